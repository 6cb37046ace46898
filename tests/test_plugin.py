"""The crawl API plugin, served by the real Airflow API app (auth, REST, plugin mount) over loopback
HTTP, reading a crawl the real engine made from a loopback site."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_harness import REPO, TEST_USER, VIEWER_PASSWORD, VIEWER_USER, LoopbackSite, configure_env

configure_env()  # before anything imports airflow

CRAWL = "plugtest"
PENDING = "pending"  # seeds injected, no round published yet
HOSTILE = "hostile"  # one page whose script reports to a canary when it runs
CRAWLS = sorted([CRAWL, PENDING, HOSTILE])
CHROMIUM = "/usr/bin/chromium"  # Debian's package; playwright drives it


@pytest.fixture(scope="module")
def site():
    s = LoopbackSite()
    yield s
    s.close()


class HostileSite:
    """A site whose home page runs a script that requests ``/ran`` from a canary listener on loopback
    (its own HTTP server): a request there proves a browser ran the page's script."""

    def __init__(self) -> None:
        import http.server
        import threading

        outer = self
        self.canary_hits: list[str] = []

        class Canary(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                outer.canary_hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        class Site(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                ctype, data = (("text/plain", b"User-agent: *\nAllow: /\n") if self.path == "/robots.txt"
                               else ("text/html; charset=utf-8", outer.body))
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), h) for h in (Canary, Site)]
        for srv in self.servers:
            srv.daemon_threads = True
            threading.Thread(target=srv.serve_forever, daemon=True).start()
        canary_port = self.servers[0].server_address[1]
        self.port = self.servers[1].server_address[1]
        # the address is built by the script, so the crawler's link extraction never sees it
        self.body = ("<!doctype html><html><head><title>hostile</title></head><body><p>hello</p><script>"
                     f"new Image().src = 'http://127.0.0.1:' + {canary_port} + '/ran';</script></body></html>"
                     ).encode()

    url = "http://www.hostile.test/"

    @property
    def resolve_rule(self) -> str:
        return f"*.hostile.test=127.0.0.1:{self.port}"

    def close(self) -> None:
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()


@pytest.fixture(scope="module")
def hostile():
    h = HostileSite()
    yield h
    h.close()


@pytest.fixture(scope="module")
def root(tmp_path_factory, site, hostile) -> Path:
    """Real rounds of the engine (CLI, embedded Dask) into a private crawl root."""
    root = tmp_path_factory.mktemp("plugroot")
    procs = [subprocess.Popen(  # two crawls, side by side (one crawl root, separate crawl ids)
        [sys.executable, "-m", "crawl", "round", "--root", str(root), "--crawl-id", crawl_id,
         "--resolve", rule, "--delay", "0", "--workers", "1", "--seeds", *seeds],
        cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    ) for crawl_id, rule, seeds in ((CRAWL, site.resolve_rule, site.seed_urls(2)),
                                    (HOSTILE, hostile.resolve_rule, [hostile.url]))]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    proc = subprocess.run(
        [sys.executable, "-m", "crawl", "inject", "--root", str(root), "--crawl-id", PENDING,
         "--seeds", *site.seed_urls(2)],
        cwd=str(REPO), capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


@pytest.fixture(scope="module")
def server(root: Path):
    from airflow_harness import inprocess_api_on

    with inprocess_api_on(root) as api:
        yield api


@pytest.fixture(scope="module")
def token(server) -> str:
    return server.token()


@pytest.fixture(scope="module")
def viewer(server) -> str:
    """A token of the read-only user (simple auth manager role VIEWER)."""
    return server.token(VIEWER_USER, VIEWER_PASSWORD)


def _headers(resp: tuple[int, bytes, dict]) -> dict[str, str]:
    return {k.lower(): v for k, v in resp[2].items()}


def _json(resp: tuple[int, bytes, dict]) -> object:
    return json.loads(resp[1])


def _duck(sql: str) -> list[tuple]:
    import duckdb

    return duckdb.sql(sql).fetchall()


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/crawl/crawls", {"crawl_id": "x", "seeds": ["http://a.example/"]}),
    ("GET", "/crawl/crawls", None),
    ("GET", f"/crawl/crawls/{CRAWL}", None),
    ("GET", "/crawl/pages?url=http://www.alpha.test/", None),
    ("GET", "/crawl/pages?url=http://www.alpha.test/&body=1", None),
    ("GET", "/crawl/summary", None),
    ("GET", "/crawl/docs", None),
    ("GET", "/crawl/redoc", None),
    ("GET", "/crawl/openapi.json", None),
])
def test_every_endpoint_needs_a_login(server, method: str, path: str, body) -> None:
    status, _, _ = server.request(method, path, body)
    assert status == 401
    status, _, _ = server.request(method, path, body, token="not-a-valid-jwt")
    assert status in (401, 403)  # Airflow answers 403 "Invalid JWT token" for a forged one


