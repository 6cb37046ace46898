"""A near copy is flagged even when its original is re-checked in the same round (a 304, or a failure).

The simulated web's truth names the duplicate cluster (``duplicate_cluster``: syndicated copies of one
article on other hosts, same text and other boilerplate). Round 1 stores one copy (on a host that
answers conditional GETs); round 2 re-checks it (the access log shows the validators sent and the 304;
or its host is unreachable, a closed port: a retry) and fetches the cluster's other members for the
first time. Every new member whose stored fingerprint
(the published index, read with DuckDB) is within ``simhash_max_distance`` of the stored copy must be a
``near_duplicate`` of a cluster member. Before the fix the round's own URLs were left out of the stored
side of the near-duplicate join, and rows whose last attempt was a retry too, so a copy whose original
answered 304 or failed in that round was stored as new.
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import pytest

from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.store import Store

T0 = 1_795_000_000.0
# seed 3, 80 hosts, 20 pages per host: one article and its two syndicated copies (checked below
# against the truth), the stored copy on a host with ETag / Last-Modified
STORED = "http://news-001.sim.test/syndicated/abtawex-kalo-neost-4.html"
NEW = ["http://blog-015.sim.test/blog/quinfenfor-kakajor-18",
       "http://blog-020.sim.test/syndicated/yarwexzen-drisolmar-65.html"]


@pytest.fixture
def web(make_simweb):
    return make_simweb(hosts=80, seed=3, pages_per_host=20, extra_args=("--log-conditional",))


@pytest.mark.parametrize("recheck", ["304", "unreachable"])
def test_near_copy_of_a_page_re_checked_in_its_round_is_flagged(web, tmp_path, recheck):
    import socket

    truth = {r["url"]: r for r in web.truth(at=T0).to_pylist()}
    cluster = {truth[u]["duplicate_cluster"] for u in [STORED, *NEW]}
    assert len(cluster) == 1 and truth[STORED]["host_conditional"], "the seed's web changed: pick another cluster"
    cfg = load_config(overrides={
        "root": str(tmp_path), "crawl_id": "nd", "resolve": [web.resolve_rule], "politeness_delay_s": 0.0,
        "max_pages": 20, "partitions": 1, "url_shards": 1, "round_duration_s": 30.0, "max_depth": 0,
        "sitemaps": False, "dask_workers": 1,
    }, use_env=False)
    web.set_clock(T0, speed=0.0)  # no page changes between the rounds: the stored copy answers 304
    with dask_client(cfg) as client:
        rnd.run_round(cfg, [STORED], now=datetime.fromtimestamp(T0, UTC), client=client)
        since = web.flush_log()
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        cfg2 = cfg if recheck == "304" else cfg.replace(resolve=[f"news-001.sim.test=127.0.0.1:{closed}",
                                                                  web.resolve_rule])
        rnd.run_round(cfg2, [STORED, *NEW], now=datetime.fromtimestamp(T0 + 3600, UTC), client=client)
    asked = [r for r in web.log().to_pylist()[since:]
             if r["user_agent"] == cfg.user_agent and "http://" + r["host"] + r["path"] == STORED]
    assert [(r["status"], bool(r["inm"])) for r in asked] == ([(304, True)] if recheck == "304" else []), asked

    con = duckdb.connect()
    idx = f"{Store(cfg.root, cfg.crawl_id).base}/index/crawl=nd/*/*.parquet"
    store = Store(cfg.root, cfg.crawl_id)
    seen = con.execute(f"SELECT status FROM read_parquet('{store.base}/{store.crawldb_dir(2)}/*.parquet') "
                       "WHERE url = ?", [STORED]).fetchall()
    assert seen == [("not_modified",) if recheck == "304" else ("retry",)], seen
    rows = con.execute(f"""
        SELECT n.url, n.crawl_status, n.duplicate_of, bit_count(xor(n.simhash, s.simhash)) AS dist
        FROM read_parquet('{idx}', hive_partitioning = true) n,
             (SELECT simhash FROM read_parquet('{idx}', hive_partitioning = true)
              WHERE url = ? AND subset = 'warc' AND round = 1) s
        WHERE n.round = 2 AND n.subset = 'warc' AND n.url IN (SELECT unnest(?))
        ORDER BY n.url
    """, [STORED, NEW]).fetchall()
    con.close()
    print(f"\nround 2 captures of the cluster: {rows}")
    close = [r for r in rows if r[3] <= cfg.simhash_max_distance]
    assert close, "no new member within the distance of the stored copy (else this proves nothing)"
    for url, status, dup_of, _ in close:
        assert status == "near_duplicate" and truth[dup_of]["duplicate_cluster"] in cluster, (url, status, dup_of)
