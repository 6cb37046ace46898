"""DuckDB over a crawl root: ready-made views and the named queries in ``include/sql/``.

Views (for one crawl, its published state):
- ``pages``   the page index (Common Crawl columns + ours), hive partitions ``crawl``, ``subset``;
- ``crawldb`` the current CrawlDb version (one row per known URL, with next_fetch_time and priority);
- ``links``   the link graph (from/to URL hashes and the target URL);
- ``text``    extracted text (HTML and PDF; ``page_count`` for PDFs);
- ``images``  parsed images: format, width, height, mode, EXIF date and camera.
Remote roots (``s3://…``) are read through fsspec registered with DuckDB, so no DuckDB extension
download is needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa

from crawl import crawldb
from crawl.index import IMAGES_SCHEMA, INDEX_SCHEMA, LINKS_SCHEMA, TEXT_SCHEMA
from crawl.store import Store

SQL_DIR = Path(__file__).resolve().parent.parent / "include" / "sql"

# Each view's columns when it has no file yet (a new crawl, a root without it, a crawl with no image):
# the named queries and the README's examples then return no rows instead of failing on a missing column.
# ``pages`` also has the hive partition columns of the index's paths.
EMPTY_VIEWS = {
    "pages": INDEX_SCHEMA.append(pa.field("crawl", pa.string())).append(pa.field("subset", pa.string())),
    "crawldb": crawldb.CRAWLDB_SCHEMA,
    "links": LINKS_SCHEMA,
    "text": TEXT_SCHEMA,
    "images": IMAGES_SCHEMA,
}


def named_queries() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(SQL_DIR.glob("*.sql"))}


def connect(root: str, crawl_id: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the crawl's views defined (empty views before the first round)."""
    store = Store(root, crawl_id)
    con = duckdb.connect()
    fs = store.fs
    if fs.__class__.__name__ != "LocalFileSystem":
        con.register_filesystem(fs)
        prefix = store.root.rstrip("/")
    else:
        prefix = store.base.rstrip("/")
    current = store.current_round()

    def view(name: str, pattern: str, rel_dir: str, where: str = "", hive: bool = False) -> None:
        if store.ls(rel_dir):
            opts = f", hive_partitioning = {str(hive).lower()}"
            src = f"read_parquet('{prefix}/{pattern}', union_by_name = true{opts})"
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {src} {where}")
        else:
            con.register(f"_empty_{name}", EMPTY_VIEWS[name].empty_table())
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _empty_{name}")

    cid = crawl_id.replace("'", "")
    view("pages", f"index/crawl={cid}/*/*.parquet", f"index/crawl={cid}", f"WHERE round <= {current}", hive=True)
    view("crawldb", f"{store.crawldb_dir(current)}/*.parquet", store.crawldb_dir(current) if current else "-")
    shards = len([r for r in store.ls(store.crawldb_dir(current)) if r.endswith(".parquet")]) if current else 0
    if crawldb.overlays(store, current, shards):  # base files + the overlays of an incremental round
        con.execute(f"CREATE OR REPLACE VIEW crawldb AS SELECT * FROM {crawldb.source_sql(store, con, current, shards)}")
    view("links", f"links/crawl={cid}/*/*.parquet", f"links/crawl={cid}", f"WHERE round <= {current}")
    view("text", f"text/crawl={cid}/*/*.parquet", f"text/crawl={cid}", f"WHERE round <= {current}")
    view("images", f"images/crawl={cid}/*/*.parquet", f"images/crawl={cid}", f"WHERE round <= {current}")
    return con


def run(root: str, crawl_id: str, sql_or_name: str) -> pa.Table:
    """Run a named query (file stem in include/sql) or any SQL over the views."""
    queries = named_queries()
    sql = queries.get(sql_or_name, sql_or_name)
    if sql_or_name not in queries and re.fullmatch(r"[a-z_]+", sql_or_name):
        raise ValueError(f"unknown query {sql_or_name!r}; named queries: {', '.join(queries)}")
    con = connect(root, crawl_id)
    return con.sql(sql).to_arrow_table()


def format_table(table: pa.Table, max_rows: int = 40) -> str:
    """A plain-text table for terminals (no pandas needed)."""
    cols = table.column_names
    rows = [[("" if v is None else str(v))[:60] for v in r.values()] for r in table.slice(0, max_rows).to_pylist()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    if table.num_rows > max_rows:
        out.append(f"... {table.num_rows - max_rows} more rows")
    return "\n".join(out)
