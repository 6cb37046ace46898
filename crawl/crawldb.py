"""The CrawlDb: one row per known canonical URL, versioned per round, sharded by URL hash.

Nutch's CrawlDb, as Parquet: round N reads version N-1 and writes version N; nothing is updated in
place. Rows carry what generate needs (status, next_fetch_time, priority, host, depth), what a
conditional GET needs (etag, last_modified) and the change history the freshness model learns from
(check/change counts, last change time).

A version is one Parquet file per URL-hash shard (``crawldb/v=N/shard=SS.parquet``, sorted by
url_hash) -- except after an incremental round (:func:`crawl.schedule.incremental_round`), when a
shard is the previous version's base file, linked as it is, plus an overlay of the rows changed
since (``crawldb/v=N/overlay/shard=SS.parquet``) that replaces those rows (:func:`write_overlay`).
Read through :func:`read`, :func:`read_shard` or :func:`source_sql`, which resolve both.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.records import TS
from crawl.store import Store

# CrawlDb status values (fetch statuses from records.py plus these)
UNFETCHED = "unfetched"
DUPLICATE = "duplicate"            # exact payload duplicate of duplicate_of
NEAR_DUPLICATE = "near_duplicate"  # SimHash within k of duplicate_of

CRAWLDB_SCHEMA = pa.schema([
    ("url", pa.string()),
    ("url_hash", pa.uint64()),
    ("host", pa.string()),
    ("pkey", pa.string()),               # politeness key (host, domain or ip)
    ("depth", pa.int32()),
    ("discovered_round", pa.int32()),
    ("source", pa.string()),             # seed | link | redirect | sitemap
    ("status", pa.string()),
    ("http_status", pa.int32()),
    ("fetch_time", TS),                  # last attempt
    ("last_success_time", TS),           # last 2xx/304
    ("first_fetch_time", TS),
    ("fetch_count", pa.int32()),         # attempts
    ("check_count", pa.int32()),         # successful re-checks that compared content (2xx/304 after the first)
    ("change_count", pa.int32()),        # re-checks that saw a real change
    ("last_change_time", TS),
    ("retry_count", pa.int32()),         # consecutive transient failures
    ("next_fetch_time", TS),
    ("priority", pa.float64()),
    ("payload_digest", pa.string()),
    ("text_digest", pa.string()),
    ("simhash", pa.int64()),
    ("etag", pa.string()),
    ("last_modified", pa.string()),
    ("duplicate_of", pa.string()),
    ("redirect_to", pa.string()),
    ("inlinks", pa.int32()),
    ("importance", pa.float64()),
    ("change_rate", pa.float64()),       # estimated changes per day
    ("sitemap_lastmod", TS),
    ("sitemap_changefreq", pa.string()),
    ("round", pa.int32()),               # round that last touched the row
    # change history for the freshness model (crawl.changerate): re-check intervals split by outcome
    ("unchanged_time_s", pa.float64()),  # sum of re-check intervals (s) that saw no real change
    ("changed_time_s", pa.float64()),    # sum of re-check intervals (s) that saw a real change
    ("fetch_interval_s", pa.float64()),  # current adaptive interval (nutch policy) / planned interval
])


def shard_of(url_hash: np.ndarray | pa.Array, shards: int) -> np.ndarray:
    h = url_hash.to_numpy(zero_copy_only=False) if isinstance(url_hash, pa.ChunkedArray | pa.Array) else url_hash
    return (np.asarray(h, dtype=np.uint64) % np.uint64(shards)).astype(np.int64)


def shard_path(store: Store, version: int, shard: int) -> str:
    return f"{store.crawldb_dir(version)}/shard={shard:02d}.parquet"


def inject_path(store: Store, round_no: int) -> str:
    """The seeds injected for round ``round_no`` (CrawlDb rows; written by inject, read by generate and update)."""
    return store.round_dir(round_no, "inject.parquet")


def read_injected(store: Store, round_no: int, columns: Sequence[str] | None = None) -> pa.Table | None:
    """The rows :func:`inject_path` holds (only ``columns`` when given: update's merges, once per
    shard, need only ``url_hash``), or None when nothing was injected for the round."""
    rel = inject_path(store, round_no)
    return store.read_table(rel, CRAWLDB_SCHEMA, columns) if store.exists(rel) else None


def overlay_path(store: Store, version: int, shard: int) -> str:
    """A shard's overlay: the rows changed since its base file was written (see :func:`write_overlay`)."""
    return f"{store.crawldb_dir(version)}/overlay/shard={shard:02d}.parquet"


