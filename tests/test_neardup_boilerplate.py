"""A syndicated copy under another site's boilerplate is a near duplicate; another article on the same
template is not.

The simulated web's truth names the clusters (``duplicate_cluster``, the content id: an article and its
syndicated copies on other hosts, the same text under the other host's chrome). Round 1 (a real
``crawl round`` process) stores two originals and another article on one original's site; round 2
fetches each original's copy (on another host: its header, navigation, "Syndicated from" line and its
own "See <a>...</a>." call-outs inside the article) and one more article on each template (the copy's
host and the original's). Judged by the truth and the published index (DuckDB): each copy is
``near_duplicate`` of a member of its own cluster, the other articles are stored as new.

On the old code the news-012 copy was stored as new, 6 bits from its original (k = 3): the "See ." each
stripped call-out link leaves inside the article shifted the shingles around it (0-2 bits now, the
distance also moves with the date lines' words; the news-001 copy was 2 bits away before, 0 now).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from crawl.config import load_config
from crawl.store import Store

REPO = Path(__file__).resolve().parent.parent
T0 = 1_795_000_000.0
# seed 3, 80 hosts, 20 pages per host (checked against the truth below)
ORIGINALS = ["http://blog-001.sim.test/blog/marmarru-rufennor-fenhul-15",
             "http://blog-015.sim.test/blog/quinfenfor-kakajor-18"]
COPIES = ["http://news-012.sim.test/syndicated/zenru-wexexmar-vennor-7.html",
          "http://news-001.sim.test/syndicated/abtawex-kalo-neost-4.html"]
STORED_OTHER = "http://blog-001.sim.test/blog/marexdri-wexabras-1"  # round 1: the original's template
NEW_OTHERS = ["http://blog-001.sim.test/blog/zenost-isdriul-berwex-2",  # round 2: the same two templates
              "http://news-012.sim.test/news/2024/neista-voul-solulru-1.html"]


@pytest.fixture
def web(make_simweb):
    return make_simweb(hosts=80, seed=3, pages_per_host=20)


def _round(cfg_json: str, seeds: list[str], now: float) -> None:
    cmd = [sys.executable, "-m", "crawl", "round", "--seeds", *seeds,
           "--now", datetime.fromtimestamp(now, UTC).isoformat(), "--config-json", cfg_json]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]


def test_syndicated_copy_under_other_boilerplate_is_flagged_and_other_articles_are_not(web, tmp_path):
    truth = {r["url"]: r for r in web.truth(at=T0).to_pylist()}
    for orig, copy in zip(ORIGINALS, COPIES, strict=True):
        assert truth[copy]["dup_kind"] == "near" and truth[orig]["dup_kind"] == "original", "the web changed"
        assert truth[copy]["duplicate_cluster"] == truth[orig]["duplicate_cluster"]
        assert truth[copy]["host"] != truth[orig]["host"]  # another site's template
    for u in [STORED_OTHER, *NEW_OTHERS]:
        assert truth[u]["dup_kind"] == "" and truth[u]["page_type"] == "article"
    cfg = load_config(overrides={
        "root": str(tmp_path), "crawl_id": "nb", "resolve": [web.resolve_rule], "politeness_delay_s": 0.0,
        "max_pages": 20, "partitions": 1, "url_shards": 1, "round_duration_s": 30.0, "max_depth": 0,
        "sitemaps": False, "dask_workers": 1, "dask_dashboard": False,
    }, use_env=False)
    web.set_clock(T0, speed=0.0)  # one version of every page for both rounds
    cfg_json = json.dumps(cfg.to_dict())
    _round(cfg_json, [*ORIGINALS, STORED_OTHER], T0)
    _round(cfg_json, [*COPIES, *NEW_OTHERS], T0 + 3600)

    idx = f"{Store(cfg.root, cfg.crawl_id).base}/index/crawl=nb/*/*.parquet"
    con = duckdb.connect()
    rows = {r[0]: r[1:] for r in con.execute(f"""
        SELECT url, round, crawl_status, duplicate_of, simhash, content_digest
        FROM read_parquet('{idx}', hive_partitioning = true)
        WHERE subset = 'warc' AND warc_type = 'response'
        QUALIFY row_number() OVER (PARTITION BY url ORDER BY round) = 1
    """).fetchall()}
    con.close()
    dist = {c: bin((rows[c][3] ^ rows[o][3]) & (2**64 - 1)).count("1") for o, c in zip(ORIGINALS, COPIES, strict=True)}
    print(f"\ncaptures: {rows}\ncopy-original SimHash distances: {dist}")
    for u in [*ORIGINALS, STORED_OTHER]:
        assert rows[u][:2] == (1, "fetched"), (u, rows.get(u))
    for orig, copy in zip(ORIGINALS, COPIES, strict=True):
        rd, status, dup_of, _, digest = rows[copy]
        assert digest != rows[orig][4]  # other bytes: not an exact duplicate
        assert (rd, status) == (2, "near_duplicate"), (copy, rows[copy], dist)
        assert truth[dup_of]["duplicate_cluster"] == truth[copy]["duplicate_cluster"], (copy, dup_of)
    for u in NEW_OTHERS:  # a different article on a template stored in round 1: new, not a duplicate
        assert rows[u][:3] == (2, "fetched", None), (u, rows[u])
        assert rows[u][3] not in (0, None)
