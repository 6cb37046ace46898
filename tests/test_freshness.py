"""The freshness model on the simulated web: the learned prior, and the engine's rounds using it."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyrun import python_c

from crawl import changerate as cr
from crawl import crawldb, prior
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.simweb.model import SimParams, build
from crawl.simweb.truth import truth_table
from crawl.store import Store

T0 = 1767225600 + 30 * 86_400


def _history_table(hosts: int, seed: int, checks: int, interval_days: float):
    """CrawlDb-shaped rows for a simulated web's HTML pages, with re-check histories from its true versions."""
    model = build(SimParams(seed=seed, hosts=hosts, pages_per_host=20))
    truth = truth_table(model, T0)
    html = pc.is_in(truth.column("page_type"), pa.array(["home", "article"]))
    truth = truth.filter(html)
    ids = np.array([model.url_index[u] for u in truth.column("url").to_pylist()])
    times = T0 + np.arange(checks + 1) * interval_days * 86_400
    versions = np.stack([model.version_at(ids, np.full(ids.size, t)) for t in times], axis=1)
    changed = np.diff(versions, axis=1) > 0
    x = changed.sum(axis=1)
    tu = (~changed).sum(axis=1) * interval_days
    tc = x * interval_days
    db = crawldb.conform(pa.table({
        "url": truth.column("url"), "url_hash": pa.array(np.arange(1, ids.size + 1, dtype=np.uint64) * 7919),
        "host": truth.column("host"), "depth": truth.column("depth_from_home").cast(pa.int32()),
    }))
    return db, x, tu, tc, truth.column("change_rate").to_numpy()


def test_prior_beats_a_constant_on_held_out_simulated_web():
    db, x, tu, tc, true_rate = _history_table(hosts=60, seed=3, checks=8, interval_days=1.0)
    events, exposure = cr.evidence(x, tu, tc, np.full(x.size, np.nan))
    checks = np.full(x.size, 8)
    model = prior.fit(db, events, exposure, checks)
    m = model.metrics
    assert model.model is not None and m["holdout"] > 50
    assert m["holdout_deviance"] < 0.8 * m["holdout_deviance_constant"], m
    # cold start: a web the model never saw (another seed), no history at all -- the prior alone
    db2, x2, tu2, tc2, true2 = _history_table(hosts=40, seed=4, checks=8, interval_days=1.0)
    zero = np.zeros(db2.num_rows)
    pred = prior.predict(model, db2, zero, zero, zero.astype(int))
    err_model = np.mean(np.abs(np.log((pred + 0.01) / (true2 + 0.01))))
    err_const = np.mean(np.abs(np.log((model.global_rate + 0.01) / (true2 + 0.01))))
    assert err_model < 0.8 * err_const, (err_model, err_const)


def test_prior_trains_on_one_recheck_or_a_last_modified_age():
    """No URL has a second re-check yet (the first rounds of a crawl): one re-check 8 h after the first
    fetch, or only the age of the current version from Last-Modified, is enough to fit the model, and it
    ranks an unseen web's pages better than a constant."""
    db, x, tu, tc, true_rate = _history_table(hosts=60, seed=3, checks=1, interval_days=1 / 3)
    # half the pages: their Last-Modified age instead of a re-check (time since the last true change)
    model_web = build(SimParams(seed=3, hosts=60, pages_per_host=20))
    ids = np.array([model_web.url_index[u] for u in db.column("url").to_pylist()])
    last_change = model_web.change_time(ids, model_web.version_at(ids, np.full(ids.size, T0)))
    age = np.where(np.isnan(last_change), 30.0, (T0 - np.nan_to_num(last_change)) / 86_400)
    aged = np.arange(ids.size) % 2 == 0
    events, exposure = cr.evidence(np.where(aged, 0, x), np.where(aged, 0.0, tu), np.where(aged, 0.0, tc),
                                   np.where(aged, age, np.nan))
    checks = np.where(aged, 0, 1)
    model = prior.fit(db, events, exposure, checks)
    assert model.model is not None and "fallback" not in model.metrics
    assert model.metrics["usable"] == int((exposure > 0).sum()) > 0.9 * ids.size
    db2, *_, true2 = _history_table(hosts=40, seed=4, checks=1, interval_days=1.0)
    zero = np.zeros(db2.num_rows)
    pred = prior.predict(model, db2, zero, zero, zero.astype(int))
    err_model = np.mean(np.abs(np.log((pred + 0.01) / (true2 + 0.01))))
    err_const = np.mean(np.abs(np.log((model.global_rate + 0.01) / (true2 + 0.01))))
    assert err_model < 0.8 * err_const, (err_model, err_const)