def overlays(store: Store, version: int, shards: int) -> list[str]:
    """The overlay files of CrawlDb ``version`` (none after a full round)."""
    if version <= 0:
        return []
    return [r for r in (overlay_path(store, version, s) for s in range(shards)) if store.exists(r)]


def source_sql(store: Store, con: object, version: int, shards: int, shard: int | None = None) -> str:
    """A DuckDB relation (SQL text) of CrawlDb ``version``'s rows -- one shard's when ``shard`` is given:
    the base files, minus the rows an overlay replaces, plus the overlays."""
    idx = range(shards) if shard is None else [shard]
    bases = store.duckdb_paths(con, [shard_path(store, version, s) for s in idx])
    over = [r for r in (overlay_path(store, version, s) for s in idx) if store.exists(r)]
    base_src = "read_parquet([" + ", ".join(f"'{p}'" for p in bases) + "], hive_partitioning = false)"
    if not over:
        return base_src
    over_src = "read_parquet([" + ", ".join(f"'{p}'" for p in store.duckdb_paths(con, over)) + \
        "], hive_partitioning = false)"
    return (f"(SELECT * FROM {base_src} WHERE url_hash NOT IN (SELECT url_hash FROM {over_src}) "
            f"UNION ALL SELECT * FROM {over_src})")


def read(store: Store, version: int, shards: int, columns: list[str] | None = None) -> pa.Table:
    """The whole CrawlDb at ``version`` (empty before the first round)."""
    if version <= 0:
        table = CRAWLDB_SCHEMA.empty_table()
        return table.select(columns) if columns else table
    tables = []
    for s in range(shards):
        t = read_shard(store, version, s)
        tables.append(t.select(columns) if columns else t)
    return pa.concat_tables(tables)


# the columns generate selects on and copies into fetch lists (crawl.frontier.select)
GENERATE_COLUMNS = ("url", "url_hash", "host", "pkey", "depth", "priority", "etag", "last_modified",
                    "payload_digest", "fetch_count", "next_fetch_time", "status")


def read_due(store: Store, version: int, shards: int, now: datetime,
             skip_status: tuple[str, ...] = ("gone", "filtered"),
             columns: tuple[str, ...] = GENERATE_COLUMNS) -> tuple[pa.Table, np.ndarray]:
    """(rows due at ``now`` with ``columns``, URL hashes of all rows not in ``skip_status``).

    The filter and the projection run in DuckDB over the Parquet shards, so generate holds the
    round's candidates, not the whole CrawlDb (every column of every row cost seconds and a GiB at
    1 M URLs).
    """
    if version <= 0:
        return CRAWLDB_SCHEMA.empty_table().select(list(columns)), np.empty(0, np.uint64)
    from crawl import duck

    con = duck.for_store(store)
    src = source_sql(store, con, version, shards)
    skip = ", ".join(f"'{x}'" for x in skip_status)
    known = con.execute(f"SELECT url_hash FROM {src} WHERE status IS NULL OR status NOT IN ({skip})"
                        ).fetchnumpy()["url_hash"]
    due = con.sql(f"""
        SELECT {", ".join(columns)} FROM {src}
        WHERE (status IS NULL OR status NOT IN ({skip})) AND (next_fetch_time IS NULL OR next_fetch_time <= $now)
    """, params={"now": now}).to_arrow_table()  # con.sql: execute() would copy the rows once more
    con.close()
    schema = pa.schema([CRAWLDB_SCHEMA.field(c) for c in columns])
    return due.cast(schema), np.asarray(known, np.uint64)


def count(store: Store, version: int, shards: int) -> int:
    """Rows of CrawlDb ``version``, from the Parquet footers (and the overlays' hashes)."""
    if version <= 0:
        return 0
    return sum(count_shard(store, version, s) for s in range(shards))


def _footer_rows(store: Store, rel: str) -> int:
    import pyarrow.parquet as pq

    with store.fs.open(store.abs(rel), "rb") as fh:
        return pq.ParquetFile(fh).metadata.num_rows


