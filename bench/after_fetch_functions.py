"""Update and reprioritise replayed on a saved round (``after_fetch_bench.replay``, an embedded Dask cluster
as a round has), with the wall and thread CPU of each of their driver-side functions, min and median
over the reps, and the thread each ran in.

Why: on a shared box the steps' walls swing by seconds; a function's thread CPU (and its min wall) says
which parts sit on the driver's critical path and what a change took off it.

    python bench/round_timeline.py --hosts 1000 --pages 20000 --save-fetched /tmp/fetched20k
    python bench/after_fetch_functions.py /tmp/fetched20k [--reps 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import after_fetch_bench as afb  # noqa: E402

from crawl import crawldb, index, prior, schedule  # noqa: E402
from crawl import update as up  # noqa: E402
from crawl.store import Store  # noqa: E402

TIMES: dict[str, list[tuple[float, float, str]]] = defaultdict(list)


def _wrap(owner: Any, name: str, label: str) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*a: Any, **k: Any) -> Any:
        w0, t0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            TIMES[label].append((time.perf_counter() - w0, time.thread_time() - t0,
                                 threading.current_thread().name[:16]))

    setattr(owner, name, timed)


def instrument() -> None:
    for n in ("_read_with_part", "read_pages", "_health_and_prepare", "prepare", "page_fetches", "_near_duplicates",
              "_prepare_links", "_sitemap_entries", "_new_urls", "_merge_shards", "_write_digests", "_write_robots"):
        _wrap(up, n, f"update.{n}")
    for n in ("index_rows", "write_index", "write_links"):
        _wrap(index, n, f"index.{n}")
    for n in ("url_tokens", "fit", "predict", "for_round"):
        _wrap(prior, n, f"prior.{n}")
    _wrap(schedule, "reprioritise", "schedule.reprioritise")
    _wrap(schedule, "_importance", "schedule._importance")
    _wrap(crawldb, "write", "crawldb.write")
    _wrap(Store, "write_tables", "Store.write_tables")
    gather = up._start_link_parts

    def started(*a: Any, **k: Any) -> Any:  # update's wait for its link parts
        wait = gather(*a, **k)

        def timed() -> Any:
            w0, t0 = time.perf_counter(), time.thread_time()
            try:
                return wait()
            finally:
                TIMES["wait for link parts"].append((time.perf_counter() - w0, time.thread_time() - t0, "MainThread"))
        return timed

    up._start_link_parts = started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("saved", type=Path)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    from driverproc import as_crawl_run_driver

    from crawl.cluster import dask_client
    from crawl.config import load_config

    as_crawl_run_driver()
    instrument()
    over = json.loads((args.saved / "config.json").read_text())
    cfg = load_config(overrides={**{k: v for k, v in over.items() if v is not None}, "dask_workers": args.workers,
                                 "dask_address": None}, use_env=False)
    steps: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    with dask_client(cfg) as client:
        client.run(lambda: __import__("crawl.update"))
        for rep in range(args.reps):
            for k, v in afb.replay(args.saved, 0, client).items():
                steps[k].append(v)
            print(f"rep {rep + 1} done", flush=True)
    print("| step | wall min | wall median | main-thread CPU min |\n|---|---|---|---|")
    for k, v in steps.items():
        print(f"| {k} | {min(x[0] for x in v):.3f} | {statistics.median(x[0] for x in v):.3f} | "
              f"{min(x[2] for x in v):.3f} |")
    print("| function (thread) | calls a rep | wall min | wall median | thread CPU min |\n|---|---|---|---|---|")
    for k, v in TIMES.items():
        per = max(1, len(v) // args.reps)
        reps = [v[i * per:(i + 1) * per] for i in range(args.reps)]
        walls = [sum(x[0] for x in r) for r in reps if r]
        cpus = [sum(x[1] for x in r) for r in reps if r]
        print(f"| {k} ({v[0][2]}) | {per} | {min(walls):.3f} | {statistics.median(walls):.3f} | {min(cpus):.3f} |")


if __name__ == "__main__":
    main()
