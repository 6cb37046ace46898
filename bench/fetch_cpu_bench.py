"""CPU per page of the fetch-only call (``crawl.fetch.fetch_partition``), against a same-run baseline.

Why CPU and not pages/s: the box is shared (2 cores, other helpers, the simulated web's own server),
so wall-clock throughput swings by tens of percent between runs, while the CPU a fetch spends per
page (``time.process_time`` of the process: event loop, WARC writer thread and all) barely moves.
On this box the simulated web takes the other core's time, so every millisecond of our CPU per page
is throughput lost (issue 11, ``fetch_only_vs_ceiling``).

Setup as ``bench/crawl_bench.py``'s fetch-only step: robots-allowed HTML pages of ``--hosts`` simulated
hosts, round-robin over hosts, one fetch list, politeness delay 0, sitemaps on, WARC files written.
Each run is a child process (``--child``) importing ``crawl`` from a source tree: this work tree
("current") or ``git archive`` of ``--baseline-rev`` ("baseline"), alternated ``--reps`` times
against the same warm server, so both sides see the same machine state. ``--profile FILE`` instead
runs the current tree once in this process under cProfile and prints the top functions.

    python bench/fetch_cpu_bench.py --hosts 300 --pages 5000 --reps 3 --baseline-rev main
    python bench/fetch_cpu_bench.py --hosts 300 --pages 5000 --profile /tmp/fetch.prof

Ends with ``RESULT fetch_cpu_ms_per_page=… baseline=… ratio=… loop_ms_per_page=…`` (ratio = baseline / current,
medians; > 1 means the current tree spends less CPU per page; ``loop_…``: the event loop thread alone,
``time.thread_time``; ``writer_…``: the WARC writer thread, read by the thread as it ends). Each run also
prints both threads' context switches and page faults per page, the writer's backlog (bytes queued for it,
sampled every 50 records: median and p90) and the child's peak RSS. ``--hold`` calls it as the fetch+parse
task does (bodies held for the parse).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# a child imports crawl from the tree it was given (current or baseline), the parent from this one
sys.path.insert(0, os.environ.get("FETCH_CPU_TREE", str(REPO)))

from trees import tree_at  # noqa: E402  (imports nothing of crawl)


def fetch_config(work: Path, port: int, pages: int):  # noqa: ANN201 - CrawlConfig of the tree in use
    """crawl_bench's fetch-only configuration (delay 0, one round long enough for every page)."""
    from crawl.config import load_config

    return load_config(overrides={
        "root": str(work / "root"), "crawl_id": "bench", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
        "politeness_delay_s": 0.0, "max_pages": pages, "partitions": 4, "round_duration_s": 3600.0,
        "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0,
    }, use_env=False)


