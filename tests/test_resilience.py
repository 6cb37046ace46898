"""No URL lost, no state torn: a killed round resumes to the same published state; a killed Dask
worker costs a retry, not a URL. Real processes throughout: the crawl CLI as a subprocess killed with
SIGKILL, and an external ``dask scheduler`` with two ``dask worker`` processes on loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.compute as pc
import pytest

from crawl import crawldb, lease
from crawl import round as rnd
from crawl.config import load_config
from crawl.store import Store

# normal hosts only: their answers do not depend on timing, so two crawls can be compared exactly
SCOPE = r"^(blog|news|shop|docs|forum|archive)-\d+\.sim\.test$"
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _cfg(root: Path, simweb, **over):
    base = {"root": str(root), "crawl_id": "res", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.05,
            "max_pages": 150, "partitions": 4, "url_shards": 2, "round_duration_s": 30.0,
            "total_timeout_s": 5.0, "allowed_hosts": SCOPE, "max_crawl_delay_s": 2.0, "lease_expiry_s": 3.0}
    base.update(over)
    return load_config(overrides=base, use_env=False)


def _cli(cfg, *args: str) -> list[str]:
    return [sys.executable, "-m", "crawl", *args, "--config-json", json.dumps(cfg.to_dict())]


def _state(cfg) -> set[tuple]:
    store = Store(cfg.root, cfg.crawl_id)
    db = crawldb.read(store, store.current_round(), cfg.url_shards)
    return set(zip(*(db.column(c).to_pylist() for c in ("url", "status", "depth", "discovered_round", "fetch_count")),
                   strict=True))


def test_killed_round_reruns_to_the_same_published_state(simweb, tmp_path):
    seeds = simweb.seed_urls(4)
    ref = _cfg(tmp_path / "ref", simweb)
    rnd.run_round(ref, seeds, T0)
    rnd.run_round(ref, None, T0 + timedelta(hours=1))

    cfg = _cfg(tmp_path / "crash", simweb)
    rnd.run_round(cfg, seeds, T0)
    store = Store(cfg.root, cfg.crawl_id)
    proc = subprocess.Popen(_cli(cfg, "round", "--now", (T0 + timedelta(hours=1)).isoformat()),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if any(p.endswith(".done") for p in store.ls(store.round_dir(2, "fetched"))):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "round finished before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and the Dask workers it started
        proc.wait(10)
    assert store.current_round() == 1, "a killed round must not publish"
    done_before = {p for p in store.ls(store.round_dir(2, "fetched")) if p.endswith(".done")}
    dead = lease.current(store)  # the killed round's lease: taken over once it expires
    while dead.live():
        time.sleep(0.1)

    out = subprocess.run(_cli(cfg, "round", "--now", (T0 + timedelta(hours=1)).isoformat()),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert store.current_round() == 2
    assert done_before <= {p for p in store.ls(store.round_dir(2, "fetched")) if p.endswith(".done")}
    assert _state(cfg) == _state(ref)


@pytest.fixture
def dask_cluster(tmp_path):
    """A real ``dask scheduler`` + two ``dask worker`` processes (no nanny: a killed worker stays dead)."""
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    bindir = Path(sys.executable).parent
    procs = [subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    deadline = time.monotonic() + 60
    while not sched_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    address = json.loads(sched_file.read_text())["address"]
    for i in range(2):
        procs.append(subprocess.Popen([str(bindir / "dask"), "worker", address, "--nthreads", "1", "--no-nanny",
                                       "--no-dashboard", "--host", "127.0.0.1", "--name", f"w{i}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
    from distributed import Client

    with Client(address, timeout="30s") as c:
        c.wait_for_workers(2, timeout=60)
    try:
        yield address, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def test_round_on_external_cluster_survives_a_killed_worker(simweb, tmp_path, dask_cluster):
    from distributed import Client

    address, procs = dask_cluster
    cfg = _cfg(tmp_path / "ext", simweb, dask_address=address, politeness_delay_s=0.3, partitions=2)
    rnd.run_round(cfg, simweb.seed_urls(4), T0)  # round 1 on the external cluster
    gen = rnd.generate(cfg, T0 + timedelta(hours=1))
    assert gen["urls"] > 20

    victim = procs[2]  # procs: the scheduler, then the workers named w0 and w1 (killed when busy)
    killed = {}

    def kill_when_busy():
        with Client(address, timeout="30s") as c:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                info = c.scheduler_info()["workers"]
                for w, keys in c.processing().items():
                    if info[w]["name"] == "w1" and any(str(k).startswith("fetch-") for k in keys):
                        time.sleep(0.5)  # mid-fetch
                        victim.send_signal(signal.SIGKILL)
                        killed.update(at=time.monotonic(), address=w)
                        return
                time.sleep(0.05)

    import threading

    t = threading.Thread(target=kill_when_busy)
    t.start()
    stats = rnd.fetch_parse(cfg, 2, T0 + timedelta(hours=1))
    t.join()
    assert "at" in killed, "the worker was never busy"
    assert victim.poll() is not None
    # the scheduler's own record that the kill landed mid-task and the task ran again elsewhere:
    # its remove-worker event lists the fetch task(s) w1 was processing, and each such task's
    # transition story has two 'processing' spells (w1, then the survivor) before its result is in memory
    with Client(address, timeout="30s") as c:
        removed = [m for _, m in c.get_events("all")
                   if m.get("action") == "remove-worker" and m.get("worker") == killed["address"]]
        assert len(removed) == 1, (killed, [m.get("action") for _, m in c.get_events(killed["address"])])
        lost = [k for k in removed[0]["processing-tasks"] if str(k).startswith(f"fetch-{cfg.crawl_id}-2-")]
        assert lost, f"w1 held no fetch task when it died: {removed[0]}"
        story = c.story(*lost)
    for key in lost:
        spells = [s[3] for s in story if s[0] == "scheduler" and s[1] == key]
        done = spells.index("memory") if "memory" in spells else -1
        assert spells[:done].count("processing") == 2 and done > 0, (key, spells)
    rnd.update(cfg, 2, T0 + timedelta(hours=1))
    rnd.reprioritise(cfg, 2, T0 + timedelta(hours=1))
    rnd.publish(cfg, 2)
    assert stats["partitions"] == 2
    store = Store(cfg.root, cfg.crawl_id)
    listed = store.read_tables([p for p in store.ls(store.round_dir(2, "fetchlist")) if p.endswith(".parquet")],
                               None or store.read_table(gen["partitions"][0]).schema)
    db = crawldb.read(store, 2, cfg.url_shards)
    touched = db.filter(pc.equal(db.column("round"), 2))
    missing = set(listed.column("url").to_pylist()) - set(touched.column("url").to_pylist())
    assert not missing, sorted(missing)[:5]
