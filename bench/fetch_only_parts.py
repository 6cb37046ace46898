"""What separates crawl_bench's fetch-only pass from its ceiling A, item by item, in one run.

crawl_bench's ``fetch_only_vs_ceiling`` divides the pages/s of ``crawl.fetch.fetch_partition`` over the
benchmark set (one fetch list, one process: its event loop thread and its WARC writer thread) by the
pages/s of ceiling A, a bare aiohttp loop of 64 keep-alive connections to one address that only reads
the bodies. This runs, against one warm simulated web, alternated ``--reps`` times (order reversed
every other rep):

- ``ceilA``: ceiling A exactly as crawl_bench runs it;
- ``ceilA+warc``: ceiling A that also stores what the fetch-only pass must store by format: each answer
  as a gzip-member WARC request record and response record (block and payload SHA-1, ISA-L deflate as
  ours, one file), built by a writer thread from a queue as ours is -- the bare loop doing the same
  output job, a yardstick of what the record format costs any fetcher on this box;
- ``chains``: the bare loop in our politeness shape: one connection per host (hosts by name, resolved
  to the server), one request in flight per host, ``max_concurrent_hosts`` hosts at a time, each host's
  URLs one after the other (no robots.txt, no sitemaps, no WARC, no rows);
- ``ours``: ``fetch_partition`` as crawl_bench calls it (robots.txt, sitemaps, WARC, rows);
- ``-sitemaps``: the same with ``sitemaps: false``;
- ``-sitemaps-robots``: also robots.txt from a cache (the rows of a first pass), so no robots request;
- ``-sitemaps-robots-warc``: also no WARC records (an ablation of this script only: the fetcher's
  ``_store`` is replaced by one that queues nothing; the rows lose their WARC columns).

Not run unless named in ``--variants``, the whole round's yardsticks (crawl_bench's ceiling B and
``same_outputs_loop``), to give their CPU per page side by side:

- ``ceilB``: ceiling B exactly as crawl_bench runs it (ceiling A + selectolax links and body text);
- ``ceilB+outputs``: ceiling B that also stores the round's outputs (the WARC records as ``ceilA+warc``,
  text, links and page index Parquet files, text fingerprints).

Each line gives pages/s, its ratio to the same rep's ceiling A (and ceiling B when run), and the CPU per
page of this process (all threads), of its event-loop thread, and of the simulated web's process.

    python bench/fetch_only_parts.py --hosts 1000 --pages 20000 --reps 3
    python bench/fetch_only_parts.py --variants ceilB,ceilB+outputs --reps 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.abc
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bare_warc import RecordWriter, get_and_store  # noqa: E402
from crawl_bench import bench_config, bench_fetchlist, bench_urls, plain_loop, same_outputs_loop  # noqa: E402
from timeline import cpu_s  # noqa: E402

from crawl.fetch import fetch_partition, warcwriter  # noqa: E402
from crawl.fingerprint import warm_up  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402

VARIANTS = ("ceilA", "ceilA+warc", "chains", "ours", "-sitemaps", "-sitemaps-robots", "-sitemaps-robots-warc",
            "ceilB", "ceilB+outputs")
DEFAULT_VARIANTS = VARIANTS[:7]
OURS = ("ours", "-sitemaps", "-sitemaps-robots", "-sitemaps-robots-warc")  # fetch_partition


class _ToServer(aiohttp.abc.AbstractResolver):
    """Every host name resolves to the simulated web (loopback)."""

    async def resolve(self, host: str, port: int = 0, family: int = 0) -> list[dict[str, Any]]:
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": 2, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        pass


async def chains_loop(port: int, urls: list[str], hosts_at_once: int) -> float:
    """Pages/s of a bare loop shaped like our politeness: each host's URLs in order over its own
    connection, one request in flight per host, ``hosts_at_once`` hosts at a time."""
    by_host: dict[str, list[str]] = {}
    for u in urls:
        by_host.setdefault(u.split("/")[2], []).append(u)
    chains = list(by_host.values())

    async def worker(session: aiohttp.ClientSession) -> None:
        while chains:
            for url in chains.pop(0):
                host, _, path = url[len("http://"):].partition("/")
                async with session.get(f"http://{host}:{port}/{path}") as r:
                    await r.read()

    conn = aiohttp.TCPConnector(limit=hosts_at_once, limit_per_host=1, resolver=_ToServer(), use_dns_cache=False)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(worker(session) for _ in range(hosts_at_once)))
    return len(urls) / (time.perf_counter() - t0)


async def warc_loop(port: int, urls: list[str], path: Path, concurrency: int = 64) -> float:
    """Pages/s of ceiling A's loop whose answers a writer thread stores as WARC request + response
    records, each its own gzip member (the format's cost: two SHA-1s, deflate, a write; bench/bare_warc.py)."""
    queue_ = list(urls)

    async def worker(session: aiohttp.ClientSession, writer: RecordWriter) -> None:
        while queue_:
            await get_and_store(session, port, queue_.pop(), writer)

    conn = aiohttp.TCPConnector(limit=concurrency)
    t0 = time.perf_counter()
    with RecordWriter(path) as writer:
        async with aiohttp.ClientSession(connector=conn) as session:
            await asyncio.gather(*(worker(session, writer) for _ in range(concurrency)))
    return len(urls) / (time.perf_counter() - t0)


def _no_warc(self: Any, subset: str, url: str, t: datetime, r: Any, dedup: bool = False) -> dict[str, Any]:
    return {"warc_filename": self.names[subset]}


def run_variant(name: str, work: Path, port: int, server_pid: int, urls: list[str], robots: Any) -> dict[str, Any]:
    s0, c0, l0, t0 = cpu_s(server_pid), time.process_time(), time.thread_time(), time.perf_counter()
    cfg = bench_config(work, port, len(urls), **({"sitemaps": False} if "-sitemaps" in name else {}))
    if name == "ceilA":
        asyncio.run(plain_loop(port, urls, False))
        n = len(urls)
    elif name == "ceilA+warc":
        asyncio.run(warc_loop(port, urls, work / "ceil.warc.gz"))
        (work / "ceil.warc.gz").unlink()
        n = len(urls)
    elif name == "ceilB":
        asyncio.run(plain_loop(port, urls, True))
        n = len(urls)
    elif name == "ceilB+outputs":
        asyncio.run(same_outputs_loop(port, urls, work / "same-outputs"))
        shutil.rmtree(work / "same-outputs")
        n = len(urls)
    elif name == "chains":
        asyncio.run(chains_loop(port, urls, cfg.max_concurrent_hosts))
        n = len(urls)
    else:
        store = warcwriter._WarcOutput._store
        if name.endswith("-warc"):
            warcwriter._WarcOutput._store = _no_warc  # type: ignore[method-assign]
        try:
            out = fetch_partition(cfg, bench_fetchlist(urls), root=str(work / "out"), warc_prefix="warc/parts",
                                  now=datetime.now(UTC), robots_cache=robots if "-robots" in name else None)
        finally:
            warcwriter._WarcOutput._store = store  # type: ignore[method-assign]
        shutil.rmtree(work / "out", ignore_errors=True)
        pages = out.fetches.filter(pc.equal(out.fetches.column("subset"), "warc"))
        n = int(pc.sum(pc.equal(pages.column("status"), "fetched")).as_py() or 0)
        if name == "ours":
            run_variant.robots = out.robots_rows  # type: ignore[attr-defined]
    wall = time.perf_counter() - t0
    return {"variant": name, "pages_s": n / wall, "proc_ms": 1000 * (time.process_time() - c0) / n,
            "loop_ms": 1000 * (time.thread_time() - l0) / n, "server_ms": 1000 * (cpu_s(server_pid) - s0) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--pages", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if any(v not in VARIANTS for v in variants):
        ap.error(f"variants are {VARIANTS}")
    from driverproc import as_crawl_run_driver

    as_crawl_run_driver()  # every variant in a process set up as the crawl's own (workers: no huge pages)
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="fetch-only-parts-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        urls = bench_urls(args.hosts, args.seed, args.pages)
        print(f"{len(urls)} pages on {len({u.split('/')[2] for u in urls})} hosts; warm-up", flush=True)
        asyncio.run(plain_loop(port, urls, False))  # the server's render cache, as crawl_bench warms it
        robots = None
        if any(v in OURS for v in variants):
            run_variant("ours", work, port, proc.pid, urls, None)  # robots and sitemap renders warm; robots rows
            robots = run_variant.robots  # type: ignore[attr-defined]
        if "ceilB+outputs" in variants:
            warm_up()  # the fingerprint kernels (numba) load before the first timed run, as the workers' preload does
        got: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for rep in range(args.reps):
            ceil: dict[str, float] = {}
            for v in (variants if rep % 2 == 0 else variants[::-1]):
                r = run_variant(v, work, port, proc.pid, urls, robots)
                got[v].append(r)
                if v in ("ceilA", "ceilB"):
                    ceil[v] = r["pages_s"]
                r["rep"], r["load"] = rep, os.getloadavg()[0]
                print(json.dumps({k: round(x, 3) if isinstance(x, float) else x for k, x in r.items()}), flush=True)
            for c, key in (("ceilA", "ratio"), ("ceilB", "ratio_b")):
                if c in ceil:
                    for v in variants:
                        got[v][-1][key] = got[v][-1]["pages_s"] / ceil[c]
        print(f"medians over {args.reps} reps (load {load0:.1f}-{os.getloadavg()[0]:.1f}):")
        print(f"{'variant':24s} {'pages/s':>8s} {'/ceilA':>7s} {'/ceilB':>7s} {'proc ms/p':>10s} {'loop ms/p':>10s} "
              f"{'server ms/p':>11s}")
        for v in variants:
            m = {k: statistics.median(r[k] for r in got[v]) for k in ("pages_s", "proc_ms", "loop_ms", "server_ms")}
            ratio, ratio_b = (statistics.median(r[key] for r in got[v]) if all(key in r for r in got[v]) else float("nan")
                              for key in ("ratio", "ratio_b"))
            print(f"{v:24s} {m['pages_s']:8.0f} {ratio:7.2f} {ratio_b:7.2f} {m['proc_ms']:10.3f} {m['loop_ms']:10.3f} "
                  f"{m['server_ms']:11.3f}")
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
