"""Nothing is re-fetched before it is due, judged from the simulated web's access log.

The schedule's floor (``crawl.schedule.MIN_CHANGE_PROB``): a stored copy is not fetched again before it
has at least that chance of having changed, by the change rate the schedule it is fetched from gives
it (``crawldb.change_rate`` of the round before, the Poisson rate λ: the floor is -ln(1 - p) / λ after the
last fetch). The times
come from the server: each round's requests of a page in its access log, placed at the round's
virtual time (rounds every six hours, the simulated web's clock held at each round's time).
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, datetime

import duckdb
import numpy as np

from crawl import round as rnd
from crawl import schedule
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.simweb import model as M
from crawl.simweb.server import page_of_request
from crawl.store import Store

T0 = 1_795_000_000.0
SPACING_S = 6 * 3600.0
ROUNDS = 4


def test_no_copy_is_fetched_again_before_its_floor(make_simweb, tmp_path):
    simweb = make_simweb(hosts=80, seed=3, pages_per_host=20)  # enough hosts of each kind for the prior to learn
    cfg = load_config(overrides={
        "root": str(tmp_path), "crawl_id": "due", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.0,
        "max_pages": 600, "partitions": 2, "url_shards": 2, "round_duration_s": 60.0, "connect_timeout_s": 2.0,
        "read_timeout_s": 2.0, "total_timeout_s": 3.0, "dask_workers": 2, "sitemaps": False,
    }, use_env=False)
    windows = []
    seeds = [h.base + "/" for h in simweb.model.hosts if h.kind in ("news", "blog", "shop", "docs", "archive", "forum")][:40]
    with dask_client(cfg) as client:
        for r in range(ROUNDS):
            now = T0 + r * SPACING_S
            simweb.set_clock(now, speed=0.0)
            start = simweb.flush_log()
            rnd.run_round(cfg, seeds if r == 0 else None, now=datetime.fromtimestamp(now, UTC),
                          client=client)
            windows.append((start, simweb.flush_log()))
    # the server's requests of each page (its own lookup: tracking/session spellings are one page), by round
    log = simweb.log().to_pylist()
    model = simweb.model
    rounds_of: dict[int, set[int]] = defaultdict(set)
    for r, (a, b) in enumerate(windows, start=1):
        for rec in log[a:b]:
            pid = page_of_request(model, rec["host"], rec["path"])
            if (rec["user_agent"] == cfg.user_agent and pid is not None and rec["status"] in (200, 304)
                    and model.page_type[pid] not in (M.FAULT, M.TRAP)):  # a fault's 200 may be cut: a retry
                rounds_of[pid].add(r)
    store = Store(cfg.root, cfg.crawl_id)
    rates = {}
    for r in range(1, ROUNDS):  # CrawlDb version r: the rates and times round r + 1 is generated from
        con = duckdb.connect()
        rows = con.execute(f"SELECT url, change_rate FROM read_parquet('{store.base}/{store.crawldb_dir(r)}/*.parquet')"
                           ).fetchall()
        con.close()
        rates[r] = dict(rows)
    refetches, early = 0, []
    for pid, rs in rounds_of.items():
        rs = sorted(rs)
        for a, b in zip(rs, rs[1:], strict=False):
            refetches += 1
            rate = rates[b - 1][model.url(pid)]  # the schedule round b was generated from
            floor_s = -math.log1p(-schedule.MIN_CHANGE_PROB) / max(rate, 1e-9) * schedule.DAY
            if (b - a) * SPACING_S < floor_s:
                early.append((model.url(pid), a, b, round(rate, 3), round(floor_s / 3600, 1)))
    lam = np.array([model.rate[p] for p, rs in rounds_of.items() if len(rs) > 1])
    print(f"\n{len(rounds_of)} pages fetched, {refetches} re-fetches ({(lam == 0).sum()} of never-changing pages), "
          f"{len(early)} before the floor: {early[:5]}")
    assert refetches > 30  # the rounds did re-fetch (else this proves nothing)
    assert early == []


def test_a_page_that_never_changes_is_due_again_after_max_refetch_interval(make_simweb, tmp_path):
    """``max_refetch_interval_s`` (Nutch's db.fetch.interval.max): however unlikely a change looks, a stored
    copy is due again that long after its last fetch. Never-changing pages (true λ = 0) given as seeds, six
    rounds six hours apart, cap nine hours, a budget that holds every due page: judged by the access log, a
    page whose last request is at least the cap before a round is requested in that round. With the cap at
    its old fixed 365 days the estimator's falling rates push these pages past the cap (the test fails)."""
    simweb = make_simweb(hosts=30, seed=3, pages_per_host=20)
    model = simweb.model
    seeds = [p for p in range(len(model.rate)) if model.rate[p] == 0 and model.page_type[p] == M.ARTICLE][:40]
    still = set(seeds)
    cap_s = 1.5 * SPACING_S  # a page fetched in a round is due again two rounds later (its fetch took seconds)
    cfg = load_config(overrides={
        "root": str(tmp_path), "crawl_id": "cap", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.0,
        "max_pages": 400, "partitions": 2, "url_shards": 2, "round_duration_s": 60.0, "dask_workers": 2,
        "sitemaps": False, "max_depth": 0, "max_refetch_interval_s": cap_s,
    }, use_env=False)
    windows = []
    with dask_client(cfg) as client:
        for r in range(6):
            now = T0 + r * SPACING_S
            simweb.set_clock(now, speed=0.0)
            start = simweb.flush_log()
            rnd.run_round(cfg, [model.url(p) for p in seeds] if r == 0 else None,
                          now=datetime.fromtimestamp(now, UTC), client=client)
            windows.append((start, simweb.flush_log()))
    log = simweb.log().to_pylist()
    asked: dict[int, list[int]] = defaultdict(list)  # page -> rounds (0-based) that requested it
    for r, (a, b) in enumerate(windows):
        for rec in log[a:b]:
            pid = page_of_request(model, rec["host"], rec["path"])
            if rec["user_agent"] == cfg.user_agent and pid in still and rec["status"] in (200, 304):
                asked[pid].append(r)
    first = {pid: rs for pid, rs in asked.items() if rs[0] == 0}  # fetched in round 1 (not robots-denied)
    assert len(first) >= 20, len(first)
    forced, missed = 0, []
    for pid, rs in first.items():
        for r in range(1, 6):
            last = max((x for x in rs if x < r), default=None)
            if last is not None and (r - last) * SPACING_S >= cap_s:
                forced += 1
                if r not in rs:
                    missed.append((model.url(pid), last, r))
    print(f"\n{len(first)} never-changing pages fetched in round 1, {sum(len(v) for v in asked.values())} requests, "
          f"{forced} rounds at or past the cap, {len(missed)} of them without the page: {missed[:5]}")
    assert forced >= len(first)  # every page reached the cap at least once (else this proves nothing)
    assert missed == []
