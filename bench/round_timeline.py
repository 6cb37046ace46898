"""Where a whole round's wall time goes on the embedded cluster: a timeline of CPU per process.

One round over ``bench/crawl_bench.py``'s benchmark set (HTML pages spread over many hosts of the
simulated web, politeness delay 0), run with :func:`crawl.round.run_round` on the embedded Dask
cluster exactly as crawl_bench runs it, while a sampler thread reads every 0.25 s the user+system CPU
(``/proc/<pid>/stat``) of each Dask worker process, this process (driver and scheduler: the
LocalCluster's scheduler runs here) and the simulated web's server. Recorded with it: the round's
step boundaries (the progress interface of :mod:`crawl.progress`), and per partition its worker
(Dask's task stream), its start (the fetch attempt marker), the end of its fetch (the ``fetched``
marker) and the end of its parse (the ``parsed`` marker).

Prints per step its wall time and the cores each process group used on average, and for the
fetch+parse step how long each worker was fetching, parsing or without a task (the tail), and the
share of the machine's cores left idle. Why: on a 2-core box a round that keeps both cores busy
runs at the speed its CPU per page allows; this finds the seconds where it does not.

    python bench/round_timeline.py [--hosts 300] [--pages 5000] [--partitions 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.store import Store  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crawl_bench import bench_urls, plain_loop  # noqa: E402
from timeline import Sampler, StepClock, step_table  # noqa: E402


def partition_spans(store: Store, round_no: int, stream: list[dict[str, Any]], wall0: float,
                    mono0: float) -> list[dict[str, Any]]:
    """Per partition: its worker, start, end of fetch, end of parse (monotonic seconds)."""
    to_mono = lambda wall: wall - wall0 + mono0  # noqa: E731
    by_part: dict[int, str] = {}
    for t in stream:
        key = str(t.get("key", ""))
        if key.startswith("fetch-"):
            by_part[int(key.rsplit("-", 1)[1].replace("retry", "0"))] = t["worker"]
    out = []
    for part, worker in sorted(by_part.items()):
        attempt = store.read_json(store.part_file(round_no, "fetched", part, "attempt"))
        start = datetime.fromisoformat(attempt["started"]).timestamp()
        fetched = os.path.getmtime(store.location(store.part_file(round_no, "fetched", part, "done")))
        parsed = os.path.getmtime(store.location(store.part_file(round_no, "parsed", part, "done")))
        out.append({"part": part, "worker": worker, "start": to_mono(start), "fetched": to_mono(fetched),
                    "parsed": to_mono(parsed),
                    "pages": (store.read_json(store.part_file(round_no, "parsed", part, "done")) or {}).get("pages")})
    return out


def report(sampler: Sampler, steps: list[list[Any]], spans: list[dict[str, Any]], workers: dict[str, str],
           pages: int) -> dict[str, Any]:
    """Print the breakdown and return it as a dict (for --json)."""
    t_round0, t_round1 = steps[0][1], steps[-1][2]
    print(f"\nround: {t_round1 - t_round0:.2f} s for {pages} pages; {os.cpu_count()} cores")
    out: dict[str, Any] = {**step_table(sampler, steps), "partitions": spans}
    fp = next((s for s in steps if s[0] == "fetch_parse"), None)
    if fp is None or not spans:
        return out
    a, b = fp[1], fp[2]
    print(f"\nfetch+parse step {b - a:.2f} s; per partition (s from the step's start):")
    print("| part | worker | pages | start | fetch s | parse s | end | worker cores while fetching | while parsing |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in spans:
        w = workers[s["worker"]]
        fc = sampler.cores(w, s["start"], s["fetched"])
        pcores = sampler.cores(w, s["fetched"], s["parsed"])
        s.update({"fetch_cores": round(fc, 2), "parse_cores": round(pcores, 2), "worker_name": w})
        print(f"| {s['part']} | {w} | {s['pages']} | {s['start'] - a:.2f} | {s['fetched'] - s['start']:.2f} | "
              f"{s['parsed'] - s['fetched']:.2f} | {s['parsed'] - a:.2f} | {fc:.2f} | {pcores:.2f} |")
    print("| worker | fetching s | parsing s | no task s (before first / after last) |")
    print("|---|---|---|---|")
    out["workers"] = {}
    for addr, w in workers.items():
        mine = [s for s in spans if s["worker"] == addr]
        fetching = sum(s["fetched"] - s["start"] for s in mine)
        parsing = sum(s["parsed"] - s["fetched"] for s in mine)
        first = min((s["start"] for s in mine), default=b) - a
        last = b - max((s["parsed"] for s in mine), default=a)
        out["workers"][w] = {"fetching": round(fetching, 2), "parsing": round(parsing, 2),
                             "before": round(first, 2), "after": round(last, 2)}
        print(f"| {w} | {fetching:.2f} | {parsing:.2f} | {first + last:.2f} ({first:.2f} / {last:.2f}) |")
    out["phases"] = phase_table(sampler, spans, workers, a, b)
    return out


def phase_table(sampler: Sampler, spans: list[dict[str, Any]], workers: dict[str, str], a: float,
                b: float) -> dict[str, Any]:
    """The fetch+parse step cut where any worker changes state (fetching, parsing, no task), grouped by
    the combination of states ("fetch+fetch": both workers fetching), with the cores each process used
    and the idle cores in each: says whether the simulated web is saturated while the workers fetch at
    the same time, and what the tail costs."""
    names = [*sampler.pids, "others"]
    ncores = os.cpu_count() or 1
    cuts = sorted({a, b, *(t for s in spans for t in (s["start"], s["fetched"], s["parsed"]) if a <= t <= b)})

    def state(addr: str, t: float) -> str:
        for s in spans:
            if s["worker"] == addr and s["start"] <= t < s["fetched"]:
                return "fetch"
            if s["worker"] == addr and s["fetched"] <= t < s["parsed"]:
                return "parse"
        return "none"

    acc: dict[str, dict[str, float]] = {}
    for t0, t1 in zip(cuts, cuts[1:], strict=False):
        if t1 - t0 < 1e-6:
            continue
        key = "+".join(sorted(state(addr, (t0 + t1) / 2) for addr in workers))
        row = acc.setdefault(key, {"s": 0.0, **{n: 0.0 for n in names}})
        row["s"] += t1 - t0
        for n in names:
            row[n] += sampler.cores(n, t0, t1) * (t1 - t0)
    print("\nfetch+parse by the workers' states (cores averaged over each state's seconds):")
    print("| states | s | " + " | ".join(names) + " | idle |")
    print("|---|---|" + "---|" * (len(names) + 1))
    out = {}
    for key, row in sorted(acc.items(), key=lambda kv: -kv[1]["s"]):
        cores = {n: row[n] / row["s"] for n in names}
        idle = max(0.0, ncores - sum(cores.values()))
        out[key] = {"s": round(row["s"], 2), **{n: round(v, 2) for n, v in cores.items()}, "idle": round(idle, 2)}
        print(f"| {key} | {row['s']:.2f} | " + " | ".join(f"{v:.2f}" for v in cores.values()) + f" | {idle:.2f} |")
    return out


def profile_steps(top: int) -> dict[str, Any]:
    """Wrap the driver-side steps of :mod:`crawl.round` in cProfile (``run_round`` calls them by their
    module names); returns {step: Profile}, filled as the round runs."""
    import cProfile

    profs: dict[str, Any] = {}
    for name in ("generate", "update", "reprioritise", "publish"):
        fn = getattr(rnd, name)

        def wrapped(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
            prof = profs[_name] = cProfile.Profile()
            return prof.runcall(_fn, *a, **kw)

        setattr(rnd, name, wrapped)
    return profs


def save_before_update(root: Path, dest: Path, cfg: Any) -> None:
    """Make the round's update step first copy the crawl root (and the config) to ``dest``."""
    update = rnd.update

    def wrapped(*a: Any, **kw: Any) -> Any:
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(root, dest / "root")
        (dest / "config.json").write_text(json.dumps(cfg.to_dict(), default=str))
        return update(*a, **kw)

    rnd.update = wrapped


