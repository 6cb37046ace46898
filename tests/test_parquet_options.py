"""Parquet writer options by file kind (``crawl.store.parquet_options``): the values read back are the
values written, by pyarrow and by DuckDB (what ``crawl query`` and ``crawl report`` read with), and the
same as a file written the way every file was before (zstd, dictionaries and statistics on)."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawl import crawldb
from crawl.checkpoint import CKPT_FETCH_SCHEMA
from crawl.index import INDEX_SCHEMA, LINKS_SCHEMA, TEXT_SCHEMA
from crawl.records import FETCH_SCHEMA, FETCHLIST_SCHEMA, LINK_SCHEMA, PAGE_PART_SCHEMA, SITEMAP_SCHEMA
from crawl.store import UNIQUE_COLUMNS, Store
from crawl.update import DUP_INFO_SCHEMA, FETCH_UPDATE_SCHEMA

SCHEMAS = {
    "fetchlist": FETCHLIST_SCHEMA, "fetched": FETCH_SCHEMA, "checkpoint": CKPT_FETCH_SCHEMA, "pages": PAGE_PART_SCHEMA, "rawlinks": LINK_SCHEMA,
    "sitemaps": SITEMAP_SCHEMA, "update_fetch": FETCH_UPDATE_SCHEMA, "dupinfo": DUP_INFO_SCHEMA,
    "delta": crawldb.CRAWLDB_SCHEMA, "text": TEXT_SCHEMA, "index": INDEX_SCHEMA, "links": LINKS_SCHEMA,
}
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


def _values(t: pa.DataType) -> st.SearchStrategy:
    """Values of Arrow type ``t`` (None included): few distinct ones often, so dictionaries are tried."""
    if pa.types.is_string(t):
        v: st.SearchStrategy = st.one_of(st.sampled_from(["a", "http://h.test/", ""]), _TEXT)
    elif pa.types.is_boolean(t):
        v = st.booleans()
    elif pa.types.is_timestamp(t):
        v = st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1)).map(
            lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000, tzinfo=UTC if t.tz else None))
    elif pa.types.is_floating(t):
        v = st.floats(allow_nan=False, width=64)
    elif pa.types.is_integer(t):
        info = (0, 2 ** t.bit_width - 1) if pa.types.is_unsigned_integer(t) else \
            (-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
        v = st.one_of(st.sampled_from([0, 1]), st.integers(*info))
    else:
        raise AssertionError(f"no strategy for {t}")
    return st.one_of(st.none(), v)


@st.composite
def tables(draw: st.DrawFn) -> tuple[str, pa.Table]:
    name = draw(st.sampled_from(sorted(SCHEMAS)))
    schema = SCHEMAS[name]
    n = draw(st.integers(0, 30))
    cols = [draw(st.lists(_values(f.type), min_size=n, max_size=n)) for f in schema]
    return name, pa.table(cols, schema=schema)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=tables(), scratch=st.booleans())
def test_values_read_back_are_the_values_written(tmp_path, case, scratch) -> None:
    name, table = case
    store = Store(str(tmp_path), "c")
    rel = f"state/crawl=c/{name}-{int(scratch)}.parquet"
    store.write_table(rel, table, scratch=scratch)
    back = store.read_table(rel, table.schema)
    assert back.equals(table)
    old = pa.BufferOutputStream()
    pq.write_table(table, old, compression="zstd")  # how every file was written before
    assert back.equals(pq.read_table(pa.BufferReader(old.getvalue())))
    got = duckdb.sql(f"SELECT * FROM read_parquet('{store.abs(rel)}', hive_partitioning = false)").to_arrow_table()
    assert got.cast(table.schema).equals(table)


def test_options_by_kind(tmp_path) -> None:
    """Outputs users query: zstd with statistics; scratch files: Snappy without; no dictionary on
    URL-like columns in either, one on a repeated column (host) in both."""
    store = Store(str(tmp_path), "c")
    table = pa.table({"url": [f"http://h.test/{i}" for i in range(100)], "host": ["h.test"] * 100})
    for scratch, codec in ((False, "ZSTD"), (True, "SNAPPY")):
        rel = f"f{int(scratch)}.parquet"
        store.write_table(rel, table, scratch=scratch)
        meta = pq.read_metadata(store.abs(rel)).row_group(0)
        for i in range(meta.num_columns):
            col = meta.column(i)
            assert col.compression == codec
            assert col.is_stats_set is (not scratch)
            dict_pages = any("DICTIONARY" in e for e in col.encodings)
            assert dict_pages is (col.path_in_schema not in UNIQUE_COLUMNS), col
