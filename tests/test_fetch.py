"""fetch_partition against the real simulated web (``simweb`` fixture, a subprocess on loopback).

Politeness is judged from the *server's* access log (``politeness_report``), robots decisions against
the simulated web's ground truth, WARC offsets by reading the records back. Delays and timeouts are
shrunk with ``cfg.replace`` so the whole file runs in well under a minute and a half.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from crawl import url as U
from crawl.config import CrawlConfig
from crawl.fetch import ROBOTS_CACHE_SCHEMA, FetchOutput, backoff_delay, fetch_partition, parse_retry_after
from crawl.records import FETCH_SCHEMA, FETCHLIST_SCHEMA
from crawl.simweb.accesslog import politeness_report, read_log
from crawl.warc import read_record

UA_LIKE = "RecrawlBot%"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"  # WARC 1.1 §6.7.2
REVISIT_FIELDS = ("WARC-Profile", "WARC-Refers-To-Target-URI", "WARC-Refers-To-Date", "WARC-Payload-Digest")


def fetchlist(urls: list[str], etags: list[str | None] | None = None,
              last_modified: list[str | None] | None = None, prev_digest: list[str | None] | None = None) -> pa.Table:
    n = len(urls)
    return pa.table({
        "url": urls,
        "url_hash": pa.array([U.url_hash(u) for u in urls], pa.uint64()),
        "host": [U.host_of(u) for u in urls],
        "depth": pa.array([0] * n, pa.int32()),
        "priority": [1.0] * n,
        "etag": etags or [None] * n,
        "last_modified": last_modified or [None] * n,
        "prev_digest": pa.array(prev_digest or [None] * n, pa.string()),
        "pkey": [U.politeness_key(u) for u in urls],
    }, schema=FETCHLIST_SCHEMA)


def host_urls(sw, host: str, limit: int = 100) -> list[str]:
    t = sw.truth()
    return t.filter(pc.equal(t["host"], host))["url"].to_pylist()[:limit]


def cfg_for(sw, **kw) -> CrawlConfig:
    base = dict(resolve=(sw.resolve_rule,), politeness_delay_s=0.2, connect_timeout_s=2.0,
                read_timeout_s=1.0, total_timeout_s=3.0, max_body_bytes=200_000, backoff_base_s=0.5,
                backoff_cap_s=2.0)
    base.update(kw)
    return CrawlConfig().replace(**base)


def run(cfg: CrawlConfig, urls: list[str], root: Path, prefix: str = "r1/p0", **kw) -> FetchOutput:
    out = fetch_partition(cfg, fetchlist(urls, kw.pop("etags", None), kw.pop("last_modified", None),
                                         kw.pop("prev_digest", None)),
                          root=str(root), warc_prefix=prefix, now=datetime.now(UTC), **kw)
    assert out.fetches.schema == FETCH_SCHEMA
    # never lose a URL: every input URL has at least one row
    assert set(urls) <= set(out.fetches["url"].to_pylist())
    return out


def last_rows(out: FetchOutput) -> dict[str, dict]:
    """The latest row per URL (a URL retried inside the task has one row per attempt)."""
    rows: dict[str, dict] = {}
    for r in out.fetches.sort_by([("fetch_time", "ascending")]).to_pylist():
        if r["subset"] not in ("robotstxt", "sitemap"):
            rows[r["url"]] = r
    return rows


def log_for(sw, hosts: set[str], since: float = 0.0) -> list[dict]:
    """Our requests to ``hosts`` in the server's access log that started after ``since`` (epoch s)."""
    log = sw.log().to_pylist()  # flushed by the server on request: complete up to now
    return [r for r in log if r["host"] in hosts and r["user_agent"].startswith("RecrawlBot")
            and r["start"] >= since]


def _target(url: str) -> tuple[str, str]:
    p = urlsplit(url)
    return p.hostname or "", (p.path or "/") + (f"?{p.query}" if p.query else "")


def _sent(out: FetchOutput) -> list[dict]:
    """Rows of attempts that reached the server: an HTTP answer, or a timeout after sending."""
    return [r for r in out.fetches.to_pylist() if (r["http_status"] or 0) > 0 or r["error"] == "timeout"]


def report_for(sw, hosts: set[str]) -> dict[str, dict]:
    sw.flush_log()
    return {r["host"]: r for r in politeness_report(sw.access_log, user_agent_like=UA_LIKE).to_pylist()
            if r["host"] in hosts}


def check_warc(out: FetchOutput, root: Path) -> set[str]:
    """Read every record a row points at; return the WARC files seen."""
    stored = out.fetches.filter(pc.is_valid(out.fetches["warc_record_offset"])).to_pylist()
    assert stored
    for r in stored:
        rec = read_record(str(root), r["warc_filename"], r["warc_record_offset"], r["warc_record_length"])
        assert rec.url == r["url"] and rec.warc_type == r["warc_type"] and rec.http_status == r["http_status"]
        if rec.warc_type == "response":
            assert rec.warc_headers["WARC-Payload-Digest"] == r["payload_digest"]
            assert len(rec.payload) == r["content_length"]
            assert rec.warc_headers.get("WARC-Truncated") == r["truncated"]
    return {r["warc_filename"] for r in stored}


