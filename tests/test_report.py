"""The crawl report's numbers against independent DuckDB queries over a real crawl's output files.

One module-scoped crawl: three rounds of the simulated web on a real embedded Dask cluster, eight
virtual hours apart (the simulated web's clock moves with them, so pages change and re-fetches see
it). Every figure of :mod:`crawl.report` is re-derived here with plain SQL over the Parquet files
(fetch records, page index, CrawlDb versions), the robots.txt rules the simulated web serves, the
payload digests written at fetch time, and the frontier's own choice of the next round.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from crawldb_view import crawldb_relation
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from crawl import report
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.fingerprint import payload_digest
from crawl.simweb.accesslog import read_log
from crawl.store import Store

CRAWL = "rep"
ROUNDS = 3
SPACING_S = 8 * 3600
DELAY = 0.05
REPO = Path(__file__).resolve().parent.parent


def _cfg(root: Path, simweb, **over):
    base = {
        "root": str(root), "crawl_id": CRAWL, "resolve": [simweb.resolve_rule], "politeness_delay_s": DELAY,
        "max_pages": 150, "partitions": 2, "url_shards": 2, "round_duration_s": 8.0, "connect_timeout_s": 2.0,
        "read_timeout_s": 2.0, "total_timeout_s": 3.0, "max_body_bytes": 300_000, "backoff_base_s": 2.0,
        "max_crawl_delay_s": 5.0, "dask_workers": 2,
    }
    return load_config(overrides={**base, **over}, use_env=False)


@pytest.fixture(scope="module")
def crawled(simweb, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    cfg = _cfg(root, simweb)
    t0 = simweb.clock()["time"]
    with dask_client(cfg) as client:
        for r in range(ROUNDS):
            now = t0 + r * SPACING_S
            simweb.set_clock(now, 1.0)
            rnd.run_round(cfg, simweb.seed_urls(6) if r == 0 else None, datetime.fromtimestamp(now, UTC),
                          client=client)
    return cfg


def _duck(sql: str, params: list | None = None) -> list[tuple]:
    return duckdb.connect().execute(sql, params or []).fetchall()


def _fetch_glob(cfg, r: int | str = "*") -> str:
    rr = r if r == "*" else f"{r:05d}"
    return f"{cfg.root}/state/crawl={CRAWL}/rounds/{rr}/fetched/part=*.parquet"


def _db(cfg, v: int) -> str:
    return crawldb_relation(f"{cfg.root}/state/crawl={CRAWL}", v)


def _index(cfg, subset: str, r: int) -> str:
    return f"read_parquet('{cfg.root}/index/crawl={CRAWL}/subset={subset}/round={r:05d}-part=*.parquet')"


def _index_rows(cfg, subset: str, r: int, where: str) -> int:
    if not list(Path(cfg.root, "index", f"crawl={CRAWL}", f"subset={subset}").glob(f"round={r:05d}-part=*")):
        return 0
    return _duck(f"SELECT count(*) FROM {_index(cfg, subset, r)} WHERE {where}")[0][0]


def test_per_round_series_matches_duckdb(crawled):
    cfg = crawled
    rows = report.round_series(report.open_view(cfg.root, CRAWL))
    assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1))
    for row in rows:
        r = row["round"]
        pages = f"read_parquet('{_fetch_glob(cfg, r)}') WHERE subset IN ('warc', 'crawldiagnostics')"
        fetched, nm, errors, deferred, denied = _duck(f"""
            SELECT count(*) FILTER (WHERE status = 'fetched'), count(*) FILTER (WHERE status = 'not_modified'),
                   count(*) FILTER (WHERE status IN ('retry', 'http_error', 'gone')),
                   count(*) FILTER (WHERE status = 'deferred'), count(*) FILTER (WHERE status = 'robots_denied')
            FROM {pages}""")[0]
        assert (row["fetched"], row["not_modified"], row["errors"], row["deferred"], row["robots_denied"]) == (
            fetched, nm, errors, deferred, denied), r
        assert sum(row["errors_by_class"].values()) == errors
        slow = _duck(f"SELECT count(*) FROM {pages} AND status IN ('retry', 'http_error', 'gone') "
                     f"AND http_status IN (429, 503)")[0][0]
        assert row["errors_by_class"]["slow down (429/503)"] == slow
        # new URLs: rows of the latest CrawlDb first seen in this round
        new = _duck(f"SELECT count(*) FROM {_db(cfg, ROUNDS)} WHERE discovered_round = {r}")[0][0]
        assert row["new_urls"] == new
        assert row["duplicates"] == _index_rows(cfg, "warc", r, "crawl_status = 'duplicate'")
        assert row["near_duplicates"] == _index_rows(cfg, "warc", r, "crawl_status = 'near_duplicate'")
        changed = sum(_index_rows(cfg, s, r, "changed") for s in ("warc", "crawldiagnostics"))
        unchanged = sum(_index_rows(cfg, s, r, "NOT changed") for s in ("warc", "crawldiagnostics"))
        assert (row["refetch_changed"], row["refetch_unchanged"]) == (changed, unchanged)
    assert rows[0]["fetched"] == 6 and sum(r["fetched"] for r in rows) > 150
    assert rows[-1]["refetch_changed"] + rows[-1]["refetch_unchanged"] > 0  # round 3 re-fetched pages
    assert sum(r["new_urls"] for r in rows) == _duck(
        f"SELECT count(*) FROM {_db(cfg, ROUNDS)}")[0][0]


def test_politeness_wait_and_request_time_add_up_to_the_gaps_the_delay_forces(crawled):
    """Between two request starts to one host lie at least DELAY seconds, spent inside the first request or
    waiting: so per round, request time + politeness wait >= sum over hosts of (requests - 1) x DELAY."""
    cfg = crawled
    rows = report.round_series(report.open_view(cfg.root, CRAWL))
    for row in rows[1:]:
        forced = _duck(f"""
            SELECT coalesce(sum(n - 1), 0) FROM (
                SELECT host, count(*) AS n FROM read_parquet('{_fetch_glob(cfg, row['round'])}')
                WHERE status NOT IN ('deferred', 'robots_denied', 'filtered') GROUP BY host)""")[0][0] * DELAY
        assert row["request_s"] > 0 and row["politeness_wait_s"] > 0
        assert row["request_s"] + row["politeness_wait_s"] >= 0.9 * forced, (row, forced)
        assert row["pages_per_s"] > 0 and row["requests"] >= row["fetched"]


@pytest.mark.parametrize("as_of", [2, ROUNDS])
def test_status_and_freshness_as_of_a_round_match_duckdb(crawled, as_of):
    cfg = crawled
    view = report.open_view(cfg.root, CRAWL, as_of)
    db = _db(cfg, as_of)
    expect = dict(_duck(f"SELECT status, count(*) FROM {db} GROUP BY 1"))
    assert {s["status"]: s["urls"] for s in report.status_breakdown(view)} == expect
    fresh = report.freshness(view)
    at = datetime.fromisoformat(Store(cfg.root, CRAWL).read_json(
        Store(cfg.root, CRAWL).round_dir(as_of, "generate.json"))["now"])
    rows = _duck(f"SELECT change_rate, epoch(last_success_time) FROM {db} WHERE last_success_time IS NOT NULL")
    probs = [1 - math.exp(-(rate or 0) * max(at.timestamp() - t, 0) / 86_400) for rate, t in rows]
    assert fresh["copies"] == len(rows) > 0
    assert fresh["stale_share"] == pytest.approx(sum(probs) / len(probs), rel=1e-6, abs=1e-9)
    assert sum(b["urls"] for b in fresh["rate_bins"]) == sum(1 for rate, _ in rows if rate is not None)
    assert sum(b["copies"] for b in fresh["age_bins"]) == len(rows)
    # the per-round series uses the same estimate, per CrawlDb version
    series = report.round_series(view)
    assert len(series) == as_of
    assert series[-1]["stale_share"] == pytest.approx(fresh["stale_share"], rel=1e-6, abs=1e-9)


def test_hosts_match_duckdb_and_the_simulated_webs_crawl_delays(crawled, simweb):
    cfg = crawled
    view = report.open_view(cfg.root, CRAWL)
    rows = report.hosts(view, limit=10_000)
    fx = f"read_parquet('{_fetch_glob(cfg)}') WHERE subset IN ('warc', 'crawldiagnostics')"
    expect = {h: (p, e, b) for h, p, e, b in _duck(f"""
        SELECT host, count(*) FILTER (WHERE status = 'fetched'),
               count(*) FILTER (WHERE status IN ('retry', 'http_error', 'gone')),
               count(*) FILTER (WHERE http_status IN (429, 503) OR error = 'host_backoff') FROM {fx} GROUP BY 1""")}
    known = dict(_duck(f"SELECT host, count(*) FROM {_db(cfg, ROUNDS)} GROUP BY 1"))
    denied = dict(_duck(f"SELECT host, count(*) FROM {_db(cfg, ROUNDS)} "
                        f"WHERE status = 'robots_denied' GROUP BY 1"))
    assert {h["host"] for h in rows} == set(known) | set(expect)
    for h in rows:
        assert (h["pages"], h["errors"], h["backoff"]) == expect.get(h["host"], (0, 0, 0)), h
        assert (h["known"], h["robots_denied"]) == (known.get(h["host"], 0), denied.get(h["host"], 0)), h
    pages = [h["pages"] for h in rows]
    assert pages == sorted(pages, reverse=True)
    errs = [h["errors"] for h in report.hosts(view, 10, "errors")]
    assert errs == sorted(errs, reverse=True)
    # delay: max(configured delay, the Crawl-delay the simulated web's robots.txt gives the host)
    truth = {h.name: h.crawl_delay for h in simweb.model.hosts}
    checked = 0
    for h in rows:
        if h["host"] in truth and h["crawl_delay_s"] is not None:
            assert h["crawl_delay_s"] == truth[h["host"]]
            assert h["delay_s"] == max(DELAY, truth[h["host"]])
            checked += 1
        elif h["host"] in truth and h["pages"]:
            assert h["delay_s"] == DELAY
    assert checked >= 1
    with pytest.raises(ValueError, match="sort must be one of"):
        report.hosts(view, 10, "url; DROP TABLE x")


def test_queue_holds_what_the_frontier_takes_next(crawled, simweb, tmp_path):
    """The queue as of round 3 against the real frontier: generate round 4 (on a copy) at the time the
    queue expects the next round; every URL it selects must be in the queue's due set."""
    cfg = crawled
    copy = tmp_path / "copy"
    shutil.copytree(cfg.root, copy)
    view = report.open_view(str(copy), CRAWL)
    q = report.queue(view, limit=100_000)
    due = {row["url"] for pool in q["rows"].values() for row in pool}
    assert len(due) == q["counts"]["new"] + q["counts"]["refetch"] > 0
    assert all(row["why"] for pool in q["rows"].values() for row in pool)
    prios = [row["priority"] for row in q["rows"]["refetch"]]
    assert prios == sorted(prios, reverse=True)
    at = datetime.fromisoformat(q["next_round_at"].replace("Z", "+00:00"))
    gen = rnd.generate(_cfg(copy, simweb), at)
    selected = _duck(f"SELECT url FROM read_parquet('{copy}/state/crawl={CRAWL}/rounds/{ROUNDS + 1:05d}/fetchlist/*.parquet')")
    assert gen["urls"] == len(selected) > 0
    assert {u for (u,) in selected} <= due
    # and nothing is due that the CrawlDb does not schedule by then
    late = _duck(f"SELECT count(*) FROM {_db(cfg, ROUNDS)} WHERE next_fetch_time > ?",
                 [at + timedelta(seconds=1)])[0][0]
    assert len(due) + late <= _duck(f"SELECT count(*) FROM {_db(cfg, ROUNDS)}")[0][0]


