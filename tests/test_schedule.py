"""The scheduler: utility, thresholds, policies and the coverage share through the real frontier."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from crawl import crawldb, frontier, schedule
from crawl.config import load_config
from crawl.store import Store

NOW = datetime(2026, 3, 1, tzinfo=UTC)
DAY = 86_400.0


def test_utility_monotonic_in_t_and_bounded_by_mean_lifetime():
    t = np.linspace(0, 60, 2001)
    for lam in (0.01, 0.3, 1.0, 24.0):
        u = schedule.utility(np.full(t.size, lam), t)
        assert u[0] == pytest.approx(0.0, abs=1e-12)
        assert np.all(np.diff(u) >= -1e-12)
        assert u[-1] <= 1 / lam + 1e-9
    # for equal t a faster page has more expected staleness (until it saturates)
    assert schedule.utility(np.array([0.1]), np.array([1.0])) < schedule.utility(np.array([1.0]), np.array([1.0]))


def test_time_to_utility_inverts_utility():
    rate = np.array([0.05, 0.5, 2.0, 2.0])
    target = np.array([1.0, 0.5, 0.2, 0.6])  # the last is above 1/λ = 0.5: never reached
    t = schedule.time_to_utility(rate, target)
    np.testing.assert_allclose(schedule.utility(rate[:3], t[:3]), target[:3], rtol=1e-6)
    assert np.isinf(t[3])


def _db(n_content: int, n_new: int, rates: np.ndarray | None = None) -> pa.Table:
    """A CrawlDb with ``n_content`` fetched pages (a day old) on 20 hosts and ``n_new`` never-fetched URLs."""
    n = n_content + n_new
    fetched = np.arange(n) < n_content
    last = NOW.timestamp() - DAY
    ts = pa.array(np.where(fetched, last * 1000, 0).astype(np.int64), mask=~fetched).cast(
        pa.timestamp("ms", tz="UTC"))
    rates = rates if rates is not None else np.full(n_content, 0.5)
    checks = np.where(fetched, 10, 0)
    changes = np.zeros(n)
    changes[:n_content] = np.round(10 * (1 - np.exp(-rates * 1.0)))
    hosts = [f"h{i % 20}.test" for i in range(n)]
    return crawldb.conform(pa.table({
        "url": [f"http://{h}/p{i}" for i, h in enumerate(hosts)],
        "url_hash": pa.array(np.arange(1, n + 1, dtype=np.uint64)),
        "host": hosts, "pkey": hosts,
        "depth": pa.array(np.where(fetched, 1, 2).astype(np.int32)),
        "source": ["link"] * n,
        "status": np.where(fetched, "fetched", "unfetched").tolist(),
        "fetch_time": ts, "last_success_time": ts, "first_fetch_time": ts,
        "fetch_count": pa.array(np.where(fetched, 11, 0).astype(np.int32)),
        "check_count": pa.array(checks.astype(np.int32)),
        "change_count": pa.array(changes.astype(np.int32)),
        "unchanged_time_s": pa.array((checks - changes) * DAY),
        "changed_time_s": pa.array(changes * DAY),
        "round": pa.array(np.full(n, 3, np.int32)),
    }))


def _cfg(tmp_path, **over):
    return load_config(overrides={"root": str(tmp_path), "crawl_id": "s", "max_pages": 100,
                                  "politeness_delay_s": 0.0, **over}, use_env=False)


def test_coverage_share_respected_by_the_generated_round(tmp_path):
    cfg = _cfg(tmp_path, coverage_share=0.3)
    db, stats = schedule.reprioritise(cfg, Store(cfg.root, cfg.crawl_id), 3, _db(500, 400), NOW)
    selected = frontier.select(cfg, db, NOW)
    assert selected.num_rows == 100
    assert frontier.fresh_count(selected) == 30
    # with few never-fetched URLs their unused share flows to re-fetches
    db, _ = schedule.reprioritise(cfg, Store(cfg.root, cfg.crawl_id), 3, _db(500, 10), NOW)
    selected = frontier.select(cfg, db, NOW)
    assert selected.num_rows == 100 and frontier.fresh_count(selected) == 10


def test_default_prefers_pages_that_change(tmp_path):
    cfg = _cfg(tmp_path)
    rates = np.where(np.arange(300) % 3 == 0, 1.0, 0.001)   # a third of the pages change daily
    db, stats = schedule.reprioritise(cfg, Store(cfg.root, cfg.crawl_id), 3, _db(300, 0, rates), NOW)
    assert stats["policy"] == "default" and stats["model"]["usable"] == 300
    assert Store(cfg.root, cfg.crawl_id).exists(stats["model"]["path"] + "/metrics.json")
    rate = db.column("change_rate").to_numpy()
    movers = np.arange(300) % 3 == 0
    assert rate[movers].min() > 5 * rate[~movers].max()
    selected = frontier.select(cfg, db, NOW)
    picked = np.isin(db.column("url_hash").to_numpy(), selected.column("url_hash").to_numpy())
    assert picked[movers].all()                     # every mover is due and chosen
    assert not picked[~movers].any()                # static pages lose to them for the budget
    prio = db.column("priority").to_numpy()
    assert prio[movers].min() > prio[~movers].max()


def test_uniform_and_nutch_policies(tmp_path):
    cfg = _cfg(tmp_path, schedule_policy="uniform")
    db, _ = schedule.reprioritise(cfg, Store(cfg.root, cfg.crawl_id), 3, _db(50, 0), NOW)
    nxt = pc.cast(db.column("next_fetch_time"), pa.int64()).to_numpy() / 1000
    assert np.all(nxt <= NOW.timestamp())           # round robin: everything due, oldest first
    cfg = _cfg(tmp_path, schedule_policy="nutch")
    rates = np.where(np.arange(50) < 25, 24.0, 0.0)
    base = _db(50, 0, rates)
    # fetched this round: half changed at the fetch, half not; both at a 1-day interval
    t = base.column("last_success_time")
    base = base.set_column(base.schema.get_field_index("last_change_time"), "last_change_time",
                           pc.if_else(pa.array(rates > 0), t, pa.nulls(50, t.type)))
    base = base.set_column(base.schema.get_field_index("fetch_interval_s"), "fetch_interval_s",
                           pa.array(np.full(50, DAY)))
    db, _ = schedule.reprioritise(cfg, Store(cfg.root, cfg.crawl_id), 3, base, NOW)
    interval = db.column("fetch_interval_s").to_numpy()
    np.testing.assert_allclose(interval[:25], 0.8 * DAY)   # changed: I·(1 − 0.2)
    assert np.all(interval[25:] >= 1.4 * DAY - 1)          # unchanged: I·(1 + 0.4) (or sync_delta)


def test_static_copies_wait_until_a_change_is_likely(tmp_path):
    cfg = _cfg(tmp_path, max_pages=1000)
    rates = np.full(100, 0.0005)
    db, _ = schedule.reprioritise(cfg, Store(cfg.root, cfg.crawl_id), 3, _db(100, 0, rates), NOW)
    # ten unchanged daily checks: at most ~1 change in 20 days, so no re-fetch within the next days;
    # the budget is left to discovery and next_fetch_time says when each becomes worth it
    nxt = pc.cast(db.column("next_fetch_time"), pa.int64()).to_numpy() / 1000
    assert nxt.min() > NOW.timestamp() + DAY
    assert frontier.select(cfg, db, NOW).num_rows == 0
