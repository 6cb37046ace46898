"""The health gate of a round: was it the web that failed, or the crawler's own reach to it?

Why: with the network (or every site) down, a round used to publish 54 fetches, 430 URLs deferred,
0 parsed, exit 0 and no warning -- and each failure counted one step towards ``gone``. A round is
**degraded** when the share of its hosts with connection failures (DNS, refused, connect timeout,
timeout, reset) exceeds ``degraded_host_failure_share``, or when the URLs that got an answer from a
server are less than ``degraded_min_fetched_share`` of the URLs generate planned. A degraded round is
still published (its rows are true), but:

- the manifest says ``"degraded": true`` with the reasons (``crawl stats``, the API, the dashboard);
- ``crawl round|run --strict`` exits with status 5; the DAG's report task fails
  (``degraded_fails_dag``) or logs a warning;
- its transient failures do not count towards ``gone``: the update step leaves ``retry_count`` as it
  was (``retry_schedule_s`` then decides the next try as if the round had not happened).

Which hosts are judged: once the crawl has history, only hosts a server answered for before (their
robots.txt got an HTTP answer in an earlier round: ``reached_before``) or in this round. A host that has
never answered -- a dead link's domain that does not resolve, a server long gone -- says nothing about
the crawler's reach: the web always has them, and as a crawl grows its due queue collects their
retries (the demo's fourth round had 52 such hosts of 91 and was flagged). Their URLs are left out of
both sides of the answered/planned ratio too (``hosts_never_reached``, ``urls_never_reached``). In a
crawl's first round every host is judged.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from crawl import records as R
from crawl.config import CrawlConfig
from crawl.tasks import CONTROL_SUBSETS

#: ``error`` codes of fetch rows that mean the crawler could not reach or keep a connection to a server.
CONNECTION_ERRORS = ("dns", "connect", "connect_timeout", "timeout", "reset")
#: ``error`` of a fetch the SSRF guard refused (crawl.net.PrivateAddressError): the usual first-crawl mistake is
#: a seed on 127.0.0.1 or a private host without a ``--resolve`` rule, which the reason then names.
PRIVATE_ADDRESS = "private_address"
#: Fetch statuses that mean a server answered for the URL (whatever it said). URLs robots.txt denies are
#: left out of both sides of the ratio (the decision may come from the cache, without a request).
ANSWERED = (R.FETCHED, R.NOT_MODIFIED, R.REDIRECT, R.HTTP_ERROR, R.GONE)


def _distinct(t: pa.Table, column: str) -> int:
    return len(pc.unique(t.column(column))) if t.num_rows else 0


def assess(cfg: CrawlConfig, planned: int, fetched: pa.Table,
           reached_before: pa.Array | None = None) -> dict[str, Any]:
    """Health figures of a round from its fetch rows (all partitions), the number of planned URLs and
    the hosts a server answered for in earlier rounds (None or empty: a first round, every host judged)."""
    all_hosts = pc.unique(fetched.column("host")) if fetched.num_rows else pa.array([], pa.string())
    unreached = pa.array([], pa.string())
    if reached_before is not None and len(reached_before):
        answered_now = fetched.filter(pc.fill_null(pc.is_in(fetched.column("status"), pa.array(ANSWERED)), False))
        reached = pa.concat_arrays([reached_before.cast(pa.string()),
                                    answered_now.column("host").combine_chunks().cast(pa.string())])
        unreached = all_hosts.filter(pc.invert(pc.is_in(all_hosts, value_set=reached)))
    judged = pc.invert(pc.fill_null(pc.is_in(fetched.column("host"), value_set=unreached), False))
    never = fetched.filter(pc.invert(judged))
    fetched = fetched.filter(judged)
    hosts = pc.unique(fetched.column("host")) if fetched.num_rows else pa.array([], pa.string())
    conn = fetched.filter(pc.fill_null(pc.is_in(fetched.column("error"), pa.array(CONNECTION_ERRORS)), False))
    failing = _distinct(conn, "host")
    is_page = pc.invert(pc.fill_null(pc.is_in(fetched.column("subset"), pa.array(CONTROL_SUBSETS)), False))
    pages = fetched.filter(is_page)
    answered = _distinct(pages.filter(pc.is_in(pages.column("status"), pa.array(ANSWERED))), "url_hash")
    denied = _distinct(pages.filter(pc.equal(pages.column("status"), R.ROBOTS_DENIED)), "url_hash")
    guarded = _distinct(pages.filter(pc.equal(pc.fill_null(pages.column("error"), ""), PRIVATE_ADDRESS)), "url_hash")
    never_pages = never.filter(pc.invert(pc.fill_null(pc.is_in(never.column("subset"), pa.array(CONTROL_SUBSETS)),
                                                      False)))
    urls_never = _distinct(never_pages, "url_hash")
    planned = max(0, planned - denied - urls_never)
    host_share = failing / len(hosts) if len(hosts) else 0.0
    fetched_share = min(1.0, answered / planned) if planned else 1.0
    reasons = []
    if host_share > cfg.degraded_host_failure_share:
        reasons.append(f"{failing} of {len(hosts)} hosts had connection failures "
                       f"({host_share:.0%} > degraded_host_failure_share {cfg.degraded_host_failure_share:.0%})")
    if fetched_share < cfg.degraded_min_fetched_share:
        reasons.append(f"servers answered for {answered} of {planned} planned URLs "
                       f"({fetched_share:.0%} < degraded_min_fetched_share {cfg.degraded_min_fetched_share:.0%})"
                       + (f"; the private-address guard refused {guarded} of them (their host is or resolves to a "
                          "loopback or private address: a --resolve rule naming the host lets it through)"
                          if guarded else ""))
    return {"degraded": bool(reasons), "reasons": reasons, "hosts": len(hosts),
            "hosts_with_connection_failures": failing, "host_failure_share": round(host_share, 4),
            "planned": planned, "answered": answered, "fetched_share": round(fetched_share, 4),
            "hosts_never_reached": len(unreached), "urls_never_reached": urls_never}


def describe(health: dict[str, Any]) -> str:
    return "; ".join(health.get("reasons") or []) or "healthy"


__all__ = ["ANSWERED", "CONNECTION_ERRORS", "assess", "describe"]
