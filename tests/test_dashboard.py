"""The crawl dashboard pages (plugins/crawl_dashboard.py) served by the real Airflow API app over
loopback HTTP, reading a crawl that ``python -m crawl run`` made of the simulated web; every number
on the pages is checked against DuckDB over the crawl's files, every link is followed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from airflow_harness import REPO, configure_env
from browser import artifacts, chromium  # noqa: F401 - fixtures are found by name
from crawldb_view import crawldb_relation
from selectolax.lexbor import LexborHTMLParser as HTMLParser

configure_env()  # before anything imports airflow

CRAWL = "dash"
PENDING = "waiting"  # seeds injected, no round published yet
DOWN = "down"  # its web went down after round 1: round 2 is degraded (crawl.health)
ROUNDS = 2
RUN_ID = "manual__2026-12-01T10:00:00+00:00"


def _duck(sql: str, params: list | None = None) -> list[tuple]:
    import duckdb

    return duckdb.connect().execute(sql, params or []).fetchall()


@pytest.fixture(scope="module")
def root(tmp_path_factory, simweb) -> Path:
    """Two rounds by the CLI's ``crawl run`` (which writes each round's report file)."""
    root = tmp_path_factory.mktemp("dashroot")
    common = ["--root", str(root), "--resolve", simweb.resolve_rule]
    proc = subprocess.run(
        [sys.executable, "-m", "crawl", "run", *common, "--crawl-id", CRAWL, "--delay", "0.05", "--max-pages", "80",
         "--partitions", "2", "--round-duration-s", "8", "--workers", "2", "--no-dashboard", "--rounds", str(ROUNDS),
         "--seeds", *simweb.seed_urls(4)],
        cwd=str(REPO), capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "report: " in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "crawl", "inject", *common, "--crawl-id", PENDING, "--seeds",
                           simweb.seed_urls(1)[0]], cwd=str(REPO), capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # what the DAG's report task does at the end of a run: link the round to its DAG run
    from crawl import round as rnd
    from crawl.config import load_config

    rnd.report(load_config(overrides={"root": str(root), "crawl_id": CRAWL}, use_env=False), ROUNDS,
               origin={"dag_id": "recrawl", "run_id": RUN_ID})
    _crawl_a_web_that_goes_down(root, tmp_path_factory.mktemp("downweb"))
    return root


def _crawl_a_web_that_goes_down(root: Path, workdir: Path) -> None:
    """Crawl ``DOWN``: round 1 on a web of its own, then that web stops and round 2 is published
    degraded (``crawl run`` warns and exits 0 without ``--strict``; it writes both report files)."""
    from conftest import start_simweb

    web = start_simweb(workdir)
    try:
        # with the embedded cluster's Dask dashboard on (the default): each round records its URL
        common = ["--root", str(root), "--resolve", web.resolve_rule, "--crawl-id", DOWN, "--delay", "0.05",
                  "--max-pages", "40", "--partitions", "2", "--round-duration-s", "8", "--workers", "2",
                  "--rounds", "1"]
        proc = subprocess.run([sys.executable, "-m", "crawl", "run", *common, "--seeds", *web.seed_urls(4)],
                              cwd=str(REPO), capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        web.stop()
    proc = subprocess.run([sys.executable, "-m", "crawl", "run", *common], cwd=str(REPO), capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "round 2 is degraded" in proc.stderr, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def server(root: Path):
    from airflow_harness import inprocess_api_on

    with inprocess_api_on(root) as api:
        yield api


@pytest.fixture(scope="module")
def token(server) -> str:
    return server.token()


def _get(server, token: str, path: str, status: int = 200) -> tuple[bytes, dict[str, str]]:
    got, raw, headers = server.request("GET", path, token=token, timeout=120)
    assert got == status, (path, got, raw[:500])
    return raw, {k.lower(): v for k, v in headers.items()}


def _doc(server, token: str, path: str, status: int = 200) -> HTMLParser:
    raw, headers = _get(server, token, path, status)
    assert headers["content-type"].startswith("text/html")
    return HTMLParser(raw.decode("utf-8"))


def _num(node) -> int:
    return int(node.text().strip().replace(",", ""))


def _db(root: Path, version: int = ROUNDS) -> str:
    return crawldb_relation(root / "state" / f"crawl={CRAWL}", version)


def _fx(root: Path, r: int | str = "*") -> str:
    rr = r if r == "*" else f"{r:05d}"
    return (f"(SELECT *, CAST(regexp_extract(filename, '/rounds/([0-9]+)/', 1) AS INTEGER) AS round "
            f"FROM read_parquet('{root}/state/crawl={CRAWL}/rounds/{rr}/fetched/part=*.parquet', filename = true)) "
            f"WHERE subset IN ('warc', 'crawldiagnostics')")


@pytest.mark.parametrize("path", [
    "/crawl/dashboard/", f"/crawl/dashboard/crawls/{CRAWL}", f"/crawl/dashboard/crawls/{CRAWL}/hosts",
    f"/crawl/dashboard/crawls/{CRAWL}/queue", f"/crawl/dashboard/crawls/{CRAWL}/page?url=http://x.test/",
    f"/crawl/dashboard/crawls/{CRAWL}/body?url=http://x.test/&at=2026-01-01T00:00:00Z",
    f"/crawl/dashboard/crawls/{CRAWL}/reports/1",
])
def test_every_dashboard_page_needs_a_login(server, path: str) -> None:
    assert server.request("GET", path)[0] == 401
    assert server.request("GET", path, token="not-a-valid-jwt")[0] in (401, 403)


def test_crawls_list_matches_duckdb_and_links_the_report_files(server, token: str, root: Path) -> None:
    doc = _doc(server, token, "/crawl/dashboard/")
    row = doc.css_first(f'table#crawls tr[data-crawl="{CRAWL}"]')
    assert _num(row.css_first('[data-k="rounds"]')) == ROUNDS
    assert _num(row.css_first('[data-k="known"]')) == _duck(f"SELECT count(*) FROM {_db(root)}")[0][0]
    pending = doc.css_first(f'table#crawls tr[data-crawl="{PENDING}"]')
    assert _num(pending.css_first('[data-k="rounds"]')) == 0
    # the report file link serves the file `crawl run` wrote, byte for byte
    href = [a.attributes["href"] for a in row.css("a") if "/reports/" in a.attributes.get("href", "")][0]
    raw, _ = _get(server, token, href)
    assert raw == (root / "reports" / f"crawl={CRAWL}" / f"round={ROUNDS:05d}.html").read_bytes()
    assert (root / "reports" / f"crawl={CRAWL}" / "round=00001.html").exists()  # crawl run wrote every round's
    _get(server, token, f"/crawl/dashboard/crawls/{CRAWL}/reports/9", 404)


def test_crawl_overview_charts_and_numbers_match_duckdb(server, token: str, root: Path) -> None:
    doc = _doc(server, token, f"/crawl/dashboard/crawls/{CRAWL}")
    charts = doc.css("svg.chart")
    assert len(charts) >= 12 and all(c.css_first("title") for c in charts)
    assert not doc.css("script, link[href], img[src]")  # no script, nothing loaded from elsewhere
    ids = [n.attributes["id"] for n in doc.css("[id]")]
    assert len(ids) == len(set(ids))  # the charts' SVG ids (clip paths) do not collide on one page
    for r in range(1, ROUNDS + 1):
        fetched, errors = _duck(f"SELECT count(*) FILTER (WHERE status = 'fetched'), "
                                f"count(*) FILTER (WHERE status IN ('retry', 'http_error', 'gone')) FROM {_fx(root, r)}")[0]
        new = _duck(f"SELECT count(*) FROM {_db(root)} WHERE discovered_round = {r}")[0][0]
        tr = doc.css_first(f'table#rounds tr[data-round="{r}"]')
        got = [_num(tr.css_first(f'[data-k="{k}"]')) for k in ("fetched", "errors", "new_urls")]
        assert got == [fetched, errors, new], r
    for tr in doc.css("table#status tbody tr"):
        status = tr.attributes["data-status"]
        assert _num(tr.css_first('[data-k="urls"]')) == _duck(
            f"SELECT count(*) FROM {_db(root)} WHERE status = ?", [status])[0][0]
    assert len(doc.css("table#status tbody tr")) == _duck(f"SELECT count(DISTINCT status) FROM {_db(root)}")[0][0]
    for tr in doc.css("table#hosts tbody tr"):
        pages = _duck(f"SELECT count(*) FROM {_fx(root)} AND status = 'fetched' AND host = ?",
                      [tr.attributes["data-host"]])[0][0]
        assert _num(tr.css_first('[data-k="pages"]')) == pages
    # the round made by the DAG links to its run, in the top window (the page is in the UI's iframe)
    run_links = [a for a in doc.css("table#rounds a") if "/dags/" in a.attributes.get("href", "")]
    assert [unquote(a.attributes["href"]) for a in run_links] == [f"/dags/recrawl/runs/{RUN_ID}"]
    assert run_links[0].attributes["target"] == "_top"
    # every link between the dashboard's pages works
    for a in doc.css("nav.tabs a, .crumbs a"):
        _get(server, token, a.attributes["href"])


def test_hosts_page_sorts_and_refuses_a_bad_sort(server, token: str, root: Path) -> None:
    doc = _doc(server, token, f"/crawl/dashboard/crawls/{CRAWL}/hosts?sort=errors")
    assert doc.css_first("svg.chart") is not None
    rows = doc.css("table#hosts tbody tr")
    assert len(rows) == _duck(f"SELECT count(DISTINCT host) FROM (SELECT host FROM {_db(root)} "
                              f"UNION SELECT host FROM {_fx(root)})")[0][0]
    errors = [_num(tr.css_first('[data-k="errors"]')) for tr in rows]
    assert errors == sorted(errors, reverse=True)
    expect = dict(_duck(f"SELECT host, count(*) FROM {_fx(root)} AND status IN ('retry', 'http_error', 'gone') "
                        f"GROUP BY 1"))
    assert {tr.attributes["data-host"]: e for tr, e in zip(rows, errors, strict=True) if e} == expect
    _get(server, token, f"/crawl/dashboard/crawls/{CRAWL}/hosts?sort=nonsense", 400)


def test_queue_page_counts_what_is_due_by_the_next_round(server, token: str, root: Path) -> None:
    from datetime import datetime, timedelta

    state = root / "state" / f"crawl={CRAWL}" / "rounds" / f"{ROUNDS:05d}"
    now = datetime.fromisoformat(json.loads((state / "generate.json").read_text())["now"])
    at = now + timedelta(seconds=json.loads((state / "reprioritise.json").read_text())["round_spacing_s"])
    due = dict(_duck(f"""
        SELECT coalesce(fetch_count, 0) = 0, count(*) FROM {_db(root)}
        WHERE status NOT IN ('gone', 'filtered') AND (next_fetch_time IS NULL OR next_fetch_time <= ?)
        GROUP BY 1""", [at]))
    doc = _doc(server, token, f"/crawl/dashboard/crawls/{CRAWL}/queue")
    assert _num(doc.css_first('[data-k="due_new"] .v')) == due.get(True, 0)
    assert _num(doc.css_first('[data-k="due_refetch"] .v')) == due.get(False, 0)
    assert len(doc.css("table#queue-new tbody tr")) == min(50, due.get(True, 0))


def test_page_lookup_shows_the_history_and_downloads_the_stored_bodies(server, token: str, root: Path,
                                                                        simweb) -> None:
    from crawl.fingerprint import payload_digest

    seed = simweb.seed_urls(1)[0]
    doc = _doc(server, token, f"/crawl/dashboard/crawls/{CRAWL}/page?url={seed.upper()}")
    assert doc.css_first("#canonical").text() == seed
    raw = _duck(f"SELECT round, payload_digest FROM {_fx(root)} AND url = ? ORDER BY fetch_time", [seed])
    rows = doc.css("table#history tbody tr")
    assert [int(tr.attributes["data-round"]) for tr in rows] == [r for r, _ in raw]
    downloads = [a.attributes["href"] for a in doc.css("table#history a") if "/body?" in a.attributes["href"]]
    assert downloads
    digests = {d for _, d in raw}
    for href in downloads:
        body, headers = _get(server, token, href)
        assert payload_digest(body) in digests
        assert headers["content-disposition"].startswith("attachment") and "sandbox" in headers["content-security-policy"]
    doc = _doc(server, token, f"/crawl/dashboard/crawls/{CRAWL}/page?url=gopher://example.com/", 400)
    assert "http(s)" in doc.css_first("#lookup-error").text()
    # what the user typed is shown back escaped, never as markup
    evil = quote('http://x.test/"><script>alert(1)</script>', safe="")
    doc = _doc(server, token, f"/crawl/dashboard/crawls/{CRAWL}/page?url={evil}")
    assert not doc.css("script") and "<script>" in doc.css_first("form.lookup input").attributes["value"]
    _get(server, token, f"/crawl/dashboard/crawls/{CRAWL}/body?url={seed}&at=2001-01-01T00:00:00Z", 404)
    _get(server, token, "/crawl/dashboard/crawls/nosuchcrawl/page", 404)
    _get(server, token, "/crawl/dashboard/crawls/Bad%20Id", 400)


def test_a_crawl_without_a_published_round(server, token: str) -> None:
    doc = _doc(server, token, f"/crawl/dashboard/crawls/{PENDING}")
    assert "no round has been published" in doc.body.text()


def _manifest_health(root: Path, crawl_id: str, r: int) -> dict:
    """The health gate's figures of round ``r`` as its manifest holds them, read by DuckDB."""
    path = root / "state" / f"crawl={crawl_id}" / "rounds" / f"{r:05d}" / "manifest.json"
    keys = ("degraded", "failing", "hosts", "host_share", "answered", "planned", "fetched_share", "max_host_share",
            "min_fetched_share")
    row = _duck(f"""
        SELECT degraded, health.hosts_with_connection_failures, health.hosts, health.host_failure_share,
               health.answered, health.planned, health.fetched_share, config.degraded_host_failure_share,
               config.degraded_min_fetched_share
        FROM read_json_auto('{path}', maximum_object_size = 67108864)""")[0]
    return dict(zip(keys, row, strict=True))