def print_profiles(profs: dict[str, Any], top: int) -> None:
    import io
    import pstats

    for name, prof in profs.items():
        st = pstats.Stats(prof, stream=io.StringIO())
        rows = sorted(st.stats.items(), key=lambda kv: kv[1][3], reverse=True)  # type: ignore[attr-defined]
        print(f"\n{name}: {st.total_tt:.2f} s in this process; top {top} by cumulative time")  # type: ignore[attr-defined]
        for (path, line, fn), (_cc, nc, tt, ct, _) in rows[:top]:
            short = path.split("/crawl/", 1)[-1] if "/crawl/" in path else path.rsplit("/", 1)[-1]
            print(f"  {ct:7.3f} cum {tt:7.3f} own {nc:7d}x  {short}:{line}({fn})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--dask-workers", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config override (JSON value), e.g. --set parse_in_fetch_max_bytes=0")
    ap.add_argument("--json", help="write the breakdown here")
    ap.add_argument("--save-fetched", metavar="DIR",
                    help="copy the crawl root here after fetch+parse, before update (for bench/after_fetch_bench.py)")
    ap.add_argument("--profile", type=int, default=0, metavar="TOP",
                    help="cProfile the driver-side steps (generate, update, reprioritise, publish); top N rows")
    args = ap.parse_args()
    from driverproc import as_crawl_run_driver

    as_crawl_run_driver()  # this process is the round's driver: set up as `crawl run` sets up its own
    work = Path(tempfile.mkdtemp(prefix="round-timeline-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        urls = bench_urls(args.hosts, args.seed, args.pages)
        asyncio.run(plain_loop(port, urls, False))  # warm the server's render cache, as crawl_bench does
        overrides: dict[str, Any] = {
            "root": str(work / "root"), "crawl_id": "bench", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
            "politeness_delay_s": 0.0, "max_pages": len(urls), "partitions": args.partitions,
            "round_duration_s": 3600.0, "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0,
            "dask_workers": args.dask_workers,
        }
        for kv in args.set:
            k, _, v = kv.partition("=")
            overrides[k] = json.loads(v)
        cfg = load_config(overrides=overrides, use_env=False)
        with dask_client(cfg) as client:
            from distributed import get_task_stream

            wpids = client.run(os.getpid)
            workers = {addr: f"w{i}" for i, addr in enumerate(sorted(wpids))}
            pids = {**{workers[a]: p for a, p in wpids.items()}, "driver": os.getpid(), "simweb": proc.pid}
            rnd.inject(cfg, urls)
            profs = profile_steps(args.profile) if args.profile else {}
            if args.save_fetched:
                save_before_update(Path(cfg.root), Path(args.save_fetched), cfg)
            clock = StepClock()
            sampler = Sampler(pids)
            sampler.start()
            wall0, mono0 = time.time(), time.monotonic()
            with get_task_stream(client) as ts:
                summary = rnd.run_round(cfg, None, progress=clock, client=client)
            sampler.stop()
            stream = ts.data
        store = Store(cfg.root, cfg.crawl_id)
        spans = partition_spans(store, summary["round"], stream, wall0, mono0)
        out = report(sampler, clock.steps, spans, workers, summary["fetch_parse"]["fetched"])
        out["args"] = vars(args)
        print_profiles(profs, args.profile)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
