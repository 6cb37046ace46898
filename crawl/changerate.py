"""Change-rate estimation: how often does each page really change (changes per day)?

Pages are modelled as Poisson processes (Cho & Garcia-Molina). A re-check only tells whether *at least
one* change happened since the previous check, so the naive X / T undercounts fast pages. Everything
here is vectorised over NumPy arrays, one element per URL.

- :func:`cgm_rate`: the bias-corrected estimator for n checks at a regular interval I with X changes,
  ``λ̂ = −ln((n − X + 0.5) / (n + 0.5)) / I``.
- :func:`irregular_rate`: the same idea for irregular intervals from what the CrawlDb keeps per URL
  (X, the summed intervals that saw no change T_u and that saw a change T_c). The MLE of
  ``Σ_changed ln(1 − e^{−λ t_i}) − λ T_u`` with the changed intervals taken at their mean m = T_c / X
  has the closed form ``ln(1 + T_c / T_u) / m``; adding half an interval to T_u (the CGM correction)
  keeps it finite when every check saw a change and makes it *equal* to :func:`cgm_rate` when the
  intervals are regular, so one formula serves both schedules.
- :func:`gamma_poisson`: empirical-Bayes shrinkage towards a prior mean (Gamma(α, α/μ) prior,
  Poisson evidence), so one observation cannot swing a page and its own history dominates once it has
  one.
- :func:`http_date_seconds` / :func:`trusted_lastmod`: Last-Modified / sitemap lastmod as evidence of a
  page's age, dropped for hosts whose dates are lies ("always now", or newer than an observed no-change).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DAY = 86_400.0
# a page's own evidence outweighs the prior after about this many "prior events"
PRIOR_SHAPE = 1.0
MIN_RATE = 1.0 / 3650.0   # once in ten years: "never" still gets a tiny rate (utilities stay finite)
MAX_RATE = 48.0           # twice an hour: beyond what a re-check schedule can observe
LIAR_AGE_S = 300.0        # a date this close to the fetch time is "now"
LIAR_SHARE = 0.5          # a host is a liar when more than this share of its dates look like lies

CHANGEFREQ_RATE = {       # sitemap <changefreq> → changes/day (sitemaps.org vocabulary)
    "always": 24.0, "hourly": 24.0, "daily": 1.0, "weekly": 1.0 / 7, "monthly": 1.0 / 30,
    "yearly": 1.0 / 365, "never": MIN_RATE,
}


def cgm_rate(n: np.ndarray, x: np.ndarray, interval_days: np.ndarray) -> np.ndarray:
    """Bias-corrected Cho-Garcia-Molina estimate (changes/day) for regular checks; NaN without checks."""
    n = np.asarray(n, np.float64)
    x = np.minimum(np.asarray(x, np.float64), n)
    interval = np.asarray(interval_days, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = -np.log((n - x + 0.5) / (n + 0.5)) / interval
    return np.where((n > 0) & (interval > 0), rate, np.nan)


def irregular_rate(x: np.ndarray, unchanged_days: np.ndarray, changed_days: np.ndarray) -> np.ndarray:
    """Approximate MLE (changes/day) for irregular check intervals, CGM-corrected; NaN without checks.

    ``x`` = checks that saw a change, ``unchanged_days`` / ``changed_days`` = summed intervals of the
    checks that saw no change / a change. Reduces to :func:`cgm_rate` for equal intervals.
    """
    x = np.asarray(x, np.float64)
    tu = np.maximum(np.asarray(unchanged_days, np.float64), 0.0)
    tc = np.maximum(np.asarray(changed_days, np.float64), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(x > 0, tc / np.maximum(x, 1.0), 0.0)
        rate = np.where(x > 0, np.log1p(tc / (tu + 0.5 * m)) / m, 0.0)
    return np.where(tu + tc > 0, rate, np.nan)


def gamma_poisson(prior_rate: np.ndarray, events: np.ndarray, exposure_days: np.ndarray,
                  shape: float | np.ndarray = PRIOR_SHAPE) -> np.ndarray:
    """Posterior mean rate: Gamma(shape, shape / prior) prior, ``events`` over ``exposure_days``."""
    prior = np.clip(np.asarray(prior_rate, np.float64), MIN_RATE, MAX_RATE)
    ev = np.nan_to_num(np.asarray(events, np.float64))
    ex = np.nan_to_num(np.asarray(exposure_days, np.float64))
    return np.clip((shape + ev) / (shape / prior + ex), MIN_RATE, MAX_RATE)


def http_date_seconds(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """RFC 7231 HTTP-dates → epoch seconds (NaN when absent or unparseable), vectorised in Arrow."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if len(arr) == 0:
        return np.empty(0)
    ts = pc.strptime(pc.utf8_trim_whitespace(arr), format="%a, %d %b %Y %H:%M:%S GMT", unit="s",
                     error_is_null=True)
    secs = pc.cast(ts, pa.int64()).cast(pa.float64())
    return pc.fill_null(secs, np.nan).to_numpy(zero_copy_only=False)