def _pct_of(text: str) -> float:
    return float(text.strip().rstrip("%")) / 100


def test_degraded_round_in_a_real_browser(server, root: Path, chromium, artifacts) -> None:  # noqa: F811
    """Chromium, logged in through Airflow's login page: the crawls list flags the degraded crawl, its
    page opens with a banner saying why (figures and thresholds equal to the manifest read by DuckDB),
    its rounds table marks round 2; the healthy crawl shows no banner."""
    from browser import login_through_form, new_page
    from playwright.sync_api import expect

    down = _manifest_health(root, DOWN, 2)
    assert down["degraded"] is True and _manifest_health(root, DOWN, 1)["degraded"] is False
    page = new_page(chromium)
    try:
        login_through_form(page, server)
        page.goto(f"{server.url}/crawl/dashboard/")
        expect(page.locator(f'table#crawls tr[data-crawl="{DOWN}"] [data-k="health"]')).to_have_text("degraded")
        expect(page.locator(f'table#crawls tr[data-crawl="{CRAWL}"] [data-k="health"]')).to_have_text("healthy")
        artifacts.shot(page, "crawls-list-health")

        page.locator(f'table#crawls tr[data-crawl="{DOWN}"]').get_by_role("link", name=DOWN).click()
        banner = page.locator("#degraded")
        expect(banner).to_be_visible()
        assert banner.get_attribute("data-round") == "2"
        expect(banner).to_contain_text("Round 2 is degraded")
        box = banner.bounding_box()
        assert box and box["y"] < page.locator("#tiles").bounding_box()["y"]  # above the figures, seen first
        hosts = banner.locator('[data-k="host_failure_share"]')
        assert hosts.locator(".of").inner_text() == f"{down['failing']} of {down['hosts']}"
        assert abs(_pct_of(hosts.locator(".v").inner_text()) - down["host_share"]) <= 0.006
        assert abs(_pct_of(hosts.locator(".t").inner_text()) - down["max_host_share"]) <= 0.006
        answered = banner.locator('[data-k="fetched_share"]')
        assert answered.locator(".of").inner_text() == f"{down['answered']} of {down['planned']}"
        assert abs(_pct_of(answered.locator(".v").inner_text()) - down["fetched_share"]) <= 0.006
        assert abs(_pct_of(answered.locator(".t").inner_text()) - down["min_fetched_share"]) <= 0.006
        # the threshold crossed is the one marked: the same comparison as the gate's, from the manifest
        assert ("over" in (hosts.get_attribute("class") or "")) == (down["host_share"] > down["max_host_share"])
        assert ("over" in (answered.get_attribute("class") or "")) == (down["fetched_share"] < down["min_fetched_share"])
        for r in (1, 2):
            m = _manifest_health(root, DOWN, r)
            tr = page.locator(f'table#rounds tr[data-round="{r}"]')
            assert tr.locator('[data-k="health"]').inner_text() == ("degraded" if m["degraded"] else "healthy")
            assert abs(_pct_of(tr.locator('[data-k="host_failure_share"]').inner_text()) - m["host_share"]) <= 0.006
            assert abs(_pct_of(tr.locator('[data-k="fetched_share"]').inner_text()) - m["fetched_share"]) <= 0.006
        artifacts.shot(page, "degraded-crawl-overview")

        page.goto(f"{server.url}/crawl/dashboard/crawls/{CRAWL}")
        page.locator("#tiles").wait_for()
        assert page.locator("#degraded").count() == 0
        for r in range(1, ROUNDS + 1):
            assert _manifest_health(root, CRAWL, r)["degraded"] is False
            assert page.locator(f'table#rounds tr[data-round="{r}"] [data-k="health"]').inner_text() == "healthy"
        artifacts.shot(page, "healthy-crawl-overview")

        # the report file of the degraded round, served by the dashboard: the same banner
        page.goto(f"{server.url}/crawl/dashboard/crawls/{DOWN}/reports/2")
        expect(page.locator("#degraded")).to_contain_text("Round 2 is degraded")
        assert page.locator('#degraded [data-k="host_failure_share"] .of').inner_text() == \
            f"{down['failing']} of {down['hosts']}"
        artifacts.shot(page, "degraded-report-file")
    finally:
        page.context.close()


