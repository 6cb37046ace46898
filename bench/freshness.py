"""Freshness of each recrawl policy for the same budget, measured against the simulated web's truth.

For every policy (uniform round-robin, Nutch adaptive, estimator alone, the default = estimator +
learned prior + PageRank importance, oracle = true λ with the default's allocation) the real engine
(``crawl.round.run_round`` on an embedded Dask cluster) crawls the same simulated web for R rounds
with the same page budget per round. Before each round the simulated web's virtual clock is set to the
round time and the same ``now`` goes to the round, so virtual time advances ``--spacing-h`` per round.

Metrics (from the truth; a stored copy is fresh when its version equals the live version):
- freshness, importance-weighted (true PageRank; the primary figure) and plain, time-averaged over
  ``EVAL_POINTS`` instants per round interval, over the pages the crawl holds, rounds 2..R;
- mean age of the stored copies (hours since the live page first differed; 0 when fresh);
- coverage: share of reachable pages (HTML, robots-allowed, not traps or faults) ever fetched;
- wasted fetches: re-fetches whose content had not changed (truth), as a share of re-fetches.

Writes ``freshness.png`` (freshness per round per policy) and ``freshness.json`` to ``--out`` and
ends with one line ``RESULT vs_oracle=… gain_capture=… vs_uniform=… vs_nutch=…``.

    .venv/bin/python bench/freshness.py --quick     # 60 hosts, 12 rounds: a few minutes on 2 cores
    .venv/bin/python bench/freshness.py             # 100 hosts, 20 rounds
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crawl import crawldb  # noqa: E402
from crawl import round as rnd  # noqa: E402
from crawl.cluster import dask_client  # noqa: E402
from crawl.config import load_config  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.simweb.model import SimParams, build  # noqa: E402
from crawl.simweb.truth import truth_table  # noqa: E402
from crawl.store import Store  # noqa: E402

POLICIES = ("uniform", "nutch", "estimator", "default", "oracle")
EVAL_POINTS = 4
T0 = 1767225600 + 30 * 86_400  # a month after the simulated web's epoch: pages have histories


class SimWebProcess:
    """``python -m crawl.simweb serve`` on a free loopback port, stopped by its PID."""

    def __init__(self, hosts: int, seed: int, pages: int, workdir: Path):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.err = open(workdir / "simweb.stderr", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crawl.simweb", "serve", "--hosts", str(hosts), "--seed", str(seed),
             "--pages-per-host", str(pages), "--port", "0"], stdout=subprocess.PIPE, stderr=self.err,
            cwd=REPO, env=env)
        deadline, line = time.monotonic() + 60, b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            if select.select([self.proc.stdout], [], [], 0.2)[0]:
                line = self.proc.stdout.readline()
                if line.startswith(b"SIMWEB READY"):
                    break
        if not line.startswith(b"SIMWEB READY"):
            self.stop()
            raise RuntimeError("simulated web did not start")
        self.port = int(line.decode().strip().rsplit(":", 1)[1])

    def set_clock(self, t: float) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("POST", "/_sim/clock", body=json.dumps({"time": t, "speed": 1.0}),
                         headers={"Host": "control", "Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"clock: HTTP {resp.status}")
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.proc)
        self.err.close()


def _secs(col: pa.ChunkedArray) -> np.ndarray:
    arr = pc.cast(col, pa.timestamp("ms", tz="UTC")).cast(pa.int64()).cast(pa.float64())
    return pc.fill_null(arr, np.nan).to_numpy(zero_copy_only=False) / 1000.0


class Judge:
    """Truth-side measurements of a crawl's stored copies."""

    def __init__(self, model, truth: pa.Table):
        self.model = model
        self.index = model.url_index
        self.importance = truth.column("importance").to_numpy()
        reachable = (pc.is_in(truth.column("page_type"), pa.array(["home", "article"])).to_numpy(
            zero_copy_only=False) & truth.column("robots_allowed").to_numpy(zero_copy_only=False))
        self.reachable_ids = np.array([self.index[u] for u, ok in zip(truth.column("url").to_pylist(), reachable,
                                                                      strict=True) if ok])
        self.truth_ids = np.array([self.index[u] for u in truth.column("url").to_pylist()])
        self.imp_by_id = np.zeros(model.n_pages)
        self.imp_by_id[self.truth_ids] = self.importance

    def collection(self, db: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(page ids, last successful fetch time) of pages the crawl holds a copy of."""
        ok = pc.invert(pc.is_null(db.column("last_success_time")))
        db = db.filter(ok)
        ids = np.array([self.index.get(u, -1) for u in db.column("url").to_pylist()], dtype=np.int64)
        t = _secs(db.column("last_success_time"))
        keep = ids >= 0
        ids, t = ids[keep], t[keep]
        # one copy per page (aliases of a page: keep the newest)
        order = np.lexsort((-t, ids))
        ids, t = ids[order], t[order]
        first = np.concatenate(([True], ids[1:] != ids[:-1])) if ids.size else np.empty(0, bool)
        return ids[first], t[first]

    def measure(self, ids: np.ndarray, fetched_at: np.ndarray, at: float) -> dict[str, float]:
        if ids.size == 0:
            return {"fw": 0.0, "f": 0.0, "age_h": 0.0}
        stored = self.model.version_at(ids, fetched_at)
        live = self.model.version_at(ids, np.full(ids.size, at))
        fresh = stored == live
        first_diff = self.model.change_time(ids, stored + 1)
        age = np.where(fresh, 0.0, np.maximum(at - np.nan_to_num(first_diff, nan=at), 0.0)) / 3600.0
        w = self.imp_by_id[ids]
        return {"fw": float((w * fresh).sum() / max(w.sum(), 1e-12)), "f": float(fresh.mean()),
                "age_h": float(age.mean())}

    def coverage(self, ids: np.ndarray) -> float:
        return float(np.isin(self.reachable_ids, ids).mean())


def run_policy(policy: str, sw: SimWebProcess, judge: Judge, args: argparse.Namespace, root: Path,
               oracle_path: Path, seeds: list[str], client: object) -> dict:
    cfg = load_config(overrides={
        "root": str(root), "crawl_id": policy, "resolve": [f"*.sim.test=127.0.0.1:{sw.port}"],
        "politeness_delay_s": 0.0, "max_pages": args.budget, "partitions": 2, "url_shards": 2,
        "round_duration_s": 30.0, "connect_timeout_s": 2.0, "read_timeout_s": 2.0, "total_timeout_s": 3.0,
        "max_body_bytes": 300_000, "backoff_base_s": 2.0, "max_crawl_delay_s": 5.0, "dask_workers": 2,
        "schedule_policy": policy, "oracle_rates_path": str(oracle_path),
    }, use_env=False)
    store = Store(cfg.root, cfg.crawl_id)
    spacing = args.spacing_h * 3600.0
    per_round, prev_ver = [], {}
    refetches = wasted = 0
    started = time.monotonic()
    for r in range(args.rounds):
        now = T0 + r * spacing
        sw.set_clock(now)
        rnd.run_round(cfg, seeds if r == 0 else None, now=datetime.fromtimestamp(now, UTC), client=client)
        db = crawldb.read(store, r + 1, cfg.url_shards, ["url", "last_success_time", "round"])
        ids, t = judge.collection(db)
        # wasted: pages re-fetched this round whose content had not changed since our previous copy
        this_round = t >= now
        ver = judge.model.version_at(ids, t)
        for i, v, fresh_now in zip(ids.tolist(), ver.tolist(), this_round.tolist(), strict=True):
            if fresh_now and i in prev_ver:
                refetches += 1
                wasted += prev_ver[i] == v
            prev_ver[i] = v
        pts = [judge.measure(ids, t, now + k * spacing / EVAL_POINTS) for k in range(EVAL_POINTS)]
        rep = store.read_json(store.round_dir(r + 1, "reprioritise.json"), {})
        per_round.append({
            "round": r + 1, "fw": float(np.mean([p["fw"] for p in pts])), "f": float(np.mean([p["f"] for p in pts])),
            "age_h": float(np.mean([p["age_h"] for p in pts])), "coverage": judge.coverage(ids),
            "held": int(ids.size), "model": rep.get("model"),
        })
        print(f"  {policy:9s} round {r + 1:2d}: Fw={per_round[-1]['fw']:.3f} F={per_round[-1]['f']:.3f} "
              f"coverage={per_round[-1]['coverage']:.3f} held={ids.size}", flush=True)
    scored = per_round[1:] if len(per_round) > 1 else per_round
    return {
        "policy": policy, "rounds": per_round, "seconds": round(time.monotonic() - started, 1),
        "fw": float(np.mean([p["fw"] for p in scored])), "f": float(np.mean([p["f"] for p in scored])),
        "age_h": float(np.mean([p["age_h"] for p in scored])), "coverage": per_round[-1]["coverage"],
        "wasted": wasted / max(refetches, 1), "refetches": refetches,
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for res in results:
        rounds = [p["round"] for p in res["rounds"]]
        axes[0].plot(rounds, [p["fw"] for p in res["rounds"]], marker=".", label=res["policy"])
        axes[1].plot(rounds, [p["f"] for p in res["rounds"]], marker=".", label=res["policy"])
    axes[0].set_title("importance-weighted freshness")
    axes[1].set_title("freshness")
    for ax in axes:
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="60 hosts, 12 rounds")
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--pages-per-host", type=int, default=20)
    ap.add_argument("--budget", type=int, default=120, help="pages per round (max_pages), every policy")
    ap.add_argument("--spacing-h", type=float, default=8.0, help="virtual hours between rounds")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out", default=str(REPO / "bench" / "out"))
    ap.add_argument("--workdir", help="keep crawl state here (default: a temporary directory)")
    args = ap.parse_args()
    args.hosts = args.hosts or (60 if args.quick else 100)
    args.rounds = args.rounds or (12 if args.quick else 20)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policies = [p for p in args.policies.split(",") if p]

    model = build(SimParams(seed=args.seed, hosts=args.hosts, pages_per_host=args.pages_per_host))
    truth = truth_table(model, T0)
    judge = Judge(model, truth)
    print(f"simulated web: {args.hosts} hosts, {truth.num_rows} pages, {judge.reachable_ids.size} reachable; "
          f"budget {args.budget}/round, {args.rounds} rounds {args.spacing_h} h apart", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="freshness-") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        oracle_path = work / "oracle_rates.parquet"
        pq.write_table(truth.select(["url", "change_rate"]), oracle_path)
        sw = SimWebProcess(args.hosts, args.seed, args.pages_per_host, work)
        try:
            seeds = model.seed_urls(args.seeds)
            cfg0 = load_config(overrides={"dask_workers": 2}, use_env=False)
            with dask_client(cfg0) as client:
                for policy in policies:
                    results.append(run_policy(policy, sw, judge, args, work / "crawl", oracle_path, seeds, client))
        finally:
            sw.stop()

    print(f"\n{'policy':10s} {'F_weighted':>10s} {'F_plain':>8s} {'age_h':>7s} {'coverage':>8s} "
          f"{'wasted':>7s} {'seconds':>7s}")
    for res in results:
        print(f"{res['policy']:10s} {res['fw']:10.4f} {res['f']:8.4f} {res['age_h']:7.1f} {res['coverage']:8.3f} "
              f"{res['wasted']:7.3f} {res['seconds']:7.1f}")
    (out / "freshness.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1, default=str))
    plot(results, out / "freshness.png")
    by = {r["policy"]: r["fw"] for r in results}
    if all(p in by for p in ("default", "oracle", "uniform", "nutch")):
        gain = by["oracle"] - by["uniform"]
        capture = (by["default"] - by["uniform"]) / gain if abs(gain) > 1e-12 else float("nan")
        print(f"RESULT vs_oracle={by['default'] / by['oracle']:.4f} gain_capture={capture:.4f} "
              f"vs_uniform={by['default'] / by['uniform']:.4f} vs_nutch={by['default'] / by['nutch']:.4f}")


if __name__ == "__main__":
    main()
