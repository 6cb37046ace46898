"""Cost of one round against the size of the crawl (issue 11, part 3).

For each N (known URLs) this writes a synthetic crawl state straight into a crawl root, in the layout
:mod:`crawl.store` defines (CrawlDb shards, seen-sets and Bloom filters, the digest table, ten rounds
of link files, the published pointer), vectorised with NumPy/Arrow, and then runs one round of
``--fetches`` page fetches on top of it against the simulated web on loopback.

The state is shaped like the simulated web's: URLs spread over its hosts with a heavy-tailed host size,
a power-law in-degree (link targets drawn from a Zipf-like rank), log-normal change rates with re-check
histories drawn from them. The ``--fetches`` due rows are real pages of the simulated web; every other
row is a page already fetched and not due, so the round's work is fixed and only the state grows.

Every step runs in its own process (as the Airflow DAG runs them: one task each), so each step's
peak RSS is its own: the step process's VmHWM and ``getrusage(RUSAGE_CHILDREN)`` of its waited-for
children (the Dask nannies and workers of fetch+parse), the larger of the two -- the peak of one
process, not a sum.

    python bench/scale_bench.py --quick           # N = 10k, 100k, 1M
    python bench/scale_bench.py --sizes 10000000  # one point

Ends with ``RESULT n_urls=… round_s=… peak_rss_gib=… growth_1m_vs_100k=…`` (and ``growth_10m_vs_1m``
when 10 M ran), and a plot of step times against N at ``bench/scale.png`` (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

STEPS = ("generate", "fetch_parse", "update", "reprioritise", "publish")
HISTORY_ROUNDS = 10
DAY = 86_400.0
OUT_DEGREE = 6          # mean out-links per page, summed over the history rounds
BASE32 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", np.uint8)


# ---- synthetic state ---------------------------------------------------------------------------------
def _digests(rng: np.random.Generator, n: int) -> pa.Array:
    """n random 'sha1:BASE32' payload digests (the fetcher's format), without a Python loop."""
    chars = BASE32[rng.integers(0, 32, (n, 32), dtype=np.uint8)]
    raw = pa.array(chars.view("S32").ravel(), pa.binary(32)).cast(pa.binary()).cast(pa.string())
    return pc.binary_join_element_wise(pa.scalar("sha1:"), raw, "")


def _ts(seconds: np.ndarray) -> pa.Array:
    return pa.array((seconds * 1000).astype(np.int64), pa.int64()).cast(pa.timestamp("ms", tz="UTC"))


def build_state(cfg, n_urls: int, due: pa.Table, now: datetime, seed: int = 7,
                none_due: bool = False) -> dict[str, float]:
    """Write a published crawl state of ``n_urls`` known URLs (``due`` rows due now, unless ``none_due``)
    under ``cfg.root``."""
    from crawl import crawldb, seen
    from crawl.digests import ROW_GROUP_ROWS, write_keys
    from crawl.index import LINKS_SCHEMA
    from crawl.store import Store
    from crawl.tasks import DIGESTS_SCHEMA
    from crawl.url import url_hashes

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    store = Store(cfg.root, cfg.crawl_id)
    rnd = HISTORY_ROUNDS
    now_s = now.timestamp()
    n_due = due.num_rows
    n_syn = max(n_urls - n_due, 0)
    hosts = pa.array(sorted(set(due.column("host").to_pylist())), pa.string())
    # heavy-tailed host sizes: host rank ~ u^3 (a few hosts hold most URLs)
    hidx = np.minimum((len(hosts) * rng.random(n_syn) ** 3).astype(np.int64), len(hosts) - 1)
    syn_host = hosts.take(pa.array(hidx))
    syn_url = pc.binary_join_element_wise(pa.scalar("http://"), syn_host, pa.scalar("/s/"),
                                          pa.array(np.arange(n_syn, dtype=np.int64)).cast(pa.string()), "")
    url = pa.concat_arrays([due.column("url").combine_chunks(), syn_url])
    host = pa.concat_arrays([due.column("host").combine_chunks(), syn_host])
    n = len(url)
    h = url_hashes(url)
    # change rates: log-normal around one change in ~10 days, heavy upper tail
    rate = np.exp(rng.normal(np.log(0.1), 1.5, n)).clip(1e-4, 50)
    checks = rng.poisson(rnd / 2, n).astype(np.int32)
    p_change = 1 - np.exp(-rate * 2.0)  # re-checks every ~2 days
    changes = rng.binomial(checks, p_change).astype(np.int32)
    fetch_s = now_s - rng.uniform(0.1, rnd, n) * DAY
    nxt = fetch_s + rng.uniform(1, 30, n) * DAY
    nxt = np.maximum(nxt, now_s + 3600)  # nothing synthetic is due
    if not none_due:
        nxt[:n_due] = now_s - 3600        # the real pages are
    status = np.where(rng.random(n) < 0.95, "fetched", "not_modified")
    digests = _digests(rng, n)
    db = crawldb.conform(pa.table({
        "url": url, "url_hash": pa.array(h, pa.uint64()), "host": host, "pkey": host,
        "depth": pa.array(np.minimum(rng.geometric(0.35, n), 30).astype(np.int32)),
        "discovered_round": pa.array(rng.integers(1, rnd + 1, n).astype(np.int32)),
        "source": pa.array(np.full(n, "link", object), pa.string()),
        "status": pa.array(status, pa.string()), "http_status": pa.array(np.full(n, 200, np.int32)),
        "fetch_time": _ts(fetch_s), "last_success_time": _ts(fetch_s),
        "first_fetch_time": _ts(np.minimum(fetch_s, now_s - rnd * DAY)),
        "fetch_count": pa.array(checks + 1), "check_count": pa.array(checks), "change_count": pa.array(changes),
        "last_change_time": _ts(fetch_s - rng.exponential(1 / rate) * DAY),
        "retry_count": pa.array(np.zeros(n, np.int32)), "next_fetch_time": _ts(nxt),
        "priority": pa.array(rng.exponential(1.0, n)), "payload_digest": digests,
        "simhash": pa.array(rng.integers(-(2 ** 63), 2 ** 63 - 1, n, dtype=np.int64)),
        "inlinks": pa.array(np.zeros(n, np.int32)), "importance": pa.array(np.ones(n)),
        "change_rate": pa.array(rate), "round": pa.array(rng.integers(1, rnd + 1, n).astype(np.int32)),
        "unchanged_time_s": pa.array((checks - changes) * 2.0 * DAY),
        "changed_time_s": pa.array(changes * 2.0 * DAY),
    }))
    crawldb.write(store, rnd, cfg.url_shards, db)
    t_db = time.perf_counter()

    # seen-set + Bloom filter per URL-hash shard, as update writes them
    for s, part in enumerate(seen.split_by_shard(h, cfg.url_shards)):
        srt = seen.sorted_unique(part)
        seen.write_seen(store.url(store.seen_file(rnd, s, "parquet")), srt)
        expected = max(cfg.bloom_expected_urls // cfg.url_shards, 2 * srt.size, 1024)
        bloom = seen.BloomFilter.create(expected, cfg.bloom_fp_rate)
        bloom.add(srt)
        bloom.save(store.url(store.seen_file(rnd, s, "bloom")))
    # the digest table: first capture of every payload digest
    dg = pa.table({"payload_digest": digests, "url": url, "fetch_time": _ts(fetch_s)}).cast(DIGESTS_SCHEMA)
    store.write_table(store.digests_file(rnd), dg.sort_by("payload_digest"), row_group_size=ROW_GROUP_ROWS)
    write_keys(store, rnd, digests)  # and its keys file, as update writes it
    del dg, db
    # link files of every history round: uniform sources, Zipf-like targets (power-law in-degree)
    perm = rng.permutation(n)
    per_round = OUT_DEGREE * n // rnd
    for r in range(1, rnd + 1):
        src = h[rng.integers(0, n, per_round)]
        dst = h[perm[np.minimum((n * rng.random(per_round) ** 2.5).astype(np.int64), n - 1)]]
        lt = pa.table({"from_hash": pa.array(src, pa.uint64()), "to_hash": pa.array(dst, pa.uint64()),
                       "to_url": pa.nulls(per_round, pa.string()),
                       "kind": pa.array(np.full(per_round, "a", object), pa.string()),
                       "round": pa.array(np.full(per_round, r, np.int32))}).cast(LINKS_SCHEMA)
        store.write_table(store.links_file(r, 0), lt)
    # the previous round's change-rate prior: a model fitted on a sample, and every row's prior
    from crawl import changerate as cr
    from crawl import prior as prior_mod

    smp = np.sort(rng.choice(n, min(n, 50_000), replace=False))
    sdb = crawldb.conform(pa.table({"url": url.take(pa.array(smp)), "url_hash": pa.array(h[smp], pa.uint64()),
                                    "host": host.take(pa.array(smp)), "depth": pa.array(np.ones(smp.size, np.int32))}))
    ev, ex = cr.evidence(changes[smp].astype(float), (checks[smp] - changes[smp]) * 2.0,
                         changes[smp] * 2.0, np.full(smp.size, np.nan))
    model = prior_mod.fit(sdb, ev, ex, checks[smp].astype(float))
    model.metrics["fit_round"] = rnd
    prior_mod.save(store, rnd, model)
    order = np.argsort(h)
    store.write_table(store.state("model", f"v={rnd:05d}", "prior.parquet"),
                      pa.table({"url_hash": pa.array(h[order], pa.uint64()),
                                "prior": pa.array(rate[order] * np.exp(rng.normal(0, 0.5, n)))}))
    # the previous round's generate stats (round spacing: one day) and the published pointer
    store.write_json(store.round_dir(rnd, "generate.json"), {"round": rnd, "now": (now - timedelta(days=1)).isoformat()})
    previous_rescoring(cfg, now)
    store.write_json(store.state("CURRENT.json"), {"round": rnd})
    t1 = time.perf_counter()
    return {"build_s": round(t1 - t0, 2), "crawldb_s": round(t_db - t0, 2)}


def previous_rescoring(cfg, now: datetime) -> None:
    """Round 10's reprioritise stats, as a full rescoring on the cadence leaves them: its refetch
    threshold tau (the 2 x budget-th largest importance x U(t) over the content rows, at round 10's
    time), which the rounds up to the next full one reuse (crawl.schedule.untouched)."""
    import duckdb

    from crawl import crawldb
    from crawl.store import Store

    store = Store(cfg.root, cfg.crawl_id)
    con = duckdb.connect()
    src = crawldb.source_sql(store, con, HISTORY_ROUNDS, cfg.url_shards)
    k = 2 * cfg.max_pages
    tau = con.execute(f"""
        SELECT v FROM (
            SELECT coalesce(importance, 1) * (1 / l - (t + 1 / l) * exp(-l * t)) AS v FROM (
                SELECT greatest(coalesce(change_rate, 1 / 7), 1e-9) AS l,
                       greatest($now - epoch(coalesce(last_success_time, fetch_time)), 0)
                         / 86400.0 AS t, importance
                FROM {src} WHERE status IN ('fetched', 'not_modified', 'duplicate', 'near_duplicate')))
        ORDER BY v DESC LIMIT 1 OFFSET {k - 1}
    """, {"now": now.timestamp()}).fetchone()
    con.close()
    store.write_json(store.round_dir(HISTORY_ROUNDS, "reprioritise.json"),
                     {"round": HISTORY_ROUNDS, "policy": cfg.schedule_policy, "importance": "full",
                      "tau": float(tau[0]) if tau else None})


def due_pages(hosts: int, seed: int, fetches: int) -> pa.Table:
    """``fetches`` HTML pages of the simulated web, spread round-robin over its hosts."""
    from crawl.simweb.model import SimParams, build
    from crawl.simweb.truth import truth_table
    from crawl.url import canonicalize_many

    truth = truth_table(build(SimParams(seed=seed, hosts=hosts)))
    ok = pc.and_(pc.and_(truth.column("robots_allowed"), pc.equal(truth.column("content_type"), "text/html")),
                 pc.is_in(truth.column("kind"), pa.array(["news", "blog", "shop", "docs", "archive", "forum"])))
    pick = truth.filter(ok).filter(pc.is_null(truth.filter(ok).column("crawl_delay")))
    pick = pick.select(["url", "host"])
    canon = pc.coalesce(canonicalize_many(pick.column("url")), pick.column("url").combine_chunks())
    pick = pa.table({"url": canon, "host": pick.column("host")})
    # round-robin over hosts: rank within host, then sort by rank
    enc = pc.dictionary_encode(pick.column("host").combine_chunks()).indices.to_numpy()
    order = np.argsort(enc, kind="stable")
    rank = np.empty_like(order)
    starts = np.r_[0, np.flatnonzero(np.diff(enc[order])) + 1]
    rank[order] = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
    pick = pick.take(pa.array(np.lexsort((enc, rank))))
    if pick.num_rows < fetches:
        raise SystemExit(f"the simulated web of {hosts} hosts has only {pick.num_rows} eligible pages")
    return pick.slice(0, fetches)


# ---- one step in its own process -------------------------------------------------------------------
def run_step(step: str, cfg_json: str, now_iso: str, round_no: int) -> None:
    from crawl import round as rnd
    from crawl.config import load_config

    cfg = load_config(overrides=json.loads(cfg_json), use_env=False)
    now = datetime.fromisoformat(now_iso)
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    if step == "generate":
        rnd.generate(cfg, now)
    elif step == "fetch_parse":
        from crawl.cluster import dask_client

        with dask_client(cfg) as client:
            out["cluster_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            rnd.fetch_parse(cfg, round_no, now, client=client)
            out["work_s"] = time.perf_counter() - t1
            t2 = time.perf_counter()
        out["cluster_close_s"] = time.perf_counter() - t2
    elif step == "update":
        rnd.update(cfg, round_no, now)
    elif step == "reprioritise":
        rnd.reprioritise(cfg, round_no, now)
    elif step == "publish":
        rnd.publish(cfg, round_no)
    elif step == "inject_to_publish":  # fixed cost: a round with nothing due (run_round, no seeds)
        rnd.run_round(cfg, None, now)
    out["seconds"] = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_s"] = ru.ru_utime + ru.ru_stime  # this process's CPU (a shared box moves wall time, not this)
    # this process's own high-water mark (VmHWM: getrusage's ru_maxrss would also carry the bench
    # process's RSS at fork time across exec), and its waited-for children's (Dask nannies, workers)
    rss_self = _vm_hwm_kib()
    rss_kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out["peak_rss_gib"] = max(rss_self, rss_kids) / 2 ** 20
    print("STEP " + json.dumps(out), flush=True)


def _vm_hwm_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def step_proc(step: str, overrides: dict, now: datetime, round_no: int, profile: Path | None) -> dict[str, float]:
    """Run one step in a child process; its wall time (interpreter start included) and its own figures."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--step", step, "--cfg", json.dumps(overrides),
           "--now", now.isoformat(), "--round", str(round_no)]
    if profile is not None:
        cmd = [sys.executable, "-m", "cProfile", "-o", str(profile / f"{step}.prof"), *cmd[1:]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    line = [x for x in res.stdout.splitlines() if x.startswith("STEP ")]
    if res.returncode != 0 or not line:
        raise RuntimeError(f"step {step} failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return {"wall_s": wall, **json.loads(line[-1][5:])}


def reset_state(root: Path, round_no: int) -> None:
    """Undo a measured round on a kept state: remove every file and folder of round ``round_no`` (its
    versions ``v=NNNNN``, ``rounds/NNNNN``, ``round=NNNNN*`` outputs) and point CURRENT.json at the round
    before, so the same state measures the next change without being rebuilt."""
    tags = (f"v={round_no:05d}", f"round={round_no:05d}")
    for dirpath, dirnames, filenames in os.walk(root, topdown=True):
        for name in list(dirnames):
            if name.startswith(tags) or (Path(dirpath).name == "rounds" and name == f"{round_no:05d}"):
                shutil.rmtree(Path(dirpath) / name)
                dirnames.remove(name)
        for name in filenames:
            if name.startswith(tags):
                (Path(dirpath) / name).unlink()
    for cur in root.glob("state/crawl=*/CURRENT.json"):
        cur.write_text(json.dumps({"round": round_no - 1}))


def one_size(n_urls: int, due: pa.Table, port: int, work: Path, fetches: int, profile: bool,
             fixed: bool, every: int, state_dir: Path | None = None, digests: bool = True) -> dict:
    from crawl.config import load_config

    base = state_dir if state_dir is not None else work
    overrides = {"root": str(base / f"root-{n_urls}"), "crawl_id": "scale",
                 "resolve": [f"*.sim.test=127.0.0.1:{port}"], "politeness_delay_s": 0.0,
                 "max_pages": fetches, "partitions": 4, "round_duration_s": 300.0,
                 "max_pages_per_host_per_round": 100_000, "coverage_share": 0.0, "sitemaps": False,
                 "dask_dashboard": False}
    if every > 1:  # importance and prior on a cadence (the round measured, 11, is between two full runs)
        overrides.update(importance_every_rounds=every, prior_every_rounds=every)
    cfg = load_config(overrides=overrides, use_env=False)
    now = datetime.now(UTC).replace(microsecond=0)
    marker = Path(overrides["root"]) / "built.json"
    if state_dir is not None and marker.exists():  # a kept state: same `now`, the measured round undone
        kept = json.loads(marker.read_text())
        now, built = datetime.fromisoformat(kept["now"]), {**kept["built"], "reused": True}
        reset_state(Path(overrides["root"]), HISTORY_ROUNDS + 1)
        if not (Path(overrides["root"]) / f"state/crawl=scale/rounds/{HISTORY_ROUNDS:05d}/reprioritise.json").exists():
            previous_rescoring(cfg, now)  # a state kept before the builder wrote round 10's stats
        print(f"  N={n_urls:>10,} reusing the state in {overrides['root']} (built {kept['now']})", flush=True)
    else:
        built = build_state(cfg, n_urls, due, now)
        if state_dir is not None:
            marker.write_text(json.dumps({"now": now.isoformat(), "built": built}))
    prof_dir = None
    if profile:
        prof_dir = REPO / "bench" / "out" / f"scale-{n_urls}"
        prof_dir.mkdir(parents=True, exist_ok=True)
    res: dict = {"n_urls": n_urls, **built, "steps": {}}
    if digests:
        res.update(digest_lookup(cfg, due))
    for step in STEPS:
        res["steps"][step] = step_proc(step, overrides, now, HISTORY_ROUNDS + 1, prof_dir)
        s = res["steps"][step]
        print(f"  N={n_urls:>10,} {step:<13} {s['seconds']:7.2f} s in step, {s['wall_s']:7.2f} s wall,"
              f" {s.get('cpu_s', 0):7.2f} s CPU, peak RSS {s['peak_rss_gib']:.2f} GiB", flush=True)
    res["round_s"] = sum(s["wall_s"] for s in res["steps"].values())
    res["peak_rss_gib"] = max(s["peak_rss_gib"] for s in res["steps"].values())
    if state_dir is None:
        shutil.rmtree(overrides["root"], ignore_errors=True)
    if fixed:  # the same state with nothing due: a whole round (run_round), inject to publish
        overrides = {**overrides, "root": str(work / f"fixed-{n_urls}")}
        cfg = load_config(overrides=overrides, use_env=False)
        build_state(cfg, n_urls, due, now, none_due=True)
        s = step_proc("inject_to_publish", overrides, now, 0, None)
        res["fixed_round_s"] = s["wall_s"]
        res["fixed_round_rss_gib"] = s["peak_rss_gib"]
        print(f"  N={n_urls:>10,} fixed round (nothing due): {s['wall_s']:.2f} s wall,"
              f" peak RSS {s['peak_rss_gib']:.2f} GiB", flush=True)
        shutil.rmtree(overrides["root"], ignore_errors=True)
    return res


def digest_lookup(cfg, due: pa.Table) -> dict[str, float]:
    """What one fetch task spends on known digests: the whole table as a dict, or its fetch list's (a
    quarter of the due rows, as with 4 partitions) by the semi-join plus the key array its first miss
    builds (crawl.digests); in this process, one after the other."""
    from crawl.store import Store
    from crawl.tasks import load_known_digests

    store = Store(cfg.root, cfg.crawl_id)
    prev = store.read_table(store.digests_file(HISTORY_ROUNDS)).column("payload_digest").slice(0, due.num_rows // 4)
    t0 = time.perf_counter()
    few = load_known_digests(store, HISTORY_ROUNDS, prev)
    few.get("sha1:" + "A" * 32)  # a miss: builds the 64-bit key array of the whole table
    t1 = time.perf_counter()
    full = load_known_digests(store, HISTORY_ROUNDS)
    t2 = time.perf_counter()
    out = {"digests_semijoin_s": round(t1 - t0, 3), "digests_full_s": round(t2 - t1, 3),
           "digests_semijoin_rows": len(few), "digests_full_rows": len(full)}
    print(f"  digests for one fetch task: full table {out['digests_full_s']:.2f} s ({len(full):,} rows), "
          f"semi-join + key array {out['digests_semijoin_s']:.3f} s ({len(few):,} rows)", flush=True)
    del full
    return out


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n_urls"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for step in STEPS:
        ax.plot(ns, [r["steps"][step]["wall_s"] for r in results], marker="o", label=step)
    ax.plot(ns, [r["round_s"] for r in results], marker="s", color="black", label="round")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("known URLs (N)")
    ax.set_ylabel("seconds (one process per step)")
    ax.set_title("One round of a fixed fetch list against crawl size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 10k, 100k, 1M")
    ap.add_argument("--sizes", default="10000,100000,1000000,10000000")
    ap.add_argument("--fetches", type=int, default=3000)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="cProfile every step into bench/out/scale-N/")
    ap.add_argument("--fixed", action="store_true", help="also time a round with nothing due (fixed_round_s)")
    ap.add_argument("--every", type=int, default=1,
                    help="importance_every_rounds and prior_every_rounds (1 = full PageRank and prior fit every round)")
    ap.add_argument("--state", default="",
                    help="keep each N's built state in this folder and reuse it on later runs (the measured "
                         "round is undone first); default: a temporary folder, removed")
    ap.add_argument("--no-digests", action="store_true",
                    help="skip the digests-per-fetch-task comparison (minutes at 10 M; not part of the round)")
    ap.add_argument("--plot", default="", help="write the step-time plot here (PNG)")
    ap.add_argument("--json", default="", help="write all figures here")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--cfg", help=argparse.SUPPRESS)
    ap.add_argument("--now", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        run_step(args.step, args.cfg, args.now, args.round)
        return
    from crawl.simweb.launch import launch
    from crawl.simweb.launch import stop as stop_process

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated bench still stops its server
    sizes = [10_000, 100_000, 1_000_000] if args.quick else [int(x) for x in args.sizes.split(",")]
    print(f"load average at start: {os.getloadavg()}; cores: {os.cpu_count()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    results = []
    try:
        due = due_pages(args.hosts, args.seed, args.fetches)
        for n in sizes:
            results.append(one_size(n, due, port, work, args.fetches, args.profile, args.fixed, args.every,
                                    Path(args.state) if args.state else None, not args.no_digests))
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}", flush=True)
    print(f"{'N':>10} {'build':>7} " + " ".join(f"{s:>12}" for s in STEPS) + f" {'round':>8} {'RSS GiB':>8}")
    for r in results:
        print(f"{r['n_urls']:>10,} {r['build_s']:>7.1f} " + " ".join(f"{r['steps'][s]['wall_s']:>12.2f}" for s in STEPS)
              + f" {r['round_s']:>8.2f} {r['peak_rss_gib']:>8.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"loadavg": os.getloadavg(), "results": results}, indent=2))
    if args.plot:
        plot(results, Path(args.plot))
    by_n = {r["n_urls"]: r for r in results}
    last = results[-1]
    extra = ""
    if 100_000 in by_n and 1_000_000 in by_n:
        extra += f" growth_1m_vs_100k={by_n[1_000_000]['round_s'] / by_n[100_000]['round_s']:.2f}"
    if 1_000_000 in by_n and 10_000_000 in by_n:
        extra += f" growth_10m_vs_1m={by_n[10_000_000]['round_s'] / by_n[1_000_000]['round_s']:.2f}"
    if "fixed_round_s" in last:
        extra += f" fixed_round_s={last['fixed_round_s']:.1f}"
    print(f"RESULT n_urls={last['n_urls']} round_s={last['round_s']:.1f} peak_rss_gib={last['peak_rss_gib']:.2f}"
          + extra)


if __name__ == "__main__":
    main()
