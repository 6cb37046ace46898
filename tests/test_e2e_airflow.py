"""End to end, as users run it: a real ``airflow standalone`` (api-server, scheduler with the
LocalExecutor, dag-processor, triggerer) with the repo's DAG and plugin, a fixed test user, and the
embedded Dask cluster. A crawl is started through ``POST /crawl/crawls`` with a token, the DAG run is
polled to success, and the API's answers are checked against DuckDB over the files the round wrote."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from airflow_harness import configure_env, start_standalone

configure_env()

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(540)]

CRAWL = "e2e"
RUN_TIMEOUT_S = 300


def _poll(fn, timeout: float, every: float = 2.0, what: str = ""):
    """Call fn until it returns a truthy value; bounded in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def site(simweb):
    """The simulated web (tests/conftest.py), reached through CRAWL_RESOLVE."""
    return simweb


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, site):
    home = tmp_path_factory.mktemp("airflow-e2e")
    server = start_standalone(home, extra_env={
        "CRAWL_ROOT": str(home / "crawldata"),
        "CRAWL_RESOLVE": site.resolve_rule,
        "CRAWL_POLITENESS_DELAY_S": "0",
        "RECRAWL_TASK_RETRIES": "0",  # a failure shows at once instead of after backoff
    })
    try:
        yield server
    finally:
        server.stop()


def test_crawl_through_airflow(airflow, site) -> None:
    started = time.monotonic()
    token = airflow.token()
    # The dag-processor must have parsed dags/recrawl.py before it can be triggered.
    _poll(lambda: airflow.request("GET", "/api/v2/dags/recrawl", token=token)[0] == 200, 120,
          what="the recrawl DAG to be parsed")

    status, raw, _ = airflow.request("POST", "/crawl/crawls", {
        "crawl_id": CRAWL, "seeds": site.seed_urls(2), "max_pages": 40, "politeness_delay_s": 0,
    }, token=token)
    assert status == 201, raw
    run_id = json.loads(raw)["dag_run_id"]

    def finished():
        s, body, _ = airflow.request("GET", f"/api/v2/dags/recrawl/dagRuns/{run_id}", token=token)
        state = json.loads(body)["state"] if s == 200 else None
        return state if state in ("success", "failed") else None

    state = _poll(finished, RUN_TIMEOUT_S, what=f"DAG run {run_id}")
    if state != "success":
        _, tis, _ = airflow.request("GET", f"/api/v2/dags/recrawl/dagRuns/{run_id}/taskInstances", token=token)
        states = {t["task_id"]: t["state"] for t in json.loads(tis)["task_instances"]}
        pytest.fail(f"run {state}: {states}\n{airflow.log_tail(80)}")
    run_seconds = time.monotonic() - started

    root = Path(airflow.extra_env["CRAWL_ROOT"])
    import duckdb

    status, raw, _ = airflow.request("GET", f"/crawl/crawls/{CRAWL}", token=token)
    assert status == 200, raw
    summary = json.loads(raw)
    crawldb = sorted((root / "state" / f"crawl={CRAWL}" / "crawldb").iterdir())[-1]
    known, fetched = duckdb.sql(
        f"SELECT count(*), count(*) FILTER (WHERE status IN ('fetched', 'not_modified')) "
        f"FROM read_parquet('{crawldb}/*.parquet')").fetchall()[0]
    assert (summary["known"], summary["fetched"], summary["last_round"]) == (known, fetched, 1)
    assert fetched == 2

    index = f"{root}/index/crawl={CRAWL}/subset=warc/*.parquet"
    for url in site.seed_urls(2):
        status, raw, _ = airflow.request("GET", f"/crawl/pages?url={url}&crawl_id={CRAWL}", token=token)
        assert status == 200, raw
        capture = json.loads(raw)
        row = duckdb.sql(f"SELECT warc_filename, warc_record_offset, warc_record_length FROM "
                         f"read_parquet('{index}', hive_partitioning=false) WHERE url = '{url}'").fetchall()
        assert row == [(capture["warc_filename"], capture["warc_record_offset"], capture["warc_record_length"])]
    status, raw, _ = airflow.request("GET", f"/crawl/pages?url={site.seed_urls(1)[0]}&body=1", token=token)
    from crawl.api import read_body

    wf, off, length = duckdb.sql(f"SELECT warc_filename, warc_record_offset, warc_record_length FROM "
                                 f"read_parquet('{index}', hive_partitioning=false) "
                                 f"WHERE url = '{site.seed_urls(1)[0]}'").fetchall()[0]
    stored = read_body(str(root), {"warc_filename": wf, "warc_record_offset": off, "warc_record_length": length})
    assert status == 200 and raw == stored and b"<html" in raw.lower()

    # The same calls without a token.
    for method, path in (("GET", f"/crawl/crawls/{CRAWL}"), ("GET", f"/crawl/pages?url={site.seed_urls(1)[0]}"),
                         ("POST", "/crawl/crawls")):
        body = {"crawl_id": "x", "seeds": ["http://a.example/"]} if method == "POST" else None
        assert airflow.request(method, path, body)[0] == 401, path
    print(f"e2e: crawl triggered and finished in {run_seconds:.1f}s")