def run_once(fetchlist_path: Path, port: int, work: Path, prefix: str, checkpoint_every: int = 0,
             hold: bool = False) -> dict:
    """One fetch_partition over the stored fetch list: CPU and wall seconds, pages fetched.
    ``checkpoint_every`` > 0: checkpointed every that many rows, as a round's fetch task is;
    ``hold``: bodies kept for the task's parse (``hold_bytes``) and a stop check, as the fetch+parse
    task calls it. ``loop_cpu_s`` is the calling thread's CPU (the event loop's thread)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from crawl.fetch import fetch_partition

    fl = pq.read_table(fetchlist_path)
    cfg = fetch_config(work, port, fl.num_rows)
    kw: dict = {}
    if checkpoint_every:
        from crawl.checkpoint import PartitionCheckpoints, fetchlist_key
        from crawl.store import Store

        cfg = cfg.replace(fetch_checkpoint_every=checkpoint_every)
        kw["checkpoint"] = PartitionCheckpoints(Store(str(work / "out"), "bench"), 1, 0,
                                                fetchlist_key(fl) + prefix).save
    if hold:
        kw["hold_bytes"] = cfg.parse_in_fetch_max_bytes
        kw["should_continue"] = lambda: True
    gc_s = [0.0, 0.0, 0.0]  # CPU in garbage collections, by generation
    gc_at = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_at[0] = time.thread_time()
        else:
            gc_s[info["generation"]] += time.thread_time() - gc_at[0]

    gc.callbacks.append(on_gc)
    ctx0 = _ctx_switches()
    lflt0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    t0, c0, l0 = time.perf_counter(), time.process_time(), time.thread_time()
    with _writer_thread_cpu() as writer:
        out = fetch_partition(cfg, fl, root=str(work / "out"), warc_prefix=prefix, now=datetime.now(UTC), **kw)
    cpu, wall, loop_cpu = time.process_time() - c0, time.perf_counter() - t0, time.thread_time() - l0
    ctx1 = _ctx_switches()
    lflt = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - lflt0
    gc.callbacks.remove(on_gc)
    pages = out.fetches.filter(pc.equal(out.fetches.column("subset"), "warc"))
    fetched = int(pc.sum(pc.equal(pages.column("status"), "fetched")).as_py() or 0)
    return {"cpu_s": cpu, "loop_cpu_s": loop_cpu, "writer_cpu_s": writer.get("cpu_s", 0.0),
            "writer_ctx": writer.get("ctx", (0, 0)),
            "backlog_mb": _quantiles(writer.get("backlog", [])), "writer_minflt": writer.get("minflt", 0),
            "loop_minflt": lflt, "loop_ctx": (ctx1[0] - ctx0[0], ctx1[1] - ctx0[1]), "gc_s": gc_s, "wall_s": wall,
            "fetched": fetched, "rows": out.fetches.num_rows,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "requests": out.stats.get("requests", 0), "robots": out.stats.get("robots_requests", 0)}


def _quantiles(xs: list[int]) -> tuple[float, float]:
    """Median and p90 of the sampled writer backlog, in MB."""
    if not xs:
        return (0.0, 0.0)
    xs = sorted(xs)
    return (xs[len(xs) // 2] / 2**20, xs[min(len(xs) - 1, 9 * len(xs) // 10)] / 2**20)


def _ctx_switches() -> tuple[int, int]:
    """(voluntary, involuntary) context switches of the calling thread so far."""
    vol = inv = 0
    with open("/proc/thread-self/status") as fh:
        for line in fh:
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                inv = int(line.split()[1])
    return vol, inv


@contextlib.contextmanager
def _writer_thread_cpu():  # noqa: ANN202
    """The WARC writer thread's CPU seconds and context switches, read by the thread as it ends
    (its ``_loop`` wrapped; the class of whichever tree is imported)."""
    from crawl.fetch import warcwriter

    out: dict = {}
    orig = warcwriter._WarcWriter._loop

    def loop(self) -> None:  # noqa: ANN001
        c0, x0 = time.thread_time(), _ctx_switches()
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        try:
            orig(self)
        finally:
            x1 = _ctx_switches()
            out["minflt"] = out.get("minflt", 0) + resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
            out["cpu_s"] = out.get("cpu_s", 0.0) + time.thread_time() - c0
            ctx = out.get("ctx", (0, 0))
            out["ctx"] = (ctx[0] + x1[0] - x0[0], ctx[1] + x1[1] - x0[1])

    orig_submit = warcwriter._WarcWriter.submit
    backlog: list[int] = []
    out["backlog"] = backlog

    def submit(self, fn, size: int) -> int:  # noqa: ANN001
        i = orig_submit(self, fn, size)
        if i % 50 == 0:  # bytes queued for the writer, sampled every 50 records
            backlog.append(self.submitted_bytes - self.written_bytes)
        return i

    warcwriter._WarcWriter._loop = loop
    warcwriter._WarcWriter.submit = submit
    try:
        yield out
    finally:
        warcwriter._WarcWriter._loop = orig
        warcwriter._WarcWriter.submit = orig_submit


def child(args: argparse.Namespace) -> None:
    r = run_once(Path(args.fetchlist), args.port, Path(args.work), args.prefix, args.checkpoint_every, args.hold)
    print("CHILD " + json.dumps(r), flush=True)


def spawn(tree: Path, fetchlist: Path, port: int, work: Path, prefix: str, checkpoint_every: int,
          hold: bool = False) -> dict:
    env = {**os.environ, "FETCH_CPU_TREE": str(tree), "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--fetchlist", str(fetchlist),
                        "--port", str(port), "--work", str(work), "--prefix", prefix,
                        "--checkpoint-every", str(checkpoint_every)] + (["--hold"] if hold else []),
                       env=env, capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("CHILD "):
            return json.loads(line[6:])
    raise RuntimeError(f"child on {tree} failed: {p.stderr[-3000:]}")


def warm(port: int, urls: list[str]) -> None:
    """Fetch every URL once with a bare loop so the server's render cache is warm for all runs."""
    sys.path.insert(0, str(REPO / "bench"))
    from crawl_bench import plain_loop

    asyncio.run(plain_loop(port, urls, False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3, help="runs per side (alternated with --baseline-rev)")
    ap.add_argument("--baseline-rev", default="", help="also run crawl/ of this git revision (or of this directory), alternated")
    ap.add_argument("--profile", default="", help="run once in-process under cProfile, save stats here")
    ap.add_argument("--once", action="store_true", help="run the current tree once in-process (for py-spy)")
    ap.add_argument("--checkpoint-every", type=int, default=0,
                    help="checkpoint every N rows, as a round's fetch task (default 0: as crawl_bench's fetch-only call)")
    ap.add_argument("--hold", action="store_true",
                    help="keep bodies for the parse (hold_bytes) with a stop check, as the fetch+parse task")
    ap.add_argument("--task-ab", action="store_true",
                    help="this tree twice: the fetch-only call (baseline) against the fetch+parse task's call "
                         "(current: --hold and checkpoints every --checkpoint-every or 500 rows)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fetchlist", default="", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--work", default="", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    import pyarrow.parquet as pq

    sys.path.insert(0, str(REPO / "bench"))
    from crawl_bench import bench_fetchlist, bench_urls

    from crawl.simweb.launch import launch
    from crawl.simweb.launch import stop as stop_process

    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="fetch-cpu-bench-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        urls = bench_urls(args.hosts, args.seed, args.pages)
        fl_path = work / "fetchlist.parquet"
        pq.write_table(bench_fetchlist(urls), fl_path)
        print(f"simulated web: {args.hosts} hosts; fetch list: {len(urls)} HTML pages on "
              f"{len({u.split('/')[2] for u in urls})} hosts")
        warm(port, urls)
        if args.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            r = run_once(fl_path, port, work / "prof", "warc/prof", args.checkpoint_every, args.hold)
            prof.disable()
            prof.dump_stats(args.profile)
            print(f"profiled run: {r['fetched']} pages, {1000 * r['cpu_s'] / max(r['fetched'], 1):.2f} ms CPU/page "
                  "(under cProfile: inflated)")
            pstats.Stats(prof).sort_stats("tottime").print_stats(35)
            return
        if args.once:
            r = run_once(fl_path, port, work / "once", "warc/once", args.checkpoint_every, args.hold)
            print(f"one run: {r['fetched']} pages, {1000 * r['cpu_s'] / max(r['fetched'], 1):.3f} ms CPU/page, "
                  f"loop thread {1000 * r['loop_cpu_s'] / max(r['fetched'], 1):.3f}, "
                  f"GC by generation {[round(1000 * g / max(r['fetched'], 1), 4) for g in r['gc_s']]}")
            return
        # (name, tree, hold, checkpoint every): --task-ab compares this tree's fetch-only call
        # ("baseline") with the call the fetch+parse task makes ("current": bodies held, checkpoints)
        sides = [("current", REPO, args.hold or args.task_ab, args.checkpoint_every or 500 * args.task_ab)]
        if args.task_ab:
            sides.insert(0, ("baseline", REPO, False, 0))
        elif args.baseline_rev:
            base_tree = Path(args.baseline_rev)  # a directory holding crawl/ (a snapshot), else a git revision
            sides.insert(0, ("baseline", base_tree if (base_tree / "crawl").is_dir()
                             else tree_at(args.baseline_rev, work / "baseline-tree"), args.hold,
                             args.checkpoint_every))
        cpu: dict[str, list[float]] = {side[0]: [] for side in sides}
        loop: dict[str, list[float]] = {side[0]: [] for side in sides}
        wcpu: dict[str, list[float]] = {side[0]: [] for side in sides}
        rate: dict[str, list[float]] = {side[0]: [] for side in sides}
        for rep in range(args.reps):
            for name, tree, hold, every in (sides if rep % 2 == 0 else sides[::-1]):
                r = spawn(tree, fl_path, port, work / f"{name}{rep}", f"warc/{name}{rep}", every, hold)
                ms = 1000 * r["cpu_s"] / max(r["fetched"], 1)
                lms = 1000 * r.get("loop_cpu_s", 0.0) / max(r["fetched"], 1)
                wms = 1000 * r.get("writer_cpu_s", 0.0) / max(r["fetched"], 1)
                cpu[name].append(ms)
                loop[name].append(lms)
                wcpu[name].append(wms)
                rate[name].append(r["fetched"] / r["wall_s"])
                n = max(r["fetched"], 1)
                wctx, lctx = r.get("writer_ctx", (0, 0)), r.get("loop_ctx", (0, 0))
                print(f"rep {rep} {name:8s}: {r['fetched']} pages, {ms:.3f} ms CPU/page (loop thread {lms:.3f}, "
                      f"writer {wms:.3f}), {r['fetched'] / r['wall_s']:.0f} pages/s; context switches a page "
                      f"(voluntary/involuntary) writer {wctx[0] / n:.2f}/{wctx[1] / n:.2f} loop {lctx[0] / n:.2f}/"
                      f"{lctx[1] / n:.2f}; page faults a page writer {r.get('writer_minflt', 0) / n:.1f} loop "
                      f"{r.get('loop_minflt', 0) / n:.1f}; writer backlog p50/p90 "
                      f"{r.get('backlog_mb', (0, 0))[0]:.1f}/{r.get('backlog_mb', (0, 0))[1]:.1f} MB, peak RSS "
                      f"{r.get('maxrss_mb', 0):.0f} MB; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
                shutil.rmtree(work / f"{name}{rep}", ignore_errors=True)
        cur = statistics.median(cpu["current"])
        line = f"RESULT fetch_cpu_ms_per_page={cur:.3f}"
        if len(sides) > 1:
            base = statistics.median(cpu["baseline"])
            line += f" baseline={base:.3f} ratio={base / cur:.2f}"
        lcur = statistics.median(loop["current"])
        line += f" loop_ms_per_page={lcur:.3f} writer_ms_per_page={statistics.median(wcpu['current']):.3f}"
        if len(sides) > 1:
            lbase = statistics.median(loop["baseline"])
            line += f" loop_baseline={lbase:.3f} loop_ratio={lbase / lcur:.2f}"
            line += f" writer_baseline={statistics.median(wcpu['baseline']):.3f}"
            print(f"pages/s median: current {statistics.median(rate['current']):.0f}, "
                  f"baseline {statistics.median(rate['baseline']):.0f} ({args.baseline_rev or 'fetch-only call'})")
        print(line + f" load={load0:.1f}-{os.getloadavg()[0]:.1f}")
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