# --- pure helpers -----------------------------------------------------------------------------------

def test_retry_after_parsing() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("7", now) == 7.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:30 GMT", now) == 30.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0.0  # in the past: go now
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


def test_backoff_doubles_with_jitter_and_cap() -> None:
    cfg = CrawlConfig().replace(backoff_base_s=60, backoff_cap_s=86_400, backoff_jitter=0.1)
    rng = random.Random(1)
    for n, base in [(0, 60), (1, 120), (2, 240), (10, 61_440), (11, 86_400), (40, 86_400)]:
        d = backoff_delay(cfg, n, rng)
        assert base * 0.9 <= d <= base * 1.1
    no_jitter = cfg.replace(backoff_jitter=0.0)
    assert backoff_delay(no_jitter, 3, rng) == 480.0


# --- politeness and robots ----------------------------------------------------------------------------

ROBOTS_HOSTS = {
    "news-001.sim.test": "wildcards", "news-003.sim.test": "disallow", "news-005.sim.test": "bom",
    "archive-002.sim.test": "404", "news-006.sim.test": "5xx", "blog-005.sim.test": "delay 60",
    "news-004.sim.test": "delay 0.5", "news-002.sim.test": "redirect", "shop-002.sim.test": "agent-specific",
    "archive-003.sim.test": "timeout", "blog-002.sim.test": "agent-block", "blog-001.sim.test": "huge",
    "shop-004.sim.test": "redirect-cross",
}


def test_politeness_and_robots_variants(simweb, tmp_path: Path) -> None:
    sw = simweb
    truth = sw.truth()
    model_hosts = {h.name: h for h in sw.model.hosts}
    assert all(model_hosts[h].robots == v.split()[0] or v.startswith("delay") for h, v in ROBOTS_HOSTS.items())
    urls: list[str] = []
    for h in ROBOTS_HOSTS:
        urls += host_urls(sw, h, 7)
    # the private pages too, so robots has something to refuse on every host
    priv = truth.filter(pc.and_(pc.is_in(truth["host"], pa.array(list(ROBOTS_HOSTS))),
                                pc.invert(truth["robots_allowed"])))["url"].to_pylist()
    # the host shop-004's robots.txt redirects to is in this fetch list too: its key belongs to this
    # task, so the redirect is followed at that host's pace (test_origins covers the other case)
    cross_target = U.host_of(model_hosts["shop-004.sim.test"].robots_redirect_to)
    urls = list(dict.fromkeys(urls + priv[:20] + [f"http://{cross_target}/"]))
    cfg = cfg_for(sw)
    since = time.time()
    out = run(cfg, urls, tmp_path)
    rows = last_rows(out)
    log = log_for(sw, set(ROBOTS_HOSTS) | {cross_target})
    # every request carried our User-Agent (robots.txt included)
    everyone = [r for r in read_log(sw.access_log).to_pylist() if r["host"] in ROBOTS_HOSTS and r["start"] >= since]
    assert everyone and all(r["user_agent"] == cfg.user_agent for r in everyone)
    requested = {(r["host"], r["path"]) for r in log}

    allowed = dict(zip(truth["url"].to_pylist(), truth["robots_allowed"].to_pylist(), strict=True))
    for url, row in rows.items():
        host = U.host_of(url)
        path = url.split(host, 1)[1] or "/"
        if host in ("news-006.sim.test", "archive-003.sim.test"):  # robots 5xx / timeout
            assert row["status"] == "deferred" and row["error"] == "robots_unavailable", row
            assert (host, path) not in requested
        elif host == "blog-005.sim.test":  # Crawl-delay 60 > cap 30: deferred, not failed
            assert row["status"] == "deferred" and row["error"] == "crawl_delay_above_cap", row
            assert (host, path) not in requested
        elif not allowed[url]:
            assert row["status"] == "robots_denied", row
            assert (host, path) not in requested, f"disallowed {url} was requested"
        else:
            assert row["status"] in ("fetched", "redirect"), row
            assert (host, path) in requested
    # the log those absences were read from is complete: it holds exactly the requests the task recorded
    assert Counter(_target(r["url"]) for r in _sent(out) if U.host_of(r["url"]) in ROBOTS_HOSTS) == \
        Counter((r["host"], r["path"]) for r in log_for(sw, set(ROBOTS_HOSTS), since))
    # 404 robots = allow all; BOM file still parsed (its /private/ rule holds)
    assert any(r["status"] == "fetched" for u, r in rows.items() if "archive-002" in u)
    assert any(r["status"] == "robots_denied" for u, r in rows.items() if "news-005" in u)
    # robots.txt requested exactly once per host and logged as robotstxt rows; redirected robots.txt
    # followed (same host and cross host); the huge file's first rule still holds
    robots_req = [r for r in log if r["path"] == "/robots.txt"]
    assert sorted(r["host"] for r in robots_req if r["host"] != "forum-001.sim.test") == \
        sorted(h for h in ROBOTS_HOSTS if h != "forum-001.sim.test")
    assert ("news-002.sim.test", "/robots-moved.txt") in requested
    assert any(r["status"] == "robots_denied" for u, r in rows.items() if "blog-001" in u)
    assert set(pc.unique(out.fetches.filter(pc.equal(out.fetches["subset"], "robotstxt"))["host"])
               .to_pylist()) == set(ROBOTS_HOSTS) | {cross_target}
    # 5xx robots: nothing but robots.txt was asked of that host
    assert {p for h, p in requested if h == "news-006.sim.test"} == {"/robots.txt"}

    # server-side politeness: gap between starts >= delay (Crawl-delay 0.5 where set), one in flight
    rep = report_for(sw, set(ROBOTS_HOSTS) | {cross_target})
    assert rep[cross_target]["requests"] >= 3  # its own robots.txt and page, and shop-004's robots.txt
    for host, r in rep.items():
        assert r["max_in_flight"] == 1, r
        if r["requests"] > 1:
            want = 0.5 if host == "news-004.sim.test" else 0.2
            assert r["min_gap_s"] >= want, r
    assert rep["news-004.sim.test"]["requests"] >= 3

    # robots cache rows (only definite answers: 2xx/4xx) and a rerun from the cache fetches no robots.txt
    assert out.robots_rows.schema == ROBOTS_CACHE_SCHEMA
    cached_hosts = set(out.robots_rows["host"].to_pylist())
    assert "archive-002.sim.test" in cached_hosts and "news-006.sim.test" not in cached_hosts
    since = time.time()
    out2 = run(cfg, host_urls(sw, "news-003.sim.test", 2), tmp_path, "r1/p1", robots_cache=out.robots_rows)
    assert out2.stats.get("robots_requests", 0) == 0 and out2.stats["robots_cached"] == 1
    new = log_for(sw, {"news-003.sim.test"}, since)
    assert "/robots.txt" not in {r["path"] for r in new}
    assert Counter((r["host"], r["path"]) for r in new) == Counter(_target(r["url"]) for r in _sent(out2))

    # WARC offsets in the rows point at the right records
    assert check_warc(out, tmp_path) >= {"r1/p0-warc.warc.gz", "r1/p0-robotstxt.warc.gz"}


