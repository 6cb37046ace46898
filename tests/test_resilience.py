"""No URL lost, no state torn: a killed round resumes to the same published state; a killed Dask
worker costs a retry, not a URL. Real processes throughout: the crawl CLI as a subprocess killed with
SIGKILL, and an external ``dask scheduler`` with two ``dask worker`` processes on loopback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.compute as pc
import pytest
from simlog import first_request_after, log_figures, rerun_partition_waits

from crawl import crawldb, lease, query
from crawl import round as rnd
from crawl.config import load_config
from crawl.simweb.accesslog import read_log
from crawl.store import Store

# normal hosts only: their answers do not depend on timing, so two crawls can be compared exactly
SCOPE = r"^(blog|news|shop|docs|forum|archive)-\d+\.sim\.test$"
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
CKPT_ROWS = 5  # a small fetch checkpoint (crawl.checkpoint): a rerun repeats at most about this many rows per partition


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



def kill_round_when(cmd: list[str], workdir: Path, ready: Callable[[], bool], poll_s: float = 0.1) -> None:
    """Start the round CLI ``cmd``; SIGKILL it with the Dask workers it started once ``ready()`` (within
    120 s; failing if the round ended first, with its stderr)."""
    err_path = workdir / "killed.stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(poll_s)
        assert proc.poll() is None, f"round ended before it could be killed: {err_path.read_text()[-3000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and the Dask workers it started
        proc.wait(10)

def test_killed_round_reruns_to_the_same_published_state(simweb, tmp_path):
    seeds = simweb.seed_urls(4)
    ref = _cfg(tmp_path / "ref", simweb)
    rnd.run_round(ref, seeds, T0)
    rnd.run_round(ref, None, T0 + timedelta(hours=1))

    cfg = _cfg(tmp_path / "crash", simweb)
    rnd.run_round(cfg, seeds, T0)
    store = Store(cfg.root, cfg.crawl_id)
    kill_round_when(_cli(cfg, "round", "--now", (T0 + timedelta(hours=1)).isoformat()), tmp_path,
                    lambda: any(p.endswith(".done") for p in store.ls(store.round_dir(2, "fetched"))), poll_s=0.05)
    assert store.current_round() == 1, "a killed round must not publish"
    done_before = {p for p in store.ls(store.round_dir(2, "fetched")) if p.endswith(".done")}
    dead = lease.current(store)  # the killed round's lease: taken over once it expires
    while dead.live():
        time.sleep(0.1)

    rerun_at = time.time()
    out = subprocess.run(_cli(cfg, "round", "--now", (T0 + timedelta(hours=1)).isoformat()),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert store.current_round() == 2
    assert done_before <= {p for p in store.ls(store.round_dir(2, "fetched")) if p.endswith(".done")}
    assert _state(cfg) == _state(ref)
    _one_quiet_period(cfg, store, simweb.access_log, dead, out.stderr, rerun_at, "killed round")


def _one_quiet_period(cfg, store: Store, access_log: Path, dead: lease.LeaseRecord, stderr: str, rerun_at: float,
                      what: str) -> None:
    """After a dead owner the rerun waits one quiet period (the lease's), not two: the partitions the
    dead attempt left unfinished do not wait again, and no request comes before that period ends."""
    quiet_until = lease.quiet_after(dead, lease.quiet_s(cfg), dead.expires_at)
    said = re.search(r"previous attempt \(\d+\) ended while fetching; waiting ([0-9.]+) s", stderr)
    waits = rerun_partition_waits(store, 2, rerun_at)
    first = first_request_after(access_log, rerun_at)
    print(f"{what}: rerun waited {float(said.group(1)) if said else 0.0:.2f} s for the lease, {waits} s in the dead "
          f"attempt's unfinished partitions; first request {first - rerun_at:.2f} s after the rerun started, "
          f"{first - quiet_until:+.2f} s from the end of the quiet period")
    assert first >= quiet_until
    assert waits and set(waits.values()) == {0.0}, waits


DASK_ENV = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
BINDIR = Path(sys.executable).parent


def start_scheduler(workdir: Path) -> tuple[str, subprocess.Popen]:
    """A real ``dask scheduler`` on a free loopback port; returns (address, process)."""
    sched_file = workdir / f"scheduler-{time.monotonic_ns()}.json"
    proc = subprocess.Popen([str(BINDIR / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                             "--no-dashboard", "--scheduler-file", str(sched_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=DASK_ENV)
    deadline = time.monotonic() + 60
    while not sched_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return json.loads(sched_file.read_text())["address"], proc


def start_workers(address: str, n: int, prefix: str = "w") -> list[subprocess.Popen]:
    """``n`` real ``dask worker`` processes without nanny (a killed worker stays dead)."""
    procs = [subprocess.Popen([str(BINDIR / "dask"), "worker", address, "--nthreads", "1", "--no-nanny",
                               "--no-dashboard", "--host", "127.0.0.1", "--name", f"{prefix}{i}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=DASK_ENV)
              for i in range(n)]
    from distributed import Client

    with Client(address, timeout="30s") as c:
        c.wait_for_workers(n, timeout=60)
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


@pytest.fixture
def dask_cluster(tmp_path):
    """A real ``dask scheduler`` + two ``dask worker`` processes (no nanny: a killed worker stays dead)."""
    address, sched = start_scheduler(tmp_path)
    procs = [sched, *start_workers(address, 2)]
    try:
        yield address, procs
    finally:
        stop(procs)


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


def test_no_workers_fails_fast_naming_the_scheduler(simweb, tmp_path):
    address, sched = start_scheduler(tmp_path)
    try:
        cfg = _cfg(tmp_path / "nw", simweb, dask_address=address, dask_wait_for_workers_s=3.0)
        since = time.time()
        started = time.monotonic()
        out = subprocess.run(_cli(cfg, "round", "--seeds", *simweb.seed_urls(2), "--now", T0.isoformat()),
                             capture_output=True, text=True, timeout=120)
        wall = time.monotonic() - started
    finally:
        stop([sched])
    print(f"\nno workers: exit {out.returncode} after {wall:.1f} s: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 4, out.stderr[-2000:]
    assert address in out.stderr and "no Dask worker" in out.stderr and "dask_wait_for_workers_s" in out.stderr
    store = Store(cfg.root, cfg.crawl_id)
    time.sleep(1.2)  # the server flushes its access log every second
    log = read_log(simweb.access_log)
    sent = pc.sum(pc.and_(pc.greater_equal(log["start"], since),
                          pc.starts_with(log["user_agent"], "RecrawlBot"))).as_py() or 0
    assert store.current_round() == 0 and sent == 0
    assert lease.current(store).released, "a failed round must not keep the crawl locked"


def _temp_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and (".tmp-" in p.name or (p.name.startswith(".") and p.name.endswith(".tmp"))))


def _raw_index(root: Path) -> list[tuple]:
    """What a plain DuckDB user sees: read_parquet over index/**, no view, no CURRENT pointer."""
    import duckdb

    if not list(root.glob("index/**/*.parquet")):
        return []
    return duckdb.sql(f"""SELECT round, count(*) FROM read_parquet('{root}/index/**/*.parquet')
                          GROUP BY round ORDER BY round""").fetchall()


def test_unpublished_round_is_invisible_and_litter_is_cleaned(simweb, tmp_path):
    from crawl.warc import read_record

    cfg = _cfg(tmp_path / "vis", simweb)
    root = Path(cfg.root)
    rnd.run_round(cfg, simweb.seed_urls(4), T0)
    assert [r for r, _ in _raw_index(root)] == [1]
    t1 = T0 + timedelta(hours=1)
    # a round killed just before publish: everything but the commit ran
    gen = rnd.generate(cfg, t1)
    rnd.fetch_parse(cfg, 2, t1)
    rnd.update(cfg, 2, t1)
    rnd.reprioritise(cfg, 2, t1)
    staged = list(root.glob("state/crawl=res/rounds/00002/staged/index/**/*.parquet"))
    assert staged and gen["urls"] > 20
    assert [r for r, _ in _raw_index(root)] == [1], "an unpublished round must be invisible to raw readers"
    assert not list(root.glob("warc/crawl=res/round=00002/*")) and not list(root.glob("text/**/round=00002"))
    # litter of dead attempts: an atomic write and a WARC writer killed mid-file
    litter = [root / "state/crawl=res/rounds/00002/staged/warc/crawl=res/round=00002/.res-00002-009-warc.warc.gz.x1.tmp",
              root / "state/crawl=res/crawldb/v=00001/shard=00.parquet.tmp-0123abcd",
              root / "index/crawl=res/subset=warc/round=00001-part=000.parquet.tmp-4567ef"]
    for p in litter:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"half a file")
    rnd.publish(cfg, 2)
    rows = dict(_raw_index(root))
    assert sorted(rows) == [1, 2] and rows[2] > 20
    assert not list(root.glob("state/crawl=res/rounds/00002/staged"))
    rnd.run_round(cfg, None, T0 + timedelta(hours=2))  # the next attempt's fetch step cleans the litter
    assert _temp_files(root) == []
    # every WARC pointer of the raw index reads back the record of its URL at its final path
    import duckdb

    ptrs = duckdb.sql(f"""SELECT url, warc_filename, warc_record_offset, warc_record_length
                          FROM read_parquet('{root}/index/**/*.parquet') WHERE warc_filename IS NOT NULL""").fetchall()
    assert len(ptrs) > 50
    for url, fname, off, length in ptrs:
        assert fname.startswith("warc/crawl=res/round="), fname
        rec = read_record(cfg.root, fname, off, length)
        assert rec.url == url and rec.warc_type in ("response", "revisit"), (url, fname, off)


