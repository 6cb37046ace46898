"""Crawl rounds end to end on a real embedded Dask cluster against the simulated web on loopback.

One module-scoped crawl (3 rounds) is checked from every side the users and the hosts see:
the server's access log (politeness, robots), the page index read by DuckDB, the WARC files read
back with warcio at the index's offsets, the CrawlDb against the simulated web's truth (duplicates,
traps), and the CLI. Crash/resume and worker-loss tests live in test_resilience.py.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl import api, query
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.errors import SeedError
from crawl.fingerprint import payload_digest
from crawl.simweb.accesslog import politeness_report
from crawl.simweb.render import Renderer, strip_noise
from crawl.simweb.server import TRAP_PREFIXES, lookup_key
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


def _fetch_rows(cfg) -> pa.Table:
    """Every fetch attempt the crawl recorded (all rounds, robots.txt and sitemaps included)."""
    files = sorted(Path(cfg.root, "state", f"crawl={cfg.crawl_id}", "rounds").glob("*/fetched/*.parquet"))
    assert files
    return pa.concat_tables(pq.read_table(p, columns=["url", "http_status", "error"]) for p in files)


def _target(url: str) -> tuple[str, str]:
    p = urlsplit(url)
    return p.hostname or "", (p.path or "/") + (f"?{p.query}" if p.query else "")


def _crawler_requests(cfg, simweb) -> Counter:
    """(host, path?query) of every request our crawler made, from the server's flushed access log."""
    log = simweb.log()
    return Counter((h, p) for h, p, ua in zip(log.column("host").to_pylist(), log.column("path").to_pylist(),
                                              log.column("user_agent").to_pylist(), strict=True)
                   if ua == cfg.user_agent)


def _recorded_requests(cfg) -> Counter:
    """(host, path?query) of every attempt the crawl recorded as sent: a response, or a timeout."""
    rows = _fetch_rows(cfg)
    sent = pc.or_kleene(pc.greater(rows.column("http_status"), 0), pc.equal(rows.column("error"), "timeout"))
    return Counter(_target(u) for u in rows.filter(pc.fill_null(sent, False)).column("url").to_pylist())


def test_access_log_holds_exactly_the_recorded_attempts(crawled, simweb):
    """The positive count that makes the "never requested" checks meaningful: the server saw exactly
    the requests the crawl recorded (a response, or a timeout after sending), no more, no less."""
    cfg, _ = crawled
    expected = _recorded_requests(cfg)
    got = _crawler_requests(cfg, simweb)
    assert sum(got.values()) > 200
    assert got == expected, (expected - got, got - expected)


def test_politeness_from_the_server_side(crawled, simweb):
    cfg, _ = crawled
    simweb.flush_log()
    report = politeness_report(simweb.access_log, user_agent_like=cfg.user_agent)
    assert report.num_rows > 10
    assert pc.sum(report.column("requests")).as_py() == sum(_crawler_requests(cfg, simweb).values())
    assert pc.max(report.column("max_in_flight")).as_py() == 1
    gaps = [g for g in report.column("min_gap_s").to_pylist() if g is not None]
    assert min(gaps) >= DELAY, f"min gap {min(gaps):.3f}s < {DELAY}s"


def test_robots_obeyed(crawled, simweb):
    cfg, _ = crawled
    truth = simweb.truth()
    denied = set(truth.filter(pc.invert(truth.column("robots_allowed"))).column("url").to_pylist())
    requested = _crawler_requests(cfg, simweb)
    # the log is complete (flushed, and it equals the attempts the crawl recorded), so absence means something
    assert requested == _recorded_requests(cfg) and sum(requested.values()) > 200
    assert denied, "the simulated web has robots-denied pages"
    hit = sorted(u for u in denied if _target(u) in requested)
    assert not hit, hit[:5]
    rows = _fetch_rows(cfg)
    refused = set(rows.filter(pc.equal(rows.column("error"), "robots")).column("url").to_pylist())
    assert refused and refused <= denied, sorted(refused - denied)[:5]  # the crawler met denied URLs
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