# --- hostile hosts ---------------------------------------------------------------------------------

FAULT = "http://hostile-001.sim.test/fault/"


def test_hostile_limits(simweb, tmp_path: Path) -> None:
    sw = simweb
    names = ["404", "410", "500", "redirect-chain-3", "redirect-chain-8", "redirect-loop-a", "redirect-cross",
             "slow", "stall", "stall-accept", "endless", "huge", "gzip-bomb", "reset", "wrong-type-image"]
    urls = [FAULT + n for n in names]
    cfg = cfg_for(sw, politeness_delay_s=0.05, max_host_errors=50, total_timeout_s=2.0)
    # the server builds its gzip bomb on first use (seconds on a loaded box): build it before the
    # crawler's 2 s timeout is what is being measured
    status, _, _ = sw.request(FAULT + "gzip-bomb", timeout=120)
    assert status == 200
    time.sleep(0.1)
    since = time.time()
    out = run(cfg, urls, tmp_path)
    rows = last_rows(out)
    by = {u.rsplit("/fault/", 1)[1]: r for u, r in rows.items() if "/fault/" in u}
    assert by["404"]["status"] == "gone" and by["410"]["status"] == "gone"
    assert by["500"]["status"] == "retry" and by["500"]["http_status"] == 500
    # chain of 3 followed to its end, hop by hop, on the same host
    assert by["redirect-chain-3/0"]["status"] == "fetched"
    # chain of 8 and the loop stop at max_redirects (5) hops
    assert by["redirect-chain-8/2"]["status"] == "filtered" and by["redirect-chain-8/2"]["error"] == "max_redirects"
    loop_rows = [r for r in out.fetches.to_pylist() if "redirect-loop" in r["url"]]
    assert sum(r["status"] == "redirect" for r in loop_rows) == cfg.max_redirects + 1
    assert loop_rows[-1]["status"] == "filtered"
    # cross-host redirect recorded, not followed
    cross = by["redirect-cross"]
    assert cross["status"] == "redirect" and not cross["redirect_location"].startswith("http://hostile-001")
    target_host = U.host_of(cross["redirect_location"])
    # slow (3 s) and a server that accepts and stalls: bounded by the timeouts, retried later
    assert by["slow"]["status"] == "retry" and by["slow"]["error"] == "timeout"
    assert by["stall-accept"]["status"] == "retry" and by["stall-accept"]["error"] == "timeout"
    # headers then a stalled body: what came is kept (a diagnostic, truncated for time), not the page
    assert (by["stall"]["status"], by["stall"]["error"], by["stall"]["truncated"]) == ("retry", "timeout", "time")
    assert by["stall"]["subset"] == "crawldiagnostics"
    # endless chunked, huge body and gzip bomb all stop at the decoded cap
    for n in ("endless", "huge", "gzip-bomb"):
        assert by[n]["status"] == "fetched" and by[n]["truncated"] == "length", by[n]
        assert by[n]["content_length"] == cfg.max_body_bytes
    assert (by["reset"]["status"], by["reset"]["error"], by["reset"]["truncated"]) == ("retry", "reset", "disconnect")
    assert 0 < by["reset"]["content_length"] < 200_000
    assert by["wrong-type-image"]["content_type"] == "image/jpeg"
    assert "r1/p0-crawldiagnostics.warc.gz" in check_warc(out, tmp_path)
    log = log_for(sw, {"hostile-001.sim.test", target_host}, since)
    assert not [r for r in log if r["host"] == target_host], "cross-host redirect target was fetched"
    # the body cap seen by the server: the 256 MiB body and the endless one were cut off (the client
    # closed; the server sent what its socket buffers took), not read to their end or to its 120 s bound
    for n in ("huge", "endless"):
        served = [r for r in log if r["path"] == "/fault/" + n]
        assert len(served) == 1 and served[0]["bytes"] < 32 << 20 and served[0]["end"] - served[0]["start"] < 10, served
    # ... read from a complete log: the host's requests are exactly the attempts the task recorded
    assert Counter((r["host"], r["path"]) for r in log) == \
        Counter(_target(r["url"]) for r in _sent(out) if U.host_of(r["url"]) in ("hostile-001.sim.test", target_host))
    rep = report_for(sw, {"hostile-001.sim.test"})["hostile-001.sim.test"]
    assert rep["max_in_flight"] == 1 and rep["min_gap_s"] >= 0.05


