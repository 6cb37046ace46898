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

import duckdb
import pytest

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
    with dask_client(cfg) as client:
        for i in range(3):
            started.append(time.time())
            summaries.append(rnd.run_round(cfg, seeds if i == 0 else None, client=client))
    return cfg, summaries, started


def _requested_since(simweb, since: float) -> set[str]:
    log = simweb.log()
    return {f"http://{h}{p}" for h, p, ua, s in zip(
        log.column("host").to_pylist(), log.column("path").to_pylist(), log.column("user_agent").to_pylist(),
        log.column("start").to_pylist(), strict=True) if ua.startswith("RecrawlBot") and s >= since}


def _version(cfg, v: int) -> dict[str, dict]:
    path = f"{cfg.root}/state/crawl={cfg.crawl_id}/crawldb/v={v:05d}/*.parquet"
    rows = duckdb.sql(f"SELECT * FROM read_parquet('{path}', hive_partitioning = false)").to_arrow_table().to_pylist()
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
