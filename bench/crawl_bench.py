"""End-to-end crawl throughput on the simulated web, as ratios of a same-run ceiling.

In one run, over the same URLs of a simulated web with ≥ 500 hosts (politeness delay 0):
- ceiling A: a bare aiohttp loop (64 connections) that only downloads;
- ceiling B: the same loop plus selectolax link extraction (the issue's "plain aiohttp + selectolax");
- ceiling B + outputs (``same_outputs_loop``): ceiling B that also stores what our round stores per
  page -- WARC request + response records (bench/bare_warc.py), the text file, the links file resolved
  with the engine's ``resolve_many``, a page index with the text's digest and SimHash from the engine's
  ``fingerprints_many`` -- with no orchestration: how fast a bare loop goes at the cost the outputs fix;
- ours, fetch only: ``crawl.fetch.fetch_partition`` over the URLs as one fetch list (robots.txt,
  per-host queues, one request in flight per host, WARC writing);
- ours, end to end: one full round (inject, generate, fetch+parse on the embedded Dask cluster,
  update with dedup, index, reprioritise, publish), timed from generate to publish, with the Dask
  workers' user+system CPU per page next to the bare loop's (ceiling B, this process);
- fixed cost: on a synthetic crawl of ``--known`` URLs (1 M) with nothing due, one round from inject
  to publish on the same running cluster (``fixed_round_s``).
Absolute numbers on a shared 2-core box are noise; the ratios are the figures to compare. The RESULT
line's ``vs_ceiling`` is ours end to end / ceiling B (issue 11's target); ``same_outputs_vs_ceiling`` is
ceiling B + outputs / ceiling B, and ``vs_same_outputs`` ours end to end / ceiling B + outputs.

    python bench/crawl_bench.py [--hosts 500] [--pages 3000]
    python bench/crawl_bench.py --fixed-only        # only fixed_round_s
    python bench/crawl_bench.py --fetch-only        # only ceiling A and the fetch-only pass (bench/fetch_only_parts.py
                                                    # splits what separates them)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from selectolax.lexbor import LexborHTMLParser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.config import CrawlConfig, load_config  # noqa: E402
from crawl.fetch import fetch_partition  # noqa: E402
from crawl.fingerprint import fingerprints_many  # noqa: E402
from crawl.fingerprint import warm_up as fingerprint_warm_up  # noqa: E402
from crawl.records import FETCHLIST_SCHEMA  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.simweb.model import SimParams, build  # noqa: E402
from crawl.simweb.truth import truth_table  # noqa: E402
from crawl.store import parquet_options  # noqa: E402
from crawl.url import host_of, resolve_many, url_hash  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_warc import RecordWriter, get_and_store  # noqa: E402
from timeline import Sampler, StepClock, step_table  # noqa: E402


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


async def same_outputs_loop(port: int, urls: list[str], out_dir: Path, concurrency: int = 64,
                            batch: int = 500) -> float:
    """Pages/s of ceiling B's loop that also stores what our round stores per page, with none of its
    orchestration (no politeness, robots.txt, dedup state, Dask): the answers as WARC request + response
    records (a writer thread, bench/bare_warc.py); per ``batch`` pages, the body text with its URL as a
    zstd Parquet text file, the ``a[href]`` links resolved against the page URL
    (:func:`crawl.url.resolve_many`, the engine's) as a (from_url, to_url) Parquet links file, and the
    text's digest and SimHash (:func:`crawl.fingerprint.fingerprints_many`) in the page index (url,
    status, length, digest, SimHash), whose WARC offsets are known once the writer is done, so the
    index is written last. Parquet options are the engine's (:func:`crawl.store.parquet_options`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    queue = list(urls)
    page_url: list[str] = []
    page_text: list[str] = []
    link_from: list[str] = []
    link_href: list[str] = []
    index: dict[str, list[Any]] = {"url": [], "http_status": [], "content_length": [], "text_digest": [],
                                   "simhash": []}
    writers: dict[str, pq.ParquetWriter] = {}

    def write(name: str, table: pa.Table) -> None:
        if name not in writers:
            writers[name] = pq.ParquetWriter(out_dir / f"{name}.parquet", table.schema, **parquet_options(table))
        writers[name].write_table(table)

    def flush() -> None:
        write("text", pa.table({"url": page_url, "text": page_text}))
        to = resolve_many(link_href, link_from)
        links = pa.table({"from_url": pa.array(link_from, pa.string()), "to_url": to}).filter(pc.is_valid(to))
        write("links", links)
        sims, digests = fingerprints_many(page_text)
        index["url"] += page_url
        index["text_digest"] += digests
        index["simhash"].append(sims)
        for col in (page_url, page_text, link_from, link_href):
            col.clear()

    async def worker(session: aiohttp.ClientSession, warc: RecordWriter) -> None:
        while queue:
            url = queue.pop()
            status, body = await get_and_store(session, port, url, warc)
            tree = LexborHTMLParser(body)
            hrefs = [n.attributes.get("href") for n in tree.css("a[href]")]
            page_url.append(url)
            page_text.append(tree.body.text(separator=" ") if tree.body else "")
            link_href.extend(hrefs)
            link_from.extend([url] * len(hrefs))
            index["http_status"].append(status)
            index["content_length"].append(len(body))
            if len(page_url) >= batch:
                flush()

    conn = aiohttp.TCPConnector(limit=concurrency)
    t0 = time.perf_counter()
    try:
        with RecordWriter(out_dir / "pages.warc.gz") as warc:
            async with aiohttp.ClientSession(connector=conn) as session:
                await asyncio.gather(*(worker(session, warc) for _ in range(concurrency)))
            if page_url:
                flush()
        index_t = pa.table({**{k: v for k, v in index.items() if k != "simhash"},
                            "simhash": np.concatenate(index["simhash"]),
                            "warc_record_offset": pa.array(warc.offsets, pa.int64())})
        write("index", index_t)
    finally:
        for w in writers.values():
            w.close()
    return len(urls) / (time.perf_counter() - t0)


