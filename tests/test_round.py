"""Crawl rounds end to end on a real embedded Dask cluster against the simulated web on loopback.

One module-scoped crawl (3 rounds) is checked from every side the users and the hosts see:
the server's access log (politeness, robots), the page index read by DuckDB, the WARC files read
back with warcio at the index's offsets, the CrawlDb against the simulated web's truth (duplicates,
traps), and the CLI. Crash/resume and worker-loss tests live in test_resilience.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl import api, query
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.errors import SeedError
from crawl.fingerprint import payload_digest
from crawl.simweb.accesslog import politeness_report, read_log
from crawl.store import Store

DELAY = 0.1
ROUNDS = 3


def crawl_config(root: Path, simweb, **over):
    base = {
        "root": str(root), "crawl_id": "t1", "resolve": [simweb.resolve_rule], "politeness_delay_s": DELAY,
        "max_pages": 400, "partitions": 3, "url_shards": 2, "round_duration_s": 20.0,
        "connect_timeout_s": 2.0, "read_timeout_s": 2.0, "total_timeout_s": 4.0, "max_body_bytes": 300_000,
        "backoff_base_s": 2.0, "max_crawl_delay_s": 5.0, "dask_workers": 2,
    }
    base.update(over)
    return load_config(overrides=base, use_env=False)


@pytest.fixture(scope="module")
def crawled(simweb, tmp_path_factory):
    root = tmp_path_factory.mktemp("crawl")
    cfg = crawl_config(root, simweb)
    seeds = simweb.seed_urls(6)
    summaries = []
    with dask_client(cfg) as client:
        for i in range(ROUNDS):
            summaries.append(rnd.run_round(cfg, seeds if i == 0 else None, client=client))
    return cfg, summaries


def _con(cfg):
    return query.connect(cfg.root, cfg.crawl_id)


def test_rounds_publish_and_grow(crawled):
    cfg, summaries = crawled
    assert [s["round"] for s in summaries] == [1, 2, 3]
    assert Store(cfg.root, cfg.crawl_id).current_round() == 3
    known = [s["update"]["known"] for s in summaries]
    assert known[0] < known[1] < known[2]
    assert sum(s["fetch_parse"]["fetched"] for s in summaries) > 200
    for s in summaries:
        assert s["generate"]["urls"] <= cfg.max_pages


def test_politeness_from_the_server_side(crawled, simweb):
    cfg, _ = crawled
    report = politeness_report(simweb.access_log)
    assert report.num_rows > 10
    assert pc.max(report.column("max_in_flight")).as_py() == 1
    gaps = [g for g in report.column("min_gap_s").to_pylist() if g is not None]
    assert min(gaps) >= DELAY, f"min gap {min(gaps):.3f}s < {DELAY}s"


def test_robots_obeyed(crawled, simweb):
    cfg, _ = crawled
    truth = simweb.truth()
    denied = set(truth.filter(pc.invert(truth.column("robots_allowed"))).column("url").to_pylist())
    log = read_log(simweb.access_log)
    requested = {f"http://{h}{p}" for h, p in zip(log.column("host").to_pylist(), log.column("path").to_pylist(),
                                                     strict=True)}
    assert denied, "the simulated web has robots-denied pages"
    assert not (requested & denied), sorted(requested & denied)[:5]
    db = _con(cfg).execute("SELECT count(*) FROM crawldb WHERE status = 'robots_denied'").fetchone()[0]
    assert db > 0


def test_index_is_common_crawl_shaped_and_warc_offsets_point_at_records(crawled):
    cfg, _ = crawled
    con = _con(cfg)
    cols = {r[0] for r in con.execute("DESCRIBE pages").fetchall()}
    for c in ("url_surtkey", "url", "url_host_name", "url_host_registered_domain", "url_protocol", "url_port",
              "url_path", "url_query", "fetch_time", "fetch_status", "fetch_redirect", "content_digest",
              "content_mime_type", "content_mime_detected", "content_charset", "content_languages",
              "content_truncated", "warc_filename", "warc_record_offset", "warc_record_length", "warc_segment",
              "crawl", "subset", "simhash", "duplicate_of", "depth", "round", "text_length", "outlink_count",
              "changed"):
        assert c in cols, c
    subsets = dict(con.execute("SELECT subset, count(*) FROM pages GROUP BY 1").fetchall())
    assert subsets.get("warc", 0) > 100 and subsets.get("robotstxt", 0) > 5
    rows = con.execute("""
        SELECT url, warc_filename, warc_record_offset, warc_record_length, content_digest, warc_type
        FROM pages WHERE subset = 'warc' ORDER BY url_hash LIMIT 60
    """).fetchall()
    for url, fname, off, length, digest, wtype in rows:
        assert fname.endswith(".warc.gz") and not fname.startswith("/")
        with open(Path(cfg.root) / fname, "rb") as fh:
            fh.seek(off)
            data = fh.read(length)
        rec = next(iter(ArchiveIterator(__import__("io").BytesIO(data))))
        assert rec.rec_headers.get_header("WARC-Target-URI") == url
        assert rec.rec_type == wtype
        if wtype == "response":
            body = rec.content_stream().read()
            assert payload_digest(body) == "sha1:" + digest


def test_duckdb_reads_the_output_directly(crawled):
    cfg, _ = crawled
    con = duckdb.connect()
    n = con.execute(f"""SELECT count(*) FROM read_parquet('{cfg.root}/index/*/*/*.parquet', hive_partitioning=true)
                        WHERE crawl = 't1' AND subset = 'warc'""").fetchone()[0]
    assert n > 100
    for name in query.named_queries():
        table = query.run(cfg.root, cfg.crawl_id, name)
        assert table.num_columns > 0, name


def test_duplicates_detected_against_truth(crawled, simweb):
    cfg, _ = crawled
    truth = simweb.truth().select(["url", "duplicate_cluster", "dup_kind"])
    con = _con(cfg)
    con.register("truth", truth)
    # exact mirrors and syndicated copies that were fetched along with their original
    pairs = con.execute("""
        SELECT c.url, c.status, c.duplicate_of, t1.duplicate_cluster = t2.duplicate_cluster AS same_cluster
        FROM crawldb c JOIN truth t1 ON t1.url = c.url LEFT JOIN truth t2 ON t2.url = c.duplicate_of
        WHERE c.status IN ('duplicate', 'near_duplicate')
    """).fetchall()
    assert len(pairs) >= 3
    wrong = [p for p in pairs if not p[3]]
    assert len(wrong) <= max(1, len(pairs) // 20), wrong[:5]  # precision >= 95 %
    # every fetched page of a duplicate cluster whose original was fetched earlier is flagged
    missed = con.execute("""
        WITH fetched AS (SELECT c.url, c.status, c.first_fetch_time, t.duplicate_cluster, t.dup_kind
                         FROM crawldb c JOIN truth t USING (url) WHERE c.fetch_count > 0 AND c.first_fetch_time IS NOT NULL)
        SELECT a.url FROM fetched a JOIN fetched b ON a.duplicate_cluster = b.duplicate_cluster AND a.url <> b.url
        WHERE a.dup_kind = 'exact' AND b.dup_kind = 'original' AND b.first_fetch_time < a.first_fetch_time
          AND a.status NOT IN ('duplicate', 'near_duplicate')
    """).fetchall()
    assert not missed, missed[:5]


def test_sitemaps_feed_discovery_and_change_evidence(crawled, simweb):
    cfg, _ = crawled
    con = _con(cfg)
    truth = simweb.truth().select(["url", "last_change_time"])
    con.register("truth", truth)
    n_lastmod, n_sitemap_source = con.execute(
        "SELECT count(sitemap_lastmod), count(*) FILTER (WHERE source = 'sitemap') FROM crawldb").fetchone()
    assert n_lastmod > 10 and n_sitemap_source > 0
    # hosts whose sitemaps tell the truth: lastmod equals the page's true last change (to the second)
    agree = con.execute("""
        SELECT count(*) FILTER (WHERE abs(epoch(c.sitemap_lastmod) - epoch(t.last_change_time)) < 1), count(*)
        FROM crawldb c JOIN truth t USING (url) WHERE c.sitemap_lastmod IS NOT NULL
    """).fetchone()
    assert agree[0] > 0, agree


def test_traps_stopped(crawled, simweb):
    cfg, _ = crawled
    con = _con(cfg)
    deepest = con.execute("SELECT max(depth) FROM crawldb").fetchone()[0]
    assert deepest <= cfg.max_depth
    # repeated segments and query explosions never enter the CrawlDb
    bad = con.execute(f"""
        SELECT url FROM crawldb
        WHERE len(string_split(split_part(url, '?', 2), '&')) > {cfg.max_query_params}
           OR length(url) > {cfg.max_url_length}
    """).fetchall()
    assert not bad, bad[:5]


def test_api_summary_and_lookup(crawled):
    cfg, _ = crawled
    s = api.crawl_summary(cfg.root, cfg.crawl_id)
    assert s["last_round"] == 3 and s["known"] >= s["fetched"] > 100
    url = _con(cfg).execute("SELECT url FROM pages WHERE subset = 'warc' AND warc_type = 'response' LIMIT 1").fetchone()[0]
    cap = api.lookup(cfg.root, cfg.crawl_id, url.replace("http://", "HTTP://", 1) + "#frag")  # canonicalised
    assert cap is not None and cap["url"] == url
    assert api.read_body(cfg.root, cap)
    assert api.lookup(cfg.root, cfg.crawl_id, "http://never-seen.sim.test/x") is None
    assert api.crawl_summary(cfg.root, "nope") is None


def test_cli_query_lookup_stats(crawled):
    cfg, _ = crawled
    base = [sys.executable, "-m", "crawl"]
    common = ["--root", cfg.root, "--crawl-id", cfg.crawl_id]
    out = subprocess.run(base + ["query", "status_mix", *common], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "status" in out.stdout
    stats = json.loads(subprocess.run(base + ["stats", *common], capture_output=True, text=True, timeout=60).stdout)
    assert stats["last_round"] == 3
    url = _con(cfg).execute("SELECT url FROM pages WHERE subset='warc' AND warc_type='response' LIMIT 1").fetchone()[0]
    out = subprocess.run(base + ["lookup", url, *common], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["url"] == url
    body = subprocess.run(base + ["lookup", url, "--body", *common], capture_output=True, timeout=60)
    assert body.returncode == 0 and b"<html" in body.stdout.lower()
    bad = subprocess.run(base + ["query", "no_such_query", *common], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown query" in bad.stderr


def test_bad_seeds_are_refused_and_nothing_is_written(tmp_path, simweb):
    cfg = crawl_config(tmp_path / "r", simweb)
    with pytest.raises(SeedError) as err:
        rnd.inject(cfg, ["http://ok.sim.test/", "ftp://x.sim.test/", "not a url", "http://"])
    msg = str(err.value)
    assert "ftp://x.sim.test/" in msg and "not a url" in msg and "'http://'" in msg
    assert "ok.sim.test" not in msg
    assert not (tmp_path / "r").exists()
    cli = subprocess.run([sys.executable, "-m", "crawl", "inject", "--root", str(tmp_path / "r"),
                          "--seeds", "javascript:alert(1)"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and "javascript:alert(1)" in cli.stderr
    assert not (tmp_path / "r").exists()
