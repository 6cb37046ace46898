"""Dask task keys belong to one attempt of a round's fetch step, not to (crawl, round, partition).

An Airflow retry of ``fetch_parse`` takes the run's lease over with a new fencing token while the
earlier attempt may still be connected to the scheduler (a zombie: its process hung, its client and
futures alive). Dask hands a submission whose key another client still holds the task already under
that key -- the zombie's, fenced by its old token -- instead of running the new one. Real processes:
an external ``dask scheduler`` and worker, the crawl CLI's ``step`` for both attempts (the first one
SIGSTOPped mid-fetch), the simulated web's access log as the oracle for who fetched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from simlog import first_request_after
from test_resilience import start_scheduler, start_workers, stop

from crawl import lease as L
from crawl import round as rnd
from crawl.config import load_config
from crawl.store import Store

SCOPE = r"^(blog|news|shop|docs|forum|archive)-\d+\.sim\.test$"
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
RUN = "manual__2026-11-30T13:00:00+00:00"


def _step(cfg, name: str) -> list[str]:
    return [sys.executable, "-m", "crawl", "step", name, "--round", "2", "--run-id", RUN, "--now", T1.isoformat(),
            "--config-json", json.dumps(cfg.to_dict())]


def test_a_retried_fetch_step_runs_its_own_tasks_while_a_zombie_attempt_holds_its_keys(make_simweb, tmp_path):
    web = make_simweb()
    address, sched = start_scheduler(tmp_path)
    procs = [sched, *start_workers(address, 1)]
    zombie = None
    try:
        cfg = load_config(overrides={
            "root": str(tmp_path / "root"), "crawl_id": "keys", "resolve": [web.resolve_rule],
            "politeness_delay_s": 0.5, "max_pages": 60, "partitions": 1, "url_shards": 1, "round_duration_s": 60.0,
            "total_timeout_s": 5.0, "allowed_hosts": SCOPE, "max_crawl_delay_s": 1.0, "lease_expiry_s": 30.0,
            "dask_address": address}, use_env=False)
        store = Store(cfg.root, cfg.crawl_id)
        rnd.run_round(cfg, web.seed_urls(3), T0)  # round 1: the seeds; round 2 has pages to fetch
        gen = subprocess.run(_step(cfg, "generate"), capture_output=True, text=True, timeout=120)
        assert gen.returncode == 0, gen.stderr[-2000:]

        requests0 = web.stats()["requests"]
        zombie = subprocess.Popen(_step(cfg, "fetch_parse"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and zombie.poll() is None:
            if store.exists(store.part_file(2, "fetched", 0, "attempt")) and web.stats()["requests"] > requests0 + 3:
                break
            time.sleep(0.1)
        assert zombie.poll() is None, "the first attempt ended before it could hang"
        os.kill(zombie.pid, signal.SIGSTOP)  # hung, still connected: its client holds its futures
        stale = L.current(store)
        assert stale is not None and stale.phase == L.FETCH_PHASE

        retry_at = time.time()
        retry = subprocess.run(_step(cfg, "fetch_parse"), capture_output=True, text=True, timeout=300)
        assert retry.returncode == 0, retry.stderr[-3000:]
        assert L.current(store).token > stale.token
        stats = store.read_json(store.round_dir(2, "fetch_parse.json"))
        assert [p["part"] for p in stats["per_partition"]] == [0]
        assert store.is_done(2, "fetched", 0)
        # the retry's own task fetched what the fenced attempt left (the server saw it, after the retry began)
        assert first_request_after(web.access_log, retry_at) is not None
    finally:
        if zombie is not None and zombie.poll() is None:
            zombie.kill()
            zombie.wait(10)
        stop(procs)