def bench_fetchlist(urls: list[str], depth: int = 1) -> pa.Table:
    """A fetch list of ``urls`` as generate writes one (host and politeness key from the URL model;
    no previous capture), for the benchmarks that call the fetcher directly."""
    hosts = [host_of(u) for u in urls]
    n = len(urls)
    cols = {"url": urls, "url_hash": pa.array([url_hash(u) for u in urls], pa.uint64()), "host": hosts,
            "depth": pa.array([depth] * n, pa.int32()), "priority": [1.0] * n, "pkey": hosts}
    return pa.Table.from_arrays([pa.array(cols[f.name]).cast(f.type) if f.name in cols else pa.nulls(n, f.type)
                                 for f in FETCHLIST_SCHEMA], schema=FETCHLIST_SCHEMA)


def bench_config(work: Path, port: int, pages: int, **overrides: Any) -> CrawlConfig:
    """The config of a delay-0 bench round over ``pages`` URLs of the simulated web served on ``port``
    (one definition for the bench scripts that crawl it; ``overrides`` win)."""
    return load_config(overrides={
        "root": str(work / "root"), "crawl_id": "bench", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
        "politeness_delay_s": 0.0, "max_pages": pages, "partitions": 4, "round_duration_s": 3600.0,
        "max_pages_per_host_per_round": 100_000, "coverage_share": 1.0, **overrides,
    }, use_env=False)


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