def test_host_error_budget_defers_the_rest(simweb, tmp_path: Path) -> None:
    sw = simweb
    urls = [FAULT + n for n in ("500", "stall-accept", "404", "410")]
    out = run(cfg_for(sw, max_host_errors=2, politeness_delay_s=0.05), urls, tmp_path)
    rows = last_rows(out)
    assert [rows[u]["status"] for u in urls] == ["retry", "retry", "deferred", "deferred"]
    assert rows[urls[2]]["error"] == "host_errors"


def test_429_retry_after_and_503_backoff(simweb, tmp_path: Path) -> None:
    sw = simweb
    # throttle host: every second request is 429 with Retry-After 2 (seconds or HTTP-date)
    thr = [u for u in host_urls(sw, "hostile-002.sim.test") if "/fault/" not in u][:4]
    # burst503 host: the first three requests are 503 with Retry-After 1, then 200s
    b503 = [u for u in host_urls(sw, "hostile-003.sim.test") if "/fault/" not in u][:2]
    cfg = cfg_for(sw, politeness_delay_s=0.1, max_host_errors=10)
    since = time.time()
    out = run(cfg, thr + b503, tmp_path, deadline_s=20)
    rows = last_rows(out)
    assert all(rows[u]["status"] == "fetched" for u in thr + b503), [rows[u] for u in thr + b503]
    retries = out.fetches.filter(pc.equal(out.fetches["status"], "retry")).to_pylist()
    assert {r["http_status"] for r in retries} == {429, 503}
    log = sorted(log_for(sw, {"hostile-002.sim.test", "hostile-003.sim.test"}, since), key=lambda r: r["start"])
    for host, wait in (("hostile-002.sim.test", 1.0), ("hostile-003.sim.test", 1.0)):
        seq = [r for r in log if r["host"] == host and r["path"] != "/robots.txt"]
        gaps = [b["start"] - a["start"] for a, b in zip(seq, seq[1:], strict=False) if a["status"] in (429, 503)]
        assert gaps and min(gaps) >= wait, (host, gaps)
    # a Retry-After beyond the task deadline: row 'retry' with retry_after_s, the host's rest deferred
    # (backoff_cap_s, which also caps an obeyed Retry-After, above the 7 s asked)
    urls = [FAULT + "429-seconds"] + [u for u in host_urls(sw, "hostile-001.sim.test") if "/blog/" in u][:2]
    out = run(cfg.replace(backoff_cap_s=60.0), urls, tmp_path, "r1/p1", deadline_s=3)
    rows = last_rows(out)
    assert rows[urls[0]]["status"] == "retry" and rows[urls[0]]["retry_after_s"] == 7.0
    assert all(rows[u]["status"] == "deferred" and rows[u]["error"] == "host_backoff" for u in urls[1:])


# --- network guard, conditional GET, revisits, deadline ----------------------------------------------------