def test_page_lookup_shows_each_attempt_as_the_web_answered_it(server, root: Path, simweb, chromium,  # noqa: F811
                                                               artifacts) -> None:  # noqa: F811
    """A URL answered 429 or 503 and then 200 in the same round: in Chromium, the lookup page's history shows
    each attempt with its own result, in the order the simulated web's access log has the answers (a
    503 attempt is a retry, never "fetched"; "changed?" only for captures)."""
    from browser import new_page
    from playwright.sync_api import expect

    url, r = _duck(f"""SELECT url, round FROM {_fx(root)} GROUP BY url, round
                      HAVING bool_or(status = 'retry') AND bool_or(status = 'fetched') AND url NOT LIKE '%?%'
                      ORDER BY url LIMIT 1""")[0]
    host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
    answers = [e["status"] for e in simweb.log().to_pylist() if e["host"] == host and e["path"] == path]
    assert {429, 503} & set(answers) and 200 in answers, answers
    page = new_page(chromium, cookies=[{"name": "_token", "value": server.token(), "url": server.url}])
    try:
        page.goto(f"{server.url}/crawl/dashboard/crawls/{CRAWL}/page?url={quote(url, safe='')}")
        rows = page.locator("table#history tbody tr")
        expect(rows.first).to_be_visible()
        http = [_int_or_none(t) for t in rows.locator('[data-k="http_status"]').all_inner_texts()]
        assert http == answers[:len(http)] and len(http) == len(answers), (http, answers)
        results = [t.strip() for t in rows.locator("td:nth-child(3) .badge").all_inner_texts()]
        changed = [t.strip() for t in rows.locator('[data-k="changed"]').all_inner_texts()]
        artifacts.shot(page, "lookup-retried-url")
        for status, result, ch in zip(http, results, changed, strict=True):
            if status in (429, 503):
                assert result == "retry", (url, http, results)
                assert ch == "–", (url, http, changed)
            elif status == 200:
                assert result == "fetched", (url, http, results)
    finally:
        page.context.close()


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def test_the_index_gives_each_attempt_of_a_retried_url_its_own_status(root: Path, simweb) -> None:
    """The published page index as a user queries it (DuckDB over its files): a URL answered 429/503 and
    then 200 in one round has a ``crawl_status`` per attempt in the order of the access log's answers,
    'retry' for the 429/503 and 'fetched' (or a duplicate status) for the 200. Before, every attempt
    carried the URL's merged status: the 503 read 'fetched', so ``summary.sql`` counted the URL twice."""
    url, _ = _duck(f"""SELECT url, round FROM {_fx(root)} GROUP BY url, round
                      HAVING bool_or(status = 'retry') AND bool_or(status = 'fetched') AND url NOT LIKE '%?%'
                      ORDER BY url LIMIT 1""")[0]
    host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
    answers = [e["status"] for e in simweb.log().to_pylist() if e["host"] == host and e["path"] == path]
    rows = _duck(f"""SELECT fetch_status, crawl_status FROM read_parquet('{root}/index/crawl={CRAWL}/subset=*/*.parquet')
                     WHERE url = ? AND fetch_time IS NOT NULL ORDER BY fetch_time""", [url])
    assert [s for s, _ in rows] == answers, (rows, answers)
    for status, crawl_status in rows:
        if status in (429, 503):
            assert crawl_status == "retry", (url, rows)
        else:
            assert crawl_status in ("fetched", "duplicate", "near_duplicate"), (url, rows)