def test_web_down_round_is_degraded_and_does_not_push_urls_to_gone(make_simweb, tmp_path):
    sw = make_simweb()
    cfg = _cfg(tmp_path / "down", sw)
    store = Store(cfg.root, cfg.crawl_id)
    rnd.run_round(cfg, sw.seed_urls(4), T0)
    assert store.read_json(store.round_dir(1, "manifest.json"))["degraded"] is False
    sw.stop()  # the whole web is down from here on
    for r, strict in ((2, True), (3, False)):
        started = time.monotonic()
        out = subprocess.run(_cli(cfg, "round", *(["--strict"] if strict else []),
                                  "--now", (T0 + timedelta(hours=r - 1)).isoformat()),
                             capture_output=True, text=True, timeout=300)
        print(f"\nweb down, round {r}: exit {out.returncode} in {time.monotonic() - started:.1f} s: "
              f"{out.stderr.strip().splitlines()[-1]}")
        assert out.returncode == (5 if strict else 0), out.stderr[-2000:]
        assert f"round {r} is degraded" in out.stderr and "connection failures" in out.stderr
        manifest = store.read_json(store.round_dir(r, "manifest.json"))
        assert store.current_round() == r and manifest["degraded"] is True
        assert manifest["health"]["host_failure_share"] > 0.5 and manifest["health"]["answered"] == 0
    db = crawldb.read(store, 3, cfg.url_shards)
    statuses = db.column("status").to_pylist()
    retries = db.column("retry_count").to_pylist()
    assert statuses.count("retry") > 10, "the rounds tried URLs and failed"
    assert "gone" not in statuses and max(retries) == 0, "a degraded round's failures must not count towards gone"