def test_private_address_guard(simweb, tmp_path: Path) -> None:
    sw = simweb
    url = f"http://127.0.0.1:{sw.port}/"
    out = run(cfg_for(sw), [url], tmp_path)
    row = last_rows(out)[url]
    assert row["status"] == "filtered" and row["error"] == "private_address"
    assert not log_for(sw, {"127.0.0.1"})
    allowed = cfg_for(sw, resolve=(sw.resolve_rule, f"127.0.0.1=127.0.0.1:{sw.port}"))
    out = run(allowed, [url], tmp_path, "r1/p1")
    assert last_rows(out)[url]["status"] == "fetched"
    # robots.txt fetched fresh and allowing: /sitemap.xml (none named) is asked too, nothing else
    assert sorted(r["path"] for r in log_for(sw, {"127.0.0.1"})) == ["/", "/robots.txt", "/sitemap.xml"]
    # a name that resolves to loopback (no rule) is refused inside the resolver; allow_private_networks lifts it
    local = [f"http://localhost:{sw.port}/", f"http://localhost:{sw.port}/x"]
    rows = last_rows(run(cfg_for(sw), local, tmp_path, "r1/p2"))
    assert all(rows[u]["status"] == "filtered" and rows[u]["error"] == "private_address" for u in local)
    rows = last_rows(run(cfg_for(sw, allow_private_networks=True), local[:1], tmp_path, "r1/p3"))
    assert rows[local[0]]["status"] == "fetched"
    # without the resolve rule the simulated hosts do not resolve: dns, retried in a later round
    urls = ["http://news-001.sim.test/", "http://news-001.sim.test/x"]
    rows = last_rows(run(cfg_for(sw, resolve=()), urls, tmp_path, "r1/p4"))
    assert all(rows[u]["status"] == "retry" and rows[u]["error"] == "dns" for u in urls)


