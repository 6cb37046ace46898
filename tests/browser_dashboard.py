"""The crawl dashboard in a real browser: reached from the Airflow UI's navigation, its charts drawn,
its numbers equal to DuckDB's over the crawl's files, its links followed, every page screenshotted.

Called by tests/test_browser.py once its DAG run (triggered through the form) has succeeded, with a
page logged in to that Airflow. Numbers are read as the user sees them (the cells' text), and the
oracle is DuckDB over the crawl root's Parquet files, never the dashboard's own code.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from crawldb_view import crawldb_relation

MIN_CHARTS = 12


def _duck(sql: str, params: list | None = None) -> list[tuple]:
    import duckdb

    return duckdb.connect().execute(sql, params or []).fetchall()


def _int(text: str) -> int:
    return int(text.strip().replace(",", ""))


class CrawlFiles:
    """DuckDB sources over one crawl's output files (the oracle)."""

    def __init__(self, root: Path, crawl_id: str):
        self.root, self.crawl_id = root, crawl_id
        state = root / "state" / f"crawl={crawl_id}"
        self.round = json.loads((state / "CURRENT.json").read_text())["round"]
        self.state = state
        self.db = crawldb_relation(state, self.round)

    def fetches(self, r: int | str = "*") -> str:
        rr = r if r == "*" else f"{r:05d}"
        return (f"(SELECT *, CAST(regexp_extract(filename, '/rounds/([0-9]+)/', 1) AS INTEGER) AS round FROM "
                f"read_parquet('{self.state}/rounds/{rr}/fetched/part=*.parquet', filename = true)) "
                f"WHERE subset IN ('warc', 'crawldiagnostics')")

    def step(self, r: int, name: str) -> dict[str, Any]:
        return json.loads((self.state / "rounds" / f"{r:05d}" / f"{name}.json").read_text())