def test_crawl_summary_matches_duckdb(server, token: str, root: Path) -> None:
    status, raw, _ = server.request("GET", f"/crawl/crawls/{CRAWL}", token=token)
    assert status == 200, raw
    summary = json.loads(raw)
    state = root / "state" / f"crawl={CRAWL}" / "crawldb"
    version = sorted(p.name for p in state.iterdir())[-1]
    known, fetched = _duck(f"SELECT count(*), count(*) FILTER (WHERE status IN ('fetched', 'not_modified')) "
                           f"FROM read_parquet('{state / version}/*.parquet')")[0]
    assert summary["crawl_id"] == CRAWL and summary["last_round"] == 1
    assert (summary["known"], summary["fetched"]) == (known, fetched)
    assert fetched == 2 and known > 2
    assert _json(server.request("GET", "/crawl/crawls", token=token)) == {"crawls": CRAWLS}


def test_unknown_or_bad_crawl_ids(server, token: str) -> None:
    status, raw, _ = server.request("GET", "/crawl/crawls/nosuchcrawl", token=token)
    assert status == 404 and b"nosuchcrawl" in raw
    assert server.request("GET", "/crawl/crawls/Bad%20Id", token=token)[0] == 400
    assert server.request("GET", "/crawl/pages?url=http://www.alpha.test/&crawl_id=nosuchcrawl",
                          token=token)[0] == 404


def test_page_lookup_is_canonical_and_matches_the_index(server, token: str, root: Path, site) -> None:
    seed = site.seed_urls(1)[0]
    index = f"{root}/index/crawl={CRAWL}/subset=warc/*.parquet"
    expected = _duck(f"SELECT warc_filename, warc_record_offset, warc_record_length, content_digest "
                     f"FROM read_parquet('{index}', hive_partitioning=false) WHERE url = '{seed}'")
    assert len(expected) == 1
    for asked in (seed, "HTTP://WWW.ALPHA.TEST:80/?utm_source=newsletter"):  # canonicalised by the engine
        status, raw, _ = server.request("GET", f"/crawl/pages?url={asked}&crawl_id={CRAWL}", token=token)
        assert status == 200, raw
        capture = json.loads(raw)
        assert capture["url"] == seed and capture["crawl_id"] == CRAWL and capture["fetch_status"] == 200
        got = (capture["warc_filename"], capture["warc_record_offset"], capture["warc_record_length"],
               capture["content_digest"])
        assert got == expected[0]
    # without crawl_id: searched across crawls
    assert _json(server.request("GET", f"/crawl/pages?url={seed}", token=token))["crawl_id"] == CRAWL


def test_page_body_streams_the_stored_payload(server, token: str, site) -> None:
    seed = site.seed_urls(1)[0]
    status, raw, headers = server.request("GET", f"/crawl/pages?url={seed}&crawl_id={CRAWL}&body=1", token=token)
    assert status == 200
    assert raw.decode() == site.page("www.alpha.test", "/")[2]
    assert {k.lower(): v for k, v in headers.items()}["x-crawl-id"] == CRAWL