def count_shard(store: Store, version: int, shard: int) -> int:
    """Rows of one shard of CrawlDb ``version``: its base file's footer, plus the overlay's rows the
    base does not hold (a sorted search of the overlay's hashes in the base's hash column)."""
    if version <= 0:
        return 0
    n = _footer_rows(store, shard_path(store, version, shard))
    orel = overlay_path(store, version, shard)
    if store.exists(orel):
        oh = store.read_table(orel).column("url_hash").to_numpy()
        bh = read_shard_base(store, version, shard, ["url_hash"]).column("url_hash").to_numpy()
        i = np.searchsorted(bh, oh).clip(0, max(bh.size - 1, 0))
        n += int(oh.size - (np.sum(bh[i] == oh) if bh.size else 0))
    return n


def copy_version(store: Store, src: int, dst: int, shards: int) -> None:
    """CrawlDb ``dst`` as a copy of ``src`` (a round that changed no row): base files and overlays."""
    for s in range(shards):
        store.copy(shard_path(store, src, s), shard_path(store, dst, s))
        if store.exists(overlay_path(store, src, s)):
            store.copy(overlay_path(store, src, s), overlay_path(store, dst, s))


# an overlay holding more than this share of its base's rows is folded into a new base file
COMPACT_SHARE = 0.2


def write_overlay(store: Store, version: int, shard: int, delta: pa.Table) -> str:
    """CrawlDb ``version``'s shard as ``version - 1``'s base file (linked, not decoded) plus an overlay:
    ``version - 1``'s overlay with ``delta``'s rows (sorted by url_hash) spliced in.

    A round off the rescoring cadence changes a few thousand rows of millions; rewriting every shard
    was most of its cost at 10 M URLs. Readers go through :func:`read_shard` / :func:`source_sql`.
    When the overlay outgrows :data:`COMPACT_SHARE` of the base, base and overlay are written as one
    new base file instead (so a long run of incremental rounds never lets the overlay grow unbounded)."""
    prev = version - 1
    orel = overlay_path(store, prev, shard)
    old = store.read_table(orel, CRAWLDB_SCHEMA) if store.exists(orel) else CRAWLDB_SCHEMA.empty_table()
    over = splice(old, conform(delta).sort_by("url_hash"))
    base_rows = _footer_rows(store, shard_path(store, prev, shard))
    if over.num_rows > COMPACT_SHARE * max(base_rows, 1):
        store.remove(overlay_path(store, version, shard))
        return write_shard(store, version, shard, splice(read_shard_base(store, prev, shard), over))
    store.copy(shard_path(store, prev, shard), shard_path(store, version, shard))
    store.write_table(overlay_path(store, version, shard), over)
    return shard_path(store, version, shard)


def read_shard(store: Store, version: int, shard: int) -> pa.Table:
    """One shard of CrawlDb ``version``, every column, sorted by url_hash (base file + overlay)."""
    base = read_shard_base(store, version, shard)
    orel = overlay_path(store, version, shard) if version > 0 else ""
    if orel and store.exists(orel):
        return splice(base, store.read_table(orel, CRAWLDB_SCHEMA))
    return base


def read_shard_base(store: Store, version: int, shard: int, columns: list[str] | None = None) -> pa.Table:
    """The base file of one shard of CrawlDb ``version`` (all of :data:`CRAWLDB_SCHEMA`, or ``columns``)."""
    if version <= 0:
        table = CRAWLDB_SCHEMA.empty_table()
        return table.select(columns) if columns else table
    import pyarrow.parquet as pq

    with store.fs.open(store.abs(shard_path(store, version, shard)), "rb") as fh:
        table = pq.read_table(fh, columns=columns)
    schema = pa.schema([CRAWLDB_SCHEMA.field(c) for c in columns]) if columns else CRAWLDB_SCHEMA
    return table.cast(schema) if table.schema != schema else table


SPLICE_SLICES_MAX = 50_000  # delta rows up to which splice assembles zero-copy slices instead of a take
# ... and only when the base has this many rows per delta row: a slice pair costs ~60 us of Python per
# delta row, a take ~1 us per row of the whole table (a fresh crawl's first round spliced 60 k rows into
# empty shards one slice at a time: 5.8 s of a 20 k-page round's reprioritise)
SPLICE_SLICES_BASE_PER_ROW = 64


