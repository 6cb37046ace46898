"""Incremental rounds: between two full runs of PageRank and the prior, a round rescores only the
rows it touched and splices them into the previous CrawlDb version.

Three real rounds on the simulated web with ``importance_every_rounds = prior_every_rounds = 2``:
rounds 1 and 2 are full (every row rescored), round 3 is incremental. The oracle for "touched" is
the server's access log: a CrawlDb row whose URL the crawler did not request in round 3 must be in
version 3 exactly as in version 2, every column; requested URLs carry round 3's fetch; version 3
holds every row of version 2 once, plus the URLs discovered in round 3. (A URL on round 3's fetch
lists that was not requested -- deferred at the round's deadline -- is touched too.)
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest

from crawl import crawldb
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.store import Store


@pytest.fixture(scope="module")
def rounds(simweb, tmp_path_factory):
    root = tmp_path_factory.mktemp("inc")
    cfg = load_config(overrides={
        "root": str(root), "crawl_id": "inc", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.05,
        "max_pages": 120, "partitions": 2, "url_shards": 2, "round_duration_s": 20.0, "sitemaps": False,
        "importance_every_rounds": 2, "prior_every_rounds": 2, "dask_workers": 1, "dask_dashboard": False,
        "total_timeout_s": 4.0,
    }, use_env=False)
    seeds = simweb.seed_urls(6)
    summaries, started = [], []
    share = crawldb.COMPACT_SHARE
    crawldb.COMPACT_SHARE = 100.0  # a small crawl: round 3 touches a large share of it, keep the overlay
    try:
        with dask_client(cfg) as client:
            for i in range(3):
                started.append(time.time())
                summaries.append(rnd.run_round(cfg, seeds if i == 0 else None, client=client))
    finally:
        crawldb.COMPACT_SHARE = share
    return cfg, summaries, started


def _requested_since(simweb, since: float) -> set[str]:
    log = simweb.log()
    return {f"http://{h}{p}" for h, p, ua, s in zip(
        log.column("host").to_pylist(), log.column("path").to_pylist(), log.column("user_agent").to_pylist(),
        log.column("start").to_pylist(), strict=True) if ua.startswith("RecrawlBot") and s >= since}


def _version(cfg, v: int) -> dict[str, dict]:
    """CrawlDb version ``v`` as the layout defines it: base files, each row an overlay holds replaced."""
    d = f"{cfg.root}/state/crawl={cfg.crawl_id}/crawldb/v={v:05d}"
    base = f"read_parquet('{d}/*.parquet', hive_partitioning = false)"
    sql = f"SELECT * FROM {base}"
    if list(Path(d).glob("overlay/*.parquet")):
        over = f"read_parquet('{d}/overlay/*.parquet', hive_partitioning = false)"
        sql = f"SELECT * FROM {base} WHERE url_hash NOT IN (SELECT url_hash FROM {over}) UNION ALL SELECT * FROM {over}"
    rows = duckdb.sql(sql).to_arrow_table().to_pylist()
    by_url = {r["url"]: r for r in rows}
    assert len(by_url) == len(rows)  # one row per URL
    return by_url


def test_rounds_off_the_cadence_rescore_only_what_they_touched(rounds, simweb):
    cfg, summaries, started = rounds
    rep = [s["reprioritise"] for s in summaries]
    assert "rescored" not in rep[0] and "rescored" not in rep[1]  # rounds 1 and 2: full
    assert rep[1]["importance"] == "full" and rep[1]["model"]["refit"]
    assert rep[2]["importance"] == "incremental" and not rep[2]["model"]["refit"]
    v2, v3 = _version(cfg, 2), _version(cfg, 3)
    assert len(v3) == summaries[2]["update"]["known"] == rep[2]["known"]
    assert set(v2) <= set(v3)
    requested = _requested_since(simweb, started[2])
    fetched = [u for u in v2 if u in requested]
    # the round's fetch lists: a listed URL not requested (deferred past the deadline) is touched too
    listed = set(duckdb.sql(f"SELECT url FROM read_parquet('{cfg.root}/state/crawl={cfg.crawl_id}/rounds/00003/"
                            "fetchlist/*.parquet')").to_arrow_table().column("url").to_pylist())
    untouched = [u for u in v2 if u not in requested and u not in listed]
    assert fetched and untouched
    for u in untouched:  # every column as version 2 left it
        assert v3[u] == v2[u], u
    for u in fetched:
        assert v3[u]["round"] == 3 and v3[u]["fetch_count"] == v2[u]["fetch_count"] + 1
    new = set(v3) - set(v2)
    assert new and all(v3[u]["discovered_round"] == 3 and v3[u]["priority"] is not None for u in new)
    # rescored: the fetched rows, the new ones, redirect targets fetched as hops -- not the crawl
    assert len(fetched) + len(new) <= rep[2]["rescored"] < len(v3)
    assert Store(cfg.root, cfg.crawl_id).current_round() == 3
    # version 3 = version 2's base files, unchanged (linked), plus overlays of the rescored rows
    for s in range(cfg.url_shards):
        b2 = Path(cfg.root, f"state/crawl={cfg.crawl_id}/crawldb/v=00002/shard={s:02d}.parquet")
        b3 = Path(cfg.root, f"state/crawl={cfg.crawl_id}/crawldb/v=00003/shard={s:02d}.parquet")
        assert b2.read_bytes() == b3.read_bytes()
        assert Path(cfg.root, f"state/crawl={cfg.crawl_id}/crawldb/v=00003/overlay/shard={s:02d}.parquet").exists()
    # what a user queries is the same CrawlDb
    from crawl import query

    assert query.run(cfg.root, cfg.crawl_id, "SELECT count(*) AS n FROM crawldb").column("n")[0].as_py() == len(v3)
    from crawl.report import open_view

    view = open_view(cfg.root, cfg.crawl_id)
    assert view.rows("SELECT count(*) AS n, count(DISTINCT url) AS d FROM db")[0] == {"n": len(v3), "d": len(v3)}
    assert view.rows("SELECT count(*) AS n FROM dbv WHERE version = 2")[0]["n"] == len(v2)


def test_an_overlay_outgrowing_its_base_is_folded_into_a_new_base(tmp_path):
    """write_overlay: a small delta grows the overlay (base linked as it is); past COMPACT_SHARE of the
    base the shard is written whole again, without an overlay; read_shard gives the same rows."""
    import numpy as np
    import pyarrow as pa

    store = Store(str(tmp_path), "ov")
    h = np.sort(np.random.default_rng(3).choice(2**40, 1000, replace=False).astype(np.uint64))
    db = crawldb.conform(pa.table({"url": [f"http://a.test/{x}" for x in h], "url_hash": pa.array(h),
                                   "status": ["fetched"] * 1000, "priority": [1.0] * 1000}))
    crawldb.write(store, 1, 1, db)
    small = \
        db.slice(10, 50).set_column(db.schema.get_field_index("priority"), "priority", pa.array([2.0] * 50))
    crawldb.write_overlay(store, 2, 0, small)
    assert store.read_bytes(crawldb.shard_path(store, 2, 0)) == store.read_bytes(crawldb.shard_path(store, 1, 0))
    assert store.exists(crawldb.overlay_path(store, 2, 0)) and crawldb.count(store, 2, 1) == 1000
    got = crawldb.read_shard(store, 2, 0)
    assert got.column("url_hash").to_numpy().tolist() == h.tolist()
    assert got.column("priority").to_pylist() == [2.0 if 10 <= i < 60 else 1.0 for i in range(1000)]
    new = crawldb.conform(pa.table({"url": ["http://a.test/new"], "url_hash": pa.array([2**41], pa.uint64())}))
    big = pa.concat_tables([db.slice(100, 300), new])
    crawldb.write_overlay(store, 3, 0, big)  # 50 + 301 rows > 20 % of 1000: folded
    assert not store.exists(crawldb.overlay_path(store, 3, 0)) and crawldb.count(store, 3, 1) == 1001
    assert crawldb.read_shard(store, 3, 0).column("priority").to_pylist()[10:60] == [2.0] * 50


def _readme_crawldb_view(cfg, version: int) -> str:
    """The README's DuckDB quick-start definition of the ``crawldb`` view, as written, pointed at ``cfg``'s
    crawl root and ``version`` (the README's example is ``crawldata``, crawl ``demo``, round 3)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("## DuckDB quick start", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    stmt = next(s for s in block.split(";") if "CREATE OR REPLACE VIEW crawldb" in s)
    example = "crawldata/state/crawl=demo/crawldb/v=00003/"
    assert example in stmt
    return stmt.replace(example, f"{cfg.root}/state/crawl={cfg.crawl_id}/crawldb/v={version:05d}/")


def test_the_readme_crawldb_query_sees_an_incremental_rounds_rows(rounds, simweb):
    """What the README tells a DuckDB user to run gives version 3 as the crawler left it: every URL the
    crawler requested in round 3 (the server's access log) with round 3's fetch, the URLs round 3
    discovered, one row per URL -- not version 2's rows that round 3's overlay replaced."""
    cfg, summaries, started = rounds
    overlay = Path(cfg.root, f"state/crawl={cfg.crawl_id}/crawldb/v=00003/overlay")
    assert list(overlay.glob("*.parquet"))  # the case the README must cover
    con = duckdb.connect()
    con.execute(_readme_crawldb_view(cfg, 3))
    rows = {r["url"]: r for r in con.sql("SELECT * FROM crawldb").to_arrow_table().to_pylist()}
    assert con.sql("SELECT count(*) FROM crawldb").fetchall()[0][0] == len(rows)  # one row per URL
    assert len(rows) == summaries[2]["update"]["known"]
    requested = _requested_since(simweb, started[2]) & set(rows)
    assert requested and all(rows[u]["round"] == 3 for u in requested), \
        sorted(u for u in requested if rows[u]["round"] != 3)[:5]
    v2 = duckdb.sql(f"SELECT url FROM read_parquet('{cfg.root}/state/crawl={cfg.crawl_id}/crawldb/v=00002/*.parquet')"
                    ).to_arrow_table().column("url").to_pylist()
    new = set(rows) - set(v2)
    assert new and all(rows[u]["discovered_round"] == 3 for u in new)
    assert set(v2) <= set(rows)
    # the same view over a version without overlays is its shard files
    con.execute(_readme_crawldb_view(cfg, 2))
    assert con.sql("SELECT count(*) FROM crawldb").fetchall()[0][0] == len(v2) == summaries[1]["update"]["known"]


def test_splice_gives_the_rows_of_a_dict_merge_on_every_path():
    """crawldb.splice: zero-copy slices (small delta, big base), one take (delta large against the base)
    and an empty base (a fresh crawl's first round) all give base's rows with delta's replacing or
    joining them, sorted by url_hash -- checked against a plain dict merge."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(5)

    def rows(hashes, prio):
        return crawldb.conform(pa.table({"url": [f"http://a.test/{x}" for x in hashes],
                                         "url_hash": pa.array(hashes, pa.uint64()), "priority": [prio] * len(hashes)}))

    base_h = np.sort(rng.choice(2**40, 5000, replace=False).astype(np.uint64))
    base = rows(base_h, 1.0)
    for n_delta, empty_base in ((10, False), (60, False), (500, False), (800, True)):
        known = rng.choice(base_h, n_delta // 2, replace=False)
        fresh = rng.choice(2**40, n_delta - known.size).astype(np.uint64) | np.uint64(2**41)
        delta_h = rng.permutation(np.concatenate([known, fresh]))  # unsorted, as deltas come
        b = base.slice(0, 0) if empty_base else base
        want = {} if empty_base else {int(h): 1.0 for h in base_h}
        want.update({int(h): 2.0 for h in delta_h})
        got = crawldb.splice(b, rows(delta_h, 2.0))
        assert got.column("url_hash").to_pylist() == sorted(want)
        assert got.column("priority").to_pylist() == [want[h] for h in sorted(want)]
