"""Deterministic Poisson change processes, queried without ever listing the events.

Every page (really: every *content*, mirrors share it) changes at the event times of a Poisson process of
rate λ. A news page at 24 changes/day over the 34-year horizon has ~300 000 events; listing them for
50 000 pages is far too much, and summing per-day counts costs O(days) per query. Instead the process
is defined top-down by recursive halving: the count on the whole horizon is Poisson(λ·H) and, given
``n`` events on an interval, the count on its left half is Binomial(n, ½); a lone event sits at a
uniform position in its interval. Every random draw is a pure hash of (seed, key, tree node), so any
query — "how many events up to t", "when was the k-th event" — walks one root-to-leaf path
(≈ log2 of the count, vectorised over pages with NumPy) and all queries agree with one another and with
every other process run with the same seed. This is a faithful Poisson process (exact binomial for
n ≤ 64, a continuity-corrected normal split above, where the difference is invisible).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri
from scipy.stats import poisson

HORIZON_S = float(2**30)  # ~34 years after epoch0; beyond it a page no longer changes
MAX_DEPTH = 40  # interval of ~1 ms: events closer than that are treated as simultaneous
_EXACT_N = 64
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)

_TAG_TOTAL, _TAG_SPLIT, _TAG_POS = 1, 2, 3


def _binom_half_cdf_table(nmax: int) -> np.ndarray:
    """CDF[n, k] of Binomial(n, 1/2) for n, k <= nmax (exact, from integer binomial coefficients)."""
    table = np.ones((nmax + 1, nmax + 1))
    for n in range(nmax + 1):
        acc = 0
        for k in range(n + 1):
            acc += math.comb(n, k)
            table[n, k] = acc / 2**n
    return table


_CDF = _binom_half_cdf_table(_EXACT_N)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser on a uint64 array: a fast, well-mixed, platform-independent hash."""
    with np.errstate(over="ignore"):
        z = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
        return z ^ (z >> np.uint64(31))


def hash_uniform(seed: int, key: np.ndarray, node: np.ndarray | int, tag: int) -> np.ndarray:
    """Uniform in (0, 1) as a pure function of (seed, key, node, tag); never Python's ``hash()``."""
    with np.errstate(over="ignore"):
        k = np.asarray(key, dtype=np.uint64)
        h = splitmix64(np.uint64(seed & 0xFFFFFFFF) * np.uint64(0x100000001B3) + np.uint64(tag))
        h = splitmix64(h ^ (k * np.uint64(0xD6E8FEB86659FD93)))
        h = splitmix64(h ^ np.asarray(node, dtype=np.uint64))
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / 9007199254740992.0


def _split_left(u: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Left-half count: the u-quantile of Binomial(n, 1/2), vectorised."""
    out = np.empty(n.shape, dtype=np.int64)
    small = n <= _EXACT_N
    if small.any():
        rows = _CDF[n[small]]
        out[small] = np.minimum((rows < u[small, None]).sum(axis=1), n[small])
    big = ~small
    if big.any():
        nb = n[big].astype(np.float64)
        k = np.floor(nb / 2 + 0.5 * np.sqrt(nb) * ndtri(u[big]) + 0.5)
        out[big] = np.clip(k, 0, nb).astype(np.int64)
    return out


def total_events(seed: int, keys: np.ndarray, rates_per_day: np.ndarray) -> np.ndarray:
    """Number of events on the whole horizon, Poisson(λ·H), one draw per key."""
    mean = np.asarray(rates_per_day, dtype=np.float64) * (HORIZON_S / 86400.0)
    u = hash_uniform(seed, keys, 0, _TAG_TOTAL)
    out = np.zeros(mean.shape, dtype=np.int64)
    pos = mean > 0
    out[pos] = poisson.ppf(u[pos], mean[pos]).astype(np.int64)
    return out


def count_until(seed: int, keys: np.ndarray, totals: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Number of events with offset <= ``offsets`` (seconds after epoch0), per key, vectorised."""
    keys = np.asarray(keys, dtype=np.uint64)
    x = np.broadcast_to(np.asarray(offsets, dtype=np.float64), keys.shape)
    n = np.asarray(totals, dtype=np.int64).copy()
    result = np.zeros(keys.shape, dtype=np.int64)
    result[x >= HORIZON_S] = n[x >= HORIZON_S]
    idx = np.flatnonzero((x >= 0) & (x < HORIZON_S) & (n > 0))
    lo = np.zeros(idx.size)
    hi = np.full(idx.size, HORIZON_S)
    node = np.ones(idx.size, dtype=np.uint64)
    n = n[idx]
    xs = x[idx]
    k = keys[idx]
    acc = np.zeros(idx.size, dtype=np.int64)
    depth = 0
    while idx.size:
        multi = n > 1
        if depth >= MAX_DEPTH:
            multi[:] = False
        done = ~multi
        if done.any():
            # n == 1: the event sits at a hashed position; n == 0: nothing left; depth cap: the midpoint
            one = done & (n == 1)
            pos = np.where(one, lo + hash_uniform(seed, k, node, _TAG_POS) * (hi - lo), (lo + hi) / 2)
            result[idx[done]] = acc[done] + np.where(pos[done] <= xs[done], n[done], 0)
        idx, lo, hi, node, n, xs, k, acc = (a[multi] for a in (idx, lo, hi, node, n, xs, k, acc))
        if not idx.size:
            break
        left = _split_left(hash_uniform(seed, k, node, _TAG_SPLIT), n)
        mid = (lo + hi) / 2
        right = xs >= mid
        acc = acc + np.where(right, left, 0)
        n = np.where(right, n - left, left)
        lo = np.where(right, mid, lo)
        hi = np.where(right, hi, mid)
        node = node * np.uint64(2) + right.astype(np.uint64)
        depth += 1
    return result


def kth_event(seed: int, keys: np.ndarray, totals: np.ndarray, kth: np.ndarray) -> np.ndarray:
    """Offset (seconds after epoch0) of the k-th event (1-based), NaN where k is out of range."""
    keys = np.asarray(keys, dtype=np.uint64)
    kk = np.broadcast_to(np.asarray(kth, dtype=np.int64), keys.shape).copy()
    n = np.asarray(totals, dtype=np.int64).copy()
    result = np.full(keys.shape, np.nan)
    idx = np.flatnonzero((kk >= 1) & (kk <= n))
    lo = np.zeros(idx.size)
    hi = np.full(idx.size, HORIZON_S)
    node = np.ones(idx.size, dtype=np.uint64)
    n, kk, k = n[idx], kk[idx], keys[idx]
    depth = 0
    while idx.size:
        multi = n > 1
        if depth >= MAX_DEPTH:
            multi[:] = False
        done = ~multi
        if done.any():
            one = done & (n == 1)
            pos = np.where(one, lo + hash_uniform(seed, k, node, _TAG_POS) * (hi - lo), (lo + hi) / 2)
            result[idx[done]] = pos[done]
        idx, lo, hi, node, n, kk, k = (a[multi] for a in (idx, lo, hi, node, n, kk, k))
        if not idx.size:
            break
        left = _split_left(hash_uniform(seed, k, node, _TAG_SPLIT), n)
        mid = (lo + hi) / 2
        right = kk > left
        kk = np.where(right, kk - left, kk)
        n = np.where(right, n - left, left)
        lo = np.where(right, mid, lo)
        hi = np.where(right, hi, mid)
        node = node * np.uint64(2) + right.astype(np.uint64)
        depth += 1
    return result