def test_capture_history_and_stored_bodies(crawled, simweb):
    cfg = crawled
    view = report.open_view(cfg.root, CRAWL)
    seed = simweb.seed_urls(1)[0]
    h = report.capture_history(view, seed.upper().replace("HTTP://", "http://") + "?utm_source=x")
    assert h["url"] == seed and h["crawldb"]["status"] in ("fetched", "not_modified", "duplicate", "near_duplicate")
    raw = _duck(f"SELECT fetch_time, status, payload_digest FROM read_parquet('{_fetch_glob(cfg)}') "
                f"WHERE url = ? ORDER BY fetch_time", [seed])
    assert [(a["status"], a["payload_digest"]) for a in h["attempts"]] == [(s, d) for _, s, d in raw]
    assert len(h["attempts"]) == ROUNDS and h["attempts"][0]["changed"] is None
    for a in h["attempts"]:
        if a["status"] != "fetched":
            continue
        cap, body = report.capture_body(view, seed, a["fetch_time"])
        assert payload_digest(body) == a["payload_digest"]  # the bytes the fetcher hashed when it fetched
    with pytest.raises(ValueError):
        report.capture_history(view, "gopher://example.com/")
    with pytest.raises(LookupError):
        report.capture_body(view, seed, "2001-01-01T00:00:00Z")