def test_conditional_get_revisit_and_rerun(simweb, tmp_path: Path) -> None:
    sw = simweb
    urls = host_urls(sw, "archive-001.sim.test", 5)  # conditional, noise-free host
    cfg = cfg_for(sw, politeness_delay_s=0.05)
    first = run(cfg, urls, tmp_path, "r1/p0")
    rows = last_rows(first)
    html = [u for u in urls if rows[u]["status"] == "fetched" and rows[u]["etag"]]
    assert html
    # conditional GET with the validators and payload digest of the last capture -> 304 not_modified,
    # stored as a revisit (server-not-modified, WARC 1.1 §6.7.2) of that capture in the main WARC file
    known = {rows[u]["payload_digest"]: (u, rows[u]["fetch_time"].isoformat()) for u in html}
    validators = {"etags": [rows[u]["etag"] for u in html], "last_modified": [rows[u]["last_modified"] for u in html]}
    cond = {**validators, "prev_digest": [rows[u]["payload_digest"] for u in html], "known_digests": known}

    def stored(out: FetchOutput) -> list[tuple]:
        got = []
        for u in html:
            r = last_rows(out)[u]
            rec = read_record(str(tmp_path), r["warc_filename"], r["warc_record_offset"], r["warc_record_length"])
            got.append((r["status"], r["http_status"], r["subset"], r["warc_filename"], r["warc_type"],
                        r["revisit_of_url"], r["revisit_of_date"], r["payload_digest"], rec.warc_type,
                        rec.http_status, rec.payload, {k: rec.warc_headers.get(k) for k in REVISIT_FIELDS}))
        return got

    again = stored(run(cfg, html, tmp_path, "r2/p0", **cond))
    assert again == [("not_modified", 304, "warc", "r2/p0-warc.warc.gz", "revisit", u, rows[u]["fetch_time"].isoformat(),
                      rows[u]["payload_digest"], "revisit", 304, b"",
                      {"WARC-Profile": NOT_MODIFIED_PROFILE, "WARC-Refers-To-Target-URI": u,
                       "WARC-Refers-To-Date": rows[u]["fetch_time"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                       "WARC-Payload-Digest": rows[u]["payload_digest"]}) for u in html]
    # rerun: the same records at the same path
    assert stored(run(cfg, html, tmp_path, "r2/p0", **cond)) == again
    # a 304 with no stored copy to name (no digest of the last capture) stays a diagnostic response
    diag = last_rows(run(cfg, html, tmp_path, "r2/p1", **validators))
    assert {(diag[u]["status"], diag[u]["http_status"], diag[u]["subset"], diag[u]["warc_type"]) for u in html} == \
        {("not_modified", 304, "crawldiagnostics", "response")}
    # the same bodies without validators but with known digests -> revisit records, not new copies
    rev = run(cfg, html, tmp_path, "r3/p0", known_digests=known)
    for u in html:
        r = last_rows(rev)[u]
        assert r["warc_type"] == "revisit" and r["revisit_of_url"] == u
        rec = read_record(str(tmp_path), r["warc_filename"], r["warc_record_offset"], r["warc_record_length"])
        assert rec.warc_type == "revisit" and rec.warc_headers["WARC-Refers-To-Target-URI"] == u
        assert rec.payload == b""
    # rerunning a task writes the same paths (overwrites, never duplicates)
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.warc.gz"))
    run(cfg, urls, tmp_path, "r1/p0")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.warc.gz")) == files
    assert not list(tmp_path.rglob("*.tmp"))


def test_deadline_defers_unstarted_urls(simweb, tmp_path: Path) -> None:
    sw = simweb
    urls = host_urls(sw, "forum-001.sim.test", 30)
    # sitemaps off: forum-001's sitemap index would take the first slots of this 1.6 s run
    cfg = cfg_for(sw, politeness_delay_s=0.5, sitemaps=False)
    since = time.time()
    out = run(cfg, urls, tmp_path, deadline_s=1.6)
    # counted at the server, not timed: 1.6 s at one request per 0.5 s leaves room for robots.txt and at
    # most 4 pages, and the server saw exactly the attempts the task recorded
    log = log_for(sw, {"forum-001.sim.test"}, since)
    assert Counter((r["host"], r["path"]) for r in log) == Counter(_target(r["url"]) for r in _sent(out))
    assert len(log) <= 1 + int(1.6 / 0.5) + 1
    rows = last_rows(out)
    deferred = [u for u in urls if rows[u]["status"] == "deferred"]
    assert rows[urls[0]]["status"] in ("fetched", "robots_denied")
    assert len(deferred) >= len(urls) - 5 and all(rows[u]["error"] == "deadline" for u in deferred)


# --- sitemaps inside the host schedule ------------------------------------------------------------------

SITEMAP_HOSTS = {  # host: (sitemap kind, lastmod flavour) as the simulated web's model has them
    "news-001.sim.test": ("index", "true"), "docs-001.sim.test": ("single", "absent"),
    "blog-002.sim.test": ("single", "now"), "news-003.sim.test": ("single", "true"),
    "archive-002.sim.test": ("index", "absent"),  # robots.txt 404: /sitemap.xml asked anyway
    "blog-003.sim.test": ("none", "now"),  # /sitemap.xml answers 404
    "shop-004.sim.test": ("index", "true"),  # robots.txt redirects cross-host: its Sitemap: line is foreign
}


def test_sitemaps_follow_the_schedule_and_match_the_truth(simweb, tmp_path: Path) -> None:
    sw = simweb
    model_hosts = {h.name: h for h in sw.model.hosts}
    assert all((model_hosts[h].sitemap, model_hosts[h].lastmod) == v for h, v in SITEMAP_HOSTS.items())
    urls = [u for h in SITEMAP_HOSTS for u in host_urls(sw, h, 2)]
    # shop-004's robots.txt is answered by another host: that host's queue must be in this task
    cross_target = U.host_of(model_hosts["shop-004.sim.test"].robots_redirect_to)
    urls.append(f"http://{cross_target}/")
    cfg = cfg_for(sw, politeness_delay_s=0.2)
    since = time.time()
    out = run(cfg, urls, tmp_path, "r1/p0")
    truth = sw.truth()
    f = out.fetches
    sm = f.filter(pc.equal(f["subset"], "sitemap")).to_pylist()
    # sitemap requests are their own subset, stored in the robotstxt WARC file (crawler-control files)
    assert sm and all(r["warc_filename"] == "r1/p0-robotstxt.warc.gz" for r in sm if r["http_status"])
    assert "r1/p0-robotstxt.warc.gz" in check_warc(out, tmp_path)
    asked = {(U.host_of(r["url"]), r["url"].split(".sim.test", 1)[1]) for r in sm}
    index_children = {h: {f"/sitemap-{i}.xml" for i in range(1, 4)} for h in ("news-001.sim.test",)}
    for host, (kind, _) in SITEMAP_HOSTS.items():
        paths = {p for h, p in asked if h == host}
        if host == "shop-004.sim.test":
            assert paths == set()  # the only Sitemap: line names another host: skipped
        elif kind == "index":
            assert "/sitemap.xml" in paths and len(paths) >= 2, (host, paths)
        else:
            assert paths == {"/sitemap.xml"}, (host, paths)
    assert index_children["news-001.sim.test"] >= {p for h, p in asked if h == "news-001.sim.test"} - {"/sitemap.xml"}
    assert out.stats["sitemaps_cross_host"] >= 1
    by_url = {r["url"]: r for r in sm}
    assert by_url["http://blog-003.sim.test/sitemap.xml"]["status"] == "gone"

    # entries: exactly the host's listed pages (all but traps and fault pages), lastmod as the host lies
    rows = out.sitemap_rows
    assert rows.schema.names == ["host", "sitemap_url", "loc", "lastmod", "changefreq", "fetch_time"]
    for host, (kind, lastmod) in SITEMAP_HOSTS.items():
        got = rows.filter(pc.equal(rows["host"], host))
        t = truth.filter(pc.and_(pc.equal(truth["host"], host),
                                 pc.invert(pc.is_in(truth["page_type"], pa.array(["trap", "fault"])))))
        if kind == "none" or host == "shop-004.sim.test":
            assert got.num_rows == 0
            continue
        assert sorted(got["loc"].to_pylist()) == sorted(t["url"].to_pylist()), host
        lm = dict(zip(got["loc"].to_pylist(), got["lastmod"].to_pylist(), strict=True))
        true_lm = dict(zip(t["url"].to_pylist(), t["last_change_time"].to_pylist(), strict=True))
        if lastmod == "absent":
            assert all(v is None for v in lm.values())
        elif lastmod == "true":  # the true last change (to the second; a change may land meanwhile)
            close = [abs((lm[u] - true_lm[u]).total_seconds()) <= 1.0 for u in lm]
            assert sum(close) >= 0.9 * len(close), host
        else:  # "now": every entry claims a change at fetch time
            assert all(abs((v - got["fetch_time"][0].as_py()).total_seconds()) < 5 for v in lm.values())

    # server side: sitemap requests kept the gap and the one-in-flight rule with pages and robots.txt
    log = log_for(sw, set(SITEMAP_HOSTS) | {cross_target}, since)
    assert {(r["host"], r["path"]) for r in log if "sitemap" in r["path"]} == asked
    for r in report_for(sw, set(SITEMAP_HOSTS)).values():
        assert r["max_in_flight"] == 1, r
        assert r["min_gap_s"] is None or r["min_gap_s"] >= 0.2, r
    # sitemaps come before pages: the host's first page request follows its sitemap requests
    seq = sorted((r for r in log if r["host"] == "docs-001.sim.test"), key=lambda r: r["start"])
    assert [r["path"] for r in seq][:2] == ["/robots.txt", "/sitemap.xml"]

    # the per-host file cap holds (index children breadth-first), and a cached robots.txt asks no sitemap
    capped = cfg.replace(max_sitemaps_per_host=2)
    since = time.time()
    out2 = run(capped, host_urls(sw, "archive-002.sim.test", 1) + host_urls(sw, "news-003.sim.test", 1),
               tmp_path, "r1/p1", robots_cache=out.robots_rows.filter(
                   pc.equal(out.robots_rows["host"], "news-003.sim.test")))
    log2 = log_for(sw, {"archive-002.sim.test", "news-003.sim.test"}, since)
    assert sorted(r["path"] for r in log2 if "sitemap" in r["path"]) == [
        ("/sitemap-1.xml"), ("/sitemap.xml")]
    assert all(r["host"] == "archive-002.sim.test" for r in log2 if "sitemap" in r["path"])
    assert out2.stats["sitemaps_over_cap"] == 2
    assert set(out2.sitemap_rows["sitemap_url"].to_pylist()) == {"http://archive-002.sim.test/sitemap-1.xml"}
    # sitemaps off: none asked
    since = time.time()
    out3 = run(cfg.replace(sitemaps=False), host_urls(sw, "docs-001.sim.test", 1), tmp_path, "r1/p2")
    assert out3.sitemap_rows.num_rows == 0 and out3.stats.get("sitemap_requests", 0) == 0
    log3 = log_for(sw, {"docs-001.sim.test"}, since)
    assert not [r for r in log3 if "sitemap" in r["path"]]
    assert Counter((r["host"], r["path"]) for r in log3) == Counter(_target(r["url"]) for r in _sent(out3))


def test_sitemap_entries_are_those_of_the_stored_sitemap_files(simweb, tmp_path: Path) -> None:
    """The entry rows the fetcher builds (one table per file, constant columns repeated) are, row for
    row, what the sitemap files it stored give when read back from the WARC records and parsed one
    entry at a time, with the own-origin rule applied in plain Python."""
    from crawl.sitemaps import parse_sitemap

    sw = simweb
    hosts = ["news-001.sim.test", "news-003.sim.test", "blog-002.sim.test", "archive-002.sim.test"]
    out = run(cfg_for(sw, politeness_delay_s=0.02), [u for h in hosts for u in host_urls(sw, h, 1)], tmp_path)
    want = []
    for r in out.fetches.filter(pc.equal(out.fetches["subset"], "sitemap")).to_pylist():
        if r["status"] != "fetched":
            continue
        rec = read_record(str(tmp_path), r["warc_filename"], r["warc_record_offset"], r["warc_record_length"])
        origin = "/".join(r["url"].split("/", 3)[:3]).lower() + "/"
        entries, _ = parse_sitemap(rec.payload, r["url"])
        for loc, lastmod, freq in entries:
            if loc.lower().startswith(origin):  # a file lists its own origin's URLs only
                ms = None if lastmod is None else lastmod.replace(microsecond=lastmod.microsecond // 1000 * 1000)
                want.append((r["host"], r["url"], loc, ms, freq, r["fetch_time"]))
    got = out.sitemap_rows.to_pylist()
    assert len(want) > 20 and len({w[0] for w in want}) >= 3
    assert out.sitemap_rows.schema.names == ["host", "sitemap_url", "loc", "lastmod", "changefreq", "fetch_time"]
    assert Counter(tuple(g.values()) for g in got) == Counter(want)


# --- politeness per key ------------------------------------------------------------------------------

def test_politeness_key_ip_makes_one_queue(simweb, tmp_path: Path) -> None:
    """All *.sim.test hosts resolve to 127.0.0.1: with politeness_key=ip they are one queue to the
    server (no two request starts to any of them closer than the delay), robots.txt still per host."""
    sw = simweb
    hosts = ["news-007.sim.test", "forum-002.sim.test", "shop-003.sim.test", "docs-001.sim.test"]
    urls = [u for h in hosts for u in host_urls(sw, h, 3)]
    cfg = cfg_for(sw, politeness_delay_s=0.15, politeness_key="ip", sitemaps=False)
    since = time.time()
    out = run(cfg, urls, tmp_path)
    assert out.stats["politeness_keys"] == 1 and out.stats["hosts"] == len(hosts)
    assert all(r["status"] == "fetched" for r in last_rows(out).values())
    log = sorted(log_for(sw, set(hosts), since), key=lambda r: r["start"])
    assert len(log) == len(urls) + len(hosts)
    assert sorted(r["host"] for r in log if r["path"] == "/robots.txt") == sorted(hosts)
    gaps = [b["start"] - a["start"] for a, b in zip(log, log[1:], strict=False)]
    assert min(gaps) >= 0.15, min(gaps)
    # requests of different hosts interleave (one queue, round-robin), not host after host
    assert len({r["host"] for r in log[:len(hosts)]}) == len(hosts)
    # the same hosts with per-host keys run side by side: some starts closer than the delay
    since = time.time()
    out = run(cfg.replace(politeness_key="host"), urls, tmp_path, "r1/p1")
    assert out.stats["politeness_keys"] == len(hosts)
    log = sorted(log_for(sw, set(hosts), since), key=lambda r: r["start"])
    assert min(b["start"] - a["start"] for a, b in zip(log, log[1:], strict=False)) < 0.15


def test_total_timeout_bounds_each_request(simweb, tmp_path: Path) -> None:
    """``total_timeout_s`` bounds a whole request (crawl.fetch.http._TotalBounds, one timer for all
    requests) when the read timeout alone would not: a 3 s answer under a 2 s bound is a timeout, a
    stalled body is kept truncated for time 2 s (not the read timeout's 10 s) after it started."""
    sw = simweb
    urls = [FAULT + n for n in ("slow", "stall", "stall-accept", "404")]
    cfg = cfg_for(sw, politeness_delay_s=0.05, max_host_errors=50, read_timeout_s=10.0, total_timeout_s=2.0)
    out = run(cfg, urls, tmp_path)
    rows = last_rows(out)
    by = {u.rsplit("/fault/", 1)[1]: r for u, r in rows.items() if "/fault/" in u}
    assert by["slow"]["status"] == "retry" and by["slow"]["error"] == "timeout"  # answered at 3 s: too late
    assert by["stall-accept"]["status"] == "retry" and by["stall-accept"]["error"] == "timeout"
    assert (by["stall"]["status"], by["stall"]["truncated"]) == ("retry", "time")  # cut: not the page
    assert by["stall"]["content_length"] == 15  # what came before the stall is kept (crawldiagnostics)
    assert by["404"]["status"] == "gone"  # the host's later requests go on as before
    # one request after the other on this host (delay 0.05 s between an answer and the next start):
    # each timed-out request took the bound, not less, and not the 10 s of the read timeout
    starts = [by[n]["fetch_time"] for n in ("slow", "stall", "stall-accept", "404")]
    took = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    assert all(cfg.total_timeout_s <= t < cfg.read_timeout_s for t in took), took


def test_an_earlier_rounds_backoff_is_waited_out_or_passed_on(simweb, tmp_path: Path) -> None:
    """``backoff_until_unix`` (the previous round's pending 429/503 waits, crawl.tasks.previous_contact):
    a key of this task whose wait ends within the task starts its first request only then (the
    server's log), and the wait of a key this task does not have is passed on to the next round as it
    is, so a round without URLs of that host does not end it."""
    sw = simweb
    urls = host_urls(sw, "docs-001.sim.test", 2)
    since = time.time()
    elsewhere = since + 600.0
    out = run(cfg_for(sw, sitemaps=False), urls, tmp_path,
              backoff_until_unix={"docs-001.sim.test": since + 1.5, "hostile-009.sim.test": elsewhere})
    assert all(r["status"] == "fetched" for r in last_rows(out).values())
    log = sorted(log_for(sw, {"docs-001.sim.test"}, since), key=lambda r: r["start"])
    assert len(log) == 3 and log[0]["start"] >= since + 1.5, [(r["path"], r["start"] - since) for r in log]
    assert out.stats["host_backoff_until"] == {"hostile-009.sim.test": elsewhere}


def test_a_final_101_to_a_get_is_an_http_error_not_an_internal_one(simweb, tmp_path: Path) -> None:
    """A host that answers a plain GET with ``101 Switching Protocols`` (it is the final answer: nothing
    follows on the connection): the URL gets an ``http_error`` row with status 101 and the host's other
    URL is fetched, as the server's log shows. Before, a 2xx cut by time became a retry by looking up the
    cut's reason for every status below 300: a 101 (no cut) raised inside the fetcher (an internal
    error, the URL's row missing its status)."""
    sw = simweb
    cfg = cfg_for(sw, politeness_delay_s=0.05)
    since = time.time()
    out = run(cfg, [FAULT + "switching-protocols", FAULT + "404"], tmp_path)
    by = {u.rsplit("/fault/", 1)[1]: r for u, r in last_rows(out).items() if "/fault/" in u}
    assert (by["switching-protocols"]["status"], by["switching-protocols"]["http_status"]) == ("http_error", 101)
    assert by["404"]["status"] == "gone"
    assert out.stats.get("internal_errors", 0) == 0, out.stats
    served = {r["path"]: r["status"] for r in sw.log().to_pylist() if r["start"] >= since and "/fault/" in r["path"]}
    assert served == {"/fault/switching-protocols": 101, "/fault/404": 404}, served
