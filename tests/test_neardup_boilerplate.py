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
import pyarrow as pa
import pytest
from simhash_ref import M64 as _M64
from simhash_ref import WORD_BYTES, P, mix, shingle_simhash

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


# --- a page stored before the SimHash left out short sentences ---------------------------------------
def _previous_simhash(text: str) -> int:
    """The SimHash as rounds before session 19 stored it (every word shingled, short sentences too): a
    plain-Python transcription of that definition, sharing no code with crawl.fingerprint."""
    words, h, k, inword = [], 0, 0, False
    for byte in [*text.lower().encode("utf-8"), 32]:
        if byte in WORD_BYTES:
            h, k, inword = (h + byte * pow(P, k, 1 << 64)) & _M64, k + 1, True
        elif inword:
            words.append(mix(h))
            h, k, inword = 0, 0, False
    return shingle_simhash(words)


def test_an_unchanged_page_stored_with_the_previous_simhash_is_not_counted_as_changed(web, tmp_path):
    """Round 1 stores a never-changing article; its CrawlDb row is given the SimHash the previous
    definition computes for its main text (what a crawl made before this version holds); round 2, a
    month later in crawl time with the web's clock held, fetches it again (200: the ad and the
    "generated" line change its bytes, not its article). Its main text is the same, so it must not
    count as a change (``changed`` in the index, ``change_count`` in CrawlDb). With the SimHash alone
    it did: the two definitions are more than k apart on a page with "See <a>...</a>." call-outs."""
    import pyarrow.parquet as pq

    from crawl.parse import parse_html

    page = STORED_OTHER
    truth = {r["url"]: r for r in web.truth(at=T0).to_pylist()}
    assert truth[page]["change_rate"] == 0 and not truth[page]["host_conditional"], "the web changed"
    cfg = load_config(overrides={
        "root": str(tmp_path), "crawl_id": "up", "resolve": [web.resolve_rule], "politeness_delay_s": 0.0,
        "max_pages": 20, "partitions": 1, "url_shards": 1, "round_duration_s": 30.0, "max_depth": 0,
        "sitemaps": False, "dask_workers": 1, "dask_dashboard": False,
    }, use_env=False)
    web.set_clock(T0, speed=0.0)
    cfg_json = json.dumps(cfg.to_dict())
    _round(cfg_json, [page], T0)

    status, headers, body = web.request(page)
    assert status == 200
    text = parse_html(page, body, headers).fingerprint_text
    store = Store(cfg.root, cfg.crawl_id)
    path = Path(store.base) / store.crawldb_dir(1) / "shard=00.parquet"
    db = pq.read_table(path)
    rows = db.column("url").to_pylist()
    sims = db.column("simhash").to_pylist()
    i = rows.index(page)
    previous = _previous_simhash(text)
    assert bin((previous ^ sims[i]) & _M64).count("1") > cfg.simhash_max_distance, "proves nothing"
    sims[i] = previous
    pq.write_table(db.set_column(db.schema.get_field_index("simhash"), db.schema.field("simhash"),
                                 pa.array(sims, pa.int64())), path)

    since = web.flush_log()
    _round(cfg_json, [page], T0 + 30 * 86400)
    asked = [r["status"] for r in web.log().to_pylist()[since:]
             if r["user_agent"] == cfg.user_agent and "http://" + r["host"] + r["path"] == page]
    assert asked == [200], asked
    con = duckdb.connect()
    idx = f"{store.base}/index/crawl=up/*/*.parquet"
    got = con.execute(f"SELECT crawl_status, changed FROM read_parquet('{idx}', hive_partitioning = true) "
                      "WHERE url = ? AND round = 2 AND subset = 'warc'", [page]).fetchall()
    db2 = con.execute(f"SELECT change_count, fetch_count FROM read_parquet('{store.base}/{store.crawldb_dir(2)}/*.parquet') "
                      "WHERE url = ?", [page]).fetchall()
    con.close()
    assert got == [("fetched", False)] and db2 == [(0, 2)], (got, db2)