def test_unpublished_round_is_refused(crawled):
    with pytest.raises(ValueError, match="not published"):
        report.open_view(crawled.root, CRAWL, ROUNDS + 1)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crawl", "report", *args], cwd=str(REPO), capture_output=True,
                          text=True, timeout=300, check=False)


def test_report_file_from_the_cli_is_self_contained_and_matches_duckdb(crawled):
    cfg = crawled
    store = Store(cfg.root, CRAWL)
    proc = _cli("--root", cfg.root, "--crawl-id", CRAWL)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip())
    assert path == Path(cfg.root) / "reports" / f"crawl={CRAWL}" / f"round={ROUNDS:05d}.html" and path.exists()
    doc = HTMLParser(path.read_text(encoding="utf-8"))
    assert len(doc.css("svg.chart")) >= 12
    # nothing is loaded from anywhere when the file is opened
    assert not doc.css("script, link, img, iframe, object, embed")
    assert "url(http" not in path.read_text(encoding="utf-8") and "@import" not in path.read_text(encoding="utf-8")
    # the per-round table against DuckDB over the fetch records
    for r in range(1, ROUNDS + 1):
        fetched = _duck(f"SELECT count(*) FROM read_parquet('{_fetch_glob(cfg, r)}') WHERE status = 'fetched' "
                        f"AND subset IN ('warc', 'crawldiagnostics')")[0][0]
        cell = doc.css_first(f'table#rounds tr[data-round="{r}"] td[data-k="fetched"]')
        assert int(cell.text().replace(",", "")) == fetched
    known = _duck(f"SELECT count(*) FROM {_db(cfg, ROUNDS)}")[0][0]
    assert doc.css_first('#tiles [data-k="known"] .v').text().replace(",", "") == str(known)
    # a given round: written (again) as of that round; a round not published: exit 2, nothing written
    proc = _cli("--root", cfg.root, "--crawl-id", CRAWL, "--round", "2")
    assert proc.returncode == 0, proc.stderr
    two = HTMLParser(Path(proc.stdout.strip()).read_text(encoding="utf-8"))
    assert [tr.attributes["data-round"] for tr in two.css("table#rounds tbody tr")] == ["2", "1"]
    proc = _cli("--root", cfg.root, "--crawl-id", CRAWL, "--round", "7")
    assert proc.returncode == 2 and "no published round 7" in proc.stderr
    assert not store.exists(report.report_path(store, 7))


