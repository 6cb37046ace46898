"""Where the Dask workers' CPU goes in a real round: per step, and inside fetch+parse by kind of work.

Runs one round like ``bench/crawl_bench.py`` (HTML pages over many hosts of a simulated web, delay 0,
4 partitions, the embedded Dask cluster), reads the workers' user+system CPU at every step boundary
(so the round's CPU per page splits into fetch+parse, update, ...) and the driver's (this process, set up as
``crawl run`` sets up its own: bench/driverproc.py), and samples both worker processes
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

from crawl_bench import bench_config, bench_urls, worker_cpu  # noqa: E402
from driverproc import as_crawl_run_driver  # noqa: E402

from crawl import cluster  # noqa: E402
from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.simweb.launch import served  # noqa: E402

# (bucket, substrings of a frame): a stack goes to the first bucket (in this order) any of whose
# substrings occurs in any of its frames, so a Parquet write inside parse counts as a write and a
# checkpoint's Parquet write as a checkpoint. The wait rule looks at the innermost frame only.
WAIT_LEAVES: tuple[str, ...] = (
    "select (selectors.py", "wait (threading.py", "get (queue.py", "_wait_for_tstate_lock",
    "_WarcWriter._loop (crawl/fetch/warcwriter.py:86)",  # its q.get(): SimpleQueue.get is C code
    "ParseAhead._run (crawl/parse_ahead.py:66)",  # its q.get()
)
RULES: list[tuple[str, tuple[str, ...]]] = [
    ("numba compile (first call of the fingerprint kernel)", ("numba/core/", "llvmlite/")),
    ("imports (pandas on pyarrow's first Parquet read, ...)", ("<frozen importlib", "pandas/")),
    ("checkpoints (crawl/checkpoint.py)", ("crawl/checkpoint.py",)),
    ("Parquet writes", ("write_table", "write_tables")),
    ("text/images files, not the write (write_part_texts)", ("write_part_texts",)),
    ("Parquet reads", ("read_table",)),
    ("digests / robots cache load", ("load_known_digests", "load_robots_cache")),
    ("WARC read-back (held_bodies)", ("held_bodies", "warc_bodies")),
    ("WARC writer thread", ("crawl/fetch/warcwriter.py", "crawl/warc.py")),
    ("parse: text column collapse (collapse_many)", ("collapse_many",)),
    ("parse: fingerprints (crawl/fingerprint*.py)", ("crawl/fingerprint",)),
    ("parse: links (resolve, crawl/url/)", ("_resolve_pages", "crawl/url/")),
    ("parse: HTML (Lexbor, walk, text, tables)", ("crawl/parse.py", "crawl/parse_ahead.py", "crawl/media.py")),
    ("update merge_shard", ("merge_shard",)),
    ("fetch loop: robots", ("crawl/robots.py",)),
    ("fetch loop: sitemaps", ("crawl/sitemaps.py",)),
    ("fetch loop: rest (aiohttp, our loop)", ("fetch_partition", "crawl/fetch/", "aiohttp/", "yarl/", "multidict/")),
    ("fetch/parse task, rest (crawl/tasks.py)", ("crawl/tasks.py",)),
    ("Dask's own threads (distributed, tornado, asyncio)", ("distributed/", "tornado/", "asyncio/", "msgpack/")),
]
WAIT = "waiting (seen as active: queue/selector/lock waits)"


def bucket(stack: str) -> str:
    frames = stack.split(";")
    leaf = frames[-1] if frames else ""
    if any(w in leaf for w in WAIT_LEAVES):
        return WAIT
    for name, needles in RULES:
        for needle in needles:
            if needle in stack:
                return name
    return "other: " + (leaf[:60] or "?")


def gc_timer_install() -> None:
    """In a worker: add a ``gc.callbacks`` hook summing the CPU time (``time.thread_time``, the
    collecting thread's) and count of the cyclic collector's runs. py-spy without ``--native`` puts a
    collection on whatever Python frame allocated, so GC is measured here instead."""
    import gc
    import time as t

    st = {"s": 0.0, "n": 0, "t0": 0.0, "s0": 0.0, "s1": 0.0, "s2": 0.0, "n0": 0, "n1": 0, "n2": 0}

    def cb(phase: str, info: dict) -> None:
        if phase == "start":
            st["t0"] = t.thread_time()
        else:
            d = t.thread_time() - st["t0"]
            g = info.get("generation", 0)
            st["s"] += d
            st["n"] += 1
            st[f"s{g}"] += d
            st[f"n{g}"] += 1

    gc.callbacks.append(cb)
    gc._wprof_gc = st  # type: ignore[attr-defined]


def gc_timer_read() -> dict[str, float]:
    import gc

    return dict(getattr(gc, "_wprof_gc", {}))


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
    as_crawl_run_driver()  # this process is the round's driver: set up as `crawl run` sets up its own
    if args.dask_defaults:
        cluster.EMBEDDED_WORKER_CONFIG.clear()
    spy = str(Path(sys.executable).parent / "py-spy")
    with served(args.hosts, args.seed, "crawl-wprof-") as (work, port):
        urls = bench_urls(args.hosts, args.seed, args.pages)
        cfg = bench_config(work, port, len(urls))
        with dask_client(cfg) as client:
            rnd.inject(cfg, urls)
            wpids = client.run(os.getpid)
            pools = sorted({arrow_pool(), *client.run(arrow_pool).values()})
            client.run(gc_timer_install)
            cpu_at: list[tuple[str, float, float]] = []

            class Clock:
                def __call__(self, msg: str) -> None:
                    pass

                def start(self, step: str, total: int | None = None) -> None:
                    cpu_at.append((step, worker_cpu(client), time.perf_counter(), time.process_time()))

                def advance(self, n: int = 1) -> None:
                    pass

                def finish(self) -> None:
                    cpu_at.append(("/" + cpu_at[-1][0], worker_cpu(client), time.perf_counter(), time.process_time()))

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
            gcs: collections.Counter[str] = collections.Counter()
            for v in client.run(gc_timer_read).values():
                gcs.update({k: x for k, x in v.items() if k != "t0"})
            for p, _ in spies:
                p.send_signal(signal.SIGINT)
            for p, _ in spies:
                p.wait(30)
        pages = max(fetched_pages(cfg), 1)
        print(f"# worker CPU of one round: {args.hosts} hosts, {len(urls)} URLs, {pages} page requests, "
              f"4 partitions, 2 workers, {'distributed defaults' if args.dask_defaults else 'EMBEDDED_WORKER_CONFIG'}, "
              f"Arrow memory pool(s) {'/'.join(pools)}, load {os.getloadavg()[0]:.1f}\n")
        print("| step | wall s | workers' CPU s | CPU ms per page | driver's CPU s |\n|---|---|---|---|---|")
        for (name, c0, t0, d0), (_, c1, t1, d1) in zip(cpu_at[::2], cpu_at[1::2], strict=False):
            print(f"| {name} | {t1 - t0:.2f} | {c1 - c0:.2f} | {1000 * (c1 - c0) / pages:.3f} | {d1 - d0:.2f} |")
        total = cpu_at[-1][1] - cpu_at[0][1]
        print(f"| **round** | {cpu_at[-1][2] - cpu_at[0][2]:.2f} | {total:.2f} | {1000 * total / pages:.3f} "
              f"| {cpu_at[-1][3] - cpu_at[0][3]:.2f} |\n")
        print(f"GC (gc.callbacks, the collecting thread's CPU; spread over the rows above): {gcs['n']:.0f} "
              f"collections, {gcs['s']:.2f} s, {1000 * gcs['s'] / pages:.3f} ms per page; by generation "
              + ", ".join(f"{g}: {gcs[f'n{g}']:.0f} x, {1000 * gcs[f's{g}'] / pages:.3f} ms/page" for g in range(3))
              + "\n")
        if spies:
            stacks: collections.Counter[str] = collections.Counter()
            for _, out in spies:
                stacks.update(read_raw(out))
            n = sum(stacks.values()) or 1
            by: collections.Counter[str] = collections.Counter()
            for s, k in stacks.items():
                by[bucket(s)] += k
            waiting = by.pop(WAIT, 0)
            active = (n - waiting) or 1
            print(f"py-spy samples of both workers at {args.rate}/s: {n}, of them {waiting} in a queue/selector/lock "
                  f"wait that py-spy's idle filter let through (left out below); ms per page = the round's workers' "
                  f"CPU per page ({1000 * total / pages:.3f}) x the bucket's share of the other {active}\n")
            print("| where | samples | share | ~CPU ms per page |\n|---|---|---|---|")
            for name, k in by.most_common(args.top):
                print(f"| {name} | {k} | {100 * k / active:.1f} % | {1000 * total * k / active / pages:.3f} |")
            leaf: collections.Counter[str] = collections.Counter()
            for s, k in stacks.items():
                leaf[s.split(";")[-1]] += k
            print("\n| innermost frame | share |\n|---|---|")
            for name, k in leaf.most_common(args.top):
                print(f"| `{name[:100]}` | {100 * k / n:.1f} % |")
            print(f"\nraw stacks in {tmp}")


def arrow_pool() -> str:
    """This process's Arrow default memory pool (``ARROW_DEFAULT_MEMORY_POOL`` picks it at the first use)."""
    import pyarrow as pa

    return pa.default_memory_pool().backend_name


def fetched_pages(cfg: Any) -> int:
    """Page requests of round 1 (pages, robots.txt, sitemaps), from its fetch_parse.json summary."""
    import json

    from crawl.store import Store

    store = Store(cfg.root, cfg.crawl_id)
    return int(json.loads(Path(store.abs(store.round_dir(1, "fetch_parse.json"))).read_text()).get("fetched", 0))


if __name__ == "__main__":
    main()
