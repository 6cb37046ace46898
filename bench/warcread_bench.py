"""Reading a partition's WARC back: warcio (crawl.warc.iter_records) against FastWARC, same files, same run.

Fetches ``--pages`` pages of the crawl_bench set into WARC files with ``crawl.fetch.fetch_partition``,
then reads every file back ``--reps`` times with each reader, alternating, checks both give the same
records (type, URL, status, headers, payload, offset, length) and prints records/s and
``RESULT fastwarc_vs_warcio=<speed ratio> same=<True|False>``.

    python bench/warcread_bench.py [--hosts 200] [--pages 2000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_bench import bench_fetchlist, bench_urls  # noqa: E402

from crawl import warc  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.fetch import fetch_partition  # noqa: E402
from crawl.simweb.launch import served  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with served(args.hosts, 1, "warcread-bench-") as (work, port):
        urls = bench_urls(args.hosts, 1, args.pages)
        cfg = load_config(overrides={"root": str(work / "root"), "crawl_id": "w",
                                     "resolve": [f"*.sim.test=127.0.0.1:{port}"], "politeness_delay_s": 0.0},
                          use_env=False)
        fl = bench_fetchlist(urls)
        out = fetch_partition(cfg, fl, root=cfg.root, warc_prefix="warc/w", now=datetime.now(UTC))
        files = sorted(set(pc.drop_null(out.fetches.column("warc_filename")).to_pylist()))
        readers = {"warcio": warc.iter_records_warcio, "fastwarc": warc.iter_records_fastwarc}
        got = {name: [r for f in files for r in fn(cfg.root, f)] for name, fn in readers.items()}
        same = got["warcio"] == got["fastwarc"]
        n = len(got["warcio"])
        times: dict[str, list[float]] = {k: [] for k in readers}
        for i in range(args.reps):
            for name in (list(readers) if i % 2 == 0 else list(readers)[::-1]):
                t0 = time.process_time()
                for f in files:
                    for _ in readers[name](cfg.root, f):
                        pass
                times[name].append(time.process_time() - t0)
        for name, ts in times.items():
            print(f"{name:8s} {n} records: CPU s {', '.join(f'{t:.3f}' for t in ts)} = "
                  f"{n / statistics.median(ts):,.0f} records/s")
        ratio = statistics.median(times["warcio"]) / statistics.median(times["fastwarc"])
        # what parse's read-back costs per page it parses (parse from memory would save this)
        pages = sum(r.warc_type == "response" for r in got["fastwarc"])
        per_page = {k: 1000 * statistics.median(ts) / max(pages, 1) for k, ts in times.items()}
        print(f"RESULT fastwarc_vs_warcio={ratio:.2f} same={same} records={n} responses={pages} "
              f"fastwarc_ms_per_page={per_page['fastwarc']:.3f} warcio_ms_per_page={per_page['warcio']:.3f} "
              f"load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