def _manifest_health(root: str, crawl_id: str, r: int) -> dict:
    """The health gate's figures of round ``r``, read from its manifest by DuckDB (not by crawl.report)."""
    path = f"{root}/state/crawl={crawl_id}/rounds/{r:05d}/manifest.json"
    con = duckdb.connect()
    rel = con.execute(f"""
        SELECT degraded, health.hosts_with_connection_failures, health.hosts, health.host_failure_share,
               health.answered, health.planned, health.fetched_share, config.degraded_host_failure_share,
               config.degraded_min_fetched_share
        FROM read_json_auto('{path}', maximum_object_size = 67108864)""")
    keys = ("degraded", "failing", "hosts", "host_share", "answered", "planned", "fetched_share", "max_host_share",
            "min_fetched_share")
    return dict(zip(keys, rel.fetchone(), strict=True))


def _pct_of(text: str) -> float:
    return float(text.strip().rstrip("%")) / 100


def _health_cells_match(doc, r: int, m: dict) -> None:
    tr = doc.css_first(f'table#rounds tr[data-round="{r}"]')
    assert tr.css_first('[data-k="health"]').text().strip() == ("degraded" if m["degraded"] else "healthy")
    assert _pct_of(tr.css_first('[data-k="host_failure_share"]').text()) == pytest.approx(m["host_share"], abs=0.006)
    assert _pct_of(tr.css_first('[data-k="fetched_share"]').text()) == pytest.approx(m["fetched_share"], abs=0.006)


def test_report_file_of_a_healthy_crawl_has_no_degraded_banner(crawled):
    cfg = crawled
    proc = _cli("--root", cfg.root, "--crawl-id", CRAWL, "--round", str(ROUNDS))
    assert proc.returncode == 0, proc.stderr
    doc = HTMLParser(Path(proc.stdout.strip()).read_text(encoding="utf-8"))
    assert doc.css_first("#degraded") is None and "degraded" not in doc.css_first("#tiles").text()
    for r in range(1, ROUNDS + 1):
        m = _manifest_health(cfg.root, CRAWL, r)
        assert m["degraded"] is False
        _health_cells_match(doc, r, m)