def splice(base: pa.Table, delta: pa.Table) -> pa.Table:
    """``base`` (sorted by url_hash) with the rows of ``delta`` replacing or joining it, sorted by url_hash.

    A round changes a few thousand rows of a shard of millions: the result is assembled from
    zero-copy slices of ``base`` between the changed positions and single rows of ``delta`` (a take
    of the whole shard was 2.5 s of every 2.5 M-row shard); a large delta is put in place by one take."""
    if delta.num_rows == 0:
        return base
    delta = delta.select(base.column_names).cast(base.schema)
    hd = delta.column("url_hash").to_numpy()
    od = np.argsort(hd, kind="stable")
    if not np.array_equal(od, np.arange(hd.size)):
        delta, hd = delta.take(pa.array(od)), hd[od]
    if base.num_rows == 0:  # nothing to keep: the sorted delta is the result
        return delta.combine_chunks()
    hb = base.column("url_hash").to_numpy()
    pos = np.searchsorted(hb, hd)
    replaced = (pos < hb.size) & (hb[np.minimum(pos, hb.size - 1)] == hd)
    if hd.size > SPLICE_SLICES_MAX or hd.size * SPLICE_SLICES_BASE_PER_ROW > hb.size:
        kept = np.ones(hb.size, bool)
        kept[pos[replaced]] = False
        idx = np.concatenate([np.flatnonzero(kept), hb.size + np.arange(hd.size)])
        keys = np.concatenate([hb[kept], hd])
        return pa.concat_tables([base, delta]).take(pa.array(idx[np.argsort(keys, kind="stable")]))
    pieces, start = [], 0
    for i in range(hd.size):  # delta row i goes before base row pos[i] (and replaces it when equal)
        p = int(pos[i])
        if p > start:
            pieces.append(base.slice(start, p - start))
        pieces.append(delta.slice(i, 1))
        start = max(start, p + 1 if replaced[i] else p)
    if start < hb.size:
        pieces.append(base.slice(start))
    # one contiguous chunk per column: compute kernels and writers over thousands of chunks were
    # slower than this copy (crawldb.write on a spliced 1 M-row table: 12.5 s vs ~3 s)
    return pa.concat_tables(pieces).combine_chunks()


# columns worth a Parquet dictionary (few distinct values); URLs, digests and the like are not, and
# trying a dictionary on them first was ~40 % of writing a shard
DICTIONARY_COLUMNS = ["host", "pkey", "source", "status", "sitemap_changefreq"]
# every round rewrites every shard: Snappy wrote a 2.5 M-row shard in 4.0 s and read it in 2.6 s
# where zstd took 6.3 s and 5.6 s (files 1.4x larger)
SHARD_COMPRESSION = "snappy"


def write_shard(store: Store, version: int, shard: int, table: pa.Table) -> str:
    """Write one shard of CrawlDb ``version`` (``table`` already sorted by url_hash)."""
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=SHARD_COMPRESSION, use_dictionary=DICTIONARY_COLUMNS)
    path = shard_path(store, version, shard)
    store.write_bytes(path, sink.getvalue().to_pybytes())
    store.remove(overlay_path(store, version, shard))  # a rerun that compacts leaves no stale overlay
    return path


def write(store: Store, version: int, shards: int, table: pa.Table) -> list[str]:
    """Write ``table`` as ``shards`` files sorted by url_hash (deterministic bytes for equal input)."""
    table = conform(table)
    sh = shard_of(table.column("url_hash"), shards)

    def one(s: int) -> str:
        part = table.filter(pa.array(sh == s))
        part = part.take(pc.sort_indices(part, sort_keys=[("url_hash", "ascending")]))
        return write_shard(store, version, s, part)

    # the shards in threads: sorting, Parquet encoding and each file's fsync run without the GIL
    with ThreadPoolExecutor(max_workers=max(1, min(4, shards))) as pool:
        return list(pool.map(one, range(shards)))


def conform(table: pa.Table) -> pa.Table:
    """Reorder/cast to CRAWLDB_SCHEMA, filling missing columns with nulls."""
    cols = []
    for f in CRAWLDB_SCHEMA:
        if f.name in table.column_names:
            cols.append(table.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=CRAWLDB_SCHEMA)
