"""The crawl API plugin, served by the real Airflow API app (auth, REST, plugin mount) over loopback
HTTP, reading a crawl the real engine made from a loopback site."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_harness import REPO, TEST_USER, LoopbackSite, configure_env

configure_env()  # before anything imports airflow

CRAWL = "plugtest"


@pytest.fixture(scope="module")
def site():
    s = LoopbackSite()
    yield s
    s.close()


@pytest.fixture(scope="module")
def root(tmp_path_factory, site) -> Path:
    """One real round of the engine (CLI, embedded Dask) into a private crawl root."""
    root = tmp_path_factory.mktemp("plugroot")
    proc = subprocess.run(
        [sys.executable, "-m", "crawl", "round", "--root", str(root), "--crawl-id", CRAWL,
         "--resolve", site.resolve_rule, "--delay", "0", "--seeds", *site.seed_urls(2)],
        cwd=str(REPO), capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


@pytest.fixture(scope="module")
def server(root: Path):
    from airflow_harness import init_db, start_inprocess_api, sync_dags_to_db

    saved = os.environ.get("CRAWL_ROOT")
    os.environ["CRAWL_ROOT"] = str(root)
    init_db()
    sync_dags_to_db()
    api = start_inprocess_api()
    yield api
    api.stop()
    if saved is None:
        os.environ.pop("CRAWL_ROOT", None)
    else:
        os.environ["CRAWL_ROOT"] = saved


@pytest.fixture(scope="module")
def token(server) -> str:
    return server.token()


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
    assert _json(server.request("GET", "/crawl/crawls", token=token)) == {"crawls": [CRAWL]}


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


def test_page_errors(server, token: str) -> None:
    status, raw, _ = server.request("GET", f"/crawl/pages?url=http://www.alpha.test/never-seen&crawl_id={CRAWL}",
                                    token=token)
    assert status == 404 and b"unknown URL" in raw
    assert server.request("GET", "/crawl/pages?url=ftp://x/", token=token)[0] == 400
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
    status, raw, _ = server.request("POST", "/crawl/crawls", {
        "crawl_id": "ok", "seeds": ["http://ok.example/"], "allowed_hosts": "("}, token=token)
    assert status == 400 and b"allowed_hosts" in raw


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
    assert crawl_plugin["external_views"][0]["href"] == "/crawl/summary"
