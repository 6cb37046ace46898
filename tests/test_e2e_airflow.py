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
from crawldb_view import crawldb_relation

configure_env()

# pytest-timeout counts setup, call and teardown together. Every wait below takes its time from one
# Budget, so the waits can never add up to more than the timeout: a slow step fails with a message
# naming it instead of the whole test being killed mid-way.
TEST_TIMEOUT_S = 720
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S)]
TEARDOWN_S = 90  # AirflowServer.stop(): SIGINT wait 40 s + SIGTERM 10 s + SIGKILL 5 s + 5 s; simweb stop 15 s
AIRFLOW_READY_S = 180  # airflow standalone healthy
DAG_PARSED_S = 90  # the dag-processor has parsed dags/recrawl.py
RUN_S = 300  # the DAG run, at most what is left after the others
CHECKS_S = 140  # the API and DuckDB checks after the run (7 calls of at most REQUEST_S)
REQUEST_S = 20.0  # one HTTP call to the API server (slow when the machine is loaded)

CRAWL = "e2e"


class Budget:
    """One deadline for the test's setup and call; each wait takes at most what is left after keeping
    the minimum the later steps need."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def take(self, want: float, keep: float, what: str) -> float:
        have = min(want, self.left() - keep)
        if have <= 0:
            raise AssertionError(f"no time left for {what}: {self.left():.0f}s of the test's {self.seconds:.0f}s "
                                 f"budget remain and {keep:.0f}s are kept for the later steps")
        return have

    def poll(self, fn, want: float, keep: float, what: str, every: float = 2.0):
        """Call fn until it returns a truthy value, within this step's share of the budget."""
        timeout = self.take(want, keep, what)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = fn()
            except OSError:  # one slow answer (a timeout) of a loaded server: ask again
                value = None
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} "
                             f"({self.left():.0f}s of the test's {self.seconds:.0f}s budget left)")


@pytest.fixture(scope="module")
def budget() -> Budget:
    return Budget(TEST_TIMEOUT_S - TEARDOWN_S)


@pytest.fixture(scope="module")
def site(budget, simweb):
    """The simulated web (tests/conftest.py), reached through CRAWL_RESOLVE."""
    return simweb


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, budget, site):
    home = tmp_path_factory.mktemp("airflow-e2e")
    ready = budget.take(AIRFLOW_READY_S, 30 + 120 + CHECKS_S, "airflow standalone to become healthy")
    server = start_standalone(home, extra_env={
        "CRAWL_ROOT": str(home / "crawldata"),
        "CRAWL_RESOLVE": site.resolve_rule,
        "CRAWL_POLITENESS_DELAY_S": "0",
        "RECRAWL_TASK_RETRIES": "0",  # a failure shows at once instead of after backoff
    }, ready_timeout=ready)
    try:
        yield server
    finally:
        server.stop()


def test_crawl_through_airflow(airflow, site, budget) -> None:
    started = time.monotonic()

    def call(method: str, path: str, body: object | None = None, token: str | None = None):
        return airflow.request(method, path, body, token=token, timeout=max(1.0, min(REQUEST_S, budget.left())))

    token = airflow.token()
    # The dag-processor must have parsed dags/recrawl.py before it can be triggered.
    budget.poll(lambda: call("GET", "/api/v2/dags/recrawl", token=token)[0] == 200, DAG_PARSED_S, 120 + CHECKS_S,
                "the recrawl DAG to be parsed")

    status, raw, _ = call("POST", "/crawl/crawls", {
        "crawl_id": CRAWL, "seeds": site.seed_urls(2), "max_pages": 40, "politeness_delay_s": 0,
    }, token=token)
    assert status == 201, raw
    run_id = json.loads(raw)["dag_run_id"]

    def finished():
        s, body, _ = call("GET", f"/api/v2/dags/recrawl/dagRuns/{run_id}", token=token)
        state = json.loads(body)["state"] if s == 200 else None
        return state if state in ("success", "failed") else None

    state = budget.poll(finished, RUN_S, CHECKS_S, f"DAG run {run_id}")
    if state != "success":
        _, tis, _ = call("GET", f"/api/v2/dags/recrawl/dagRuns/{run_id}/taskInstances", token=token)
        states = {t["task_id"]: t["state"] for t in json.loads(tis)["task_instances"]}
        pytest.fail(f"run {state}: {states}\n{airflow.log_tail(80)}")
    run_seconds = time.monotonic() - started

    root = Path(airflow.extra_env["CRAWL_ROOT"])
    import duckdb

    status, raw, _ = call("GET", f"/crawl/crawls/{CRAWL}", token=token)
    assert status == 200, raw
    summary = json.loads(raw)
    state = root / "state" / f"crawl={CRAWL}"
    version = int(sorted((state / "crawldb").iterdir())[-1].name.removeprefix("v="))
    known, fetched = duckdb.sql(
        f"SELECT count(*), count(*) FILTER (WHERE status IN ('fetched', 'not_modified')) "
        f"FROM {crawldb_relation(state, version)}").fetchall()[0]
    assert (summary["known"], summary["fetched"], summary["last_round"]) == (known, fetched, 1)
    assert fetched == 2

    index = f"{root}/index/crawl={CRAWL}/subset=warc/*.parquet"
    for url in site.seed_urls(2):
        status, raw, _ = call("GET", f"/crawl/pages?url={url}&crawl_id={CRAWL}", token=token)
        assert status == 200, raw
        capture = json.loads(raw)
        row = duckdb.sql(f"SELECT warc_filename, warc_record_offset, warc_record_length FROM "
                         f"read_parquet('{index}', hive_partitioning=false) WHERE url = '{url}'").fetchall()
        assert row == [(capture["warc_filename"], capture["warc_record_offset"], capture["warc_record_length"])]
    status, raw, _ = call("GET", f"/crawl/pages?url={site.seed_urls(1)[0]}&body=1", token=token)
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
        assert call(method, path, body)[0] == 401, path
    print(f"e2e: crawl triggered and finished in {run_seconds:.1f}s; {budget.left():.0f}s of the budget left")
