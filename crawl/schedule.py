"""Reprioritise: change rates, importance, priority and next fetch time of every CrawlDb row.

Runs once per round (``crawl.round.reprioritise``, the DAG's reprioritise task), vectorised over the
whole CrawlDb with NumPy -- or, in an :func:`incremental_round` between two full runs of PageRank and
the prior, over the rows the round touched only (the rest keep their schedule). ``schedule_policy`` picks how re-fetches are valued (never-fetched URLs are
always ranked by importance / (1 + depth), seeds first, and get the frontier's ``coverage_share``):

- ``default``: rate = Gamma-Poisson posterior of the page's own evidence (CGM-corrected re-check
  history, trusted Last-Modified age before the first re-check) around the learned prior
  (:mod:`crawl.prior`, refitted and saved every round); importance = PageRank (:mod:`crawl.rank`);
  priority = importance × Olston-Pandey utility U(t) = 1/λ − (t + 1/λ)e^(−λt) at the next round
  (t = time since the last fetch). U(t) is the expected time the stored copy has been stale, so the
  top-N of importance × U within host slots is a batch form of the optimal "refresh when
  importance × U ≥ τ" schedule: fast pages are worth less than their rate suggests (U saturates at
  1/λ), which is why it beats rate-proportional refresh.
- ``estimator``: the same allocation with the re-check history only (constant prior, importance 1).
- ``oracle``: the true rates from ``oracle_rates_path`` (benchmarks), same allocation as default.
- ``nutch``: Nutch AdaptiveFetchSchedule (changed → I·0.8, unchanged → I·1.4, sync_delta 0.3,
  clamped to [60 s, 365 d]), due URLs ranked by importance.
- ``uniform``: round-robin, the copy fetched longest ago first.

``next_fetch_time`` is when importance × U(t) reaches this round's threshold τ (the marginal value
that filled the refetch budget), so ``SELECT url, next_fetch_time, priority, change_rate, importance``
in DuckDB answers "what will be fetched next and why". Transient failures wait ``retry_schedule_s`` and
become ``gone`` after the last try.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crawl import changerate as cr
from crawl import crawldb, rank
from crawl import prior as prior_mod
from crawl.config import CrawlConfig
from crawl.store import Store

DAY = 86_400.0
MIN_INTERVAL_S = 60.0
MAX_INTERVAL_S = 365 * DAY     # bisection bound of time_to_utility; a crawl's cap is cfg.max_refetch_interval_s
DEFAULT_ROUND_S = DAY          # assumed spacing of rounds before two rounds have run
DUE_FACTOR = 2.0               # make ~2x the refetch budget due, so host caps never starve the round
NUTCH_INC, NUTCH_DEC, NUTCH_SYNC = 0.4, 0.2, 0.3
SEED_BOOST = 10.0
# a copy is not worth re-fetching before it has at least this chance of having changed: below it the
# budget is better spent on discovery (unused refetch slots flow to never-fetched URLs in the frontier)
MIN_CHANGE_PROB = 0.05


def _secs(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Timestamp column → float epoch seconds (NaN for null)."""
    arr = pc.cast(col, pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    return pc.fill_null(arr.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False) / 1000.0


def _ts(seconds: np.ndarray) -> pa.Array:
    ms = np.where(np.isnan(seconds), 0, seconds * 1000.0).astype(np.int64)
    return pa.array(ms, pa.int64(), mask=np.isnan(seconds)).cast(pa.timestamp("ms", tz="UTC"))


def _num(db: pa.Table, name: str, fill: float = 0.0) -> np.ndarray:
    return pc.fill_null(db.column(name), fill).to_numpy(zero_copy_only=False).astype(np.float64)


def utility(rate: np.ndarray, t_days: np.ndarray) -> np.ndarray:
    """Olston-Pandey: expected stale time (days) accumulated t days after a refresh; grows with t to 1/λ."""
    lam = np.maximum(rate, 1e-9)
    return 1.0 / lam - (t_days + 1.0 / lam) * np.exp(-lam * t_days)


def time_to_utility(rate: np.ndarray, target: np.ndarray, iterations: int = 60) -> np.ndarray:
    """Smallest t (days) with U(t) ≥ target (inf when target ≥ 1/λ), by vectorised bisection."""
    lam = np.maximum(rate, 1e-9)
    reachable = target < 1.0 / lam
    lo = np.zeros_like(lam)
    hi = np.full_like(lam, MAX_INTERVAL_S / DAY)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        up = utility(lam, mid) >= target
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    return np.where(reachable, hi, np.inf)


def estimate_change_rate(checks: np.ndarray, changes: np.ndarray, span_days: np.ndarray) -> np.ndarray:
    """Changes/day from regular re-checks (CGM), shrunk to one change a week (kept for simple callers)."""
    n = np.asarray(checks, np.float64)
    interval = np.where(n > 0, span_days / np.maximum(n, 1), 0.0)
    x = np.minimum(np.asarray(changes, np.float64), n)
    ev, ex = cr.evidence(x, (n - x) * interval, x * interval, np.full(n.shape, np.nan))
    return cr.gamma_poisson(np.full(n.shape, 1.0 / 7.0), ev, ex)


def round_spacing_s(store: Store, round_no: int, now_s: float) -> float:
    """Seconds between this round and the previous one (the expected wait until the next round)."""
    prev = store.read_json(store.round_dir(round_no - 1, "generate.json")) if round_no > 1 else None
    if prev and prev.get("now"):
        gap = now_s - datetime.fromisoformat(prev["now"]).timestamp()
        if gap > 0:
            return gap
    return DEFAULT_ROUND_S


def oracle_rates(path: str, urls: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """True rates (changes/day) from a (url, change_rate) Parquet file; NaN for URLs not in it."""
    t = pq.read_table(path, columns=["url", "change_rate"])
    idx = pc.index_in(urls, value_set=t.column("url").combine_chunks())
    rates = t.column("change_rate").to_numpy().astype(np.float64)
    i = pc.fill_null(idx, -1).to_numpy(zero_copy_only=False)
    return np.where(i >= 0, rates[np.maximum(i, 0)], np.nan)


def _lastmod_age_days(db: pa.Table, success_s: np.ndarray) -> np.ndarray:
    """Age of the stored version from trusted HTTP Last-Modified or sitemap lastmod (NaN if unknown)."""
    hosts = prior_mod.host_codes(db)  # integer codes: no Python string per row
    changes = _num(db, "change_count")
    checks = _num(db, "check_count")
    lm = cr.http_date_seconds(db.column("last_modified"))
    lm_ok = cr.trusted_lastmod(hosts, lm, success_s)
    sm = _secs(db.column("sitemap_lastmod"))
    # a sitemap date after our first fetch while every re-check saw no change contradicts what we saw
    contradicted = (sm > _secs(db.column("first_fetch_time"))) & (checks > 0) & (changes == 0)
    sm_ok = cr.trusted_lastmod(hosts, sm, np.where(np.isnan(success_s), sm + cr.LIAR_AGE_S * 10, success_s),
                               contradicted)
    best = np.where(np.isnan(lm_ok), sm_ok, lm_ok)
    return np.where(np.isnan(success_s), np.nan, (success_s - best) / DAY)


def _threshold(values: np.ndarray, k: int) -> float:
    """The k-th largest value (the marginal priority a budget of k buys); inf when k ≤ 0."""
    if k <= 0 or values.size == 0:
        return float("inf")
    k = min(k, values.size)
    return float(np.partition(values, values.size - k)[values.size - k])


INCREMENTAL_POLICIES = ("default", "estimator", "oracle")


@dataclass(frozen=True)
class Untouched:
    """What an incremental round needs of the rows it does not rescore (counted by DuckDB over the
    CrawlDb, never loaded): how many, how many wait for a first fetch (the coverage pool), how many
    are due by the next round, and the refetch threshold τ of the last full rescoring."""
    rows: int
    fresh: int
    due_next: int
    tau: float
    tau_round: int


def incremental_round(cfg: CrawlConfig, store: Store, round_no: int) -> bool:
    """Whether round ``round_no`` may rescore only the rows it touched (see :func:`reprioritise`).

    Between two full runs of PageRank and the prior (``importance_every_rounds`` /
    ``prior_every_rounds`` > 1, off the cadence) nothing a row's schedule depends on changes unless the
    round fetched it or gave it evidence: its importance and prior are kept, so its rate and next fetch
    time are the ones it has. A full round (the default, every = 1) rescores every row."""
    if cfg.schedule_policy not in INCREMENTAL_POLICIES or round_no <= 1:
        return False
    if rank.is_full_round(round_no, cfg.importance_every_rounds, np.ones(1)):
        return False
    return cfg.schedule_policy != "default" or not prior_mod.refit_due(store, round_no, cfg.prior_every_rounds)


def last_tau(store: Store, round_no: int) -> tuple[float, int] | None:
    """(τ, the round that computed it) of the newest rescoring before ``round_no`` (rounds carried
    forward skipped); None when that rescoring set no threshold."""
    for r in range(round_no - 1, 0, -1):
        st = store.read_json(store.round_dir(r, "reprioritise.json"), {})
        if st.get("carried_forward"):
            continue
        tau = st.get("tau")
        return (float(tau), int(st.get("tau_round", r))) if tau is not None else None
    return None


def untouched(cfg: CrawlConfig, store: Store, round_no: int, touched: np.ndarray, now: datetime) -> Untouched | None:
    """The :class:`Untouched` context of an incremental round, or None when the round must rescore
    every row (off-cadence rounds only; and a τ from an earlier full rescoring must exist)."""
    if not incremental_round(cfg, store, round_no):
        return None
    tau = last_tau(store, round_no)
    if tau is None:
        return None
    from crawl import duck

    con = duck.for_store(store)
    con.register("touched", pa.table({"url_hash": pa.array(np.unique(touched), pa.uint64())}))
    src = crawldb.source_sql(store, con, round_no - 1, cfg.url_shards)
    nxt = now.timestamp() + round_spacing_s(store, round_no, now.timestamp())
    rows, fresh, due, with_importance = con.execute(f"""
        SELECT count(*), count(*) FILTER (WHERE status IN ('unfetched', 'deferred')),
               count(*) FILTER (WHERE next_fetch_time <= to_timestamp($nxt)),
               count(*) FILTER (WHERE isfinite(importance))
        FROM {src} WHERE url_hash NOT IN (SELECT url_hash FROM touched)
    """, {"nxt": nxt}).fetchone()
    con.close()
    if not with_importance:
        return None  # no row has an importance yet: the full PageRank runs, over every row
    return Untouched(int(rows), int(fresh), int(due), tau[0], tau[1])


def reprioritise(cfg: CrawlConfig, store: Store, round_no: int, db: pa.Table,
                 now: datetime, others: Untouched | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """CrawlDb version ``round_no`` from the merged rows: status, rates, importance, priority, next time.

    ``others`` (:func:`untouched`): in an :func:`incremental_round`, ``db`` holds only the rows the
    round touched and only they are rescored; the others keep their schedule and count only in the
    pool of unfetched URLs, and the refetch threshold τ is the last full rescoring's (the budget's
    marginal value over every content row, recomputed on the cadence). Host-level statistics
    (Last-Modified trust, the prior's host pooling of new rows) then come from the touched rows."""
    now_s = now.timestamp()
    n = db.num_rows
    policy = cfg.schedule_policy
    status_col = db.column("status")
    if others is not None and policy not in INCREMENTAL_POLICIES:
        raise ValueError(f"schedule_policy {policy!r} rescores every row: no incremental round")

    def is_status(*values: str) -> np.ndarray:
        return pc.fill_null(pc.is_in(status_col, pa.array(values)), False).to_numpy(zero_copy_only=False)

    fetch_s = _secs(db.column("fetch_time"))
    success_s = _secs(db.column("last_success_time"))
    retries = _num(db, "retry_count").astype(np.int64)
    depth = _num(db, "depth")
    checks = _num(db, "check_count")
    changes = _num(db, "change_count")
    unchanged_d = _num(db, "unchanged_time_s") / DAY
    changed_d = _num(db, "changed_time_s") / DAY
    spacing_s = round_spacing_s(store, round_no, now_s)
    stats: dict[str, Any] = {"policy": policy, "round_spacing_s": spacing_s}

    # importance needs only the hashes, the rows' importance and the link files, nothing the change
    # rate computes: a side thread reads the links and runs PageRank while this one fits the prior
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reprioritise-rank") as side:
        ranked = side.submit(_importance, cfg, store, round_no, db, others is None)

        # ---- change rate ----
        events, exposure = cr.evidence(changes, unchanged_d, changed_d,
                                       _lastmod_age_days(db, success_s) if policy == "default" else np.full(n, np.nan))
        if policy == "default":
            prior, stats["model"] = prior_mod.for_round(store, round_no, db, events, exposure, checks,
                                                        cfg.prior_every_rounds, partial=others is not None)
        else:
            total = float(exposure.sum())
            prior = np.full(n, events.sum() / total if total > 0 else 1.0 / 7.0)
        rate = cr.gamma_poisson(prior, events, exposure)
        if policy == "oracle":
            true = oracle_rates(cfg.oracle_rates_path, db.column("url"))
            rate = np.where(np.isnan(true), rate, np.clip(true, cr.MIN_RATE, cr.MAX_RATE))

        # ---- importance ----
        importance, inlinks, stats["importance"] = ranked.result()
    if policy in ("estimator", "uniform"):
        weight = np.ones(n)
    else:
        weight = importance

    # ---- retries and non-content statuses ----
    sched = np.array(cfg.retry_schedule_s, dtype=np.float64)
    is_retry = is_status("retry")
    gone_now = is_retry & (retries > len(sched))
    is_retry = is_retry & ~gone_now
    retry_wait = sched[np.clip(retries - 1, 0, len(sched) - 1)] if len(sched) else np.full(n, DAY)
    content = is_status("fetched", "not_modified", "duplicate", "near_duplicate")
    last = np.where(np.isnan(success_s), fetch_s, success_s)
    t_next = np.where(np.isnan(last), 0.0, np.maximum(now_s + spacing_s - last, 0.0) / DAY)

    # ---- re-fetch value and next fetch time of content rows ----
    interval_s = _num(db, "fetch_interval_s", np.nan)
    fresh_pool = int((is_status("unfetched", "deferred")).sum())
    if others is not None:
        fresh_pool += others.fresh
    refetch_budget = cfg.max_pages - min(fresh_pool, round(cfg.coverage_share * cfg.max_pages))
    nxt_content = np.full(n, now_s)
    cap_s = cfg.max_refetch_interval_s  # however unlikely a change, a stored copy is due again after this
    if policy == "uniform":
        value = t_next
    elif policy == "nutch":
        value = weight
        nxt_content, interval_s = _nutch(db, round_no, last, success_s, interval_s, content, refetch_budget,
                                         spacing_s, cap_s)
    else:
        value = weight * utility(rate, t_next)
        if others is None:
            tau = _threshold(value[content], int(DUE_FACTOR * refetch_budget))
        else:
            tau = others.tau
            stats["tau_round"] = others.tau_round
        stats["tau"] = tau if np.isfinite(tau) else None
        if np.isfinite(tau):
            t_star = time_to_utility(rate, tau / np.maximum(weight, 1e-12))
            t_min = -np.log1p(-MIN_CHANGE_PROB) / np.maximum(rate, 1e-9)
            due_at = last + np.minimum(np.maximum(t_star, t_min) * DAY, cap_s)
            # due when the row has crossed both the threshold and the MIN_CHANGE_PROB floor, never
            # before: generate takes rows with next_fetch_time <= its round's time. A row worth it at
            # the next round (expected spacing_s from now) is due now, or at the floor when that is
            # later, so a round that comes sooner than expected (round 2 after round 1's assumed
            # day) does not take it early. Was now_s, and due_at - spacing_s for the others: a round up
            # to a spacing early re-fetched copies (never-changing ones too) below the floor.
            worth = (value >= tau) & (t_next >= t_min)
            floor = last + np.minimum(t_min * DAY, cap_s)
            nxt_content = np.where(worth, np.fmax(floor, now_s), np.maximum(due_at, now_s + 1.0))
        # the expected interval: a row due by the next round is fetched then, one spacing on
        fetch_at = np.maximum(nxt_content, now_s + spacing_s)
        interval_s = np.where(content, np.minimum(np.nan_to_num(fetch_at - last, nan=0.0), cap_s), interval_s)

    nxt = np.full(n, np.nan)
    nxt[content] = nxt_content[content]
    nxt[is_status("unfetched", "deferred")] = now_s
    nxt[is_retry] = fetch_s[is_retry] + retry_wait[is_retry]
    for name, wait in (("redirect", 7 * DAY), ("http_error", 30 * DAY), ("robots_denied", cfg.robots_ttl_s)):
        sel = is_status(name)
        nxt[sel] = fetch_s[sel] + wait
    nxt = np.where(np.isnan(nxt) & ~is_status("gone", "filtered") & ~gone_now, now_s, nxt)

    seed = pc.fill_null(pc.equal(db.column("source"), "seed"), False).to_numpy(zero_copy_only=False)
    discovery = importance * np.where(seed, SEED_BOOST, 1.0) / (1.0 + depth)
    priority = np.where(content, value, discovery)

    out = db
    for name, arr in (
        ("status", pc.if_else(pa.array(gone_now), pa.scalar("gone"), status_col)),
        ("change_rate", pa.array(rate)),
        ("importance", pa.array(importance)),
        ("inlinks", pa.array(inlinks.astype(np.int32))),
        ("priority", pa.array(priority)),
        ("next_fetch_time", _ts(nxt)),
        ("fetch_interval_s", pa.array(interval_s, mask=np.isnan(interval_s))),
    ):
        out = out.set_column(out.schema.get_field_index(name), name, arr)
    due_next = int(np.sum(~np.isnan(nxt) & (nxt <= now_s + spacing_s)))
    if others is not None:
        due_next += others.due_next
        stats["rescored"] = n
    stats.update({"gone_now": int(gone_now.sum()), "known": n + (others.rows if others is not None else 0),
                  "due_next": due_next, "refetch_budget": int(refetch_budget),
                  "mean_rate_content": float(rate[content].mean()) if content.any() else None})
    return out, stats


def _importance(cfg: CrawlConfig, store: Store, round_no: int, db: pa.Table,
                full: bool) -> tuple[np.ndarray, np.ndarray, str]:
    """(importance, in-links, how) of every row of ``db``: :func:`crawl.rank.for_round` when every row
    is rescored (``full``), else :func:`crawl.rank.incremental` (the linkers of new rows are pages
    fetched this round: touched rows, all in ``db``)."""
    hashes = db.column("url_hash").to_numpy()
    if full:
        return rank.for_round(store, round_no, hashes, _num(db, "importance", np.nan), _num(db, "inlinks"),
                              cfg.importance_every_rounds)
    importance, inlinks = rank.incremental(store, round_no, hashes, _num(db, "importance", np.nan),
                                           _num(db, "inlinks"))
    return importance, inlinks, "incremental"


def carry_forward(cfg: CrawlConfig, store: Store, round_no: int) -> dict[str, Any] | None:
    """When update carried the round forward (nothing fetched, nothing injected), CrawlDb ``round_no``
    is CrawlDb ``round_no - 1`` byte for byte, and so are the prior's model and per-row priors: every
    next fetch time is absolute, so nothing moves. None when there was a real merge."""
    up = store.read_json(store.round_dir(round_no, "update.json"), {})
    if not up.get("carried_forward"):
        return None
    crawldb.copy_version(store, round_no - 1, round_no, cfg.url_shards)
    prev_model, model = store.state("model", f"v={round_no - 1:05d}"), store.state("model", f"v={round_no:05d}")
    for name in ("model.pkl", "metrics.json", "prior.parquet"):
        if store.exists(f"{prev_model}/{name}"):
            store.write_bytes(f"{model}/{name}", store.read_bytes(f"{prev_model}/{name}"))
    return {"policy": cfg.schedule_policy, "carried_forward": True, "known": up.get("known")}


def _nutch(db: pa.Table, round_no: int, last: np.ndarray, success_s: np.ndarray, interval_s: np.ndarray,
           content: np.ndarray, refetch_budget: int, spacing_s: float,
           cap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Nutch AdaptiveFetchSchedule: (next fetch time, interval) for every row.

    The initial interval is the uniform cycle (known pages / refetch budget × round spacing), so
    Nutch starts where round-robin is and adapts from there (its 30-day default would leave the
    budget unused in a benchmark of days).
    """
    touched = _num(db, "round", -1) == round_no
    fetched_now = touched & content & ~np.isnan(success_s) & (np.abs(success_s - _secs(db.column("fetch_time"))) < 1)
    change_s = _secs(db.column("last_change_time"))
    changed_now = fetched_now & (np.abs(change_s - success_s) < 1)
    checked = fetched_now & (_num(db, "check_count") > 0)
    cycle = max(spacing_s * max(int(content.sum()), 1) / max(refetch_budget, 1), MIN_INTERVAL_S)
    interval = np.where(np.isnan(interval_s), cycle, interval_s)
    interval = np.where(checked & changed_now, interval * (1 - NUTCH_DEC),
                        np.where(checked, interval * (1 + NUTCH_INC), interval))
    lm = cr.http_date_seconds(db.column("last_modified"))
    modified = np.where(changed_now, success_s, np.where(np.isnan(lm), change_s, lm))
    modified = np.where(np.isnan(modified), _secs(db.column("first_fetch_time")), modified)
    delta = np.where(checked & ~np.isnan(modified), np.maximum(last - modified, 0.0), 0.0)
    interval = np.where(delta > interval, delta, interval)
    interval = np.clip(interval, MIN_INTERVAL_S, max(cap_s, MIN_INTERVAL_S))
    ref = last - NUTCH_SYNC * delta
    return ref + interval, interval


__all__ = ["estimate_change_rate", "oracle_rates", "reprioritise", "round_spacing_s", "time_to_utility",
           "utility"]
