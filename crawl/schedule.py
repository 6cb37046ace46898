"""Reprioritise: change-rate estimates, importance and the next fetch time of every URL.

A first, closed-form scheduler (the learned model of the freshness work builds on it):
- change rate: Cho & Garcia-Molina's bias-corrected estimator from n re-checks with X changes over
  the observed span, shrunk towards a prior by Gamma-Poisson pooling so one observation does not
  swing it;
- importance: PageRank over the crawl's link graph (:mod:`crawl.rank`), normalised to mean 1;
- priority of a fetched URL = importance x the Olston-Pandey utility U(t) = 1/λ - (t + 1/λ)e^(-λt)
  (expected time the copy has been stale); never-fetched URLs get importance / (1 + depth);
- transient failures wait ``retry_schedule_s`` and become ``gone`` after the last try (kept, visible).
Every number is vectorised over the CrawlDb with NumPy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl import rank
from crawl.config import CrawlConfig
from crawl.store import Store

DAY = 86_400.0
PRIOR_RATE = 1.0 / 7.0      # changes/day assumed before any evidence
PRIOR_WEIGHT_DAYS = 7.0     # prior counts as this many days of observation
MIN_INTERVAL_S = 3_600.0
MAX_INTERVAL_S = 30 * DAY


def _secs(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Timestamp column → float epoch seconds (NaN for null)."""
    arr = pc.cast(col, pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    return pc.fill_null(arr.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False) / 1000.0


def _ts(seconds: np.ndarray) -> pa.Array:
    ms = np.where(np.isnan(seconds), 0, seconds * 1000.0).astype(np.int64)
    return pa.array(ms, pa.int64(), mask=np.isnan(seconds)).cast(pa.timestamp("ms", tz="UTC"))


def estimate_change_rate(checks: np.ndarray, changes: np.ndarray, span_days: np.ndarray) -> np.ndarray:
    """Changes/day: bias-corrected Cho-Garcia-Molina, pooled with the prior (Gamma-Poisson)."""
    n = checks.astype(np.float64)
    x = np.minimum(changes.astype(np.float64), n)
    interval = np.where(n > 0, span_days / np.maximum(n, 1), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        cgm = -np.log((n - x + 0.5) / (n + 0.5)) / interval
    observed = np.where((n > 0) & (interval > 0), cgm, np.nan)
    exposure = np.where(np.isnan(observed), 0.0, n * interval)
    events = np.where(np.isnan(observed), 0.0, observed * exposure)
    return (PRIOR_RATE * PRIOR_WEIGHT_DAYS + events) / (PRIOR_WEIGHT_DAYS + exposure)


def utility(rate: np.ndarray, t_days: np.ndarray) -> np.ndarray:
    """Olston-Pandey: expected stale time (days) accumulated t days after a refresh; grows with t."""
    lam = np.maximum(rate, 1e-9)
    return 1.0 / lam - (t_days + 1.0 / lam) * np.exp(-lam * t_days)


def reprioritise(cfg: CrawlConfig, store: Store, round_no: int, db: pa.Table,
                 now: datetime) -> tuple[pa.Table, dict[str, Any]]:
    now_s = now.timestamp()
    n = db.num_rows
    status_col = db.column("status")

    def is_status(*values: str) -> np.ndarray:
        return pc.fill_null(pc.is_in(status_col, pa.array(values)), False).to_numpy(zero_copy_only=False)

    fetch_s = _secs(db.column("fetch_time"))
    success_s = _secs(db.column("last_success_time"))
    first_s = _secs(db.column("first_fetch_time"))
    checks = pc.fill_null(db.column("check_count"), 0).to_numpy()
    changes = pc.fill_null(db.column("change_count"), 0).to_numpy()
    retries = pc.fill_null(db.column("retry_count"), 0).to_numpy()
    depth = pc.fill_null(db.column("depth"), 0).to_numpy().astype(np.float64)

    span_days = np.where(np.isnan(first_s) | np.isnan(success_s), 0.0, (success_s - first_s) / DAY)
    rate = estimate_change_rate(checks, changes, span_days)
    importance, inlinks = rank.importance(store, round_no, db.column("url_hash").to_numpy())

    # retries past the schedule become gone (dead-letter: kept in the CrawlDb, never fetched again)
    sched = np.array(cfg.retry_schedule_s, dtype=np.float64)
    is_retry = is_status("retry")
    gone_now = is_retry & (retries > len(sched))
    is_retry = is_retry & ~gone_now
    retry_wait = sched[np.clip(retries - 1, 0, len(sched) - 1)] if len(sched) else np.full(n, DAY)

    interval = np.clip(1.0 / np.maximum(rate, 1e-9) * DAY, MIN_INTERVAL_S, MAX_INTERVAL_S)
    last = np.where(np.isnan(success_s), fetch_s, success_s)
    nxt = np.full(n, np.nan)
    content = is_status("fetched", "not_modified", "duplicate", "near_duplicate")
    nxt[content] = last[content] + interval[content]
    nxt[is_status("unfetched", "deferred")] = now_s
    nxt[is_retry] = fetch_s[is_retry] + retry_wait[is_retry]
    for name, wait in (("redirect", 7 * DAY), ("http_error", 30 * DAY), ("robots_denied", cfg.robots_ttl_s)):
        sel = is_status(name)
        nxt[sel] = fetch_s[sel] + wait
    nxt = np.where(np.isnan(nxt) & ~is_status("gone", "filtered") & ~gone_now, now_s, nxt)

    t_days = np.where(np.isnan(last), 0.0, np.maximum(now_s - last, 0.0) / DAY)
    seed_boost = np.where(pc.fill_null(pc.equal(db.column("source"), "seed"), False).to_numpy(zero_copy_only=False),
                          10.0, 1.0)
    priority = np.where(content, importance * utility(rate, t_days), importance * seed_boost / (1.0 + depth))

    out = db
    for name, arr in (
        ("status", pc.if_else(pa.array(gone_now), pa.scalar("gone"), status_col)),
        ("change_rate", pa.array(rate)),
        ("importance", pa.array(importance)),
        ("inlinks", pa.array(inlinks.astype(np.int32))),
        ("priority", pa.array(priority)),
        ("next_fetch_time", _ts(nxt)),
    ):
        out = out.set_column(out.schema.get_field_index(name), name, arr)
    return out, {"gone_now": int(gone_now.sum()), "known": n,
                 "due_next": int(np.sum(~np.isnan(nxt) & (nxt <= now_s)))}
