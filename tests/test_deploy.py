"""The deployment, run for real on one machine (``scripts/deploy_local.py``, the same plan as
docker-compose.yaml): PostgreSQL as Airflow's metadata DB, the four Airflow components as separate
processes, an external Dask scheduler with two workers, and moto's S3 server holding the crawl root.

Two crawl rounds of the simulated web are started through ``POST /crawl/crawls`` and polled to
success. During the second, one Dask worker is SIGKILLed while it executes a fetch task. Then the
output is checked where it lives, in the object store, with oracles outside the code under test:
DuckDB reads the page index and CrawlDb over ``s3://`` (fsspec/s3fs registered with DuckDB, as the
README's offline quick start does) and must agree with ``GET /crawl/crawls/{id}`` and ``GET
/crawl/pages``; every WARC record is fetched from S3 by its byte range and parsed with warcio; the
Dask scheduler's own transition log shows the killed task ran again; the simulated web's access log
shows no politeness violation; no URL of the round's fetch list is lost.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from crawldb_view import crawldb_relation  # noqa: E402
from deploy_local import Deployment  # noqa: E402
from hugepages import allow_hugepages  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.deploy, pytest.mark.timeout(900)]

CRAWL = "deploy"
DELAY = 0.5
RUN_TIMEOUT_S = 300
SEEDS = 5


def _poll(fn, timeout: float, every: float = 2.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Api:
    """HTTP calls to the deployment's api-server with the admin login the deployment printed."""

    def __init__(self, dep: Deployment) -> None:
        import urllib.request

        self.base = dep.plan.api_url
        self._urllib = urllib.request
        status, body = self.call("POST", "/auth/token",
                                 {"username": dep.plan.admin_user, "password": dep.plan.admin_password}, auth=False)
        assert status in (200, 201), body
        self.token = json.loads(body)["access_token"]

    def call(self, method: str, path: str, body: object = None, auth: bool = True) -> tuple[int, bytes]:
        import urllib.error

        data = None if body is None else json.dumps(body).encode()
        req = self._urllib.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with self._urllib.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def json(self, path: str) -> dict:
        status, body = self.call("GET", path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)


@pytest.fixture(scope="module")
def deployment(simweb):
    started = time.monotonic()
    allow_hugepages()  # the deployment's processes inherit this process's flag (tests/hugepages.py)
    dep = Deployment(extra_env={
        # test-only settings, on top of the compose plan
        "CRAWL_RESOLVE": simweb.resolve_rule,       # *.sim.test -> the simulated web on loopback
        "RECRAWL_SCHEDULE": "none",
        "RECRAWL_TASK_RETRIES": "0",                # a failure shows at once instead of after backoff
        "AIRFLOW__API__WORKERS": "1",               # 2 shared cores
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }, log=lambda msg: print(msg, flush=True))
    dep.start()
    dep.timings["start_total"] = time.monotonic() - started
    try:
        yield dep
    finally:
        t0 = time.monotonic()
        dep.stop()
        print(f"deployment stopped in {time.monotonic() - t0:.1f}s; start timings {dep.timings}")


@pytest.fixture(scope="module")
def s3fs_and_duckdb(deployment):
    """s3fs from the deployment's endpoint and keys, registered with a DuckDB connection."""
    import duckdb
    import s3fs

    env = deployment.plan.crawl_env
    fs = s3fs.S3FileSystem(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"],
                           client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"],
                                          "region_name": env["AWS_DEFAULT_REGION"]})
    con = duckdb.connect()
    con.register_filesystem(fs)
    return fs, con


def _run_round(api: Api, simweb, max_pages: int) -> tuple[str, float]:
    t0 = time.monotonic()
    status, raw = api.call("POST", "/crawl/crawls", {
        "crawl_id": CRAWL, "seeds": simweb.seed_urls(SEEDS), "max_pages": max_pages, "politeness_delay_s": DELAY,
    })
    assert status == 201, raw
    run_id = json.loads(raw)["dag_run_id"]

    def finished():
        s, body = api.call("GET", f"/api/v2/dags/recrawl/dagRuns/{run_id}")
        state = json.loads(body)["state"] if s == 200 else None
        return state if state in ("success", "failed") else None

    state = _poll(finished, RUN_TIMEOUT_S, what=f"DAG run {run_id}")
    if state != "success":
        tis = api.json(f"/api/v2/dags/recrawl/dagRuns/{run_id}/taskInstances")
        pytest.fail(f"run {run_id} {state}: {({t['task_id']: t['state'] for t in tis['task_instances']})}")
    return run_id, time.monotonic() - t0


