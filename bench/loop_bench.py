"""uvloop against asyncio's default event loop for one fetch task, same run, alternating.

``crawl.fetch.fetch_partition`` over the crawl_bench set (HTML pages spread over many hosts of the
simulated web, delay 0) with each loop ``--reps`` times, alternating; prints pages/s and this
process's CPU per page for each, then ``RESULT uvloop_vs_asyncio=<pages/s ratio> cpu_ratio=...``.

    python bench/loop_bench.py [--hosts 200] [--pages 2000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_bench import bench_fetchlist, bench_urls  # noqa: E402

import crawl.fetch as F  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.simweb.launch import served  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    uv = F.event_loop_factory()
    with served(args.hosts, 1, "loop-bench-") as (work, port):
        urls = bench_urls(args.hosts, 1, args.pages)
        cfg = load_config(overrides={"root": str(work / "root"), "crawl_id": "loop",
                                     "resolve": [f"*.sim.test=127.0.0.1:{port}"], "politeness_delay_s": 0.0},
                          use_env=False)
        fl = bench_fetchlist(urls)
        res: dict[str, list[tuple[float, float]]] = {"asyncio": [], "uvloop": []}
        F.event_loop_factory = lambda: None  # warm the server's render cache
        F.fetch_partition(cfg, fl, root=str(work / "root"), warc_prefix="warc/warm", now=datetime.now(UTC))
        for i in range(args.reps):
            for name, factory in (("asyncio", None), ("uvloop", uv)) if i % 2 == 0 else \
                    (("uvloop", uv), ("asyncio", None)):
                F.event_loop_factory = lambda factory=factory: factory
                t0, c0 = time.perf_counter(), time.process_time()
                F.fetch_partition(cfg, fl, root=str(work / "root"), warc_prefix=f"warc/{name}{i}",
                                  now=datetime.now(UTC))
                res[name].append((len(urls) / (time.perf_counter() - t0), 1000 * (time.process_time() - c0) / len(urls)))
        for name, rows in res.items():
            print(f"{name:8s} pages/s {', '.join(f'{r[0]:.0f}' for r in rows)}; CPU ms/page "
                  f"{', '.join(f'{r[1]:.2f}' for r in rows)}")
        rate = statistics.median(r[0] for r in res["uvloop"]) / statistics.median(r[0] for r in res["asyncio"])
        cpu = statistics.median(r[1] for r in res["uvloop"]) / statistics.median(r[1] for r in res["asyncio"])
        print(f"RESULT uvloop_vs_asyncio={rate:.2f} cpu_ratio={cpu:.2f} load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