def _index_rows(cfg) -> list[dict]:
    """All page-index rows, read with pyarrow (not DuckDB), ``subset`` from the directory name."""
    out = []
    for d in sorted(Path(cfg.root, "index", f"crawl={cfg.crawl_id}").iterdir()):
        subset = d.name.split("=", 1)[1]
        for f in sorted(d.glob("*.parquet")):
            out += [{**r, "subset": subset} for r in pq.read_table(f).to_pylist()]
    return out


def _crawldb_rows(cfg) -> list[dict]:
    """The published CrawlDb version (the round CURRENT.json names), read with pyarrow."""
    state = Path(cfg.root, "state", f"crawl={cfg.crawl_id}")
    current = json.loads((state / "CURRENT.json").read_text())["round"]
    files = sorted((state / "crawldb" / f"v={current:05d}").glob("*.parquet"))
    assert files
    return pa.concat_tables(pq.read_table(f) for f in files).to_pylist()


def _near(got, exact, nd: int) -> bool:
    """``got`` is ``exact`` rounded to ``nd`` decimals (by DuckDB: allow its half-way rule)."""
    if got is None or exact is None:
        return got is None and exact is None
    return abs(got - exact) <= 0.5 * 10.0 ** -nd + 1e-9


def test_named_queries_agree_with_pyarrow_over_the_files(crawled):
    """Every named query's answer equals the same question answered in Python over the Parquet files."""
    cfg, _ = crawled
    idx, db = _index_rows(cfg), _crawldb_rows(cfg)
    warc = [r for r in idx if r["subset"] == "warc"]
    got = {name: query.run(cfg.root, cfg.crawl_id, name).to_pylist() for name in query.named_queries()}
    assert set(got) == {"duplicates", "freshness", "pages_per_host", "status_mix", "summary", "top_linked"}

    dups = sorted((r["round"], r["crawl_status"], r["url"], r["duplicate_of"]) for r in idx if r["duplicate_of"])
    assert dups, "the crawl found duplicates"
    assert [(g["round"], g["crawl_status"], g["url"], g["duplicate_of"]) for g in got["duplicates"]] == dups[:100]

    status = Counter(r["status"] for r in db)
    assert {g["status"]: g["urls"] for g in got["status_mix"]} == dict(status)
    assert all(_near(g["pct"], 100.0 * status[g["status"]] / len(db), 1) for g in got["status_mix"])
    assert [g["urls"] for g in got["status_mix"]] == sorted(status.values(), reverse=True)

    per_host: dict[str, list] = {}
    for r in warc:
        e = per_host.setdefault(r["url_host_name"], [0, set(), 0])
        e[0] += 1
        e[1].add(r["url"])
        e[2] += r["crawl_status"] in ("duplicate", "near_duplicate")
    hosts = sorted(((-c, h, c, len(u), d) for h, (c, u, d) in per_host.items()))[:50]
    assert [(g["host"], g["captures"], g["urls"], g["duplicates"]) for g in got["pages_per_host"]] == \
        [h[1:] for h in hosts]

    rounds = sorted({r["round"] for r in warc})
    assert rounds == [1, 2, 3]
    want = []
    for n in rounds:
        rr = [r for r in warc if r["round"] == n]
        want.append({"round": n, "captures": len(rr), "urls": len({r["url"] for r in rr}),
                     "hosts": len({r["url_host_name"] for r in rr}),
                     "fetched": sum(r["crawl_status"] == "fetched" for r in rr),
                     "duplicates": sum(r["crawl_status"] in ("duplicate", "near_duplicate") for r in rr),
                     "revisits": sum(r["warc_type"] == "revisit" for r in rr)})
    assert got["summary"] == want

    links = pa.concat_tables(pq.read_table(f, columns=["from_hash", "to_url"]) for f in
                             sorted(Path(cfg.root, "links", f"crawl={cfg.crawl_id}").glob("*/*.parquet")))
    linkers: dict[str, set] = {}
    for f, t in zip(links.column("from_hash").to_pylist(), links.column("to_url").to_pylist(), strict=True):
        linkers.setdefault(t, set()).add(f)
    top = sorted((-len(v), u) for u, v in linkers.items())[:50]
    assert [(g["url"], g["inlinks"]) for g in got["top_linked"]] == [(u, -n) for n, u in top]

    due = sorted((r for r in db if r["next_fetch_time"] is not None), key=lambda r: -r["priority"])
    assert len(got["freshness"]) == min(50, len(due)) > 0
    # ties in priority may come in any order: compare the priorities in order and every row by its URL
    assert all(_near(g["priority"], r["priority"], 4) for g, r in zip(got["freshness"], due, strict=False))
    by_url = {r["url"]: r for r in db}
    for g in got["freshness"]:
        r = by_url[g["url"]]
        assert (g["status"], g["next_fetch_time"], g["check_count"], g["change_count"], g["last_change_time"]) == \
            (r["status"], r["next_fetch_time"], r["check_count"], r["change_count"], r["last_change_time"]), g
        assert _near(g["priority"], r["priority"], 4) and _near(g["changes_per_day"], r["change_rate"], 4) \
            and _near(g["importance"], r["importance"], 3), (g, r)


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
    assert not wrong, wrong[:5]  # the truth gives every flagged pair's cluster: none may be wrong
    # and the kind agrees: byte-identical copies are 'duplicate', edited copies 'near_duplicate'
    kinds = dict(con.execute("SELECT c.url, t.dup_kind FROM crawldb c JOIN truth t USING (url)").fetchall())
    for url, status, _, _ in pairs:
        assert kinds[url] == ("exact" if status == "duplicate" else "near"), (url, status, kinds[url])
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


