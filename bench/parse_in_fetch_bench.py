"""Parse in the fetch task, on and off, same run: whole rounds on the embedded Dask cluster.

The lever (issue 11): with ``parse_in_fetch_max_bytes`` > 0 one task per partition fetches and then
parses from the bodies it kept in memory (``crawl.tasks.fetch_parse_task``); with 0 a second task per
partition reads every body back from the WARC files (``parse_task``). Each run is one round over the
same benchmark URLs as ``bench/crawl_bench.py`` (politeness delay 0) in a fresh crawl root, on one
running cluster, runs alternating on/off ``--repeat`` times. Per run: the round's wall time
(generate to publish), the fetch+parse phase's pages/s, and the Dask workers' user+system CPU per
fetched page; the load average before and after.

    python bench/parse_in_fetch_bench.py [--hosts 200] [--pages 3000] [--repeat 2]

``--overlap``: both runs parse in the fetch task; "ahead" parses the held bodies on a side thread
while the fetch goes on (``parse_overlap_docs``, crawl.parse_ahead), "after" parses them once it ended.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.config import CrawlConfig, load_config  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.tasks import fetch_parse_task, fetch_task, parse_task  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crawl_bench import bench_urls, plain_loop, worker_cpu  # noqa: E402

ON_BYTES = 256 << 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--pages", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--in-process", action="store_true",
                    help="no Dask: inject + generate, then every partition's task(s) called in this process, "
                         "timed (wall and this process's CPU, threads included) over fetch+parse only")
    ap.add_argument("--overlap", action="store_true",
                    help="A/B parse_overlap_docs on ('ahead') and off ('after'), both parsing in the fetch task")
    args = ap.parse_args()
    # mode -> (parse_in_fetch_max_bytes, parse_overlap_docs)
    modes = ((("ahead", ON_BYTES, 256), ("after", ON_BYTES, 0)) if args.overlap
             else (("on", ON_BYTES, 0), ("off", 0, 0)))
    on, off = modes[0][0], modes[1][0]
    work = Path(tempfile.mkdtemp(prefix="crawl-inparse-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        urls = bench_urls(args.hosts, args.seed, args.pages)
        asyncio.run(plain_loop(port, urls, False))  # warm the server's render cache: all runs see warm pages

        def cfg_for(name: str, budget: int, overlap: int = 0):
            return load_config(overrides={
                "root": str(work / name), "crawl_id": name,  # Dask task keys name the crawl: one per run
                "resolve": [f"*.sim.test=127.0.0.1:{port}"],
                "politeness_delay_s": 0.0, "max_pages": len(urls), "partitions": args.partitions,
                "round_duration_s": 3600.0, "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0,
                "parse_in_fetch_max_bytes": budget, "parse_overlap_docs": overlap}, use_env=False)

        if args.in_process:
            in_process(args, cfg_for, urls, modes)
            return
        rows = []
        with dask_client(cfg_for("warmup", 0)) as client:
            for i in range(args.repeat):
                for mode, budget, overlap in modes:
                    cfg = cfg_for(f"{mode}{i}", budget, overlap)
                    rnd.inject(cfg, urls)
                    load0 = os.getloadavg()[0]
                    cpu0 = worker_cpu(client)
                    t0 = time.perf_counter()
                    summary = rnd.run_round(cfg, None, client=client)
                    wall = time.perf_counter() - t0
                    fp = summary["fetch_parse"]
                    n = max(int(fp["fetched"]), 1)
                    rows.append((mode, i, n, wall, fp["seconds"], fp["pages_per_s"],
                                 1000 * (worker_cpu(client) - cpu0) / n, load0, os.getloadavg()[0]))
                    shutil.rmtree(work / f"{mode}{i}", ignore_errors=True)
                    print(f"run {mode} {i}: {n} pages, round {wall:.1f} s, fetch+parse {fp['seconds']:.1f} s "
                          f"({fp['pages_per_s']} pages/s), workers' CPU {rows[-1][6]:.2f} ms/page, "
                          f"load {load0:.1f}-{rows[-1][8]:.1f}", flush=True)
        print("\n| run | pages | round s | e2e pages/s | fetch+parse s | fetch+parse pages/s | CPU ms/page | load |")
        print("|---|---|---|---|---|---|---|---|")
        for mode, i, n, wall, fps, rate, cpu, l0, l1 in rows:
            print(f"| {mode} {i + 1} | {n} | {wall:.1f} | {n / wall:.0f} | {fps:.1f} | {rate:.0f} | {cpu:.2f} | "
                  f"{l0:.1f}-{l1:.1f} |")

        def mean(mode: str, k: int) -> float:
            vals = [r[k] for r in rows if r[0] == mode]
            return sum(vals) / len(vals)

        print(f"\nRESULT {on}_vs_{off} e2e_ratio={mean(off, 3) / mean(on, 3):.2f} "
              f"fetch_parse_ratio={mean(on, 5) / mean(off, 5):.2f} "
              f"cpu_ms_{on}={mean(on, 6):.2f} cpu_ms_{off}={mean(off, 6):.2f}")
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)


def in_process(args: argparse.Namespace, cfg_for: Callable[..., CrawlConfig], urls: list[str],
               modes: tuple[tuple[str, int, bool], ...]) -> None:
    """The lever alone: fetch_parse_task against fetch_task + parse_task (or, ``--overlap``,
    fetch_parse_task with and without parse_overlap_docs), same process, alternating. ``fetch s``: the
    fetch tasks' own elapsed time (stats ``elapsed_s``); the rest of the wall time is the parse."""
    on, off = modes[0][0], modes[1][0]
    rows = []
    for i in range(-1, args.repeat):  # run -1: warm-up (imports, first parses), not counted
        for mode, budget, overlap in modes:
            cfg = cfg_for(f"p{mode}{i + 1}", budget, overlap)
            now = datetime.now(UTC)
            rnd.inject(cfg, urls if i >= 0 else urls[:300], now)
            gen = rnd.generate(cfg, now)
            parts = sorted(int(p.rsplit("part=", 1)[1].split(".")[0]) for p in gen["partitions"])
            load0 = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            n, fetch_s = 0, 0.0
            for k in parts:
                if budget:
                    fs = fetch_parse_task(cfg, gen["round"], k, now)["fetch"]
                else:
                    fs = fetch_task(cfg, gen["round"], k, now)
                    parse_task(cfg, gen["round"], k, fs)
                n += int(fs.get("requests", 0) or 0)
                fetch_s += float(fs.get("elapsed_s", 0.0))
                if "parse_ahead_s" in fs:
                    print(f"  part {k}: parse ahead {fs['parse_ahead']} docs, {fs['parse_ahead_s']} s CPU, "
                          f"backlog after the fetch {fs['parse_ahead_wait_s']} s", flush=True)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            shutil.rmtree(cfg.root, ignore_errors=True)
            if i < 0:
                continue
            rows.append((mode, i, n, wall, 1000 * cpu / max(n, 1), load0, os.getloadavg()[0], fetch_s, cpu / wall))
            print(f"run {mode} {i}: {n} requests, fetch+parse {wall:.1f} s (fetch {fetch_s:.1f} s), "
                  f"{rows[-1][4]:.2f} CPU ms/request, core use {cpu / wall:.2f}, "
                  f"load {load0:.1f}-{rows[-1][6]:.1f}", flush=True)
    print("\n| run | requests | fetch+parse s | fetch s | pages/s | CPU ms/request | cores busy | load |\n"
          "|---|---|---|---|---|---|---|---|")
    for mode, i, n, wall, cpu, l0, l1, fetch_s, busy in rows:
        print(f"| {mode} {i + 1} | {n} | {wall:.1f} | {fetch_s:.1f} | {n / wall:.0f} | {cpu:.2f} | {busy:.2f} | "
              f"{l0:.1f}-{l1:.1f} |")

    def mean(mode: str, k: int) -> float:
        vals = [r[k] for r in rows if r[0] == mode]
        return sum(vals) / len(vals)

    print(f"\nRESULT in_process cpu_ms_{on}={mean(on, 4):.2f} cpu_ms_{off}={mean(off, 4):.2f} "
          f"cpu_ratio={mean(on, 4) / mean(off, 4):.2f} wall_ratio={mean(on, 3) / mean(off, 3):.2f} "
          f"fetch_s_ratio={mean(on, 7) / mean(off, 7):.2f}")


if __name__ == "__main__":
    main()