def test_dead_link_hosts_do_not_make_a_round_degraded(make_simweb, tmp_path):
    """Hosts that never answered (dead links' domains: here a closed loopback port) are the web's, not
    the crawler's reach: a round whose queue is mostly their retries is healthy; the web going down
    (test above) is still degraded."""
    import socket

    sw = make_simweb()
    with socket.socket() as s:  # a port nothing listens on: every "server" behind it is long gone
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    cfg = _cfg(tmp_path / "dead", sw, resolve=[sw.resolve_rule, f"*.gone.test=127.0.0.1:{closed}"],
               allowed_hosts=r"^((blog|news|shop|docs|forum|archive)-\d+\.sim\.test|site-\d+\.gone\.test)$")
    store = Store(cfg.root, cfg.crawl_id)
    rnd.run_round(cfg, sw.seed_urls(4), T0)
    assert store.read_json(store.round_dir(1, "manifest.json"))["degraded"] is False
    dead = [f"http://site-{i:02d}.gone.test/" for i in range(40)]
    since = time.time()
    rnd.run_round(cfg, dead, T0 + timedelta(hours=1))
    health = store.read_json(store.round_dir(2, "manifest.json"))["health"]
    print(f"\ndead-link hosts: {health}")
    served = {r["host"] for r in read_log(sw.access_log).to_pylist() if r["start"] >= since}
    assert len(served) >= 3, "the simulated web's hosts answered in round 2 (its access log)"
    import duckdb

    planned = duckdb.sql(f"SELECT DISTINCT host FROM read_parquet('{cfg.root}/state/crawl=res/rounds/00002/"
                         "fetchlist/*.parquet')").fetchall()
    tried_dead = {h for (h,) in planned if h.endswith(".gone.test")}
    assert len(tried_dead) == len(dead) > len(served), "round 2 planned mostly dead hosts (else this proves nothing)"
    assert health["degraded"] is False, health["reasons"]
    assert health["hosts_never_reached"] == len(tried_dead) and health["hosts"] >= len(served)