def test_page_body_is_a_download_never_rendered(server, token: str, site) -> None:
    """A crawled text/html body on the Airflow origin would run its script as the logged-in user."""
    seed = site.seed_urls(1)[0]
    resp = server.request("GET", f"/crawl/pages?url={seed}&crawl_id={CRAWL}&body=1", token=token)
    headers = _headers(resp)
    assert resp[0] == 200 and headers["content-type"].startswith("text/html")  # the site's type, as stored
    assert headers["content-disposition"].startswith("attachment;")
    assert headers["content-disposition"].endswith('.bin"') and f'filename="{CRAWL}-' in headers["content-disposition"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"] == "sandbox"


def test_page_errors(server, token: str) -> None:
    status, raw, _ = server.request("GET", f"/crawl/pages?url=http://www.alpha.test/never-seen&crawl_id={CRAWL}",
                                    token=token)
    assert status == 404 and b"unknown URL" in raw
    assert server.request("GET", "/crawl/pages?url=gopher://x/", token=token)[0] == 400
    assert server.request("GET", "/crawl/pages", token=token)[0] == 422


def test_start_crawl_refuses_bad_input(server, token: str) -> None:
    status, raw, _ = server.request("POST", "/crawl/crawls", {
        "crawl_id": "new-one", "seeds": ["ftp://files.example/", "http://ok.example/", "mailto:x@y.z"]}, token=token)
    assert status == 400
    bad = {b["seed"] for b in json.loads(raw)["detail"]["bad_seeds"]}
    assert bad == {"ftp://files.example/", "mailto:x@y.z"}
    for body in ({"crawl_id": "Bad Id", "seeds": ["http://ok.example/"]},
                 {"crawl_id": "ok", "seeds": []},
                 {"crawl_id": "ok", "seeds": ["http://ok.example/"], "coverage_share": 1.5},
                 {"seeds": ["http://ok.example/"]}):
        assert server.request("POST", "/crawl/crawls", body, token=token)[0] == 422, body
    # the request model is derived from crawl.config.CrawlSettings, which checks the regex itself
    status, raw, _ = server.request("POST", "/crawl/crawls", {
        "crawl_id": "ok", "seeds": ["http://ok.example/"], "allowed_hosts": "("}, token=token)
    assert status == 422 and b"allowed_hosts" in raw and b"RE2" in raw


def test_a_browser_downloads_a_stored_page_and_never_runs_it(server, token: str, hostile) -> None:
    """Real Chromium, logged in by the UI's cookie: the stored hostile page comes as a download, its
    script never runs on the Airflow origin; the same page served by its own site does run (control)."""
    from urllib.parse import quote

    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    def canary_after(page, action) -> list[str]:
        """Canary hits after ``action``, then after a control visit that does run the script: the control's
        hit arrives after any the action caused, so no fixed sleep decides a negative."""
        hostile.canary_hits.clear()
        action()
        page.goto(f"http://127.0.0.1:{hostile.port}/")
        page.wait_for_function("() => performance.getEntriesByType('resource').some(e => e.name.endsWith('/ran'))")
        for _ in range(100):  # the control's own request reaches the canary shortly after
            if hostile.canary_hits:
                break
            page.wait_for_timeout(100)
        return list(hostile.canary_hits)

    api_url = f"{server.url}/crawl/pages?url={quote(hostile.url, safe='')}&crawl_id={HOSTILE}&body=1"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            ctx = browser.new_context(accept_downloads=True)
            ctx.add_cookies([{"name": "_token", "value": token, "url": server.url}])
            page = ctx.new_page()
            assert canary_after(page, lambda: None) == ["/ran"]  # the script works in this browser
            downloads = []

            def open_body() -> None:
                with page.expect_download() as info:
                    try:
                        page.goto(api_url)
                    except PlaywrightError as exc:  # a download aborts the navigation
                        assert "download" in str(exc).lower() or "aborted" in str(exc).lower(), exc
                downloads.append(info.value)

            assert canary_after(page, open_body) == ["/ran"]  # the control's hit only
            download = downloads[0]
            assert Path(download.path()).read_bytes() == hostile.body  # what was stored, byte for byte
            assert download.suggested_filename.startswith(f"{HOSTILE}-") and download.suggested_filename.endswith(".bin")
        finally:
            browser.close()


def test_docs_need_a_login_and_serve_the_schema(server, token: str, viewer: str) -> None:
    for tok in (token, viewer):  # a login is enough, whatever the role
        status, raw, _ = server.request("GET", "/crawl/openapi.json", token=tok)
        assert status == 200, raw
        schema = json.loads(raw)
        assert {"/crawls", "/crawls/{crawl_id}", "/pages"} <= set(schema["paths"])
        assert schema["servers"] == [{"url": "/crawl"}]
    for page in ("/crawl/docs", "/crawl/redoc"):
        status, raw, headers = server.request("GET", page, token=token)
        assert status == 200 and b"/crawl/openapi.json" in raw, page


def test_viewer_reads_but_cannot_start_a_crawl(server, viewer: str) -> None:
    assert _json(server.request("GET", "/crawl/crawls", token=viewer)) == {"crawls": CRAWLS}
    assert server.request("GET", f"/crawl/crawls/{CRAWL}", token=viewer)[0] == 200
    assert server.request("GET", "/crawl/pages?url=http://www.alpha.test/&body=1", token=viewer)[0] == 200
    assert server.request("GET", "/crawl/summary", token=viewer)[0] == 200
    runs_before = _json(server.request("GET", "/api/v2/dags/recrawl/dagRuns", token=viewer))["total_entries"]
    status, raw, _ = server.request("POST", "/crawl/crawls", {"crawl_id": "viewer-try", "seeds": ["http://www.alpha.test/"]},
                                    token=viewer)
    assert status == 403, raw
    # Permission comes first: no validation (body, seeds, the allowed_hosts pattern) for a caller who may not.
    for body in ({"crawl_id": "Bad Id", "seeds": []},
                 {"crawl_id": "x", "seeds": ["ftp://nope/"], "allowed_hosts": "^(a+)+$"},
                 {"crawl_id": "x", "seeds": ["http://ok.example/"], "allowed_hosts": "("}):
        assert server.request("POST", "/crawl/crawls", body, token=viewer)[0] == 403, body
    assert _json(server.request("GET", "/api/v2/dags/recrawl/dagRuns", token=viewer))["total_entries"] == runs_before


@pytest.mark.timeout(120)  # generous: only a backtracking engine (minutes to hours on this pattern) trips it
def test_pathological_allowed_hosts_answers_at_once(server, token: str) -> None:
    """``^(a+)+$`` against a 40-a host: exponential in Python's re, linear in RE2."""
    seed = "http://" + "a" * 40 + ".example/"
    status, raw, _ = server.request("POST", "/crawl/crawls", {
        "crawl_id": "evil-scope", "seeds": [seed], "allowed_hosts": "^(a+)+$"}, token=token, timeout=100)
    assert status == 400, raw
    assert json.loads(raw)["detail"]["bad_seeds"] == [{"seed": seed, "reason": "refused by URL filter: out_of_scope"}]
    status, raw, _ = server.request("POST", "/crawl/crawls", {
        "crawl_id": "evil-scope", "seeds": [seed], "allowed_hosts": "^(?!x)(a|aa)+\\1$"}, token=token)
    # refused by the request model (derived from crawl.config.CrawlSettings, which compiles it on RE2)
    assert status == 422 and b"allowed_hosts" in raw and b"RE2" in raw, raw


def test_crawl_id_is_matched_whole(server, token: str) -> None:
    """``$`` in Python's re also matches before a trailing newline; the id must match whole."""
    # In the path, Starlette's mount already refuses it (404: never routed to the crawl API).
    status, raw, _ = server.request("GET", f"/crawl/crawls/{CRAWL}%0A", token=token)
    assert status in (400, 404) and b"last_round" not in raw, raw
    assert server.request("GET", f"/crawl/pages?url=http://www.alpha.test/&crawl_id={CRAWL}%0A", token=token)[0] == 400
    status, raw, _ = server.request("POST", "/crawl/crawls", {"crawl_id": "fresh\n", "seeds": ["http://www.alpha.test/"]},
                                    token=token)
    assert status == 422 and b"crawl_id" in raw, raw


def test_lookups_before_the_first_publish_answer_404(server, token: str, site) -> None:
    status, raw, _ = server.request("GET", f"/crawl/crawls/{PENDING}", token=token)
    assert status == 404 and b"has not published a round yet" in raw, raw
    seed = site.seed_urls(1)[0]
    status, raw, _ = server.request("GET", f"/crawl/pages?url={seed}&crawl_id={PENDING}", token=token)
    assert status == 404 and b"has not published a round yet" in raw, raw
    # Searching all crawls while one has not published: the published crawl answers, not a 500.
    status, raw, _ = server.request("GET", f"/crawl/pages?url={seed}", token=token)
    assert status == 200 and json.loads(raw)["crawl_id"] == CRAWL, raw
    status, raw, _ = server.request("GET", "/crawl/pages?url=http://www.alpha.test/never-seen", token=token)
    assert status == 404 and b"unknown URL" in raw, raw


def test_a_run_cannot_name_its_own_dask_scheduler(server, token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fetch step unpickles what the scheduler sends: only the deployment's addresses are allowed."""
    import socket

    canary = socket.socket()
    canary.bind(("127.0.0.1", 0))
    canary.listen()
    canary.setblocking(False)
    address = f"tcp://127.0.0.1:{canary.getsockname()[1]}"
    body = {"crawl_id": "own-dask", "seeds": ["http://www.alpha.test/"], "dask_address": address}
    try:
        monkeypatch.delenv("RECRAWL_DASK_ADDRESSES", raising=False)
        monkeypatch.setenv("CRAWL_DASK_ADDRESS", "tcp://127.0.0.1:1")
        status, raw, _ = server.request("POST", "/crawl/crawls", body, token=token)
        assert status == 400 and b"dask_address" in raw and b"not allowed" in raw, raw
        with pytest.raises(BlockingIOError):
            canary.accept()  # nobody connected to the address the run named
        # On the operator's allowlist it is accepted and reaches the run's conf.
        monkeypatch.setenv("RECRAWL_DASK_ADDRESSES", f"tcp://127.0.0.1:2, {address}")
        status, raw, _ = server.request("POST", "/crawl/crawls", body, token=token)
        assert status == 201, raw
        run_id = json.loads(raw)["dag_run_id"]
        run = _json(server.request("GET", f"/api/v2/dags/recrawl/dagRuns/{run_id}", token=token))
        assert run["conf"]["dask_address"] == address
    finally:
        canary.close()


def test_start_crawl_triggers_the_dag_as_the_caller(server, token: str) -> None:
    body = {"crawl_id": "started-1", "seeds": ["http://www.alpha.test/"], "max_pages": 5, "coverage_share": 0.5}
    status, raw, _ = server.request("POST", "/crawl/crawls", body, token=token)
    assert status == 201, raw
    started = json.loads(raw)
    assert started["crawl_id"] == "started-1" and started["dag_id"] == "recrawl"
    status, raw, _ = server.request("GET", f"/api/v2/dags/recrawl/dagRuns/{started['dag_run_id']}", token=token)
    assert status == 200
    run = json.loads(raw)
    assert run["conf"] == body
    assert run["triggering_user_name"] == TEST_USER and run["run_type"] == "manual"


def test_summary_page_and_external_view(server, token: str) -> None:
    status, raw, headers = server.request("GET", "/crawl/summary", token=token)
    assert status == 200 and {k.lower(): v for k, v in headers.items()}["content-type"].startswith("text/html")
    assert f"<td>{CRAWL}</td>".encode() in raw
    plugins = _json(server.request("GET", "/api/v2/plugins", token=token))["plugins"]
    crawl_plugin = next(p for p in plugins if p["name"] == "crawl_api")
    assert crawl_plugin["fastapi_apps"][0]["url_prefix"] == "/crawl"
    view = crawl_plugin["external_views"][0]
    assert view["href"] == "/crawl/dashboard/" and view["destination"] == "nav"  # the crawl dashboard
    assert server.request("GET", view["href"], token=token)[0] == 200


def test_two_urls_pasted_as_one_seed_are_refused(server, token: str, root: Path) -> None:
    """Two URLs on one line (space or tab between them, as pasted into the form's seeds box or a JSON
    list) are a mistake, not one URL: refused naming the seed, no DAG run created, nothing stored
    (the URL parser would otherwise make '%20' of the space or drop the tab and crawl a URL nobody typed)."""
    def runs() -> int:
        status, raw, _ = server.request("GET", "/api/v2/dags/recrawl/dagRuns?limit=1", token=token)
        assert status == 200, raw
        return json.loads(raw)["total_entries"]

    before = runs()
    for seed in ("http://www.alpha.test/ http://www.beta.test/", "http://www.alpha.test/\thttp://www.beta.test/",
                 "http://www.alpha.test/a b"):
        status, raw, _ = server.request("POST", "/crawl/crawls", {"crawl_id": "pasted", "seeds": [seed]}, token=token)
        assert status == 400, (seed, status, raw)
        bad = json.loads(raw)["detail"]["bad_seeds"]
        assert [b["seed"] for b in bad] == [seed] and "whitespace" in bad[0]["reason"], bad
    assert runs() == before
    assert not list(root.rglob("*pasted*"))


def test_a_seed_at_a_private_address_is_refused_up_front(server, token: str, root: Path) -> None:
    """A seed whose host is an IP literal in a private network (loopback, RFC 1918, link-local) would be
    accepted and then dropped at fetch time as 'filtered' (the connection guard refuses it while
    ``allow_private_networks`` is off): refused at once naming each, no DAG run, nothing stored."""
    status, raw, _ = server.request("GET", "/api/v2/dags/recrawl/dagRuns?limit=1", token=token)
    before = json.loads(raw)["total_entries"]
    seeds = ["http://127.0.0.1:8080/", "http://[::1]/x", "http://10.1.2.3/", "http://169.254.169.254/latest/"]
    status, raw, _ = server.request("POST", "/crawl/crawls", {"crawl_id": "private", "seeds": seeds}, token=token)
    assert status == 400, raw
    bad = json.loads(raw)["detail"]["bad_seeds"]
    assert [b["seed"] for b in bad] == seeds and all("allow_private_networks" in b["reason"] for b in bad), bad
    status, raw, _ = server.request("GET", "/api/v2/dags/recrawl/dagRuns?limit=1", token=token)
    assert json.loads(raw)["total_entries"] == before
    assert not list(root.rglob("*private*"))


def test_a_crawl_just_started_is_not_called_unknown_without_saying_why(server, token: str, root: Path) -> None:
    """POST /crawl/crawls answers 201 at once, but the crawl's files appear only when its run's inject
    task has run (and a queued run waits behind the running round): GET /crawl/crawls/{id} meanwhile
    answers 404, saying so rather than a bare "unknown crawl" right after a successful start."""
    status, raw, _ = server.request("POST", "/crawl/crawls", {"crawl_id": "just-started",
                                                              "seeds": ["http://www.alpha.test/"]}, token=token)
    assert status == 201, raw
    assert not (root / "state" / "crawl=just-started").exists()  # the oracle: nothing under the root yet
    status, raw, _ = server.request("GET", "/crawl/crawls/just-started", token=token)
    detail = json.loads(raw)["detail"]
    assert status == 404 and "just-started" in detail and "inject" in detail and "DAG run" in detail, detail