def _sha1_b32(data: bytes) -> str:
    """The WARC-Payload-Digest form: SHA-1 in RFC 4648 base32 (computed here, not by the crawler)."""
    return base64.b32encode(hashlib.sha1(data).digest()).decode()


def _served(simweb, url: str, t: float) -> tuple[bytes, bool] | None:
    """The bytes the simulated web served for ``url`` at virtual time ``t`` (noise slots included when
    ``noisy``), rendered in this process from the same model; None for a page whose version changes
    within 2 s of ``t`` (which version the crawler saw is then not known) or that is not a model page."""
    m = simweb.model
    p = urlsplit(url)
    host = m.host_of(p.hostname or "")
    if host is None or (host.kind == "trap" and (p.path or "/").startswith(TRAP_PREFIXES)):
        return None
    pid = m.page_at(host, lookup_key(p.path or "/", p.query))
    if pid is None:
        return None
    v0 = m.version_info(np.array([pid]), t - 2.0)[0][0]
    v, last, _ = m.version_info(np.array([pid]), t)
    v1 = m.version_info(np.array([pid]), t + 2.0)[0][0]
    if not v0 == v[0] == v1:
        return None
    r = Renderer(m).get(pid, int(v[0]), float(last[0]))
    return r.body(0, t), r.noisy


def _same_payload(stored: bytes, served: tuple[bytes, bool]) -> bool:
    body, noisy = served
    return strip_noise(stored) == strip_noise(body) if noisy else stored == body


def _payload_digest_header(cfg, cap: dict) -> str:
    where = cap["body_record"] or cap
    with open(Path(cfg.root) / where["warc_filename"], "rb") as fh:
        fh.seek(where["warc_record_offset"])
        rec = next(iter(ArchiveIterator(io.BytesIO(fh.read(where["warc_record_length"])))))
    return rec.rec_headers.get_header("WARC-Payload-Digest")


def _lookup_cases(cfg, simweb) -> list[tuple[str, dict, tuple[bytes, bool], str]]:
    """Captures to check: the first response captures of plain and of noisy hosts, and revisits (a
    mirror whose payload is stored once, under its original's URL), each with what was served."""
    con = _con(cfg)
    latest = con.execute("""
        SELECT url, warc_type, epoch_ms(fetch_time) / 1000.0 FROM pages
        WHERE subset = 'warc' AND fetch_status = 200
        QUALIFY row_number() OVER (PARTITION BY url ORDER BY fetch_time DESC) = 1 ORDER BY url
    """).fetchall()
    want = {"revisit": 3, "plain": 3, "noisy": 3}
    cases = []
    for url, wtype, t in latest:
        if wtype == "revisit" and not want["revisit"] or wtype == "response" and not (want["plain"] or want["noisy"]):
            continue
        served = _served(simweb, url, t)
        if served is None:
            continue
        kind = "revisit" if wtype == "revisit" else "noisy" if served[1] else "plain"
        if want[kind]:
            want[kind] -= 1
            cases.append((url, api.lookup(cfg.root, cfg.crawl_id, url), served, kind))
        if not any(want.values()):
            break
    assert not any(want.values()), want
    return cases