def test_rounds_use_the_model_and_next_fetch_is_queryable(simweb, tmp_path):
    cfg = load_config(overrides={
        "root": str(tmp_path), "crawl_id": "fr", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.0,
        "max_pages": 150, "partitions": 2, "url_shards": 2, "round_duration_s": 20.0, "connect_timeout_s": 2.0,
        "read_timeout_s": 2.0, "total_timeout_s": 3.0, "dask_workers": 2,
    }, use_env=False)
    store = Store(cfg.root, cfg.crawl_id)
    with dask_client(cfg) as client:
        for r in range(3):
            now = T0 + r * 6 * 3600
            simweb.set_clock(now)
            rnd.run_round(cfg, simweb.seed_urls(6) if r == 0 else None, now=datetime.fromtimestamp(now, UTC),
                          client=client)
    rep = store.read_json(store.round_dir(3, "reprioritise.json"))
    assert rep["policy"] == "default" and rep["round_spacing_s"] == 6 * 3600
    assert store.exists(rep["model"]["path"] + "/metrics.json")
    db = crawldb.read(store, 3, cfg.url_shards)
    assert pc.all(pc.is_valid(db.filter(pc.equal(db.column("status"), "fetched")).column("change_rate"))).as_py()
    # re-checked pages carry their history
    assert pc.sum(db.column("unchanged_time_s")).as_py() + pc.sum(db.column("changed_time_s")).as_py() > 0
    con = duckdb.connect()
    con.register("db", db)
    rows = con.sql("""
        SELECT url, next_fetch_time, priority, change_rate, importance FROM db
        WHERE status IN ('fetched', 'not_modified') ORDER BY next_fetch_time, priority DESC LIMIT 20
    """).fetchall()
    assert len(rows) == 20 and all(r[1] is not None and r[3] > 0 for r in rows)


# ---- sitemaps -----------------------------------------------------------------------------------------
def test_parse_sitemap_namespaces_gzip_whitespace_and_caps():
    import gzip

    from crawl.sitemaps import parse_sitemap

    body = b"""<?xml version="1.0"?>
    <urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <url><loc>
         http://a.test/x</loc><lastmod> 2026-01-05 </lastmod><changefreq>Daily</changefreq></url>
      <url><loc>/relative</loc></url>
      <url><loc>https://a.test/y</loc><lastmod>2026-01-05T10:00:00+02:00</lastmod></url>
      <url><loc>https://a.test/z</loc><lastmod>not a date</lastmod></url>
    </urlset>"""
    for b in (body, gzip.compress(body), body.replace(b' xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"', b"")):
        entries, children = parse_sitemap(b, "http://a.test/sitemap.xml")
        assert children == []
        assert [e[0] for e in entries] == ["http://a.test/x", "https://a.test/y", "https://a.test/z"]
        assert entries[0][1] == datetime(2026, 1, 5, tzinfo=UTC) and entries[0][2] == "daily"
        assert entries[1][1] == datetime(2026, 1, 5, 8, tzinfo=UTC) and entries[2][1] is None
    assert len(parse_sitemap(body, "", max_entries=2)[0]) == 2
    index = b"<sitemapindex><sitemap><loc>http://a.test/s1.xml</loc></sitemap><sitemap><loc>http://a.test/s2.xml" \
            b"</loc></sitemap></sitemapindex>"
    assert parse_sitemap(index, "") == ([], ["http://a.test/s1.xml", "http://a.test/s2.xml"])


def test_the_fetchers_sitemap_parse_loads_no_duckdb():
    """A worker's first sitemap imports crawl.sitemaps on its fetch loop: DuckDB (only update's
    ``sitemap_rows`` uses it) must not come with it."""
    code = ("import sys\n"
            "import crawl.fetch, crawl.tasks\n"
            "from crawl.sitemaps import parse_sitemap\n"
            "assert parse_sitemap(b'<urlset><url><loc>http://a.test/x</loc></url></urlset>', '')[0]\n"
            "print('duckdb' in sys.modules)\n")
    assert python_c(code).split() == ["False"]


def test_parse_sitemap_refuses_entities_bombs_and_garbage():
    from crawl.sitemaps import parse_sitemap

    xxe = b"""<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>
    <urlset><url><loc>http://a.test/&x;</loc></url></urlset>"""
    assert parse_sitemap(xxe, "") == ([], [])
    laughs = b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]><urlset/>'
    assert parse_sitemap(laughs, "") == ([], [])
    import gzip
    bomb = gzip.compress(b"<urlset>" + b" " * 3_000_000 + b"</urlset>")
    assert parse_sitemap(bomb, "", max_bytes=1_000_000) == ([], [])
    assert parse_sitemap(b"\x00\xff not xml", "") == ([], [])
    assert parse_sitemap(b"", "") == ([], [])


