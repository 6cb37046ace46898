"""Update builds the index rows in a side thread while prepare and the shard merges run, and fills in
the four columns only the merges know afterwards (``crawl.index.index_rows`` + ``with_merge_columns``).
The index files it writes must be those of the single SQL join over the round's files that built them
before: the oracle here is that query, run by DuckDB over the fetched and pages part files and the
merges' ``dupinfo`` files, against the staged index files (every column, and each file's row order).

A real crawl on the simulated web: round 1 published, round 2 fetched and parsed in 3 partitions, so
merges see known rows (CrawlDb depth, change decisions), duplicates and robots.txt captures.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

import duckdb
import pytest

from crawl import round as rnd
from crawl.config import load_config
from crawl.linkparts import EarlyLinks
from crawl.store import Store

# the index columns the oracle computes: those the merges feed, and the row identity and order
_CHECKED = ("warc_filename", "warc_record_offset", "url", "url_hash", "crawl_status", "duplicate_of", "depth",
            "changed", "simhash", "text_length", "fetch_status", "warc_type", "round")


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    with Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as c:
        yield c


@pytest.fixture(scope="module")
def updated(simweb, client, tmp_path_factory):
    """Round 2 of a crawl, updated with the Dask client and (on a copy of the root) with threads."""
    base = tmp_path_factory.mktemp("updidx")
    cfg = load_config(overrides={
        "root": str(base / "root"), "crawl_id": "idx", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.0,
        "partitions": 3, "url_shards": 2, "max_depth": 3, "max_pages": 150, "round_duration_s": 30.0,
    }, use_env=False)
    now = datetime.now(UTC).replace(microsecond=0)
    rnd.run_round(cfg, simweb.seed_urls(6), now, client=client)
    now2 = now + timedelta(days=30)
    n = rnd.generate(cfg, now2)["round"]
    # update's link parts started on the workers as each partition is parsed, as run_round does
    early = EarlyLinks(client, cfg, n)
    rnd.fetch_parse(cfg, n, now2, client=client, on_parsed=early.start)
    assert sorted(early.futures) == [0, 1, 2]
    shutil.copytree(base / "root", base / "threads")
    shutil.copytree(base / "root", base / "late")
    rnd.update(cfg, n, now2, client, early_links=early)
    assert early.futures == {}  # update took every one
    cfg_t = load_config(overrides={**cfg.to_dict(), "root": str(base / "threads")}, use_env=False)
    rnd.update(cfg_t, n, now2)
    cfg_l = load_config(overrides={**cfg.to_dict(), "root": str(base / "late")}, use_env=False)
    rnd.update(cfg_l, n, now2, client)  # link parts started by update itself
    return [cfg, cfg_t, cfg_l], n


def _oracle_and_written(cfg, n: int) -> tuple[list[tuple], list[tuple]]:
    store = Store(cfg.root, cfg.crawl_id)
    con = duckdb.connect()
    fetched = store.location(store.round_dir(n, "fetched", "part=*.parquet"))
    pages = store.location(store.round_dir(n, "pages", "part=*.parquet"))
    dupinfo = store.location(store.round_dir(n, "update", "dupinfo", "shard=*.parquet"))
    staged = store.location(store.staged(n, f"index/crawl={cfg.crawl_id}/subset=*/round={n:05d}-part=*.parquet"))
    cols = ", ".join(_CHECKED)
    # the query build_index ran before the split (one SQL join, the merges' dupinfo included)
    want = con.sql(f"""
        SELECT {cols} FROM (
            SELECT f.warc_filename, f.warc_record_offset, f.url, f.url_hash,
                   CASE WHEN f.subset <> 'robotstxt' AND f.status = 'fetched' THEN coalesce(d.status, f.status) ELSE f.status END AS crawl_status,
                   CASE WHEN f.subset = 'robotstxt' THEN NULL ELSE d.duplicate_of END AS duplicate_of,
                   CAST(coalesce(d.depth, f.depth) AS INTEGER) AS depth,
                   CASE WHEN f.subset = 'robotstxt' THEN NULL ELSE d.changed END AS changed,
                   p.simhash, p.text_length, CAST(f.http_status AS SMALLINT) AS fetch_status, f.warc_type,
                   {n} AS round, f.part
            FROM (SELECT *, CAST(regexp_extract(filename, 'part=([0-9]+)', 1) AS INTEGER) AS part
                  FROM read_parquet('{fetched}', filename = true)) f
            LEFT JOIN read_parquet('{pages}') p USING (url_hash)
            LEFT JOIN read_parquet('{dupinfo}') d USING (url_hash)
            WHERE f.warc_filename IS NOT NULL
        ) ORDER BY part, warc_filename, warc_record_offset
    """).fetchall()
    # the files as written, each in its own row order, files in partition order
    got = con.sql(f"""
        SELECT {cols} FROM read_parquet('{staged}', filename = true)
        ORDER BY regexp_extract(filename, 'part=([0-9]+)', 1), warc_filename, warc_record_offset
    """).fetchall()
    in_file_order = con.sql(f"SELECT {cols} FROM read_parquet('{staged}', filename = true)").fetchall()
    per_file = con.execute(f"""
        SELECT count(*) FROM (SELECT filename, warc_filename, warc_record_offset,
                                     lag(warc_filename) OVER w AS pf, lag(warc_record_offset) OVER w AS po
                              FROM read_parquet('{staged}', filename = true, file_row_number = true)
                              WINDOW w AS (PARTITION BY filename ORDER BY file_row_number))
        WHERE pf IS NOT NULL AND (pf, po) > (warc_filename, warc_record_offset)
    """).fetchone()[0]
    assert per_file == 0  # every file keeps the join's order
    assert sorted(in_file_order, key=repr) == sorted(got, key=repr)
    con.close()
    return want, got


def test_index_files_equal_the_single_join(updated):
    cfgs, n = updated
    for cfg in cfgs:  # with the Dask client (link parts started early, and by update) and with threads
        want, got = _oracle_and_written(cfg, n)
        assert len(got) > 100
        assert got == want
        statuses = {r[4] for r in got}
        assert "robotstxt" not in statuses and {"fetched"} <= statuses
        assert any(r[7] is not None for r in got)  # change decisions came from the merges
        assert any(r[5] is not None for r in got) or any(s in statuses for s in ("duplicate", "near_duplicate"))


def test_links_and_update_files_equal_with_early_link_parts(updated):
    """The link parts started during the fetch give update what it computes itself: the staged links
    files and the shard merges' inputs are the same rows in the same order in all three roots."""
    cfgs, n = updated
    con = duckdb.connect()

    def rows(cfg, pattern: str, order: str = "") -> list[tuple]:
        path = Store(cfg.root, cfg.crawl_id).location(pattern)
        return con.sql(f"SELECT * EXCLUDE (filename), regexp_extract(filename, '[^/]*$') AS f "
                       f"FROM read_parquet('{path}', filename = true) {order}").fetchall()

    store = Store(cfgs[0].root, cfgs[0].crawl_id)
    links = store.staged(n, f"links/crawl={cfgs[0].crawl_id}/*/*.parquet")
    want_links = rows(cfgs[0], links)
    assert len(want_links) > 100
    new = store.round_dir(n, "update", "new", "*.parquet")
    want_new = rows(cfgs[0], new, "ORDER BY ALL")
    assert want_new
    for cfg in cfgs[1:]:
        assert rows(cfg, links) == want_links
        assert rows(cfg, new, "ORDER BY ALL") == want_new
    con.close()