def test_api_summary_and_lookup(crawled, simweb):
    cfg, _ = crawled
    s = api.crawl_summary(cfg.root, cfg.crawl_id)
    assert s["last_round"] == 3 and s["known"] >= s["fetched"] > 100
    url = _con(cfg).execute("SELECT url FROM pages WHERE subset = 'warc' AND warc_type = 'response' LIMIT 1").fetchone()[0]
    cap = api.lookup(cfg.root, cfg.crawl_id, url.replace("http://", "HTTP://", 1) + "#frag")  # canonicalised
    assert cap is not None and cap["url"] == url
    assert api.lookup(cfg.root, cfg.crawl_id, "http://never-seen.sim.test/x") is None
    assert api.crawl_summary(cfg.root, "nope") is None
    # the stored body is what the server sent for that URL at that time, and its digest is the recorded one
    for url, cap, served, _ in _lookup_cases(cfg, simweb):
        body = api.read_body(cfg.root, cap)
        assert _same_payload(body, served), (url, cap["warc_type"], len(body), len(served[0]))
        assert cap["content_digest"] == _sha1_b32(body), url
        assert _payload_digest_header(cfg, cap) == "sha1:" + _sha1_b32(body), url
        if cap["warc_type"] == "revisit":  # the payload lives in its original's response record
            ref = cap["body_record"]
            assert ref is not None and (ref["warc_filename"], ref["warc_record_offset"]) != \
                (cap["warc_filename"], cap["warc_record_offset"]), cap


def test_cli_query_lookup_stats(crawled, simweb):
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
    # --body writes the stored payload: the bytes the server sent, with the recorded digest
    one_each = {kind: (url, cap, served) for url, cap, served, kind in reversed(_lookup_cases(cfg, simweb))}
    for kind in ("plain", "revisit"):  # byte-exact, and a payload stored under its original's URL
        url, cap, served = one_each[kind]
        body = subprocess.run(base + ["lookup", url, "--body", *common], capture_output=True, timeout=60)
        assert body.returncode == 0, body.stderr
        assert _same_payload(body.stdout, served) and _sha1_b32(body.stdout) == cap["content_digest"], url
    bad = subprocess.run(base + ["query", "no_such_query", *common], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown query" in bad.stderr


def test_text_read_through_crawl_query_matches_the_pages_served(crawled, simweb):
    """The page text as users read it (``crawl query`` over the ``text`` view, the published text
    files: the only place the text is stored) against the server: only pages it answered 200 have
    text, every HTML page of unique content it answered 200 has it, under the title it was served."""
    cfg, _ = crawled
    out = subprocess.run([sys.executable, "-m", "crawl", "query", "--json", "--root", cfg.root,
                          "--crawl-id", cfg.crawl_id, "SELECT url, title, text, text_length FROM text"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    log = simweb.log()
    served = {(h, p) for h, p, ua, st in zip(*(log.column(c).to_pylist() for c in ("host", "path", "user_agent",
                                                                                    "status")), strict=True)
              if ua == cfg.user_agent and st == 200}
    assert {_target(r["url"]) for r in rows} <= served
    truth = simweb.truth().to_pylist()
    model = simweb.model
    from crawl.simweb.model import NORMAL_KINDS  # trap and hostile hosts serve pages of their own

    html = {r["url"]: i for i, r in enumerate(truth)
            if r["content_type"].startswith("text/html") and r["kind"] in NORMAL_KINDS and not r["trap"]}
    titles = {r["url"]: r["title"] for r in rows if r["url"] in html}
    for r in rows:
        if r["url"] in html:
            assert r["title"] == model.titles[html[r["url"]]] and len(r["text"]) > 100, r["url"]
            assert r["text_length"] == len(r["text"]), r["url"]
    unique = {u for u, i in html.items() if truth[i]["dup_kind"] == "" and not truth[i]["fault"]
              and _target(u) in served}
    assert len(unique) > 50 and unique <= set(titles), sorted(unique - set(titles))[:5]


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