def test_report_file_of_a_degraded_round_says_so_and_why(make_simweb, tmp_path):
    """The web goes down after round 1: round 2 is published degraded. Its report file opens with a
    banner giving the health gate's figures and thresholds, equal to the manifest read by DuckDB and to
    the connection failures counted in the round's fetch records; round 1's report (as of round 1) has none."""
    sw = make_simweb()
    cid = "down"
    cfg = _cfg(tmp_path / "root", sw, crawl_id=cid, max_pages=40, round_duration_s=6.0)
    t0 = sw.clock()["time"]
    seeds = sw.seed_urls(4)
    assert seeds
    rnd.run_round(cfg, seeds, datetime.fromtimestamp(t0, UTC))
    sw.stop()  # the whole web is unreachable from here on
    rnd.run_round(cfg, None, datetime.fromtimestamp(t0 + SPACING_S, UTC))
    m = _manifest_health(cfg.root, cid, 2)
    assert m["degraded"] is True and m["host_share"] > m["max_host_share"]
    # judged: the hosts a server answered for before (round 1's, per the simulated web's access log);
    # hosts first met in round 2 never answered, so they say nothing about the crawler's reach
    answered_before = sorted({r["host"] for r in read_log(sw.access_log).to_pylist()})
    fx = f"read_parquet('{cfg.root}/state/crawl={cid}/rounds/00002/fetched/part=*.parquet')"
    failing, hosts = _duck(f"""SELECT count(DISTINCT host) FILTER (WHERE error IN ('dns', 'connect', 'connect_timeout',
                               'timeout', 'reset')), count(DISTINCT host) FROM {fx}
                               WHERE list_contains(?, host)""", [answered_before])[0]
    assert (m["failing"], m["hosts"]) == (failing, hosts) and failing > 0

    proc = _cli("--root", cfg.root, "--crawl-id", cid)
    assert proc.returncode == 0, proc.stderr
    doc = HTMLParser(Path(proc.stdout.strip()).read_text(encoding="utf-8"))
    banner = doc.css_first("#degraded")
    assert banner is not None and banner.attributes["data-round"] == "2"
    assert "Round 2 is degraded" in banner.text()
    hosts_li, answered_li = banner.css_first('[data-k="host_failure_share"]'), banner.css_first('[data-k="fetched_share"]')
    assert hosts_li.css_first(".of").text() == f"{failing} of {hosts}"
    assert _pct_of(hosts_li.css_first(".v").text()) == pytest.approx(m["host_share"], abs=0.006)
    assert _pct_of(hosts_li.css_first(".t").text()) == pytest.approx(m["max_host_share"])
    assert "over" in hosts_li.attributes.get("class", "")
    assert answered_li.css_first(".of").text() == f"{m['answered']} of {m['planned']}"
    assert _pct_of(answered_li.css_first(".v").text()) == pytest.approx(m["fetched_share"], abs=0.006)
    assert _pct_of(answered_li.css_first(".t").text()) == pytest.approx(m["min_fetched_share"])
    for r in (1, 2):
        _health_cells_match(doc, r, _manifest_health(cfg.root, cid, r))
    # as of round 1 (healthy): no banner
    proc = _cli("--root", cfg.root, "--crawl-id", cid, "--round", "1")
    assert proc.returncode == 0, proc.stderr
    one = HTMLParser(Path(proc.stdout.strip()).read_text(encoding="utf-8"))
    assert one.css_first("#degraded") is None
    assert one.css_first('table#rounds tr[data-round="1"] [data-k="health"]').text().strip() == "healthy"


def test_a_round_of_a_crawl_with_nothing_to_fetch_publishes_and_reports(tmp_path):
    """``crawl round`` on a new crawl without seeds (an Airflow schedule before anyone injected): the round
    is published empty and its report is written. The report had opened ``rounds/*/fetched/*.parquet``
    because ``rounds/`` existed, and DuckDB refused the empty glob after the round was published."""
    root = tmp_path / "root"
    proc = subprocess.run([sys.executable, "-m", "crawl", "round", "--root", str(root), "--crawl-id", "empty",
                           "--workers", "1", "--no-dashboard"], cwd=str(REPO), capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = root / "reports" / "crawl=empty" / "round=00001.html"
    assert path.exists()
    assert Store(str(root), "empty").current_round() == 1
    doc = HTMLParser(path.read_text(encoding="utf-8"))
    assert doc.css_first("svg.chart") is not None
    rep = _cli("--root", str(root), "--crawl-id", "empty")
    assert rep.returncode == 0, rep.stderr[-3000:]
