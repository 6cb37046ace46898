"""Where a whole round's time goes: each step of one round under cProfile, top costs per step.

One round over the same benchmark set as ``bench/crawl_bench.py`` (HTML pages spread over many hosts
of a simulated web, politeness delay 0), each step run in this process so the profiler sees it:
inject, generate, every partition's fetch task then parse task (``crawl.tasks``; what a Dask worker
runs, called directly), update, reprioritise, publish. Prints per step its wall time and a table of
the functions with the most own time (tottime) and, for fetch and parse, the most cumulative time,
in Markdown for ``bench/RESULTS.md``.

    python bench/profile_round.py [--hosts 200] [--pages 3000] [--top 12]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawl import round as rnd  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.simweb.launch import served  # noqa: E402
from crawl.store import Store  # noqa: E402
from crawl.tasks import fetch_task, parse_task  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crawl_bench import bench_urls  # noqa: E402


def _short(func: tuple[str, int, str]) -> str:
    path, line, name = func
    if path == "~":
        return name
    parts = Path(path).parts
    tail = "/".join(parts[parts.index("crawl"):]) if "crawl" in parts else "/".join(parts[-2:])
    return f"{tail}:{line}({name})"


def table(prof: cProfile.Profile, top: int, key: str) -> str:
    """Markdown rows of the ``top`` functions by ``key`` ('tottime' or 'cumtime')."""
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = [(func, cc, nc, tt, ct) for func, (cc, nc, tt, ct, _) in st.stats.items()]  # type: ignore[attr-defined]
    rows.sort(key=lambda r: r[3] if key == "tottime" else r[4], reverse=True)
    total = st.total_tt  # type: ignore[attr-defined]
    out = ["| function | calls | own s | cum s | own % |", "|---|---|---|---|---|"]
    for func, _cc, nc, tt, ct in rows[:top]:
        out.append(f"| `{_short(func)}` | {nc} | {tt:.3f} | {ct:.3f} | {100 * tt / total:.1f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--pages", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    with served(args.hosts, args.seed, "crawl-profile-") as (work, port):
        urls = bench_urls(args.hosts, args.seed, args.pages)
        cfg = load_config(overrides={
            "root": str(work / "root"), "crawl_id": "prof", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
            "politeness_delay_s": 0.0, "max_pages": len(urls), "partitions": args.partitions,
            "round_duration_s": 120.0, "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0,
        }, use_env=False)
        now = datetime.now(UTC)
        store = Store(cfg.root, cfg.crawl_id)
        profiles: dict[str, cProfile.Profile] = {}
        walls: dict[str, float] = {}
        cpus: dict[str, float] = {}

        def step(name: str, fn: Callable[[], Any]) -> Any:
            prof = profiles.setdefault(name, cProfile.Profile())
            t0, c0 = time.perf_counter(), time.process_time()
            prof.enable()
            try:
                return fn()
            finally:
                prof.disable()
                walls[name] = walls.get(name, 0.0) + time.perf_counter() - t0
                cpus[name] = cpus.get(name, 0.0) + time.process_time() - c0

        step("inject", lambda: rnd.inject(cfg, urls, now))
        gen = step("generate", lambda: rnd.generate(cfg, now))
        n = gen["round"]
        parts = sorted(int(p.rsplit("part=", 1)[1].split(".")[0]) for p in gen["partitions"])
        results = []
        for k in parts:
            fs = step("fetch", lambda k=k: fetch_task(cfg, n, k, now))
            ps = step("parse", lambda k=k, fs=fs: parse_task(cfg, n, k, fs))
            results.append({"part": k, "fetch": fs, "parse": ps})
        fetched = sum(int(r["fetch"].get("requests", 0) or 0) for r in results)
        store.write_json(store.round_dir(n, "fetch_parse.json"), {"round": n, "fetched": fetched,
                                                                  "per_partition": results})
        step("update", lambda: rnd.update(cfg, n, now))
        step("reprioritise", lambda: rnd.reprioritise(cfg, n, now))
        step("publish", lambda: rnd.publish(cfg, n))
        total = sum(walls.values())
        print(f"# profile of one round: {args.hosts} hosts, {len(urls)} URLs, {fetched} page requests, "
              f"{len(parts)} partitions, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n")
        print(f"load average {os.getloadavg()[0]:.1f}; CPU = this process's user + system time (under cProfile)\n")
        print("| step | wall s | share | ms per fetched page | CPU ms per fetched page |\n|---|---|---|---|---|")
        for name, w in walls.items():
            print(f"| {name} | {w:.2f} | {100 * w / total:.0f} % | {1000 * w / max(fetched, 1):.2f} | "
                  f"{1000 * cpus[name] / max(fetched, 1):.2f} |")
        print(f"| **round** | {total:.2f} | | {1000 * total / max(fetched, 1):.2f} | "
              f"{1000 * sum(cpus.values()) / max(fetched, 1):.2f} |\n")
        for name in ("fetch", "parse", "update", "reprioritise"):
            print(f"## {name}: own time\n\n{table(profiles[name], args.top, 'tottime')}\n")
            if name in ("fetch", "parse"):
                print(f"## {name}: cumulative\n\n{table(profiles[name], args.top, 'cumtime')}\n")


if __name__ == "__main__":
    main()
