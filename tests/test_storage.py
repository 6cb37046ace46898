"""The crawl root is an fsspec URL: a whole crawl on ``memory://`` behaves as on a local folder.

``memory://`` lives in one process, so the Dask cluster here is in-process (threads); everything
else -- WARC upload, Parquet state, Bloom files, the DuckDB views through a registered fsspec
filesystem, lookups by byte range -- takes the same remote-filesystem paths as ``s3://``.
"""

from __future__ import annotations

import fsspec
from distributed import Client

from crawl import api, query
from crawl import round as rnd
from crawl.config import load_config
from crawl.store import Store


def test_two_rounds_on_an_object_store_root(simweb):
    cfg = load_config(overrides={
        "root": "memory://crawl-root-test", "crawl_id": "mem", "resolve": [simweb.resolve_rule],
        "politeness_delay_s": 0.0, "max_pages": 60, "partitions": 2, "url_shards": 2, "total_timeout_s": 3.0,
        "round_duration_s": 20.0,
    }, use_env=False)
    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
        for i in range(2):
            rnd.run_round(cfg, simweb.seed_urls(2) if i == 0 else None, client=client)
    assert Store(cfg.root, cfg.crawl_id).current_round() == 2
    fs = fsspec.filesystem("memory")
    assert fs.glob("/crawl-root-test/warc/crawl=mem/round=00002/*.warc.gz")
    assert fs.glob("/crawl-root-test/state/crawl=mem/seen/v=00002/*.bloom")
    summary = api.crawl_summary(cfg.root, cfg.crawl_id)
    assert summary["last_round"] == 2 and summary["fetched"] > 10
    rows = query.run(cfg.root, cfg.crawl_id, "summary").to_pylist()
    assert [r["round"] for r in rows] == [1, 2] and rows[1]["fetched"] > 5
    url = query.connect(cfg.root, cfg.crawl_id).execute(
        "SELECT url FROM pages WHERE subset = 'warc' AND warc_type = 'response' LIMIT 1").fetchone()[0]
    cap = api.lookup(cfg.root, cfg.crawl_id, url)
    assert cap["warc_filename"].startswith("warc/crawl=mem/") and api.read_body(cfg.root, cap)
