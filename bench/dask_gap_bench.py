"""The fetch+parse task's CPU inside the embedded Dask cluster's workers vs the same calls in plain processes.

Why: the workers spent ~2.0-2.3 ms CPU per page in fetch+parse while the same ``fetch_parse_task``
calls in one plain process cost ~1.72 (bench/RESULTS.md, "Worker CPU outside fetch and parse"); this
measures that gap on one round's partitions, same run, arms alternated: a simulated web, one
injected + generated round (4 partitions), copied afresh for every rep, then either

- ``plain``: two child processes (as many as workers), each running ``fetch_parse_task`` on two
  partitions one after the other; CPU = each child's own user+sys over its tasks (first importing every module a
  warm worker holds, so neither arm pays a first round's lazy imports);
- ``dask`` (``crawl.cluster.EMBEDDED_WORKER_CONFIG``) and ``dask-trim`` (the same with distributed's
  default ``MALLOC_TRIM_THRESHOLD_=65536`` back in the workers' environment): the four tasks submitted to the embedded cluster (``crawl.cluster.dask_client``, started once)
  as ``crawl.round._run_parts`` does; CPU = both workers' user+sys from submit to the last result.

    python bench/dask_gap_bench.py [--hosts 300] [--pages 5000] [--reps 3] [--arms plain,dask,dask-trim]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_bench import bench_urls  # noqa: E402

from crawl import cluster  # noqa: E402
from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.config import CrawlConfig, load_config  # noqa: E402
from crawl.simweb.launch import served  # noqa: E402

ENV_KEY = "distributed.nanny.pre-spawn-environ"
NOW = "2026-12-01T00:00:00+00:00"

CHILD = r"""
import json, os, sys, time
from datetime import datetime
from crawl.config import load_config
import importlib, pathlib
for m in json.loads(pathlib.Path(sys.argv[4]).read_text()):  # what a warm worker has imported
    if m.split(".")[0] in ("crawl", "pyarrow", "duckdb", "selectolax", "aiohttp", "fastwarc", "numpy", "yarl",
                           "multidict", "tldextract", "isal", "zstandard", "uvloop", "pandas"):
        try:
            importlib.import_module(m)
        except Exception:
            pass
from crawl.tasks import fetch_parse_task
over = json.loads(sys.argv[1]); parts = json.loads(sys.argv[2])
cfg = load_config(overrides=over, use_env=False)
t0 = os.times(); w0 = time.perf_counter()
res = [fetch_parse_task(cfg, 1, p, datetime.fromisoformat(sys.argv[3])) for p in parts]
t1 = os.times()
print(json.dumps({"cpu": t1.user + t1.system - t0.user - t0.system, "sys": t1.system - t0.system, "wall": time.perf_counter() - w0,
                  "requests": sum(int(r["fetch"].get("requests", 0)) for r in res)}))
"""


def overrides(root: Path, port: int, pages: int) -> dict[str, Any]:
    return {"root": str(root), "crawl_id": "bench", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
            "politeness_delay_s": 0.0, "max_pages": pages, "partitions": 4, "round_duration_s": 3600.0,
            "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0}


def worker_times(client: Any) -> tuple[float, float]:
    """(user+sys, sys) CPU seconds of every Dask worker process so far."""
    def cpu() -> tuple[float, float]:
        t = os.times()
        return t.user + t.system, t.system

    v = client.run(cpu).values()
    return sum(x[0] for x in v), sum(x[1] for x in v)


def run_plain(over: dict[str, Any], workers: int, modules: Path) -> tuple[float, float, int, float]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    groups = [[p for p in range(4) if p % workers == w] for w in range(workers)]
    w0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(over), json.dumps(g), NOW, str(modules)],
                              stdout=subprocess.PIPE, env=env, text=True) for g in groups]
    outs = [json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for p in procs]
    return (sum(o["cpu"] for o in outs), sum(o["sys"] for o in outs), sum(o["requests"] for o in outs),
            time.perf_counter() - w0)


def run_dask(client: Any, cfg: CrawlConfig) -> tuple[float, float, int, float]:
    from datetime import datetime

    from crawl.tasks import fetch_parse_task

    now = datetime.fromisoformat(NOW)
    (c0, s0), w0 = worker_times(client), time.perf_counter()
    futs = [client.submit(fetch_parse_task, cfg, 1, k, now, None, key=f"gap-{cfg.root[-12:]}-{k}", pure=False)
            for k in range(4)]
    res = client.gather(futs)
    c1, s1 = worker_times(client)
    return c1 - c0, s1 - s0, sum(int(r["fetch"].get("requests", 0)) for r in res), time.perf_counter() - w0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arms", default="plain,dask,dask-trim")
    args = ap.parse_args()
    arms = args.arms.split(",")
    with served(args.hosts, args.seed, "crawl-gap-") as (work, port):
        urls = bench_urls(args.hosts, args.seed, args.pages)
        base = work / "base"
        cfg = load_config(overrides=overrides(base, port, len(urls)), use_env=False)
        rnd.inject(cfg, urls)
        rnd.generate(cfg)
        res: dict[str, list[float]] = {a: [] for a in arms}
        modules: list[str] = []
        with contextlib.ExitStack() as stack:
            clients = {}
            for arm in arms:
                if arm.startswith("dask"):
                    env = dict(cluster.EMBEDDED_WORKER_CONFIG[ENV_KEY])
                    if arm == "dask-trim":  # distributed's default: MALLOC_TRIM_THRESHOLD_=65536
                        env["MALLOC_TRIM_THRESHOLD_"] = 65536
                    saved = cluster.EMBEDDED_WORKER_CONFIG[ENV_KEY]
                    cluster.EMBEDDED_WORKER_CONFIG[ENV_KEY] = env
                    try:
                        clients[arm] = stack.enter_context(dask_client(cfg))
                    finally:
                        cluster.EMBEDDED_WORKER_CONFIG[ENV_KEY] = saved
                    # a first round's one-time costs (lazy imports, first parse) outside every arm
                    warm = work / f"warm-{arm}"
                    shutil.copytree(base, warm)
                    run_dask(clients[arm], load_config(overrides=overrides(warm, port, len(urls)), use_env=False))
                    modules = sorted(set(modules) | set(clients[arm].run(lambda: list(sys.modules)).popitem()[1]))
            (work / "modules.json").write_text(json.dumps(modules))
            for rep in range(args.reps):
                for arm in (arms if rep % 2 == 0 else arms[::-1]):
                    root = work / f"r{rep}-{arm}"
                    shutil.copytree(base, root)
                    over = overrides(root, port, len(urls))
                    if arm == "plain":
                        cpu, sy, n, wall = run_plain(over, 2, work / "modules.json")
                    else:
                        cpu, sy, n, wall = run_dask(clients[arm], load_config(overrides=over, use_env=False))
                    res[arm].append(1000 * cpu / max(n, 1))
                    print(f"rep {rep} {arm}: {n} requests, {cpu:.2f} CPU s, {wall:.1f} s wall, "
                          f"{1000 * cpu / max(n, 1):.3f} ms/page (sys {1000 * sy / max(n, 1):.3f}), load {os.getloadavg()[0]:.1f}", flush=True)
                    shutil.rmtree(root, ignore_errors=True)
        for a in arms:
            v = res[a]
            print(f"{a}: " + ", ".join(f"{x:.3f}" for x in v) + f"  mean {sum(v) / len(v):.3f} ms/page")


if __name__ == "__main__":
    main()