def synthetic_state(cfg: Any, n: int, hosts: int, now: datetime) -> list[str]:
    """Publish round 1 of a crawl of ``n`` known URLs on ``hosts`` hosts, all fetched an hour ago and due
    in 30 days: CrawlDb shards, seen-sets and Bloom filters as update writes them. Returns a few URLs of
    it (known, so injecting them queues nothing). A stand-in until bench/scale_bench.py's builder lands."""
    from crawl import crawldb, seen
    from crawl.store import Store

    store = Store(cfg.root, cfg.crawl_id)
    rng = np.random.default_rng(7)
    host_of = rng.integers(0, hosts, n)
    host_names = np.array([f"h{i:05d}.sim.test" for i in range(hosts)], dtype=object)
    urls = [f"http://{host_names[h]}/p/{i}" for i, h in enumerate(host_of)]
    hashes = np.array([url_hash(u) for u in urls], np.uint64)
    ts = lambda dt: pa.array(np.full(n, int(dt.timestamp() * 1000)), pa.int64()).cast(pa.timestamp("ms", "UTC"))  # noqa: E731
    last = now - timedelta(hours=1)
    table = crawldb.conform(pa.table({
        "url": urls, "url_hash": pa.array(hashes), "host": pa.array(host_names[host_of], pa.string()),
        "pkey": pa.array(host_names[host_of], pa.string()), "depth": pa.array(rng.integers(0, 8, n, dtype=np.int32)),
        "discovered_round": pa.array(np.ones(n, np.int32)), "source": pa.array(["link"] * n, pa.string()),
        "status": pa.array(["fetched"] * n, pa.string()), "http_status": pa.array(np.full(n, 200, np.int32)),
        "fetch_time": ts(last), "last_success_time": ts(last), "first_fetch_time": ts(last),
        "fetch_count": pa.array(np.ones(n, np.int32)), "check_count": pa.array(np.zeros(n, np.int32)),
        "change_count": pa.array(np.zeros(n, np.int32)), "retry_count": pa.array(np.zeros(n, np.int32)),
        "next_fetch_time": ts(now + timedelta(days=30)), "priority": pa.array(rng.random(n)),
        "payload_digest": pa.array([f"sha1:{h:016x}" for h in hashes.tolist()], pa.string()),
        "simhash": pa.array(rng.integers(-2**62, 2**62, n)), "inlinks": pa.array(rng.integers(0, 20, n, dtype=np.int32)),
        "importance": pa.array(rng.random(n) / n), "change_rate": pa.array(rng.random(n) / 10),
        "round": pa.array(np.ones(n, np.int32)), "unchanged_time_s": pa.array(np.zeros(n)),
        "changed_time_s": pa.array(np.zeros(n)), "fetch_interval_s": pa.array(np.full(n, 30 * 86400.0)),
    }))
    crawldb.write(store, 1, cfg.url_shards, table)
    for s, part in enumerate(seen.split_by_shard(hashes, cfg.url_shards)):
        srt = seen.sorted_unique(part)
        seen.write_seen(store.url(store.seen_file(1, s, "parquet")), srt)
        bloom = seen.BloomFilter.create(max(cfg.bloom_expected_urls // cfg.url_shards, 2 * srt.size, 1024),
                                        cfg.bloom_fp_rate)
        bloom.add(srt)
        bloom.save(store.url(store.seen_file(1, s, "bloom")))
    store.publish(1, {"round": 1, "crawl_id": cfg.crawl_id, "synthetic": True})
    return urls[:3]


def fixed_round(work: Path, port: int, n: int, client: Any) -> tuple[float, float, dict[str, float]]:
    """(seconds of one round with nothing due on a synthetic crawl of ``n`` known URLs, inject to publish,
    seconds to build that state, seconds per step)."""
    cfg = load_config(overrides={
        "root": str(work / "fixed"), "crawl_id": "fixed", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
        "politeness_delay_s": 0.0, "partitions": 4,
    }, use_env=False)
    now = datetime.now(UTC)
    t0 = time.perf_counter()
    known = synthetic_state(cfg, n, 1000, now - timedelta(hours=1))
    built = time.perf_counter() - t0
    steps: dict[str, float] = {}

    t0 = time.perf_counter()
    rnd.inject(cfg, known, now)
    steps["inject"] = time.perf_counter() - t0
    for name, fn in (("generate", lambda: rnd.generate(cfg, now)),
                     ("fetch_parse", lambda: rnd.fetch_parse(cfg, 2, now, client=client)),
                     ("update", lambda: rnd.update(cfg, 2, now, client)),
                     ("reprioritise", lambda: rnd.reprioritise(cfg, 2, now)),
                     ("publish", lambda: rnd.publish(cfg, 2))):
        t1 = time.perf_counter()
        fn()
        steps[name] = time.perf_counter() - t1
    return sum(steps.values()), built, steps


def fetch_only(work: Path, port: int, urls: list[str], sets: list[str]) -> tuple[float, float]:
    """(pages/s, CPU ms per page of this process) of the fetch-only pass: ``fetch_partition`` over
    ``urls`` as one fetch list, in this process (robots.txt, sitemaps, per-host queues, WARC)."""
    cfg = bench_config(work, port, len(urls), **dict(kv.split("=", 1) for kv in sets))
    fl = bench_fetchlist(urls)
    t0, c0 = time.perf_counter(), time.process_time()
    out = fetch_partition(cfg, fl, root=str(work / "fetchonly"), warc_prefix="warc/fetchonly",
                          now=datetime.now(UTC))
    pages_rows = out.fetches.filter(pc.equal(out.fetches.column("subset"), "warc"))
    fetched = int(pc.sum(pc.equal(pages_rows.column("status"), "fetched")).as_py())
    ours_fetch = fetched / (time.perf_counter() - t0)  # pages fetched; robots.txt and sitemaps not counted
    fetch_cpu_ms = 1000 * (time.process_time() - c0) / max(fetched, 1)
    print(f"ours, fetch only (robots, queues, WARC):  {ours_fetch:8.1f} pages/s  ({fetched} of {len(urls)} pages fetched)")
    return ours_fetch, fetch_cpu_ms


def worker_cpu(client: Any) -> float:
    """user + system CPU seconds of every Dask worker process so far."""
    def cpu() -> float:
        import os
        t = os.times()
        return t.user + t.system

    return sum(client.run(cpu).values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--pages", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--known", type=int, default=1_000_000, help="known URLs of the fixed-cost round's crawl")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for the measured round and its cluster (repeatable), e.g. dask_workers=3")
    ap.add_argument("--fixed-only", action="store_true",
                    help="only the fixed-cost round (no ceilings, no full round): RESULT fixed_round_s=…")
    ap.add_argument("--fetch-only", action="store_true",
                    help="only ceiling A and the fetch-only pass: RESULT fetch_only_vs_ceiling=…")
    args = ap.parse_args()
    from driverproc import as_crawl_run_driver

    as_crawl_run_driver()  # this process is the round's driver: set up as `crawl run` sets up its own
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="crawl-bench-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        if args.fixed_only:
            cfg = load_config(overrides={"root": str(work / "root"), "crawl_id": "bench", "partitions": 4},
                              use_env=False)
            with dask_client(cfg) as client:
                fixed_s, built_s, steps = fixed_round(work, port, args.known, client)
            print(f"fixed cost: a round with nothing due on {args.known:,} known URLs (state built in "
                  f"{built_s:.1f} s): {fixed_s:.2f} s = " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
            print(f"RESULT fixed_round_s={fixed_s:.2f} load={load0:.1f}-{os.getloadavg()[0]:.1f}")
            return
        urls = bench_urls(args.hosts, args.seed, args.pages)
        n_hosts = len({u.split("/")[2] for u in urls})
        print(f"simulated web: {args.hosts} hosts; benchmark set: {len(urls)} HTML pages on {n_hosts} hosts")

        asyncio.run(plain_loop(port, urls, False))  # warm the server's render cache: all runs see warm pages
        ceil_fetch = asyncio.run(plain_loop(port, urls, False))
        print(f"ceiling A, bare aiohttp fetch:            {ceil_fetch:8.1f} pages/s")
        if args.fetch_only:
            ours_fetch, fetch_cpu_ms = fetch_only(work, port, urls, args.set)
            print(f"RESULT fetch_only_vs_ceiling={ours_fetch / ceil_fetch:.2f} fetch_only_pages_s={ours_fetch:.0f} "
                  f"ceiling_a_pages_s={ceil_fetch:.0f} fetch_cpu_ms_per_page={fetch_cpu_ms:.3f} "
                  f"load={load0:.1f}-{os.getloadavg()[0]:.1f}")
            return
        c0 = time.process_time()
        ceil_extract = asyncio.run(plain_loop(port, urls, True))
        bare_cpu_ms = 1000 * (time.process_time() - c0) / len(urls)
        print(f"ceiling B, aiohttp + selectolax extract:  {ceil_extract:8.1f} pages/s")
        fingerprint_warm_up()  # numba's kernels load before the timed loop, as the Dask workers' preload does
        c0 = time.process_time()
        same_outputs = asyncio.run(same_outputs_loop(port, urls, work / "same-outputs"))
        same_cpu_ms = 1000 * (time.process_time() - c0) / len(urls)
        shutil.rmtree(work / "same-outputs", ignore_errors=True)
        print(f"ceiling B + the round's outputs:          {same_outputs:8.1f} pages/s  "
              f"({same_outputs / ceil_extract:.2f} of ceiling B)")

        ours_fetch, fetch_cpu_ms = fetch_only(work, port, urls, args.set)
        cfg = bench_config(work, port, len(urls), **dict(kv.split("=", 1) for kv in args.set))

        with dask_client(cfg) as client:
            rnd.inject(cfg, urls)
            wpids = client.run(os.getpid)
            sampler = Sampler({**{f"w{i}": wpids[a] for i, a in enumerate(sorted(wpids))},
                               "driver": os.getpid(), "simweb": proc.pid})
            clock = StepClock()
            sampler.start()
            cpu0 = worker_cpu(client)
            t0 = time.perf_counter()
            summary = rnd.run_round(cfg, None, client=client, progress=clock)
            e2e_s = time.perf_counter() - t0
            round_cpu_ms = 1000 * (worker_cpu(client) - cpu0) / max(summary["fetch_parse"]["fetched"], 1)
            sampler.stop()
            print("the round's steps (s) and the cores each process used (sampled every 0.25 s; "
                  "driver = this process with the Dask scheduler; others = every other process):")
            idle = step_table(sampler, clock.steps)["round"]["idle_share"]
            fixed_s, built_s, steps = fixed_round(work, port, args.known, client)
        n = summary["fetch_parse"]["fetched"]
        ours_e2e = n / e2e_s
        fp_rate = summary["fetch_parse"]["pages_per_s"]
        print(f"ours, end to end round ({n} pages):        {ours_e2e:8.1f} pages/s  "
              f"(fetch+parse phase {fp_rate} pages/s)")
        print(f"ratios: fetch-only/ceiling A = {ours_fetch / ceil_fetch:.2f}; "
              f"end-to-end/ceiling B = {ours_e2e / ceil_extract:.2f}; "
              f"fetch+parse phase/ceiling B = {fp_rate / ceil_extract:.2f}; "
              f"ceiling B + outputs/ceiling B = {same_outputs / ceil_extract:.2f}; "
              f"end-to-end/ceiling B + outputs = {ours_e2e / same_outputs:.2f}")
        print(f"CPU per page: bare aiohttp + selectolax loop {bare_cpu_ms:.2f} ms; the same + outputs "
              f"{same_cpu_ms:.2f} ms; ours fetch only (this process) "
              f"{fetch_cpu_ms:.2f} ms; ours round, Dask workers' user+sys {round_cpu_ms:.2f} ms")
        print(f"fixed cost: a round with nothing due on {args.known:,} known URLs (state built in {built_s:.1f} s): "
              f"{fixed_s:.2f} s = " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
        print(f"idle share of the machine's cores during the round: {idle:.2f}")
        print(f"RESULT e2e_pages_s={ours_e2e:.0f} vs_ceiling={ours_e2e / ceil_extract:.2f} "
              f"fetch_only_vs_ceiling={ours_fetch / ceil_fetch:.2f} fixed_round_s={fixed_s:.2f} "
              f"cpu_ms_per_page={round_cpu_ms:.2f} bare_cpu_ms_per_page={bare_cpu_ms:.2f} "
              f"load={load0:.1f}-{os.getloadavg()[0]:.1f} same_outputs_pages_s={same_outputs:.0f} "
              f"same_outputs_vs_ceiling={same_outputs / ceil_extract:.2f} vs_same_outputs={ours_e2e / same_outputs:.2f} "
              f"same_outputs_cpu_ms_per_page={same_cpu_ms:.2f}")
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
