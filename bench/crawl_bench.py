"""End-to-end crawl throughput on the simulated web, as ratios of a same-run ceiling.

In one run, over the same URLs of a simulated web with ≥ 500 hosts (politeness delay 0):
- ceiling A: a bare aiohttp loop (64 connections) that only downloads;
- ceiling B: the same loop plus selectolax link extraction (the issue's "plain aiohttp + selectolax");
- ours, fetch only: ``crawl.fetch.fetch_partition`` over the URLs as one fetch list (robots.txt,
  per-host queues, one request in flight per host, WARC writing);
- ours, end to end: one full round (inject, generate, fetch+parse on the embedded Dask cluster,
  update with dedup, index, reprioritise, publish), timed from generate to publish.
Absolute numbers on a shared 2-core box are noise; the ratios are the figures to compare.

    python bench/crawl_bench.py [--hosts 500] [--pages 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pyarrow as pa
import pyarrow.compute as pc
from selectolax.lexbor import LexborHTMLParser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.fetch import fetch_partition  # noqa: E402
from crawl.records import FETCHLIST_SCHEMA  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.model import SimParams, build  # noqa: E402
from crawl.simweb.truth import truth_table  # noqa: E402
from crawl.url import url_hash  # noqa: E402


async def plain_loop(port: int, urls: list[str], extract: bool, concurrency: int = 64) -> float:
    """Pages/s of a bare aiohttp loop over ``urls`` (Host header routing), optionally extracting links."""
    queue = list(urls)
    links = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal links
        while queue:
            url = queue.pop()
            host, _, path = url[len("http://"):].partition("/")
            async with session.get(f"http://127.0.0.1:{port}/{path}", headers={"Host": host}) as r:
                body = await r.read()
            if extract:
                tree = LexborHTMLParser(body)
                links += sum(1 for _ in tree.css("a[href]"))
                tree.body.text(separator=" ") if tree.body else ""

    conn = aiohttp.TCPConnector(limit=concurrency)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return len(urls) / (time.perf_counter() - t0)


def bench_urls(hosts: int, seed: int, pages: int) -> list[str]:
    """Up to ``pages`` robots-allowed HTML pages of the simulated web (hosts without a Crawl-delay),
    spread over every host round-robin, as a broad crawl's fetch list is."""
    truth = truth_table(build(SimParams(seed=seed, hosts=hosts)))
    ok = pc.and_(pc.and_(truth.column("robots_allowed"), pc.equal(truth.column("content_type"), "text/html")),
                 pc.is_in(truth.column("kind"), pa.array(["news", "blog", "shop", "docs", "archive", "forum"])))
    pick = truth.filter(ok)
    pick = pick.filter(pc.is_null(pick.column("crawl_delay")))
    by_host: dict[str, list[str]] = {}
    for u, h in zip(pick.column("url").to_pylist(), pick.column("host").to_pylist(), strict=True):
        by_host.setdefault(h, []).append(u)
    urls: list[str] = []
    for i in range(max(len(v) for v in by_host.values())):
        urls += [v[i] for v in by_host.values() if i < len(v)]
    return urls[:pages]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--pages", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="crawl-bench-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        urls = bench_urls(args.hosts, args.seed, args.pages)
        n_hosts = len({u.split("/")[2] for u in urls})
        print(f"simulated web: {args.hosts} hosts; benchmark set: {len(urls)} HTML pages on {n_hosts} hosts")

        asyncio.run(plain_loop(port, urls, False))  # warm the server's render cache: all runs see warm pages
        ceil_fetch = asyncio.run(plain_loop(port, urls, False))
        ceil_extract = asyncio.run(plain_loop(port, urls, True))
        print(f"ceiling A, bare aiohttp fetch:            {ceil_fetch:8.1f} pages/s")
        print(f"ceiling B, aiohttp + selectolax extract:  {ceil_extract:8.1f} pages/s")

        cfg = load_config(overrides={
            "root": str(work / "root"), "crawl_id": "bench", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
            "politeness_delay_s": 0.0, "max_pages": len(urls), "partitions": 4, "round_duration_s": 120.0,
            "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0,
        }, use_env=False)
        fl = pa.table({
            "url": urls, "url_hash": pa.array([url_hash(u) for u in urls], pa.uint64()),
            "host": [u.split("/")[2] for u in urls], "depth": pa.array([1] * len(urls), pa.int32()),
            "priority": [1.0] * len(urls),
        })
        fl = pa.Table.from_arrays([fl.column(f.name).cast(f.type) if f.name in fl.column_names
                                   else pa.nulls(fl.num_rows, f.type) for f in FETCHLIST_SCHEMA],
                                  schema=FETCHLIST_SCHEMA)
        t0 = time.perf_counter()
        out = fetch_partition(cfg, fl, root=str(work / "fetchonly"), warc_prefix="warc/fetchonly",
                              now=datetime.now(UTC))
        fetched = int(pc.sum(pc.equal(out.fetches.column("status"), "fetched")).as_py())
        ours_fetch = len(urls) / (time.perf_counter() - t0)
        print(f"ours, fetch only (robots, queues, WARC):  {ours_fetch:8.1f} pages/s  ({fetched} fetched rows)")

        with dask_client(cfg) as client:
            rnd.inject(cfg, urls)
            t0 = time.perf_counter()
            summary = rnd.run_round(cfg, None, client=client)
            e2e_s = time.perf_counter() - t0
        n = summary["fetch_parse"]["fetched"]
        ours_e2e = n / e2e_s
        fp_rate = summary["fetch_parse"]["pages_per_s"]
        print(f"ours, end to end round ({n} pages):        {ours_e2e:8.1f} pages/s  "
              f"(fetch+parse phase {fp_rate} pages/s)")
        print(f"ratios: fetch-only/ceiling A = {ours_fetch / ceil_fetch:.2f}; "
              f"end-to-end/ceiling B = {ours_e2e / ceil_extract:.2f}; "
              f"fetch+parse phase/ceiling B = {fp_rate / ceil_extract:.2f}")
        print(f"RESULT e2e_pages_s={ours_e2e:.0f} vs_ceiling={ours_e2e / ceil_extract:.2f} "
              f"fetch_only_vs_ceiling={ours_fetch / ceil_fetch:.2f}")
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
