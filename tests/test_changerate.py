"""Change-rate estimators against closed forms and simulated Poisson processes."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from crawl import changerate as cr


def test_cgm_closed_forms():
    n = np.array([10, 10, 10, 0])
    x = np.array([0, 10, 5, 0])
    r = cr.cgm_rate(n, x, np.array([1.0, 1.0, 2.0, 1.0]))
    assert r[0] == 0.0                                       # X = 0: no change seen
    assert math.isclose(r[1], math.log(10.5 / 0.5))          # X = n: finite, ln(2n+1)/I
    assert math.isclose(r[2], -math.log(5.5 / 10.5) / 2.0)
    assert np.isnan(r[3])                                     # no checks: no estimate


def test_irregular_equals_cgm_for_regular_intervals():
    rng = np.random.default_rng(1)
    n = rng.integers(1, 40, 200)
    x = rng.integers(0, 41, 200) % (n + 1)
    interval = rng.uniform(0.1, 5.0, 200)
    cgm = cr.cgm_rate(n, x, interval)
    irr = cr.irregular_rate(x, (n - x) * interval, x * interval)
    np.testing.assert_allclose(irr, cgm, rtol=1e-12)


def _simulate(lam: np.ndarray, intervals: np.ndarray, rng: np.random.Generator):
    """Checks of Poisson pages: per page, (changes seen, unchanged time, changed time)."""
    changed = rng.random(intervals.shape) < 1.0 - np.exp(-lam[:, None] * intervals)
    x = changed.sum(axis=1)
    return x, np.where(changed, 0.0, intervals).sum(axis=1), np.where(changed, intervals, 0.0).sum(axis=1)


def test_simulated_poisson_recovers_rate_regular_and_irregular():
    rng = np.random.default_rng(7)
    pages, checks = 4000, 60
    lam = rng.choice([0.05, 0.3, 1.0, 3.0], pages)
    for intervals in (np.full((pages, checks), 0.5), rng.exponential(0.5, (pages, checks))):
        x, tu, tc = _simulate(lam, intervals, rng)
        est = cr.irregular_rate(x, tu, tc)
        for rate in (0.05, 0.3, 1.0, 3.0):
            med = np.mean(est[lam == rate])
            assert abs(med / rate - 1) < 0.15, (rate, med)


def test_bias_correction_beats_naive_on_fast_pages():
    rng = np.random.default_rng(3)
    lam = np.full(3000, 2.0)
    x, tu, tc = _simulate(lam, np.full((3000, 20), 1.0), rng)
    naive = x / 20.0
    est = cr.irregular_rate(x, tu, tc)
    assert abs(np.mean(est) - 2.0) < abs(np.mean(naive) - 2.0)
    assert np.mean(naive) < 1.0  # a check sees "at least one change": naive saturates at 1/I


def test_gamma_poisson_shrinks_then_follows_history():
    prior = np.array([1.0, 1.0, 1.0])
    post = cr.gamma_poisson(prior, np.array([0.0, 0.0, 50.0]), np.array([0.0, 100.0, 10.0]))
    assert math.isclose(post[0], 1.0)          # no evidence: the prior
    assert post[1] < 0.02                      # long history without change: near zero
    assert abs(post[2] - 51 / 11) < 1e-9           # own history dominates the prior


def test_http_dates_and_liars():
    dates = pa.array(["Mon, 05 Jan 2026 10:00:00 GMT", None, "garbage", " Tue, 06 Jan 2026 00:00:00 GMT"])
    s = cr.http_date_seconds(dates)
    assert s[0] == 1767607200 and np.isnan(s[1]) and np.isnan(s[2]) and s[3] == 1767657600
    hosts = np.array(["honest"] * 4 + ["liar"] * 4)
    seen = np.full(8, 1_800_000_000.0)
    lastmod = np.array([seen[0] - 86400 * k for k in (1, 2, 30, 0.001)] + [seen[0] - 10] * 3 + [seen[0] - 9e5])
    ok = cr.trusted_lastmod(hosts, lastmod, seen)
    assert np.all(~np.isnan(ok[:4]))           # one "just changed" page does not make a host a liar
    assert np.all(np.isnan(ok[4:]))            # "always now": every date of the host is dropped


def test_changefreq_and_age_evidence():
    r = cr.changefreq_rate(pa.array(["daily", " Weekly", None, "sometimes", "never"]))
    assert r[0] == 1.0 and math.isclose(r[1], 1 / 7) and np.isnan(r[2]) and np.isnan(r[3]) and r[4] == cr.MIN_RATE
    ev, ex = cr.evidence(np.array([0, 0, 2]), np.array([0.0, 0.0, 8.0]), np.array([0.0, 0.0, 2.0]),
                         np.array([np.nan, 30.0, 30.0]))
    assert (ev[0], ex[0]) == (0.0, 0.0)
    assert (ev[1], ex[1]) == (1.0, 30.0)       # age of the current version: one event over its age
    assert ex[2] == 10.0                       # history present: the age is not double counted