class WorkerKiller(threading.Thread):
    """SIGKILLs the first Dask worker seen executing a fetch task of the round *after* the simulated web
    has served one of that task's URLs (so the kill lands mid-fetch, not before the first request)."""

    def __init__(self, address: str, crawl_id: str, round_no: int, fs, root: str, simweb,
                 timeout: float) -> None:
        super().__init__(daemon=True)
        self.address, self.key_prefix, self.timeout = address, f"fetch-{crawl_id}-{round_no}-", timeout
        self.fetchlist = f"{root}/state/crawl={crawl_id}/rounds/{round_no:05d}/fetchlist/part={{:03d}}.parquet"
        self.fs, self.simweb, self.access_log = fs, simweb, simweb.access_log
        self.killed: dict = {}
        self.error: BaseException | None = None
        simweb.flush_log()
        self._log_pos = self.access_log.stat().st_size  # only requests from now on
        self._served: set[str] = set()
        self.partition_urls: set[str] = set()

    def _urls(self, part: int) -> set[str]:
        import pyarrow.parquet as pq

        with self.fs.open(self.fetchlist.format(part), "rb") as fh:
            return set(pq.read_table(fh, columns=["url"]).column("url").to_pylist())

    def _read_log(self) -> None:
        self.simweb.flush_log()  # every request answered so far is in the file
        with open(self.access_log, "rb") as fh:
            fh.seek(self._log_pos)
            data = fh.read()
        complete = data[:data.rfind(b"\n") + 1]
        self._log_pos += len(complete)
        for line in complete.splitlines():
            rec = json.loads(line)
            self._served.add(f"http://{rec['host']}{rec['path']}")

    def run(self) -> None:
        from distributed import Client

        def executing(dask_worker) -> list[str]:
            return [str(ts.key) for ts in dask_worker.state.executing]

        try:
            with Client(self.address, timeout="30s") as c:
                deadline = time.monotonic() + self.timeout
                urls: dict[int, set[str]] = {}
                while time.monotonic() < deadline and not self.killed:
                    self._read_log()
                    for worker, keys in c.processing().items():
                        fetch = [str(k) for k in keys if str(k).startswith(self.key_prefix)]
                        if not fetch:
                            continue
                        for key in set(fetch) & set(c.run(executing, workers=[worker])[worker]):
                            part = int(key.rsplit("-", 1)[1])
                            if part not in urls:
                                urls[part] = self._urls(part)
                            served = urls[part] & self._served
                            now_executing = c.run(executing, workers=[worker])[worker]
                            if served and key in now_executing:
                                pid = c.run(os.getpid, workers=[worker])[worker]
                                os.kill(pid, signal.SIGKILL)
                                # the worker runs 2 tasks at once: every fetch task it held dies with it
                                held = sorted(k for k in now_executing if k.startswith(self.key_prefix))
                                for k in held:
                                    self.partition_urls |= self._urls(int(k.rsplit("-", 1)[1]))
                                self.killed = {"worker": worker, "pid": pid, "key": key, "part": part, "held": held,
                                               "served_before_kill": sorted(served), "partition_urls": len(self.partition_urls)}
                                break
                        if self.killed:
                            break
                    time.sleep(0.1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _scheduler_story(address: str, key: str) -> list[tuple[str, str, str]]:
    """(start, finish, stimulus) of every transition the scheduler logged for ``key``."""
    from distributed import Client

    with Client(address, timeout="30s") as c:
        return c.run_on_scheduler(lambda dask_scheduler, key=key: [
            (str(t[1]), str(t[2]), str(t[4])) for t in dask_scheduler.story(key)])


def test_deployment_crawls_to_s3_and_survives_a_killed_worker(deployment, simweb, s3fs_and_duckdb) -> None:
    from warcio.archiveiterator import ArchiveIterator

    from crawl.simweb.accesslog import politeness_report, read_log

    started = time.monotonic()
    fs, con = s3fs_and_duckdb
    root = deployment.plan.crawl_env["CRAWL_ROOT"]
    assert root.startswith("s3://")
    api = Api(deployment)
    _poll(lambda: api.call("GET", "/api/v2/dags/recrawl")[0] == 200, 120, what="the recrawl DAG to be parsed")

    # The Dask cluster is the external one, with both compose workers.
    from distributed import Client

    with Client(deployment.plan.dask_address, timeout="30s") as c:
        names = sorted(w["name"] for w in c.scheduler_info()["workers"].values())
        # each worker's THP_enabled in /proc/self/status (a lambda: pickled by value, the workers cannot
        # import this test module)
        thp = c.run(lambda: next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("THP_enabled:")))
    assert names == ["dask-worker-1", "dask-worker-2"]
    # the compose workers preload crawl.warmup: no transparent huge pages there, as in the embedded ones
    assert sorted(thp.values()) == ["0", "0"], thp

    _, round1_s = _run_round(api, simweb, max_pages=40)

    round2_wall = time.time()
    killer = WorkerKiller(deployment.plan.dask_address, CRAWL, 2, fs, root, simweb, timeout=RUN_TIMEOUT_S)
    killer.start()
    _, round2_s = _run_round(api, simweb, max_pages=120)
    killer.join(30)
    assert killer.error is None, repr(killer.error)
    assert killer.killed, "no Dask worker was seen executing a fetch task of round 2"
    for key in killer.killed["held"]:  # every fetch task the dead worker held ran again elsewhere
        story = _scheduler_story(deployment.plan.dask_address, key)
        processing = [s for s in story if s[1] == "processing"]
        assert len(processing) >= 2, f"the scheduler did not reschedule {key}: {story}"
        assert story[-1][1] in ("memory", "released", "forgotten"), story
    story = _scheduler_story(deployment.plan.dask_address, killer.killed["key"])
    # the rerun knew an attempt had died and waited out the hosts' politeness before its first request
    # (the task whose URLs had been served: its dead attempt wrote the marker before its first request)
    part = killer.killed["part"]
    attempt = json.loads(fs.cat_file(f"{root}/state/crawl={CRAWL}/rounds/00002/fetched/part={part:03d}.attempt"))
    assert attempt["waited_s"] >= DELAY, attempt

    # ---- the object store, read by DuckDB over s3:// --------------------------------------------------
    index = f"{root}/index/crawl={CRAWL}/subset=*/*.parquet"
    rows = con.sql(f"""SELECT url, round, warc_filename, warc_record_offset, warc_record_length, warc_type,
                              content_digest, fetch_status, regexp_extract(filename, 'subset=([a-z]+)', 1) AS subset
                       FROM read_parquet('{index}', filename=true, hive_partitioning=false)""").fetchall()
    cols = ("url", "round", "warc_filename", "offset", "length", "warc_type", "digest", "status", "subset")
    rows = [dict(zip(cols, r, strict=True)) for r in rows]
    per_round = {n: sum(1 for r in rows if r["round"] == n) for n in (1, 2)}
    assert per_round[1] > 0 and per_round[2] > 0, per_round

    summary = api.json(f"/crawl/crawls/{CRAWL}")
    assert summary["last_round"] == 2
    crawldb = crawldb_relation(f"{root}/state/crawl={CRAWL}", 2)
    counts = con.sql(f"""
        SELECT count(*) AS known,
               count(*) FILTER (WHERE status IN ('fetched', 'not_modified')) AS fetched,
               count(*) FILTER (WHERE status IN ('unfetched', 'deferred')) AS queued,
               count(*) FILTER (WHERE status IN ('retry', 'http_error')) AS failed,
               count(*) FILTER (WHERE status = 'gone') AS gone,
               count(*) FILTER (WHERE status IN ('duplicate', 'near_duplicate')) AS duplicates
        FROM {crawldb}""").fetchall()[0]
    keys = ("known", "fetched", "queued", "failed", "gone", "duplicates")
    assert {k: summary[k] for k in keys} == dict(zip(keys, counts, strict=True))
    # every page the CrawlDb calls fetched has a capture in the index
    db_fetched = {u for (u,) in con.sql(f"SELECT url FROM {crawldb} "
                                        "WHERE status IN ('fetched', 'not_modified')").fetchall()}
    assert db_fetched and db_fetched <= {r["url"] for r in rows if r["subset"] == "warc"}

    # GET /crawl/pages answers the latest capture the index holds, URL by URL
    latest: dict[str, dict] = {}
    for r in sorted((r for r in rows if r["subset"] != "robotstxt"), key=lambda r: r["round"]):
        latest[r["url"]] = r
    checked_pages = sorted(u for u, r in latest.items() if r["subset"] == "warc")[:25]
    for url in checked_pages:
        page = api.json(f"/crawl/pages?url={url}&crawl_id={CRAWL}")
        r = latest[url]
        assert (page["warc_filename"], page["warc_record_offset"], page["warc_record_length"], page["round"]) == \
            (r["warc_filename"], r["offset"], r["length"], r["round"]), url

    # every index row's WARC record, fetched from S3 by its byte range, is that URL's record
    warc_checked = 0
    for r in rows:
        if r["warc_filename"] is None:
            continue
        path = f"{root}/{r['warc_filename']}"
        data = fs.cat_file(path, start=r["offset"], end=r["offset"] + r["length"])
        assert len(data) == r["length"], path
        records = list(ArchiveIterator(io.BytesIO(data)))
        assert len(records) == 1, (path, r["offset"])
        rec = records[0]
        assert rec.rec_headers.get_header("WARC-Target-URI") == r["url"]
        assert rec.rec_type == r["warc_type"], (r["url"], rec.rec_type, r["warc_type"])
        if r["digest"]:
            assert rec.rec_headers.get_header("WARC-Payload-Digest") == f"sha1:{r['digest']}", r["url"]
        if rec.rec_type == "response":
            assert rec.http_headers.get_statuscode() == str(r["status"]), r["url"]
        warc_checked += 1
    assert warc_checked >= per_round[1] + per_round[2] - sum(1 for r in rows if r["warc_filename"] is None)

    # no URL of round 2's fetch list is lost: the CrawlDb touched each in round 2
    fetchlist = f"{root}/state/crawl={CRAWL}/rounds/00002/fetchlist/*.parquet"
    listed = {u for (u,) in con.sql(f"SELECT url FROM read_parquet('{fetchlist}')").fetchall()}
    touched = {u for (u,) in con.sql(f"SELECT url FROM {crawldb} WHERE round = 2").fetchall()}
    assert listed and not (listed - touched), sorted(listed - touched)[:5]

    # politeness, judged from the server's access log (both rounds, the killed attempt included)
    simweb.flush_log()
    log = read_log(simweb.access_log)
    crawler = [ua for ua in log.column("user_agent").to_pylist() if ua.startswith("RecrawlBot")]
    assert len(crawler) >= per_round[1] + per_round[2]
    report = politeness_report(simweb.access_log, user_agent_like="RecrawlBot%").to_pylist()
    violations = [h for h in report if h["max_in_flight"] > 1 or (h["min_gap_s"] is not None and h["min_gap_s"] < DELAY)]
    assert not violations, violations
    # the URLs the killed attempt had been served were fetched again by the rerun
    requested: dict[str, int] = {}
    for h, p, ua, st in zip(*(log.column(c).to_pylist() for c in ("host", "path", "user_agent", "start")),
                            strict=True):
        if ua.startswith("RecrawlBot") and st >= round2_wall:
            requested[f"http://{h}{p}"] = requested.get(f"http://{h}{p}", 0) + 1
    refetched = [u for u in killer.killed["served_before_kill"] if requested.get(u, 0) >= 2]
    assert refetched == killer.killed["served_before_kill"], (refetched, killer.killed)
    # URLs asked for more than once in round 2: the killed partition's hosts (its rerun repeats their
    # robots.txt, sitemaps and pages) and, elsewhere, the fetcher's in-round retries after errors
    from urllib.parse import urlsplit

    killed_hosts = {urlsplit(u).hostname for u in killer.partition_urls}
    twice = {u for u, n in requested.items() if n > 1}
    twice_killed = {u for u in twice if urlsplit(u).hostname in killed_hosts}
    assert set(killer.killed["served_before_kill"]) <= twice_killed
    round2_index = {r["url"] for r in rows if r["round"] == 2}
    assert round2_index <= set(requested), sorted(round2_index - set(requested))[:5]
    gaps = [h["min_gap_s"] for h in report if h["min_gap_s"] is not None]

    # the README's offline DuckDB-over-S3 quick start, as written, with the deployment's S3 settings
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    snippet = readme.split("### Over S3", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    snippet = snippet.replace("crawl = 'demo'", f"crawl = '{CRAWL}'")
    env = {**os.environ, **deployment.plan.crawl_env}
    out = subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    shown = {line.split("│")[1].strip(): int(line.split("│")[2]) for line in out.stdout.splitlines()
             if line.count("│") == 3 and line.split("│")[2].strip().isdigit()}
    assert shown == {s: sum(1 for r in rows if r["subset"] == s) for s in {r["subset"] for r in rows}}, out.stdout

    figures = {
        "start_s": round(deployment.timings["start_total"], 1), "round1_s": round(round1_s, 1),
        "round2_s": round(round2_s, 1), "test_s": round(time.monotonic() - started, 1),
        "index_rows": per_round, "known": summary["known"], "fetched": summary["fetched"],
        "pages_checked_via_api": len(checked_pages), "warc_records_checked": warc_checked,
        "fetchlist_round2": len(listed), "killed": {k: killer.killed[k] for k in ("key", "held", "pid", "partition_urls")},
        "served_before_kill": len(killer.killed["served_before_kill"]), "refetched": len(refetched),
        "requested_twice_killed_hosts": len(twice_killed), "requested_twice_other_hosts": len(twice - twice_killed),
        "scheduler_story": [s[1] for s in story], "rerun_waited_s": attempt["waited_s"], "crawler_requests": len(crawler), "hosts": len(report),
        "min_gap_s": round(min(gaps), 3) if gaps else None, "politeness_violations": len(violations),
    }
    print("deploy figures:", json.dumps(figures))