def check_dashboard(page: Any, server: Any, shots: Any, crawl_root: Path, crawl_id: str, run_id: str) -> None:
    files = CrawlFiles(crawl_root, crawl_id)
    n = files.round
    assert n >= 1

    # 1. from the UI's navigation: Browse → Crawls opens the dashboard in the UI's frame
    page.goto(server.url + "/")
    page.get_by_role("button", name="Browse").first.click()
    page.get_by_role("menuitem", name="Crawls").click()
    page.wait_for_url(re.compile(r"/plugin/crawls"))
    frame = page.frame_locator("iframe").first
    row = frame.locator(f'table#crawls tr[data-crawl="{crawl_id}"]')
    row.wait_for()
    known = _duck(f"SELECT count(*) FROM {files.db}")[0][0]
    assert _int(row.locator('[data-k="known"]').inner_text()) == known
    assert _int(row.locator('[data-k="rounds"]').inner_text()) == n
    # the report task wrote the round's report file; the list links it
    assert (crawl_root / "reports" / f"crawl={crawl_id}" / f"round={n:05d}.html").is_file()
    assert row.locator('[data-k="report"] a').inner_text() == f"round {n}"
    shots.shot(page, "dashboard-in-airflow-nav", full_page=False)
    row.get_by_role("link", name=crawl_id).click()
    frame.locator("#tiles").wait_for()
    shots.shot(page, "dashboard-overview-in-frame", full_page=False)

    # 2. the overview, full page: charts present, numbers equal DuckDB's
    base = f"{server.url}/crawl/dashboard/crawls/{quote(crawl_id)}"
    page.goto(base)
    charts = page.locator("svg.chart")
    assert charts.count() >= MIN_CHARTS, charts.count()
    assert all(box and box["width"] > 100 and box["height"] > 50
               for box in (charts.nth(i).bounding_box() for i in range(charts.count())))
    assert _int(page.locator('#tiles [data-k="known"] .v').inner_text()) == known
    for r in range(1, n + 1):
        fetched, errors = _duck(f"SELECT count(*) FILTER (WHERE status = 'fetched'), count(*) FILTER "
                                f"(WHERE status IN ('retry', 'http_error', 'gone')) FROM {files.fetches(r)}")[0]
        new = _duck(f"SELECT count(*) FROM {files.db} WHERE discovered_round = {r}")[0][0]
        tr = page.locator(f'table#rounds tr[data-round="{r}"]')
        got = [_int(tr.locator(f'[data-k="{k}"]').inner_text()) for k in ("fetched", "errors", "new_urls")]
        assert got == [fetched, errors, new], (r, got, [fetched, errors, new])
    # the health gate (crawl.health): each round's verdict as its manifest has it; a banner only for a
    # degraded latest round
    for r in range(1, n + 1):
        verdict = "degraded" if files.step(r, "manifest")["degraded"] else "healthy"
        assert page.locator(f'table#rounds tr[data-round="{r}"] [data-k="health"]').inner_text() == verdict
    assert page.locator("#degraded").count() == int(files.step(n, "manifest")["degraded"])
    status = dict(_duck(f"SELECT status, count(*) FROM {files.db} GROUP BY 1"))
    shown = {tr.get_attribute("data-status"): _int(tr.locator('[data-k="urls"]').inner_text())
             for tr in page.locator("table#status tbody tr").all()}
    assert shown == status
    for tr in page.locator("table#hosts tbody tr").all():
        pages = _duck(f"SELECT count(*) FROM {files.fetches()} AND status = 'fetched' AND host = ?",
                      [tr.get_attribute("data-host")])[0][0]
        assert _int(tr.locator('[data-k="pages"]').inner_text()) == pages
    # the DAG's round ran on the embedded cluster, gone with its fetch step: no dead Dask link, a note why
    assert files.step(n, "fetch_parse")["dask_dashboard"].startswith("http://127.0.0.1:")
    assert page.locator("#dask-dashboard").count() == 0
    assert "embedded cluster" in page.locator("#dask-dashboard-note").inner_text()
    # the round links to the DAG run that made it, opened in the top window
    link = page.locator("table#rounds a[href*='/dags/recrawl/runs/']").first
    assert unquote(link.get_attribute("href")) == f"/dags/recrawl/runs/{run_id}"
    assert link.get_attribute("target") == "_top"
    shots.shot(page, "dashboard-overview")

    # 3. hosts, sorted by errors
    page.locator("nav.tabs a", has_text="Hosts").click()
    page.locator("table#hosts").wait_for()
    page.get_by_role("link", name="errors", exact=True).first.click()
    page.wait_for_url(re.compile(r"sort=errors"))
    errors = [_int(t) for t in page.locator('table#hosts [data-k="errors"]').all_inner_texts()]
    assert errors == sorted(errors, reverse=True)
    expect = dict(_duck(f"SELECT host, count(*) FROM {files.fetches()} AND status IN ('retry', 'http_error', "
                        f"'gone') GROUP BY 1"))
    hosts = page.locator("table#hosts tbody tr").evaluate_all("rows => rows.map(r => r.dataset.host)")
    assert {h: e for h, e in zip(hosts, errors, strict=True) if e} == expect
    assert page.locator("svg.chart").count() == 1
    shots.shot(page, "dashboard-hosts")

    # 4. the next round's queue: what is due by the time the scheduler expects the next round
    page.locator("nav.tabs a", has_text="Next round").click()
    page.locator('[data-k="due_new"]').wait_for()
    at = datetime.fromisoformat(files.step(n, "generate")["now"]) + timedelta(
        seconds=files.step(n, "reprioritise")["round_spacing_s"])
    due = dict(_duck(f"SELECT coalesce(fetch_count, 0) = 0, count(*) FROM {files.db} WHERE status NOT IN "
                     f"('gone', 'filtered') AND (next_fetch_time IS NULL OR next_fetch_time <= ?) GROUP BY 1", [at]))
    assert _int(page.locator('[data-k="due_new"] .v').inner_text()) == due.get(True, 0)
    assert _int(page.locator('[data-k="due_refetch"] .v').inner_text()) == due.get(False, 0)
    shots.shot(page, "dashboard-queue")

    # 5. page lookup: type a fetched URL into the form; its history equals the fetch records; download
    url = _duck(f"SELECT url FROM {files.fetches()} AND status = 'fetched' ORDER BY fetch_time, url LIMIT 1")[0][0]
    page.locator("nav.tabs a", has_text="Page lookup").click()
    page.locator("form.lookup input[name=url]").fill(url)
    page.get_by_role("button", name="Look up").click()
    page.locator("table#history").wait_for()
    rounds = [int(r) for r in page.locator("table#history tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.round)")]
    assert rounds == [r for (r,) in _duck(f"SELECT round FROM {files.fetches()} AND url = ? ORDER BY fetch_time",
                                          [url])]
    shots.shot(page, "dashboard-page-lookup")
    with page.expect_download() as download:
        page.locator("table#history a", has_text="download").first.click()
    from crawl.fingerprint import payload_digest

    body = Path(download.value.path()).read_bytes()
    digests = {d for (d,) in _duck(f"SELECT payload_digest FROM {files.fetches()} AND url = ?", [url])}
    assert payload_digest(body) in digests

    # 6. errors inside the UI's frame are pages with a way back: an unknown crawl, then "all crawls"
    page.goto(server.url + "/")
    page.get_by_role("button", name="Browse").first.click()
    page.get_by_role("menuitem", name="Crawls").click()
    frame = page.frame_locator("iframe").first
    frame.locator(f'table#crawls tr[data-crawl="{crawl_id}"]').wait_for()
    page.locator("iframe").first.evaluate("(f, src) => { f.src = src }", "/crawl/dashboard/crawls/no-such-crawl")
    frame.locator("#error-message").wait_for()
    assert "unknown crawl 'no-such-crawl'" in frame.locator("#error-message").inner_text()
    shots.shot(page, "dashboard-error-in-frame", full_page=False)
    frame.get_by_role("link", name="all crawls").click()
    frame.locator(f'table#crawls tr[data-crawl="{crawl_id}"]').wait_for()
    # the API reference, offline: the endpoints are there
    page.goto(server.url + "/crawl/docs")
    page.locator('section.op[data-method="POST"][data-path="/crawls"] tr[data-field="seeds"]').wait_for()
    shots.shot(page, "api-reference", full_page=False)

    # 7. back to the overview, follow the DAG run link: the Airflow UI's page of the run
    page.goto(base)
    page.locator("table#rounds a[href*='/dags/recrawl/runs/']").first.click()
    page.wait_for_url(re.compile(r"/dags/recrawl/runs/"))
    assert unquote(page.url).endswith(f"/dags/recrawl/runs/{run_id}")
    shots.shot(page, "dag-run-from-dashboard")
