"""The freshness model on the simulated web: the learned prior, and the engine's rounds using it."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