def trusted_lastmod(hosts: np.ndarray, lastmod_s: np.ndarray, seen_s: np.ndarray,
                    contradicted: np.ndarray | None = None) -> np.ndarray:
    """``lastmod_s`` where the host's dates can be believed, NaN elsewhere.

    A date is suspicious when it is within :data:`LIAR_AGE_S` of the time it was seen (``seen_s``:
    fetch time for Last-Modified) or in the future, or when ``contradicted`` (it claims a change the
    page's own re-checks did not see). A host with more than :data:`LIAR_SHARE` suspicious dates is a
    liar and all its dates are dropped: a server that says "changed just now" for every page says
    nothing; an honest host's few pages that did change just before a fetch are kept.
    """
    lm = np.asarray(lastmod_s, np.float64)
    has = ~np.isnan(lm) & ~np.isnan(seen_s)
    bad = has & ((seen_s - lm) < LIAR_AGE_S)
    if contradicted is not None:
        bad |= has & contradicted
    if not has.any():
        return np.full(lm.shape, np.nan)
    _, inv = np.unique(hosts, return_inverse=True)
    n_has = np.bincount(inv, weights=has.astype(np.float64))
    n_bad = np.bincount(inv, weights=bad.astype(np.float64))
    liar = n_bad > LIAR_SHARE * np.maximum(n_has, 1.0)
    return np.where(has & ~liar[inv], lm, np.nan)


def changefreq_rate(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Sitemap <changefreq> words → changes/day (NaN when absent or unknown)."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    keys = pa.array(list(CHANGEFREQ_RATE))
    idx = pc.index_in(pc.utf8_lower(pc.utf8_trim_whitespace(arr)), value_set=keys)
    rates = np.array(list(CHANGEFREQ_RATE.values()))
    i = pc.fill_null(idx, -1).to_numpy(zero_copy_only=False)
    return np.where(i >= 0, rates[np.maximum(i, 0)], np.nan)


def evidence(x: np.ndarray, unchanged_days: np.ndarray, changed_days: np.ndarray,
             age_days: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(events, exposure days) to feed :func:`gamma_poisson`.

    Re-check history gives ``irregular_rate × exposure`` events (the CGM-corrected count). A trusted
    Last-Modified age counts when there is no re-check yet: the time since the last change of a Poisson
    page is Exp(λ), i.e. one event over ``age`` days (a cold-start signal that separates the static
    majority from the movers before the second fetch).
    """
    exposure = np.maximum(np.nan_to_num(unchanged_days), 0) + np.maximum(np.nan_to_num(changed_days), 0)
    rate = irregular_rate(x, unchanged_days, changed_days)
    events = np.where(exposure > 0, np.nan_to_num(rate) * exposure, 0.0)
    use_age = (exposure <= 0) & ~np.isnan(age_days) & (age_days > 0)
    age = np.where(use_age, np.maximum(np.nan_to_num(age_days), 1.0 / 24), 0.0)
    return events + use_age, exposure + age


__all__ = [
    "CHANGEFREQ_RATE", "DAY", "MAX_RATE", "MIN_RATE", "PRIOR_SHAPE", "cgm_rate", "changefreq_rate", "evidence",
    "gamma_poisson", "http_date_seconds", "irregular_rate", "trusted_lastmod",
]
