"""CPU of writing (and reading) each kind of Parquet file a round leaves, under other writer options.

Why: the session-7 question "which writer options pay for which file". One round of a simulated web
runs as in ``bench/worker_cpu_profile.py`` (HTML pages over many hosts, delay 0, 4 partitions, the
embedded Dask cluster); then every Parquet file of one kind the round left (a partition's fetched,
pages, raw links, text files; a shard's CrawlDb delta, ...) is read back and written again in this
process with each option set (``pq.write_table`` into memory, as ``Store.write_table`` does), best
of ``--reps`` (``time.process_time``), and read back whole (``pq.read_table``, as the next step
reads them). Prints µs per page of the round (all files of the kind) and the bytes; every
variant's table read back must equal the table written.

    python bench/parquet_opts_bench.py [--hosts 300] [--pages 5000] [--reps 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from crawl_bench import bench_config, bench_urls  # noqa: E402

from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.simweb.launch import served  # noqa: E402
from crawl.store import parquet_options  # noqa: E402

VARIANTS: dict[str, dict] = {
    "zstd (042f2a6)": {"compression": "zstd"},
    "parquet_options(output)": {"scratch": False},
    "parquet_options(scratch)": {"scratch": True},
    "zstd, no stats": {"compression": "zstd", "write_statistics": False},
    "zstd, no dict on URLs": {"compression": "zstd", "use_dictionary": "NODICT"},
    "zstd, no dict, no stats": {"compression": "zstd", "use_dictionary": "NODICT", "write_statistics": False},
    "lz4": {"compression": "lz4"},
    "snappy": {"compression": "snappy"},
    "none": {"compression": "none"},
    "none, no dict, no stats": {"compression": "none", "use_dictionary": "NODICT", "write_statistics": False},
}
# columns that are (nearly) unique per row: a dictionary holds every value once more
HIGH_CARD = {"url", "url_hash", "payload_digest", "warc_record_offset", "warc_record_length", "from_url",
             "to_url", "text", "title", "text_digest", "simhash", "canonical_url", "fetch_time", "etag",
             "last_modified", "content_length"}


def write(table: pa.Table, opts: dict) -> bytes:
    o = dict(opts)
    if "scratch" in o:
        o = parquet_options(table, o["scratch"])
    if o.get("use_dictionary") == "NODICT":
        o["use_dictionary"] = [c for c in table.column_names if c not in HIGH_CARD]
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **o)
    return sink.getvalue().to_pybytes()


def kind_of(rel: str) -> str:
    """A file's kind: its path without the crawl, round, partition and shard parts."""
    parts = [p.removesuffix(".parquet") for p in rel.split("/")
             if "=" not in p and not p.isdigit() and p not in ("state", "rounds")]
    return "/".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated kinds to bench (default: all)")
    args = ap.parse_args()
    with served(args.hosts, 1, "pqopts-") as (work, port):
        urls = bench_urls(args.hosts, 1, args.pages)
        cfg = bench_config(work, port, len(urls))
        with dask_client(cfg) as client:
            rnd.inject(cfg, urls)
            rnd.run_round(cfg, None, client=client)
        root = work / "root"
        files: dict[str, list[Path]] = {}
        for p in sorted(root.rglob("*.parquet")):
            files.setdefault(kind_of(str(p.relative_to(root))), []).append(p)
        n = len(urls)
        print(f"# {n} pages; " + ", ".join(f"{k}: {len(v)} files, {sum(pq.read_metadata(f).num_rows for f in v)} rows"
                                           for k, v in files.items()))
        print("| file kind | variant | write µs per page | read µs per page | KB |\n|---|---|---|---|---|")
        only = set(filter(None, args.only.split(",")))
        for kind, paths in files.items():
            if only and kind not in only:
                continue
            tables = [pq.read_table(p) for p in paths]
            for name, opts in VARIANTS.items():
                size = 0
                for table in tables:
                    data = write(table, opts)
                    back = pq.read_table(pa.BufferReader(data))
                    assert back.equals(table), (kind, name)
                    size += len(data)
                best = read = float("inf")
                datas = [pa.BufferReader(write(table, opts)) for table in tables]
                for _ in range(args.reps):
                    c = time.process_time()
                    for table in tables:
                        write(table, opts)
                    best = min(best, time.process_time() - c)
                    c = time.process_time()
                    for d in datas:
                        d.seek(0)
                        pq.read_table(d)
                    read = min(read, time.process_time() - c)
                print(f"| {kind} | {name} | {1e6 * best / n:.2f} | {1e6 * read / n:.2f} | {size / 1024:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
