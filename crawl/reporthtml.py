"""HTML of the crawl report: the per-round report file and the pages of the Airflow dashboard.

Both lay out the same :class:`crawl.report.Report` with the same Jinja2 templates
(``crawl/templates``; autoescaped, so URLs and hosts from the web cannot inject markup) and the same
charts (:mod:`crawl.charts`). What differs is where things link: the dashboard passes its
:class:`Links`; the report file passes :class:`NoLinks` and is a single self-contained file (inline
CSS and SVG, no script, nothing fetched when it is opened).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from urllib.parse import quote, urlencode

import jinja2

from crawl import charts
from crawl import report as rpt
from crawl.store import Store


class NoLinks:
    """Links of the report file: none (it is read from disk, away from the dashboard)."""

    def crawls(self) -> str | None:
        return None

    def crawl(self, cid: str) -> str | None:
        return None

    def hosts(self, cid: str, sort: str | None = None) -> str | None:
        return None

    def queue(self, cid: str, pool: str | None = None) -> str | None:
        return None

    def lookup(self, cid: str, url: str | None = None) -> str | None:
        return None

    def body(self, cid: str, url: str, at: str) -> str | None:
        return None

    def dag_runs(self) -> str | None:
        return None

    def dag_run(self, run: dict[str, Any]) -> str | None:
        return None


@dataclass(frozen=True)
class Links(NoLinks):
    """Links between the dashboard's pages (under ``prefix``) and to the Airflow UI's DAG runs."""

    prefix: str = "/crawl/dashboard"
    airflow_base: str = ""  # the Airflow UI's path prefix (empty at the server root)
    dag_id: str = "recrawl"

    def crawls(self) -> str:
        return f"{self.prefix}/"

    def crawl(self, cid: str) -> str:
        return f"{self.prefix}/crawls/{quote(cid)}"

    def hosts(self, cid: str, sort: str | None = None) -> str:
        return f"{self.crawl(cid)}/hosts" + (f"?{urlencode({'sort': sort})}" if sort else "")

    def queue(self, cid: str, pool: str | None = None) -> str:
        return f"{self.crawl(cid)}/queue" + (f"?{urlencode({'pool': pool})}" if pool else "")

    def lookup(self, cid: str, url: str | None = None) -> str:
        return f"{self.crawl(cid)}/page" + (f"?{urlencode({'url': url})}" if url else "")

    def body(self, cid: str, url: str, at: str) -> str:
        return f"{self.crawl(cid)}/body?{urlencode({'url': url, 'at': at})}"

    def dag_runs(self) -> str:
        return f"{self.airflow_base}/dags/{quote(self.dag_id)}/runs"

    def dag_run(self, run: dict[str, Any]) -> str | None:
        run_id = run.get("run_id") if isinstance(run, dict) else None
        if not run_id:
            return None
        dag_id = quote(str(run.get("dag_id") or self.dag_id), safe="")
        return f"{self.airflow_base}/dags/{dag_id}/runs/{quote(str(run_id), safe='')}"


# ---- formatting filters -------------------------------------------------------------------------------
def _num(v: Any) -> str:
    if v is None:
        return "–"
    return f"{int(v):,}" if float(v).is_integer() else f"{float(v):,.1f}"


def _pct(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    p = 100.0 * float(v)
    return f"{p:.1f}%" if p < 10 else f"{p:.0f}%"


def _f1(v: Any) -> str:
    return "–" if v is None else f"{float(v):,.1f}"


def _g3(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{float(v):.3g}"


def _ts(v: Any) -> str:
    """'2026-12-02 15:00' (UTC) from an ISO string or datetime."""
    if not v:
        return "–"
    dt = v if isinstance(v, datetime) else datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("crawl", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(num=_num, pct=_pct, f1=_f1, g3=_g3, ts=_ts)
    return env


def render(template: str, **context: Any) -> str:
    context.setdefault("links", NoLinks())
    context.setdefault("cid", None)
    context.setdefault("tab", None)
    return environment().get_template(template).render(**context)


# ---- charts of a report ---------------------------------------------------------------------------------
def report_charts(r: rpt.Report) -> dict[str, str]:
    """The SVG charts of the per-crawl page and the report file."""
    rounds = r.rounds
    x = [str(row["round"]) for row in rounds]

    def col(key: str) -> list[float]:
        return [row[key] or 0 for row in rounds]

    classes = [label for label, _ in rpt.ERROR_CLASSES
               if any(row["errors_by_class"].get(label) for row in rounds)]
    err_colors = {"slow down (429/503)": "orange", "HTTP 5xx": "red", "HTTP 4xx": "pink", "timeout": "purple",
                  "DNS": "teal", "connection": "cyan", "other": "gray"}
    hosts = r.hosts[:12]
    out = {
        "pages": charts.bars("Pages per round", x, [
            ("fetched", col("fetched"), "green"), ("not modified", col("not_modified"), "teal"),
            ("errors", col("errors"), "red"),
            ("not tried", [a + b for a, b in zip(col("deferred"), col("robots_denied"), strict=True)], "gray"),
        ]),
        "new_urls": charts.bars("New URLs discovered", x, [("new URLs", col("new_urls"), "blue")]),
        "errors": charts.bars("Errors by class", x, [
            (label, [row["errors_by_class"][label] for row in rounds], err_colors[label]) for label in classes
        ] or [("errors", col("errors"), "red")]),
        "dups": charts.bars("Duplicates and near-duplicates", x, [
            ("exact", col("duplicates"), "purple"), ("near", col("near_duplicates"), "pink")]),
        "rate": charts.lines("Fetch rate", x, [("pages/s", col("pages_per_s"), "blue")], ylabel="pages/s"),
        "time": charts.bars("Where fetch time goes", x, [
            ("in requests", col("request_s"), "blue"), ("politeness wait", col("politeness_wait_s"), "orange")],
            ylabel="seconds", integer=False),
        "stale": charts.lines("Estimated stale share", x, [("stale", [row["stale_share"] for row in rounds], "red")],
                              percent=True),
        "refetch": charts.bars("Re-fetch outcomes", x, [
            ("changed", col("refetch_changed"), "orange"), ("unchanged", col("refetch_unchanged"), "gray")]),
        "status": charts.hbars("Status of known URLs", [s["status"].replace("_", " ") for s in r.status],
                               [("URLs", [s["urls"] for s in r.status], "blue")]),
        "due": charts.hbars("When URLs come due", [d["due"] for d in r.due],
                            [("URLs", [d["urls"] for d in r.due], "teal")]),
        "rates": charts.hbars("Change-rate distribution", [b["bin"] for b in r.freshness.get("rate_bins", [])],
                              [("URLs", [b["urls"] for b in r.freshness.get("rate_bins", [])], "purple")],
                              xlabel="URLs holding a copy"),
        "hosts": charts.hbars("Top hosts by pages fetched", [h["host"] for h in hosts],
                              [("pages fetched", [h["pages"] for h in hosts], "green")]),
        "host_errors": charts.hbars("Top hosts by errors", [h["host"] for h in r.hosts_by_errors], [
            ("errors", [h["errors"] for h in r.hosts_by_errors], "red"),
            ("backoffs", [h["backoff"] for h in r.hosts_by_errors], "orange")]),
        "ages": charts.hbars("Age of the copies held", [b["bin"] for b in r.freshness.get("age_bins", [])],
                             [("copies", [b["copies"] for b in r.freshness.get("age_bins", [])], "cyan")],
                             xlabel="URLs holding a copy"),
    }
    return out


def render_report(r: rpt.Report, links: NoLinks | None = None, generated: str | None = None,
                  extra_links: list[tuple[str, str]] | None = None,
                  dask: tuple[str | None, str] | None = None) -> str:
    """The per-crawl page (dashboard) or, with no links, the self-contained report file.

    ``dask``: (link, note) of the Dask dashboard, decided by the dashboard when it serves the page (a
    link only to one that answers); the report file has none."""
    c = report_charts(r) if r.round_no else {}
    return render("crawl.html", r=r, c=c, cid=r.crawl_id, links=links or NoLinks(), tab="overview",
                  generated=generated, extra_links=extra_links or [], dask=dask)


def write_report(root: str, crawl_id: str, round_no: int) -> str:
    """Write ``reports/crawl=ID/round=NNNNN.html`` (as of that round) and return its path under the root.

    Deterministic content apart from the "written" line; safe to run twice (atomic overwrite). Temp
    files of report writers that died before their rename are removed first, unless another writer
    is writing (:meth:`crawl.store.Store.write_outside_lease`).
    """
    store = Store(root, crawl_id)
    r = rpt.build(root, crawl_id, round_no)
    rel = rpt.report_path(store, round_no)
    html = render_report(r, generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    store.write_outside_lease(rel, html.encode("utf-8"))
    return rel


__all__ = ["Links", "NoLinks", "environment", "render", "render_report", "report_charts", "write_report"]