def _http(server, path: str, token: str, accept: str | None = None) -> tuple[int, str, bytes]:
    """GET with an Accept header (the harness's request sends none): (status, content type, body)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {token}",
                                                             **({"Accept": accept} if accept else {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.headers.get("content-type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("content-type", ""), exc.read()


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def test_dashboard_errors_are_pages_in_a_browser_and_json_for_api_clients(server, chromium, artifacts) -> None:  # noqa: F811
    """Chromium, logged in: an unknown crawl, a round with no report file and an out-of-range limit each
    answer a page with the status, the specific reason and links back that work (to the crawl list, to
    the crawl). The same URLs asked for JSON answer FastAPI's JSON with the same status and reason, and
    the JSON API keeps its JSON for a browser too. Before, the browser showed the raw JSON."""
    from browser import new_page
    from playwright.sync_api import expect

    token = server.token()
    cases = [  # path, status, the reason's words (page, JSON), links back
        ("/crawl/dashboard/crawls/nosuchcrawl", 404, ("unknown crawl 'nosuchcrawl'",) * 2, ["all crawls"]),
        (f"/crawl/dashboard/crawls/{CRAWL}/reports/9", 404, (f"no report file for round 9 of '{CRAWL}'",) * 2,
         [f"back to crawl {CRAWL}", "all crawls"]),
        (f"/crawl/dashboard/crawls/{CRAWL}/hosts?limit=0", 422,
         ("query parameter 'limit': Input should be greater than or equal to 1 (got '0')", '["query", "limit"]'),
         [f"back to crawl {CRAWL}", "all crawls"]),
        (f"/crawl/dashboard/crawls/{CRAWL}/nosuchtab", 404, ("Not Found",) * 2, [f"back to crawl {CRAWL}", "all crawls"]),
    ]
    page = new_page(chromium, cookies=[{"name": "_token", "value": token, "url": server.url}])
    try:
        for path, status, (reason, json_reason), backs in cases:
            resp = page.goto(server.url + path)
            assert resp.status == status, (path, resp.status)
            assert resp.headers["content-type"].startswith("text/html"), (path, resp.headers)
            expect(page.locator("#error-message")).to_contain_text(reason)
            expect(page.locator("h1")).to_be_visible()
            assert page.locator("#error").get_attribute("data-status") == str(status)
            artifacts.shot(page, f"error-{status}-{path.rsplit('/', 1)[1][:20]}")
            for label in backs:
                assert page.locator("#error-links").get_by_role("link", name=label).count() == 1, (path, label)
            # follow the first link back: the crawl (its figures) or the crawl list
            page.locator("#error-links").get_by_role("link", name=backs[0]).click()
            expect(page.locator("#tiles" if backs[0].startswith("back to crawl") else "table#crawls")).to_be_visible()
            # an API client asking for JSON gets the same status and reason as JSON
            got, ctype, raw = _http(server, path, token, "application/json")
            assert got == status and ctype.startswith("application/json"), (path, got, ctype)
            detail = json.loads(raw)["detail"]
            assert json_reason in (detail if isinstance(detail, str) else json.dumps(detail)), (path, detail)
        # a page without a login: 401 as a page that says so and links to Airflow's login
        anon = new_page(chromium)
        try:
            resp = anon.goto(f"{server.url}/crawl/dashboard/crawls/{CRAWL}")
            assert resp.status == 401
            expect(anon.locator("#error-message")).to_contain_text("Not authenticated")
            assert "/auth/login" in anon.locator("#error-links a", has_text="Log in").get_attribute("href")
            assert anon.locator("#error-links a", has_text=CRAWL).count() == 0  # no crawl named without a login
        finally:
            anon.context.close()
    finally:
        page.context.close()
    # the JSON API's answers are unchanged, whatever the client accepts
    for accept in (None, BROWSER_ACCEPT, "application/json"):
        got, ctype, raw = _http(server, "/crawl/crawls/nosuchcrawl", token, accept)
        assert got == 404 and ctype.startswith("application/json"), (accept, got, ctype)
        assert json.loads(raw)["detail"].startswith("unknown crawl 'nosuchcrawl': nothing under the crawl root")


@pytest.mark.parametrize("bad", ["-1", "0", "abc", "1.5", "+1", "-0001", "1e3", "99999999999"])
def test_a_bad_round_number_is_refused_naming_it(server, token: str, root: Path, bad: str) -> None:
    """``reports/-1`` and other round numbers that are not 1, 2, ...: 400 naming the value as given (for a
    browser and for an API client), never a 404 about a partition path made of it (``round=-0001``)."""
    for accept, kind in ((BROWSER_ACCEPT, "text/html"), ("application/json", "application/json")):
        got, ctype, raw = _http(server, f"/crawl/dashboard/crawls/{CRAWL}/reports/{quote(bad, safe='')}", token,
                                accept)
        text = raw.decode()
        assert got == 400 and ctype.startswith(kind), (bad, got, ctype, text[:300])
        assert "round=" not in text and "reports/crawl=" not in text, (bad, text[:300])
        message = (json.loads(text)["detail"] if kind == "application/json"
                   else HTMLParser(text).css_first("#error-message").text())
        assert message == f"round must be a whole number from 1 up to 999999999 (rounds count from 1), got {bad!r}", message
    # a good number of a round that has no report file: 404 saying which rounds there are
    got, _, raw = _http(server, f"/crawl/dashboard/crawls/{CRAWL}/reports/{ROUNDS + 1}", token, "application/json")
    assert got == 404 and f"its published rounds are 1 to {ROUNDS}" in json.loads(raw)["detail"]
    assert not (root / "reports" / f"crawl={CRAWL}" / "round=-0001.html").exists()


def _dask_header(server, token: str, crawl_id: str) -> HTMLParser:
    return _doc(server, token, f"/crawl/dashboard/crawls/{crawl_id}")


def test_the_dask_dashboard_is_linked_only_while_it_answers(server, token: str, root: Path, simweb,
                                                            tmp_path) -> None:
    """Embedded cluster (crawl ``down``, dashboard on): the round's cluster ended with its fetch step, so
    no link, a note saying why. A round on a real external ``dask scheduler`` with its dashboard: linked
    while the scheduler runs (the link answers 200), a note once it is stopped. Before, both crawls
    linked a dashboard whatever answered (the embedded one always dead: connection refused)."""
    import time
    import urllib.request

    from airflow_harness import VENV_BIN, free_port
    from test_resilience import DASK_ENV, start_workers, stop

    recorded = json.loads((root / "state" / f"crawl={DOWN}" / "rounds" / "00002" / "fetch_parse.json").read_text())
    assert recorded["dask_dashboard"].startswith("http://127.0.0.1:")  # the embedded cluster had one, then
    doc = _dask_header(server, token, DOWN)
    assert doc.css_first("#dask-dashboard") is None
    assert not [a for a in doc.css("a") if "Dask dashboard" in a.text()]
    assert "embedded cluster: it runs only during a round" in doc.css_first("#dask-dashboard-note").text()

    dash_port, sched_file = free_port(), tmp_path / "scheduler.json"
    sched = subprocess.Popen([str(VENV_BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                              "--dashboard-address", f"127.0.0.1:{dash_port}", "--scheduler-file", str(sched_file)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=DASK_ENV)
    procs = [sched]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        procs += start_workers(address, 1, prefix="dash")
        proc = subprocess.run(
            [sys.executable, "-m", "crawl", "run", "--root", str(root), "--resolve", simweb.resolve_rule,
             "--crawl-id", "ext", "--delay", "0.05", "--max-pages", "20", "--partitions", "1", "--rounds", "1",
             "--round-duration-s", "8", "--dask-address", address, "--seeds", *simweb.seed_urls(2)],
            cwd=str(REPO), capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        link = json.loads((root / "state" / "crawl=ext" / "rounds" / "00001" / "fetch_parse.json").read_text())[
            "dask_dashboard"]
        assert f"127.0.0.1:{dash_port}" in link
        a = _dask_header(server, token, "ext").css_first("#dask-dashboard")
        assert a is not None and a.attributes["href"] == link
        with urllib.request.urlopen(link, timeout=10) as resp:  # the real dashboard answers
            assert resp.status == 200
    finally:
        stop(procs)
    doc = _dask_header(server, token, "ext")
    assert doc.css_first("#dask-dashboard") is None
    assert "does not answer" in doc.css_first("#dask-dashboard-note").text()

    # the page's server GETs the recorded link: only on the scheduler's own host, whatever a stored file names
    from crawl.simweb.canary import Canary

    fp_path = root / "state" / "crawl=ext" / "rounds" / "00001" / "fetch_parse.json"
    with Canary() as canary:
        fp_path.write_text(json.dumps({**json.loads(fp_path.read_text()),
                                       "dask_dashboard": f"http://localhost:{canary.port}/status"}))
        doc = _dask_header(server, token, "ext")
        time.sleep(0.5)
        assert not canary.hits, canary.hits  # the old code's probe connected to it
    assert "not on the scheduler's host" in doc.css_first("#dask-dashboard-note").text()


def test_the_api_reference_shows_in_an_offline_browser(server, chromium, artifacts) -> None:  # noqa: F811
    """Chromium on this offline box, logged in: ``/crawl/docs`` and ``/crawl/redoc`` show every endpoint of
    ``/crawl/openapi.json`` with its parameters and body fields, and load nothing from another origin.
    Before, both pages loaded Swagger UI / ReDoc from cdn.jsdelivr.net and stayed blank here."""
    from browser import new_page
    from playwright.sync_api import expect

    token = server.token()
    status, raw, _ = server.request("GET", "/crawl/openapi.json", token=token)
    assert status == 200
    spec = json.loads(raw)
    ops = [(m.upper(), p) for p, item in spec["paths"].items() for m in item if m in ("get", "post")]
    assert ("POST", "/crawls") in ops and ("GET", "/pages") in ops
    page = new_page(chromium, cookies=[{"name": "_token", "value": token, "url": server.url}])
    elsewhere: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(server.url) else elsewhere.append(r.url))
    try:
        for path in ("/crawl/docs", "/crawl/redoc"):
            assert page.goto(server.url + path).status == 200
            for method, p in ops:
                op = page.locator(f'section.op[data-method="{method}"][data-path="{p}"]')
                expect(op.locator("code.path")).to_have_text(f"/crawl{p}")
                expect(op.locator("code.path")).to_be_visible()
            pages = page.locator('section.op[data-method="GET"][data-path="/pages"]')
            expect(pages.locator('tr[data-param="url"]')).to_contain_text("query")
            expect(pages.locator('tr[data-param="url"]')).to_contain_text("length ≤ 8192")
            start = page.locator('section.op[data-method="POST"][data-path="/crawls"]')
            for field in spec["components"]["schemas"]["CrawlRequest"]["properties"]:
                expect(start.locator(f'tr[data-field="{field}"]')).to_be_visible()
            expect(start.locator('tr[data-field="seeds"]')).to_contain_text("yes")
            expect(start.locator('tr[data-code="201"]')).to_be_visible()
            artifacts.shot(page, path.rsplit("/", 1)[1])
        assert elsewhere == [], elsewhere
    finally:
        page.context.close()
