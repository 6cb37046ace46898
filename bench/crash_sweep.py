"""Kill-anywhere sweep: "a crash anywhere loses no URL, and every task is safe to run twice", as an
operator meets it (bench/audit script, not a test: ~10 rounds of the CLI, a few minutes).

A simulated web (normal hosts and hostile ones answering 429/503, ``python -m crawl.simweb serve`` with
its access log); an uncrashed reference crawl of two rounds (``crawl round`` as a subprocess); then for
each kill point round 2 runs on a copy of round 1's state, its process group is SIGKILLed at that point
(a fraction of the reference round 2's wall time, or a file of a step appearing), the lease is waited
out, and ``crawl round`` runs again to completion. Each point is judged by oracles outside the code
under test:

- state: the published CrawlDb (url, status, depth, discovered_round, fetch_count; read with DuckDB over
  the shard files) equals the reference's for the normal hosts (hostile hosts answer by request count,
  so only their URL sets are compared);
- lost: every URL of round 2's fetch lists has a CrawlDb row touched in round 2, and no URL the
  reference knows is missing;
- warc: every WARC file of round 2 reads to its end with warcio, and every index row's (filename,
  offset, length) is one record of that URL;
- dups: no (url, subset, fetch_time) index row twice, and no more captures of a normal host's URL
  than the reference has;
- polite: the access log from the killed attempt's start to the rerun's end shows no host asked twice
  within the politeness delay (Crawl-delay where robots.txt names one) nor before a 429/503's wait
  (Retry-After, or a whole second for an HTTP-date) -- counted across the crash boundary too;
- again: no request of the rerun to a host of a partition whose fetch the dead attempt had finished
  (its ``.done`` marker), robots.txt included.

    PYTHONPATH=. .venv/bin/python bench/crash_sweep.py [--points 10] [--budget-s 900]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
from warcio.archiveiterator import ArchiveIterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crawl import lease  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.simweb.accesslog import read_log  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.model import SimParams, build  # noqa: E402
from crawl.store import Store  # noqa: E402

NORMAL = r"(blog|news|shop|docs|forum|archive)-\d+\.sim\.test"
# the hostile hosts that answer 429 (hostile-002: every 2nd request, Retry-After 2 s or an HTTP-date) and
# 503 (hostile-003: 3 of every 10, Retry-After 1) in a 30-host web of seed 1; not hostile-001's /fault/ pages
# (stalls and 3-4 s bodies that move the round's deadline, so two uncrashed runs differ)
HOSTILE = r"hostile-00[23]\.sim\.test"
SCOPE = rf"^({NORMAL}|{HOSTILE})$"
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
CID = "sweep"
DELAY = 0.2
# waits the hostile /fault/ pages name (crawl/simweb/server.py); other 429/503s name 1-2 s or an HTTP-date
FAULT_WAITS = {"/fault/429-seconds": 7.0, "/fault/429-date": 29.0, "/fault/503": 5.0}
SLACK = 0.03  # server start vs crawler clock, same machine


def cfg_for(root: Path, port: int):
    return load_config(overrides={
        "root": str(root), "crawl_id": CID, "resolve": [f"*.sim.test=127.0.0.1:{port}"],
        "politeness_delay_s": DELAY, "max_pages": 160, "partitions": 4, "url_shards": 2,
        "round_duration_s": 12.0, "total_timeout_s": 4.0, "allowed_hosts": SCOPE, "max_crawl_delay_s": 2.0,
        "lease_expiry_s": 3.0, "fetch_checkpoint_every": 5, "backoff_base_s": 1.0, "backoff_cap_s": 30.0,
    }, use_env=False)


def cli(cfg, *args: str) -> list[str]:
    return [sys.executable, "-m", "crawl", *args, "--config-json", json.dumps(cfg.to_dict())]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


# ---- triggers: files a step writes ---------------------------------------------------------------
def _files(root: Path, rel: str) -> list[str]:
    try:
        return os.listdir(root / f"state/crawl={CID}" / rel)
    except FileNotFoundError:
        return []


def triggers(root: Path, parts: int) -> dict[str, callable]:
    """Kill points seen from outside: a file of the step appears (polled every 5 ms). Generate and fetch
    run for seconds; the steps after them write their files within milliseconds of each other (update,
    reprioritise, publish took 0.5 s together in the reference), too fast to poll: see HOOK_POINTS."""
    r2 = "rounds/00002"
    done = lambda: [f for f in _files(root, f"{r2}/fetched") if f.endswith(".done")]  # noqa: E731
    return {
        "generate: partitions written": lambda: any(f.endswith(".parquet") for f in _files(root, f"{r2}/fetchlist")),
        "fetch: first .done": lambda: len(done()) >= 1,
        "fetch: last .done": lambda: len(done()) >= parts,
        "update: seen v2 partly": lambda: any(f.endswith((".parquet", ".bloom")) for f in _files(root, "seen/v=00002")),
        "reprio: crawldb v2": lambda: any(f.endswith(".parquet") for f in _files(root, "crawldb/v=00002")),
        "publish: manifest": lambda: "manifest.json" in _files(root, r2),
    }


# Kill points inside the fast steps: the round's process SIGKILLs its own process group just before its
# n-th rename/replace whose "src -> dst" matches the pattern, i.e. right after the (n-1)-th: the CLI runs
# unchanged under tests/killhook.py (Python's audit event "os.rename": every atomic write and publish's moves).
HOOK_POINTS = {
    "update: before its 2nd seen v2 file": (r"/seen/v=00002/", 2),
    "update: before update.json": (r"/rounds/00002/update\.json$", 1),
    "reprio: before its 2nd crawldb v2 file": (r"/crawldb/v=00002/", 2),
    "reprio: before reprioritise.json": (r"/rounds/00002/reprioritise\.json$", 1),
    "publish: before the CURRENT flip": (r"/CURRENT\.json$", 1),
    "publish: after the flip, mid-move (5th file)": (r"/rounds/00002/staged/\S* -> (?!\S*/staged/)", 5),
    "report: published, before its file": (r"/reports/crawl=sweep/round=00002\.html$", 1),
}


def _current(root: Path) -> int:
    try:
        return json.loads((root / f"state/crawl={CID}/CURRENT.json").read_text())["round"]
    except (FileNotFoundError, ValueError):
        return 0


def _sql(q: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


# ---- oracles ----------------------------------------------------------------------------------------
def crawldb_state(root: Path) -> set[tuple]:
    """(url, status, depth, discovered_round, fetch_count) of CrawlDb version 2 (round 2's, once published):
    base files minus the rows an overlay replaces, plus the overlays (read with DuckDB, not crawl.crawldb)."""
    cur = 2
    d = root / f"state/crawl={CID}/crawldb/v={cur:05d}"
    base = sorted(str(p) for p in d.glob("shard=*.parquet"))
    over = sorted(str(p) for p in (d / "overlay").glob("shard=*.parquet"))
    cols = "url, status, depth, discovered_round, fetch_count"
    q = f"SELECT {cols}, url_hash FROM read_parquet({base!r}, union_by_name=true)"
    if over:
        q = (f"SELECT * FROM ({q}) WHERE url_hash NOT IN (SELECT url_hash FROM read_parquet({over!r}, union_by_name=true)) "
             f"UNION ALL SELECT {cols}, url_hash FROM read_parquet({over!r}, union_by_name=true)")
    rows = _sql(f"SELECT {cols}, count(*) OVER (PARTITION BY url) AS n FROM ({q})")
    assert all(r[-1] == 1 for r in rows), "a URL has two CrawlDb rows"
    return {r[:-1] for r in rows}


def compare_state(got: set[tuple], ref: set[tuple]) -> tuple[str, int]:

    normal = re.compile(rf"^https?://{NORMAL}(/|$)")
    g_n = {r for r in got if normal.match(r[0])}
    r_n = {r for r in ref if normal.match(r[0])}
    diff = len(g_n ^ r_n)
    urls = {r[0] for r in got} ^ {r[0] for r in ref}
    return ("ok" if not diff and not urls else f"FAIL {diff} rows/{len(urls)} urls"), diff + len(urls)


def lost_urls(root: Path) -> int:
    """Fetch-list URLs of round 2 without a CrawlDb row of round 2 (the published version)."""
    lists = str(root / f"state/crawl={CID}/rounds/00002/fetchlist/*.parquet")
    d = root / f"state/crawl={CID}/crawldb/v=00002"
    files = [str(p) for p in d.glob("shard=*.parquet")] + [str(p) for p in (d / "overlay").glob("shard=*.parquet")]
    if not files:
        return -1
    return _sql(f"""SELECT count(*) FROM (SELECT DISTINCT url FROM read_parquet('{lists}'))
                          WHERE url NOT IN (SELECT url FROM read_parquet({files!r}, union_by_name=true)
                                            WHERE round = 2)""")[0][0]


def warc_check(root: Path) -> tuple[str, int]:
    """Every round-2 WARC file reads to its end; every index pointer of round 2 is a record of its URL."""
    bad = 0
    for p in sorted((root / f"warc/crawl={CID}/round=00002").glob("*.warc.gz")):
        try:
            with open(p, "rb") as fh:
                for rec in ArchiveIterator(fh):
                    rec.content_stream().read()
        except Exception:  # noqa: BLE001 - any failure to read is the finding
            bad += 1
    ptrs = _sql(f"""SELECT url, warc_filename, warc_record_offset, warc_record_length
                          FROM read_parquet('{root}/index/**/*.parquet')
                          WHERE warc_filename IS NOT NULL AND round = 2""")
    for url, fname, off, length in ptrs:
        try:
            with open(root / fname, "rb") as fh:
                fh.seek(off)
                raw = fh.read(length)
            recs = list(ArchiveIterator(io.BytesIO(raw)))
            if len(recs) != 1 or recs[0].rec_headers.get_header("WARC-Target-URI") != url:
                bad += 1
        except Exception:  # noqa: BLE001
            bad += 1
    return ("ok" if not bad else f"FAIL {bad}"), len(ptrs)


def index_counts(root: Path) -> dict[tuple, int]:
    rows = _sql(f"""SELECT url, subset, count(*) FROM read_parquet('{root}/index/**/*.parquet')
                          WHERE round = 2 AND warc_filename IS NOT NULL GROUP BY ALL""")
    return {(u, s): n for u, s, n in rows}


def dup_check(root: Path, ref: dict[tuple, int]) -> str:

    same = _sql(f"""SELECT count(*) - count(DISTINCT (url, subset, fetch_time))
                          FROM read_parquet('{root}/index/**/*.parquet')
                          WHERE round = 2""")[0][0]
    normal = re.compile(rf"^https?://{NORMAL}(/|$)")
    more = sum(1 for k, n in index_counts(root).items() if normal.match(k[0]) and n > ref.get(k, 0))
    return "ok" if not same and not more else f"FAIL same={same} more={more}"


def polite_check(log: list[dict], since: float, crawl_delays: dict[str, float], boundary: float) -> tuple[str, int]:
    """Gaps between our request starts per host below the delay, or before a 429/503's wait ended;
    ``boundary``: the kill (pairs across it are counted apart)."""
    per: dict[str, list[dict]] = {}
    for r in log:
        if r["start"] >= since and (r["user_agent"] or "").startswith("RecrawlBot"):
            per.setdefault(r["host"], []).append(r)
    bad = across = told = 0
    for host, rs in per.items():
        rs.sort(key=lambda r: r["start"])
        need_gap = max(DELAY, crawl_delays.get(host, 0.0))
        for a, b in zip(rs, rs[1:], strict=False):
            ok = b["start"] - a["start"] >= need_gap - SLACK
            if a["status"] in (429, 503):
                told += 1
                wait = FAULT_WAITS.get(a["path"], 1.0)
                ok = ok and b["start"] >= a["end"] + wait - SLACK
            if not ok:
                bad += 1
                across += a["start"] < boundary <= b["start"]
    n = sum(len(rs) for rs in per.values())
    return (f"ok ({n} req, {told} waits)" if not bad else f"FAIL {bad} ({across} across)"), bad


def again_check(log: list[dict], rerun_at: float, done_hosts: set[str]) -> str:
    n = sum(1 for r in log if r["start"] >= rerun_at and (r["user_agent"] or "").startswith("RecrawlBot")
            and r["host"] in done_hosts)
    return "ok" if not n else f"FAIL {n}"


def done_partition_hosts(root: Path) -> set[str]:
    d = root / f"state/crawl={CID}/rounds/00002"
    hosts: set[str] = set()
    for m in (d / "fetched").glob("part=*.done"):
        k = m.name.split(".")[0]
        hosts |= {h for (h,) in _sql(f"SELECT DISTINCT host FROM read_parquet('{d}/fetchlist/{k}.parquet')")}
    return hosts


# ---- runs ------------------------------------------------------------------------------------------
def flush(port: int) -> None:
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/_sim/flush", headers={"Host": "x"})
    c.getresponse().read()
    c.close()


def run_until(cmd: list[str], ready, wall_s: float, err_path: Path, poll_s: float = 0.005,
              extra_env: dict[str, str] | None = None) -> tuple[float, bool]:
    """Start ``cmd`` in its own session; SIGKILL its group once ``ready()`` or ``wall_s`` passed.
    Returns (kill time, whether it was killed before it ended)."""
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                env={**env(), **(extra_env or {})})
    started = time.monotonic()
    try:
        while proc.poll() is None and not ready() and time.monotonic() - started < wall_s:
            time.sleep(poll_s)
        killed = proc.poll() is None
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        run_until.last_rc = proc.wait(10)
    return time.time(), killed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=13, help="kill points (fractions + file triggers)")
    ap.add_argument("--budget-s", type=float, default=900.0, help="stop starting new points after this")
    ap.add_argument("--hosts", type=int, default=30)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--only", default="", help="run only the kill points whose name matches this regex")
    a = ap.parse_args()
    t_start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="crash_sweep-"))
    proc, port = launch(a.hosts, 1, work / "access.jsonl", 20, (), work / "simweb.stderr")
    try:
        model = build(SimParams(seed=1, hosts=a.hosts, pages_per_host=20))
        delays = {h.name: float(h.crawl_delay) for h in model.hosts if h.crawl_delay}
        seeds = [*model.seed_urls(4)] + [f"http://{h.name}/" for h in model.hosts if re.fullmatch(HOSTILE, h.name)]
        ref = cfg_for(work / "ref", port)
        out = subprocess.run(cli(ref, "round", "--seeds", *seeds, "--now", T0.isoformat()), capture_output=True,
                             text=True, timeout=300, env=env())
        assert out.returncode == 0, out.stderr[-2000:]
        snap = work / "round1"
        shutil.copytree(work / "ref", snap)
        # the reference round 2, its step files' times noted
        trig = triggers(work / "ref", ref.partitions)
        seen_at: dict[str, float] = {}
        t0 = time.monotonic()
        with open(work / "ref2.stderr", "w") as err:
            p = subprocess.Popen(cli(ref, "round", "--now", T1.isoformat()), stdout=subprocess.DEVNULL, stderr=err,
                                 env=env())
        while p.poll() is None:
            for name, f in trig.items():
                if name not in seen_at and f():
                    seen_at[name] = time.monotonic() - t0
            time.sleep(0.005)
        ref_wall = time.monotonic() - t0
        assert p.returncode == 0, (work / "ref2.stderr").read_text()[-2000:]
        ref_state = crawldb_state(work / "ref")
        ref_idx = index_counts(work / "ref")
        print(f"reference round 2: {ref_wall:.1f} s, {len(ref_state)} CrawlDb rows; step files at "
              + ", ".join(f"{k} {v:.2f}s" for k, v in seen_at.items()), flush=True)

        polled = ["generate: partitions written", "fetch: first .done", "fetch: last .done"]
        n_frac = max(1, a.points - len(polled) - len(HOOK_POINTS))
        points: list[tuple[str, float | None, str | None]] = [
            (f"{f:.2f} of wall", f * ref_wall, None) for f in [(i + 0.5) / n_frac for i in range(n_frac)]]
        points += [(name, None, name) for name in polled]
        points += [(name, None, name) for name in HOOK_POINTS]
        points.append(("control: no kill", None, "control"))  # the oracles' noise: an uncrashed round 2 again
        points = [p for p in points if re.search(a.only, p[0])]
        rows = []
        for i, (label, at_s, tname) in enumerate(points):
            if time.monotonic() - t_start > a.budget_s:
                print(f"budget spent: {len(points) - i} points not run", flush=True)
                break
            root = work / f"k{i:02d}"
            shutil.copytree(snap, root)
            cfg = cfg_for(root, port)
            store = Store(str(root), CID)
            tr = triggers(root, cfg.partitions)
            cmd = cli(cfg, "round", "--now", T1.isoformat())
            extra_env = {}
            if tname in HOOK_POINTS:
                cmd = [cmd[0], str(REPO / "tests" / "killhook.py"), *cmd[3:]]  # python killhook.py <crawl's args>
                extra_env = {"CRAWL_KILL_PATTERN": HOOK_POINTS[tname][0], "CRAWL_KILL_NTH": str(HOOK_POINTS[tname][1])}
            ready = tr[tname] if tname in tr else (lambda: False)
            if tname == "control":
                at_s = 600.0  # never: the round runs to its end and the "rerun" finds it published
            since = time.time()
            killed_at, killed = run_until(cmd, ready, at_s if at_s is not None else 120.0, root / "killed.stderr",
                                          extra_env=extra_env)
            if tname in HOOK_POINTS:
                killed = run_until.last_rc == -signal.SIGKILL
            rec = lease.current(store)
            step = rec.phase if rec is not None else "-"
            if not killed:
                step = "ended first"
            done_hosts = done_partition_hosts(root)
            while rec is not None and rec.live():
                time.sleep(0.05)
                rec = lease.current(store)
            rerun_at = time.time()
            # killed after the commit (CURRENT = 2): round 2 is published, so `crawl round` runs round 3, whose
            # first step rolls round 2's publish forward (crawl.store.finish_publish); round 3's own requests
            # then make the "again" check meaningless
            committed = _current(root) == 2 and tname != "control"
            if tname == "control":
                res = "no rerun"
            else:
                rerun = subprocess.run(cli(cfg, "round", "--now", (T1 + timedelta(hours=committed)).isoformat()),
                                       capture_output=True, text=True, timeout=300, env=env())
                res = f"exit {rerun.returncode}" + (f" ({rerun.stderr.strip().splitlines()[-1][:60]})"
                                                   if rerun.returncode else "")
            flush(port)
            log = read_log(work / "access.jsonl").to_pylist()
            try:
                state, _ = compare_state(crawldb_state(root), ref_state) if _current(root) >= 2 else ("FAIL unpub", 1)
                staged = [p for p in (root / f"state/crawl={CID}/rounds/00002/staged").rglob("*") if p.is_file()]
                litter = [p for p in root.rglob("*") if p.is_file() and (".tmp-" in p.name or (
                    p.name.startswith(".") and p.name.endswith(".tmp"))) and "/lease/" not in str(p)]
                if staged or litter:
                    state += f", {len(staged)} left staged, {len(litter)} temp files"
                no_report = [r for r in range(1, _current(root) + 1)
                             if not (root / f"reports/crawl={CID}/round={r:05d}.html").exists()]
                if no_report:
                    state += f", FAIL no report of round {no_report}"
                lost = lost_urls(root)
                warc, nptr = warc_check(root)
                dups = dup_check(root, ref_idx)
            except Exception as exc:  # noqa: BLE001 - the sweep reports, it does not stop
                state, lost, warc, nptr, dups = f"ERR {exc!r}"[:60], -1, "-", 0, "-"
            polite, _ = polite_check(log, since, delays, killed_at)
            again = again_check(log, rerun_at, done_hosts) if not committed else "n/a (round 3)"
            if committed:
                res += ", round 3"
            row = (label, step, res, state, "ok" if lost == 0 else f"FAIL {lost}", f"{warc} ({nptr})", dups, polite,
                   again)
            rows.append(row)
            print(" | ".join(str(x) for x in row), flush=True)
        print("\n| kill point | step it landed in | rerun | state | lost | warc (pointers) | dups | polite | again |")
        print("|---|---|---|---|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(str(x) for x in row) + " |")
        print(f"\nsweep: {len(rows)} points in {time.monotonic() - t_start:.0f} s; work dir {work}")
    finally:
        proc.terminate()
        proc.wait(10)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
