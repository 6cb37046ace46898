"""Where the Dask workers' CPU goes in a real round: per step, and inside fetch+parse by kind of work.

Runs one round like ``bench/crawl_bench.py`` (HTML pages over many hosts of a simulated web, delay 0,
4 partitions, the embedded Dask cluster), reads the workers' user+system CPU at every step boundary
(so the round's CPU per page splits into fetch+parse, update, ...), and samples both worker processes
with ``py-spy record --format raw`` during the round; the stacks are bucketed by the first crawl
function that explains them (fetch loop, parse, Parquet writes, digests, Dask's own threads, ...).

    python bench/worker_cpu_profile.py [--hosts 300] [--pages 5000] [--rate 200] [--no-spy] [--dask-defaults]
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_bench import bench_urls, worker_cpu  # noqa: E402

from crawl import cluster  # noqa: E402
from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.simweb.launch import served  # noqa: E402

# (bucket, substring of a frame) -- the first frame from the top of the stack (innermost) matching
# any rule wins, rules tried in this order per frame, so a Parquet write inside parse counts as a write
RULES: list[tuple[str, str]] = [
    ("parquet write", "write_table"),
    ("parquet read", "read_table"),
    ("texts/images files (write_part_texts)", "write_part_texts"),
    ("digests load", "load_known_digests"),
    ("robots cache load", "load_robots_cache"),
    ("checkpoint", "checkpoint.py"),
    ("WARC write", "warc.py"),
    ("update merge_shard", "merge_shard"),
    ("parse (parse_bodies)", "parse_bodies"),
    ("held bodies / WARC read", "held_bodies"),
    ("fetch loop (fetch_partition)", "fetch_partition"),
    ("fetch/parse task other", "crawl/tasks.py"),
    ("dask worker internals", "distributed/"),
    ("tornado/asyncio", "asyncio/"),
]


def bucket(stack: str) -> str:
    frames = stack.split(";")
    for frame in reversed(frames):  # innermost first
        for name, needle in RULES[:7]:
            if needle in frame:
                return name
    for name, needle in RULES[7:]:
        if needle in stack:
            return name
    return "other: " + (frames[-1][:60] if frames else "?")


def read_raw(path: Path) -> collections.Counter[str]:
    c: collections.Counter[str] = collections.Counter()
    if not path.exists():
        return c
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if n.isdigit():
            c[stack] += int(n)
    return c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--no-spy", action="store_true", help="only the CPU per step, no sampling")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--dask-defaults", action="store_true",
                    help="the A/B arm: distributed's default worker settings (no crawl.cluster.EMBEDDED_WORKER_CONFIG)")
    args = ap.parse_args()
    if args.dask_defaults:
        cluster.EMBEDDED_WORKER_CONFIG.clear()
    spy = str(Path(sys.executable).parent / "py-spy")
    with served(args.hosts, args.seed, "crawl-wprof-") as (work, port):
        urls = bench_urls(args.hosts, args.seed, args.pages)
        cfg = load_config(overrides={
            "root": str(work / "root"), "crawl_id": "bench", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
            "politeness_delay_s": 0.0, "max_pages": len(urls), "partitions": 4, "round_duration_s": 3600.0,
            "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0,
        }, use_env=False)
        with dask_client(cfg) as client:
            rnd.inject(cfg, urls)
            wpids = client.run(os.getpid)
            cpu_at: list[tuple[str, float, float]] = []

            class Clock:
                def __call__(self, msg: str) -> None:
                    pass

                def start(self, step: str, total: int | None = None) -> None:
                    cpu_at.append((step, worker_cpu(client), time.perf_counter()))

                def advance(self, n: int = 1) -> None:
                    pass

                def finish(self) -> None:
                    cpu_at.append(("/" + cpu_at[-1][0], worker_cpu(client), time.perf_counter()))

            spies: list[tuple[subprocess.Popen, Path]] = []
            tmp = Path(tempfile.mkdtemp(prefix="wprof-"))
            if not args.no_spy:
                for pid in wpids.values():
                    out = tmp / f"w{pid}.txt"
                    spies.append((subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", str(args.rate),
                                                    "--format", "raw", "-o", str(out), "--nonblocking"],
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out))
                time.sleep(1.0)
            rnd.run_round(cfg, None, client=client, progress=Clock())
            for p, _ in spies:
                p.send_signal(signal.SIGINT)
            for p, _ in spies:
                p.wait(30)
        pages = max(fetched_pages(cfg), 1)
        print(f"# worker CPU of one round: {args.hosts} hosts, {len(urls)} URLs, {pages} page requests, "
              f"4 partitions, 2 workers, {'distributed defaults' if args.dask_defaults else 'EMBEDDED_WORKER_CONFIG'}, "
              f"load {os.getloadavg()[0]:.1f}\n")
        print("| step | wall s | workers' CPU s | CPU ms per page |\n|---|---|---|---|")
        for (name, c0, t0), (_, c1, t1) in zip(cpu_at[::2], cpu_at[1::2], strict=False):
            print(f"| {name} | {t1 - t0:.2f} | {c1 - c0:.2f} | {1000 * (c1 - c0) / pages:.3f} |")
        total = cpu_at[-1][1] - cpu_at[0][1]
        print(f"| **round** | {cpu_at[-1][2] - cpu_at[0][2]:.2f} | {total:.2f} | {1000 * total / pages:.3f} |\n")
        if spies:
            stacks: collections.Counter[str] = collections.Counter()
            for _, out in spies:
                stacks.update(read_raw(out))
            n = sum(stacks.values()) or 1
            by: collections.Counter[str] = collections.Counter()
            for s, k in stacks.items():
                by[bucket(s)] += k
            print(f"py-spy samples of both workers at {args.rate}/s (active threads only): {n}\n")
            print("| where | samples | share | ~ms per page |\n|---|---|---|---|")
            for name, k in by.most_common(args.top):
                print(f"| {name} | {k} | {100 * k / n:.1f} % | {1000 * k / args.rate / pages:.3f} |")
            leaf: collections.Counter[str] = collections.Counter()
            for s, k in stacks.items():
                leaf[s.split(";")[-1]] += k
            print("\n| innermost frame | share |\n|---|---|")
            for name, k in leaf.most_common(args.top):
                print(f"| `{name[:100]}` | {100 * k / n:.1f} % |")
            print(f"\nraw stacks in {tmp}")


def fetched_pages(cfg: Any) -> int:
    """Page requests of round 1 (pages, robots.txt, sitemaps), from its fetch_parse.json summary."""
    import json

    from crawl.store import Store

    store = Store(cfg.root, cfg.crawl_id)
    return int(json.loads(Path(store.abs(store.round_dir(1, "fetch_parse.json"))).read_text()).get("fetched", 0))


if __name__ == "__main__":
    main()