def test_simulated_web_sitemaps_parse_to_truth_and_liars_are_detected(simweb):
    from crawl.changerate import trusted_lastmod
    from crawl.sitemaps import entry_table, parse_sitemap, sitemap_rows
    from crawl.url import canonicalize, url_hashes

    at = T0 + 5 * 86_400
    simweb.set_clock(at)
    truth = simweb.truth(at)
    hosts = {h: m for h, m in zip(truth.column("host").to_pylist(), truth.column("host_sitemap").to_pylist(),
                                   strict=True) if m != "none"}
    flavour = dict(zip(truth.column("host").to_pylist(), truth.column("host_lastmod").to_pylist(), strict=True))
    tables = []
    for host in sorted(hosts)[:12]:
        queue, seen = [f"http://{host}/sitemap.xml"], 0
        while queue and seen < 10:   # follow indexes, bounded
            url = queue.pop()
            seen += 1
            status, _, body = simweb.request(url)
            if status != 200:
                continue
            entries, children = parse_sitemap(body, url)
            queue.extend(children)
            tables.append(entry_table(url, host, entries, datetime.fromtimestamp(at, UTC)))
    entries = pa.concat_tables(tables)
    assert entries.num_rows > 20
    truth_last = dict(zip(truth.column("url").to_pylist(), truth.column("last_change_time").to_pylist(), strict=True))
    for loc, lm, host in zip(entries.column("loc").to_pylist(), entries.column("lastmod").to_pylist(),
                             entries.column("host").to_pylist(), strict=True):
        canon = canonicalize(loc)
        assert canon in truth_last
        if flavour[host] == "true":
            assert abs((lm - truth_last[canon]).total_seconds()) < 1
        elif flavour[host] == "absent":
            assert lm is None
    lm_s = pc.cast(entries.column("lastmod"), pa.int64()).to_numpy(zero_copy_only=False) / 1000
    lm_s = np.where(pc.is_null(entries.column("lastmod")).to_numpy(zero_copy_only=False), np.nan, lm_s)
    trusted = trusted_lastmod(entries.column("host").to_numpy(zero_copy_only=False), lm_s, np.full(lm_s.size, at))
    fl = np.array([flavour[h] for h in entries.column("host").to_pylist()])
    assert np.all(np.isnan(trusted[fl == "now"])) and (fl == "now").any()
    assert np.mean(~np.isnan(trusted[fl == "true"])) > 0.9
    # update side: listed URLs become CrawlDb rows with their evidence
    canon = [canonicalize(u) for u in entries.column("loc").to_pylist()]
    entries = entries.set_column(entries.schema.get_field_index("loc"), "loc", pa.array(canon, pa.string()))
    db, new = sitemap_rows(crawldb.CRAWLDB_SCHEMA.empty_table(), entries, url_hashes(pa.array(canon)), round_no=2)
    assert new.num_rows == len(set(canon)) and set(new.column("source").to_pylist()) == {"sitemap"}
    assert pc.sum(pc.is_valid(new.column("sitemap_lastmod"))).as_py() > 0


def test_prior_between_refits_keeps_known_rows_and_predicts_only_new_ones(tmp_path):
    """prior_every_rounds: a refit round saves model and per-row priors; the next round (off the
    cadence) keeps every known row's prior and predicts new rows with the saved model."""
    store = Store(str(tmp_path), "pr")
    db, x, tu, tc, _ = _history_table(hosts=30, seed=5, checks=6, interval_days=1.0)
    events, exposure = cr.evidence(x, tu, tc, np.full(x.size, np.nan))
    checks = np.full(x.size, 6)
    p4, s4 = prior.for_round(store, 4, db, events, exposure, checks, every=4)
    assert s4["refit"] and s4["fit_round"] == 4
    # round 5: the same rows, shuffled, with different evidence, plus rows another web brings (new)
    db2, x2, tu2, tc2, _ = _history_table(hosts=10, seed=6, checks=6, interval_days=1.0)
    db2 = db2.set_column(1, "url_hash", pa.array(np.arange(db2.num_rows, dtype=np.uint64) * 7919 + 10**9 + 1))
    both = pa.concat_tables([db, db2])
    ev2, ex2 = cr.evidence(np.r_[x * 0, x2], np.r_[tu, tu2], np.r_[tc, tc2], np.full(both.num_rows, np.nan))
    order = np.random.default_rng(0).permutation(both.num_rows)
    both, ev2, ex2 = both.take(pa.array(order)), ev2[order], ex2[order]
    p5, s5 = prior.for_round(store, 5, both, ev2, ex2, np.full(both.num_rows, 6), every=4)
    assert not s5["refit"] and s5["fit_round"] == 4 and s5["predicted_rows"] == db2.num_rows
    known = order < db.num_rows
    assert np.array_equal(p5[known], p4[order[known]])  # kept, although their evidence changed
    model = pickle.loads(store.read_bytes(f"{s4['path']}/model.pkl"))
    new_rows = np.flatnonzero(~known)
    want = prior.predict(model, both.take(pa.array(new_rows)), ev2[new_rows], ex2[new_rows], np.full(new_rows.size, 6))
    assert np.allclose(p5[new_rows], want)
    # every=1: a refit every round
    assert prior.for_round(store, 6, both, ev2, ex2, np.full(both.num_rows, 6), every=1)[1]["refit"]