def test_scheduler_killed_mid_fetch_then_immediate_rerun_stays_polite(make_simweb, tmp_path):
    """The scheduler dies mid-fetch; its workers' fetch threads must stop, and a rerun on a new
    scheduler with new workers, started at once, must never overlap their requests."""
    sw = make_simweb()
    delay = 0.5
    t1 = T0 + timedelta(hours=1)
    ref = _cfg(tmp_path / "ref", sw, politeness_delay_s=delay, partitions=2)
    rnd.run_round(ref, sw.seed_urls(4), T0)
    rnd.run_round(ref, None, t1)

    address, sched = start_scheduler(tmp_path)
    workers = start_workers(address, 2, "old")
    cfg = _cfg(tmp_path / "sk", sw, politeness_delay_s=delay, partitions=2, dask_address=address)
    store = Store(cfg.root, cfg.crawl_id)
    new: list[subprocess.Popen] = []
    try:
        rnd.run_round(cfg, sw.seed_urls(4), T0)
        since = time.time()
        started = time.monotonic()
        proc = subprocess.Popen(_cli(cfg, "round", "--now", t1.isoformat()), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            rec = lease.current(store)
            if rec is not None and rec.phase == lease.FETCH_PHASE:
                log = read_log(sw.access_log)
                if (pc.sum(pc.greater_equal(log["start"], since)).as_py() or 0) > 10:
                    break
            time.sleep(0.2)
        assert proc.poll() is None, "the round ended before the scheduler could be killed"
        sched.send_signal(signal.SIGKILL)
        killed_at = time.time()
        _, err = proc.communicate(timeout=120)
        print(f"\nfirst attempt: exit {proc.returncode}: {err.strip().splitlines()[-1]}")
        assert proc.returncode != 0 and store.current_round() == 1
        dead = lease.current(store)  # the failed attempt's lease (released, not clean)
        # at once: a new scheduler, new workers, the rerun
        address2, sched2 = start_scheduler(tmp_path)
        new = [sched2, *start_workers(address2, 2, "new")]
        rerun_at = time.time()
        out = subprocess.run(_cli(cfg.replace(dask_address=address2), "round", "--now", t1.isoformat()),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        wall = time.monotonic() - started
    finally:
        stop([sched, *workers, *new])
    assert store.current_round() == 2
    log = read_log(sw.access_log)
    after_kill = pc.sum(pc.and_(pc.greater(log["start"], killed_at + 1.5), pc.less(log["start"], rerun_at))).as_py()
    figs = log_figures(sw.access_log, delay, since)
    print(f"scheduler kill: {figs}, requests 1.5 s after the kill and before the rerun: {after_kill}, "
          f"wall {wall:.1f} s")
    assert figs["gaps_below_delay"] == 0, figs
    assert not after_kill, "the dead attempt's fetchers went on after their scheduler died"
    assert _state(cfg) == _state(ref)
    _one_quiet_period(cfg, store, sw.access_log, dead, out.stderr, rerun_at, "scheduler kill")


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MB tmpfs: a real filesystem that fills up (mounting needs root and CAP_SYS_ADMIN)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fetch_hosts(store: Store, round_no: int) -> int:
    parts = [p for p in store.ls(store.round_dir(round_no, "fetchlist")) if p.endswith(".parquet")]
    return len({h for p in parts for h in store.read_table(p).column("host").to_pylist()})


def _resumed(store: Store, cfg, round_no: int) -> int:
    """URLs the round's fetch tasks took from earlier attempts' checkpoints (their done markers say)."""
    return sum(int(store.read_json(store.part_file(round_no, "fetched", k, "done")).get("resumed_urls") or 0)
               for k in range(cfg.partitions) if store.is_done(round_no, "fetched", k))


def _check_warc_pointers(cfg, round_no: int) -> int:
    """Every WARC pointer of the round in the raw index (DuckDB, no view) reads back its URL's record."""
    import duckdb

    from crawl.warc import read_record

    ptrs = duckdb.sql(f"""SELECT url, warc_filename, warc_record_offset, warc_record_length
                          FROM read_parquet('{cfg.root}/index/**/*.parquet')
                          WHERE warc_filename IS NOT NULL AND round = {round_no}""").fetchall()
    for url, fname, off, length in ptrs:
        rec = read_record(cfg.root, fname, off, length)
        assert rec.url == url and rec.warc_type in ("response", "revisit"), (url, fname, off)
    dups = duckdb.sql(f"""SELECT count(*) - count(DISTINCT (url, subset)) FROM read_parquet('{cfg.root}/index/**/*.parquet')
                          WHERE round = {round_no}""").fetchall()[0][0]
    assert dups == 0, f"{dups} duplicate index rows"
    return len(ptrs)


def test_disk_full_during_fetch_is_not_retried_blindly(make_simweb, small_disk, tmp_path):
    """A full disk fails the round at once (no blind retry); the rerun fetches only what the dead
    attempt had not checkpointed, and publishes what an undisturbed run publishes."""
    sw = make_simweb()
    t1 = T0 + timedelta(hours=1)
    ref = _cfg(tmp_path / "ref", sw, max_pages=200, fetch_checkpoint_every=CKPT_ROWS)
    rnd.run_round(ref, sw.seed_urls(4), T0)
    since_ref = time.time()
    rnd.run_round(ref, None, t1)
    undisturbed = log_figures(sw.access_log, ref.politeness_delay_s, since_ref)
    cfg = _cfg(small_disk / "root", sw, max_pages=200, fetch_checkpoint_every=CKPT_ROWS)
    store = Store(cfg.root, cfg.crawl_id)
    rnd.run_round(cfg, sw.seed_urls(4), T0)
    free = os.statvfs(small_disk)
    filler = small_disk / "filler"
    with open(filler, "wb") as fh:  # leave ~400 KB: round 2's WARC files fill the disk mid-fetch
        fh.write(b"\0" * (free.f_bavail * free.f_frsize - 400_000))
    since = time.time()
    out = subprocess.run(_cli(cfg, "round", "--now", t1.isoformat()), capture_output=True, text=True, timeout=300)
    print(f"\ndisk full: exit {out.returncode}: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 1 and "not retried: no space left on device" in out.stderr, out.stderr[-2000:]
    assert store.current_round() == 1
    figs = log_figures(sw.access_log, cfg.politeness_delay_s, since)
    print(f"disk full: {figs}")
    assert figs["repeated"] == 0, "a partition that failed on a full disk was fetched again"
    filler.unlink()
    dead = lease.current(store)
    while dead is not None and dead.live():
        time.sleep(0.1)
    rerun = subprocess.run(_cli(cfg, "round", "--now", t1.isoformat()), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert store.current_round() == 2 and _temp_files(Path(cfg.root)) == []
    total = log_figures(sw.access_log, cfg.politeness_delay_s, since)
    bound = cfg.partitions * CKPT_ROWS + 2 * _fetch_hosts(store, 2)
    print(f"disk full then rerun: {total} (undisturbed: {undisturbed}); bound on repeats {bound}, "
          f"URLs resumed from checkpoints {_resumed(store, cfg, 2)}")
    assert total["gaps_below_delay"] == 0
    assert _resumed(store, cfg, 2) > 0, "the rerun took nothing from the dead attempt's checkpoints"
    assert total["repeated"] - undisturbed["repeated"] <= bound, "the rerun fetched more than one segment again"
    assert not list(Path(cfg.root).glob("state/crawl=res/rounds/00002/checkpoints/*"))
    assert _check_warc_pointers(cfg, 2) > 20
    assert _state(cfg) == _state(ref)
    # the text users read (crawl query's text view) holds the same pages, resumed or not
    texts = [set(query.connect(c.root, c.crawl_id).sql("SELECT url, title FROM text WHERE round = 2").fetchall())
             for c in (cfg, ref)]
    assert len(texts[1]) > 20 and texts[0] == texts[1], (len(texts[0]), len(texts[1]))


def test_killed_mid_fetch_resumes_from_checkpoints(make_simweb, tmp_path):
    """SIGKILL of the round CLI mid-fetch: the rerun keeps the checkpointed part of every partition,
    stays polite towards the dead attempt's last requests and publishes the undisturbed state."""
    sw = make_simweb()
    delay = 0.3
    t1 = T0 + timedelta(hours=1)
    ref = _cfg(tmp_path / "ref", sw, politeness_delay_s=delay, fetch_checkpoint_every=CKPT_ROWS)
    rnd.run_round(ref, sw.seed_urls(4), T0)
    since_ref = time.time()
    rnd.run_round(ref, None, t1)
    undisturbed = log_figures(sw.access_log, delay, since_ref)

    cfg = _cfg(tmp_path / "kill", sw, politeness_delay_s=delay, fetch_checkpoint_every=CKPT_ROWS)
    store = Store(cfg.root, cfg.crawl_id)
    rnd.run_round(cfg, sw.seed_urls(4), T0)
    since = time.time()
    def half_fetched() -> bool:
        log = read_log(sw.access_log)
        return (pc.sum(pc.greater_equal(log["start"], since)).as_py() or 0) >= undisturbed["requests"] // 2

    kill_round_when(_cli(cfg, "round", "--now", t1.isoformat()), tmp_path, half_fetched)
    first = log_figures(sw.access_log, delay, since)
    committed = list(Path(cfg.root).glob("state/crawl=res/rounds/00002/checkpoints/part=*/seg=*.json"))
    assert store.current_round() == 1 and committed, "no checkpoint before the kill"
    dead = lease.current(store)
    while dead.live():
        time.sleep(0.1)
    out = subprocess.run(_cli(cfg, "round", "--now", t1.isoformat()), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert store.current_round() == 2
    total = log_figures(sw.access_log, delay, since)
    bound = cfg.partitions * CKPT_ROWS + 2 * _fetch_hosts(store, 2)
    print(f"\nkilled mid-fetch: first attempt {first['requests']} requests, {len(committed)} checkpoints; "
          f"with the rerun {total} (undisturbed: {undisturbed}); bound on repeats {bound}, "
          f"URLs resumed {_resumed(store, cfg, 2)}")
    assert total["gaps_below_delay"] == 0, total
    assert _resumed(store, cfg, 2) > 0
    assert total["repeated"] - undisturbed["repeated"] <= bound
    assert _check_warc_pointers(cfg, 2) > 20
    assert _state(cfg) == _state(ref)
    # the text users read (crawl query's text view) holds the same pages, resumed or not
    texts = [set(query.connect(c.root, c.crawl_id).sql("SELECT url, title FROM text WHERE round = 2").fetchall())
             for c in (cfg, ref)]
    assert len(texts[1]) > 20 and texts[0] == texts[1], (len(texts[0]), len(texts[1]))


def _cli_killed_before(cfg, args: list[str], pattern: str, workdir: Path, nth: int = 1) -> None:
    """``crawl <args>`` run by tests/killhook.py: SIGKILLed (with its Dask workers) just before its
    ``nth`` file placing whose "src -> dst" matches ``pattern``; fails if it ended otherwise."""
    cmd = _cli(cfg, *args)
    cmd[1:3] = [str(Path(__file__).with_name("killhook.py"))]
    env = {**os.environ, "CRAWL_KILL_PATTERN": pattern, "CRAWL_KILL_NTH": str(nth)}
    with open(workdir / "killed.stderr", "w") as err:
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, env=env,
                            timeout=300).returncode
    assert rc == -signal.SIGKILL, f"exit {rc}, not killed: {(workdir / 'killed.stderr').read_text()[-3000:]}"


def test_killed_between_publish_and_report_the_rerun_writes_the_report(simweb, tmp_path):
    """``crawl round`` killed after its round's commit, before its HTML report was placed (the last thing
    it writes): the operator's rerun (the next ``crawl round``) writes the missing report too, so the
    dashboard's report link of the round works. Before, round 1 stayed without a report for good: the
    rerun ran round 2 and wrote round 2's, and ``crawl report`` writes only the last round's. The dead
    writer's temp file (``round=00001.html.tmp-…``) is gone after the rerun too: the next report writer
    removes it (before, it stayed for good: ``Store.clean_temp`` does not look under reports/)."""
    cfg = _cfg(tmp_path / "rep", simweb, max_pages=30, partitions=2)
    store = Store(cfg.root, cfg.crawl_id)
    reports = Path(cfg.root) / "reports" / f"crawl={cfg.crawl_id}"
    _cli_killed_before(cfg, ["round", "--seeds", *simweb.seed_urls(2), "--now", T0.isoformat()],
                       r"/reports/crawl=res/round=00001\.html$", tmp_path)
    assert store.current_round() == 1 and not (reports / "round=00001.html").exists()
    assert len(list(reports.glob("round=00001.html.tmp-*"))) == 1  # the dead writer's
    dead = lease.current(store)
    while dead.live():
        time.sleep(0.1)
    out = subprocess.run(_cli(cfg, "round", "--now", (T0 + timedelta(hours=1)).isoformat()),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert store.current_round() == 2
    assert sorted(p.name for p in reports.glob("*.html")) == ["round=00001.html", "round=00002.html"]
    assert not list(reports.glob("*.tmp*")), sorted(p.name for p in reports.iterdir())


def test_a_report_writer_leaves_a_live_writers_temp_file_alone(simweb, tmp_path):
    """Two writers of a round's report at once (the DAG's report task and an operator's ``crawl report``):
    one is frozen (SIGSTOP, tests/killhook.py) just before the rename of its temp file; the other runs
    to its end meanwhile. The frozen writer's temp file is still there (it is alive: not a dead writer's
    leftover), and once continued (SIGCONT) it places its report and exits 0. No temp file is left and
    the report is whole. A sweep that removed every temp file it found (or those older than a bound,
    for a writer frozen longer) would make the live writer's rename fail."""
    cfg = _cfg(tmp_path / "rep2", simweb, max_pages=20, partitions=1)
    rnd.run_round(cfg, simweb.seed_urls(2), T0)
    reports = Path(cfg.root) / "reports" / f"crawl={cfg.crawl_id}"
    cmd = _cli(cfg, "report", "--round", "1")
    frozen_cmd = [cmd[0], str(Path(__file__).with_name("killhook.py")), *cmd[3:]]
    env = {**os.environ, "CRAWL_KILL_PATTERN": r"/round=00001\.html$", "CRAWL_KILL_SIGNAL": "SIGSTOP"}
    with open(tmp_path / "frozen.stderr", "w") as err:
        frozen = subprocess.Popen(frozen_cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, env=env)
    try:
        _, status = os.waitpid(frozen.pid, os.WUNTRACED)  # returns once it has stopped (or ended)
        assert os.WIFSTOPPED(status), f"not stopped: {(tmp_path / 'frozen.stderr').read_text()[-3000:]}"
        temps = list(reports.glob("round=00001.html.tmp-*"))
        assert len(temps) == 1
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert temps[0].exists(), "the live writer's temp file was removed"
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    assert frozen.wait(60) == 0, (tmp_path / "frozen.stderr").read_text()[-3000:]
    assert not list(reports.glob("*.tmp*"))
    assert (reports / "round=00001.html").read_text().rstrip().endswith("</html>")


def test_a_hosts_error_count_holds_across_a_killed_round_and_its_rerun(simweb, tmp_path):
    """A host whose every page answers 500 (max_host_errors 3, 8 of its URLs in the round): ``crawl round``
    is SIGKILLed (with its Dask workers) once the server has logged 2 failing requests, well inside the
    1 s politeness delay before a 3rd; the operator runs the same command again once the lease has expired.
    Across both attempts the server logs 3 failing requests in all (the rerun made 1, then deferred the
    rest), and no URL is lost. Before, the count lived in the task's memory: the rerun began at 0 and asked
    the broken host 3 times more (5 in all), and so after every crash."""
    from simlog import our_requests

    host, limit, delay = "hostile-001.sim.test", 3, 1.0
    seeds = [f"http://{host}/fault/500?n={i}" for i in range(8)]
    cfg = _cfg(tmp_path / "errs", simweb, partitions=1, politeness_delay_s=delay, max_host_errors=limit,
               allowed_hosts=r"^hostile-001\.sim\.test$", sitemaps=False, fetch_checkpoint_every=1)
    store = Store(cfg.root, cfg.crawl_id)
    cmd = _cli(cfg, "round", "--seeds", *seeds, "--now", T0.isoformat())
    since = time.time()

    def failing() -> list[dict]:
        return [r for r in our_requests(simweb, host, since) if r["path"] != "/robots.txt"]

    def two_failed() -> bool:
        if len(failing()) < 2:
            return False
        time.sleep(0.2)  # the answer reached the crawler; its next request to the host is >= 1 s away
        return True

    kill_round_when(cmd, tmp_path, two_failed, poll_s=0.05)
    first = failing()
    assert [r["status"] for r in first] == [500, 500], first
    assert store.current_round() == 0
    dead = lease.current(store)
    while dead.live():
        time.sleep(0.1)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert store.current_round() == 1
    log = failing()
    print(f"\nfailing requests to {host}: {len(first)} before the kill, {len(log) - len(first)} in the rerun "
          f"(max_host_errors {limit})")
    assert len(log) > len(first), "the rerun never asked the host"  # not vacuous: it had URLs of the host left
    assert {r["status"] for r in log} == {500}
    assert len(log) == limit, [(r["path"], r["status"]) for r in log]
    assert {row[0] for row in _state(cfg)} >= set(seeds)  # every URL is in the CrawlDb (deferred, not lost)
