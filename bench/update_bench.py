"""Update benchmark: merge 1 M discovered links into a 10 M-URL CrawlDb (issue 3 target: < 30 s).

Builds a synthetic published CrawlDb (version 1: N URLs over many hosts, with its seen-set and Bloom
filters) in a temporary crawl root, then a round-2 link file of L links (half to known URLs, half
new, with duplicates), and times ``crawl.update.update`` — canonicalisation, trap filters, Bloom +
seen-set dedup, merge and the write of CrawlDb version 2 — plus ``reprioritise``. Prints the times,
peak RSS, and as the same-run baseline the bare set-difference of the link hashes against the
CrawlDb hashes with NumPy (sort + binary search), the least any dedup must do.

    python bench/update_bench.py                 # 10 M x 1 M
    python bench/update_bench.py --urls 1000000 --links 100000
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from crawl import crawldb, schedule, seen
from crawl import update as upd
from crawl.config import load_config
from crawl.records import LINK_SCHEMA
from crawl.store import Store
from crawl.url import url_hashes


def _urls(ids: np.ndarray, hosts: int) -> pa.Array:
    h = ids % hosts
    return pa.array([f"http://h{a}.example.com/p/{b}" for a, b in zip(h.tolist(), ids.tolist(), strict=True)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=10_000_000)
    ap.add_argument("--links", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=50_000)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="update-bench-")
    try:
        cfg = load_config(overrides={"root": root, "crawl_id": "bench", "url_shards": 8,
                                     "bloom_expected_urls": 2 * args.urls}, use_env=False)
        store = Store(root, cfg.crawl_id)
        t0 = time.perf_counter()
        ids = np.arange(args.urls, dtype=np.int64)
        urls = _urls(ids, args.hosts)
        hashes = url_hashes(urls)
        hosts = pa.array([f"h{a}.example.com" for a in (ids % args.hosts).tolist()])
        n = args.urls
        db = crawldb.conform(pa.table({
            "url": urls, "url_hash": pa.array(hashes, pa.uint64()), "host": hosts, "pkey": hosts,
            "depth": pa.array(np.full(n, 2, np.int32)), "status": pa.array(np.full(n, "unfetched").astype(object)),
            "fetch_count": pa.array(np.zeros(n, np.int32)), "priority": pa.array(np.random.default_rng(0).random(n)),
            "round": pa.array(np.ones(n, np.int32)),
        }))
        crawldb.write(store, 1, cfg.url_shards, db)
        for s, part in enumerate(seen.split_by_shard(hashes, cfg.url_shards)):
            part = seen.sorted_unique(part)
            seen.write_seen(store.url(store.seen_file(1, s, "parquet")), part)
            seen.bloom_from_seen(part, cfg.bloom_fp_rate, cfg.bloom_expected_urls // cfg.url_shards).save(
                store.url(store.seen_file(1, s, "bloom")))
        store.write_json(store.state("CURRENT.json"), {"round": 1})
        del db, urls, hosts
        print(f"setup: {n:,} URL CrawlDb written in {time.perf_counter() - t0:.1f} s")

        rng = np.random.default_rng(1)
        known = rng.integers(0, n, args.links // 2)
        new = rng.integers(n, 2 * n, args.links - args.links // 2)
        link_ids = np.concatenate([known, new])
        src = _urls(rng.integers(0, n, args.links), args.hosts)
        links = pa.table({"from_url": src, "to_url": _urls(link_ids, args.hosts),
                          "kind": pa.array(["a"] * args.links), "nofollow": pa.array(np.zeros(args.links, bool))})
        store.write_table(store.part_file(2, "rawlinks", 0), links.cast(LINK_SCHEMA))

        # same-run baseline: the bare hash set-difference (no canonicalisation, no I/O)
        t0 = time.perf_counter()
        to_h = url_hashes(links.column("to_url"))
        db_h = crawldb.read(store, 1, cfg.url_shards, ["url_hash"]).column("url_hash").to_numpy()
        base_new = seen.sorted_unique(to_h[~seen.confirm(to_h, seen.sorted_unique(db_h))]).size
        t_base = time.perf_counter() - t0

        now = datetime.now(UTC)
        t0 = time.perf_counter()
        stats = upd.update(cfg, 2, now)
        t_update = time.perf_counter() - t0
        t0 = time.perf_counter()
        merged = store.read_tables([store.round_dir(2, "merged", f"shard={s:02d}.parquet")
                                    for s in range(cfg.url_shards)], crawldb.CRAWLDB_SCHEMA)
        scheduled, _ = schedule.reprioritise(cfg, store, 2, merged, now)
        crawldb.write(store, 2, cfg.url_shards, scheduled)
        t_sched = time.perf_counter() - t0
        rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
        assert stats["new_urls"] == base_new, (stats["new_urls"], base_new)
        print(f"update: {args.links:,} links x {n:,} URLs -> {stats['new_urls']:,} new in {t_update:.1f} s "
              f"(Bloom maybes {stats['bloom_maybe']:,}, false positives {stats['bloom_false_positives']:,})")
        print(f"reprioritise + write CrawlDb v2: {t_sched:.1f} s; peak RSS {rss_gb:.1f} GiB")
        print(f"baseline (sorted-hash set difference, no I/O): {t_base:.1f} s; update/baseline = {t_update / t_base:.1f}x")
        print(f"RESULT update_s={t_update:.1f} reprioritise_s={t_sched:.1f} peak_rss_gib={rss_gb:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
