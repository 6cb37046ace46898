"""Fetcher throughput and politeness on the simulated web, each against its own same-run bound.

1. **Fetch-only, delay 0**: ``fetch_partition`` (robots.txt per host, host heap, WARC writing) over the
   robots-allowed HTML pages of ``--hosts`` normal hosts, against a plain aiohttp loop over the same
   URLs in the same run (the ceiling on this box). Printed as pages/s and a ratio: absolute figures on
   a shared 2-core box are noise, the ratio is not.
2. **Politeness-bound**: ``--polite-hosts`` H hosts at ``--delay`` d seconds, ``--polite-pages`` pages
   each: pages/s against the H/d limit, plus the server-side minimum gap between request starts and
   the maximum in-flight requests per host (from the simulated web's access log).

The simulated web runs as a subprocess (one core), as in the tests. Each run is bounded (~30 s).
Sitemaps are off in the throughput run, so both sides fetch the same URLs (robots.txt aside).

``--baseline-rev REV`` also runs ``crawl/fetch.py`` as it was at git revision REV, interleaved with
the current one (``--reps`` pairs, each fetch run between two ceiling runs), so before/after ratios
come from the same machine state. ``--checkpoints`` likewise adds a run that checkpoints its progress
(:mod:`crawl.checkpoint`, every ``--checkpoint-every`` rows), as fetch tasks of a round do.

    .venv/bin/python bench/fetch_bench.py                 # 600 simulated hosts, >= 500 crawled
    .venv/bin/python bench/fetch_bench.py --hosts 200 --polite-hosts 50
    .venv/bin/python bench/fetch_bench.py --baseline-rev 4428359 --reps 2 --polite-hosts 0
    .venv/bin/python bench/fetch_bench.py --checkpoints --checkpoint-every 100 --reps 2 --polite-hosts 0
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crawl import url as U  # noqa: E402
from crawl.checkpoint import PartitionCheckpoints, fetchlist_key  # noqa: E402
from crawl.config import CrawlConfig  # noqa: E402
from crawl.fetch import fetch_partition  # noqa: E402
from crawl.net import GuardedResolver  # noqa: E402
from crawl.records import FETCHLIST_SCHEMA  # noqa: E402
from crawl.simweb import model as M  # noqa: E402
from crawl.simweb.accesslog import read_log  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.simweb.truth import truth_table  # noqa: E402
from crawl.store import Store  # noqa: E402

RUN_CAP_S = 30.0


def start_simweb(hosts: int, seed: int, pages: int, workdir: Path) -> tuple[subprocess.Popen, int, Path]:
    log = workdir / "access.jsonl"
    proc, port = launch(hosts, seed, log, pages)
    return proc, port, log


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        stop_process(proc)


def pick_urls(model: M.Model, good: list[str], per_host: int) -> list[str]:
    """Up to ``per_host`` robots-allowed HTML pages of each host in ``good``."""
    t = truth_table(model, time.time())
    t = t.filter(pc.and_(pc.is_in(t["host"], pa.array(good)),
                         pc.and_(t["robots_allowed"], pc.equal(t["content_type"], "text/html"))))
    t = t.filter(pc.invert(t["trap"]))
    out: list[str] = []
    seen: dict[str, int] = {}
    for url, host in zip(t["url"].to_pylist(), t["host"].to_pylist(), strict=True):
        if seen.get(host, 0) < per_host:
            seen[host] = seen.get(host, 0) + 1
            out.append(url)
    return out


def host_report(log: Path, hosts: set[str], since: float) -> list[dict]:
    """Per host, from the server's access log (our User-Agent, starts after ``since``): requests,
    min gap between request starts, max in flight, first and last start."""
    by: dict[str, list[dict]] = {}
    for r in read_log(log).to_pylist():
        if r["host"] in hosts and r["start"] >= since and r["user_agent"].startswith("RecrawlBot"):
            by.setdefault(r["host"], []).append(r)
    out = []
    for host, rs in by.items():
        starts = sorted(r["start"] for r in rs)
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        out.append({"host": host, "requests": len(rs), "min_gap_s": min(gaps) if gaps else None,
                    "max_in_flight": max(r["in_flight"] for r in rs), "first_start": starts[0],
                    "last_start": starts[-1]})
    return out


def fetchlist(urls: list[str]) -> pa.Table:
    n = len(urls)
    return pa.table({
        "url": urls, "url_hash": pa.array([U.url_hash(u) for u in urls], pa.uint64()),
        "host": [U.host_of(u) for u in urls], "depth": pa.array([0] * n, pa.int32()),
        "priority": [1.0] * n, "etag": pa.array([None] * n, pa.string()),
        "last_modified": pa.array([None] * n, pa.string()), "prev_digest": pa.array([None] * n, pa.string()),
        "pkey": [U.politeness_key(u) for u in urls],
    }, schema=FETCHLIST_SCHEMA)


async def plain_loop(urls: list[str], rule: str, concurrency: int) -> dict:
    """The ceiling: one session, N workers, GET and read every URL, nothing else."""
    conn = aiohttp.TCPConnector(resolver=GuardedResolver([rule]), use_dns_cache=False, limit=concurrency)
    queue = list(reversed(urls))
    ok = 0
    stop_at = time.monotonic() + RUN_CAP_S
    async with aiohttp.ClientSession(connector=conn) as s:
        async def worker() -> None:
            nonlocal ok
            while queue and time.monotonic() < stop_at:
                url = queue.pop()
                try:
                    async with s.get(url, allow_redirects=False) as r:
                        await r.read()
                        ok += r.status == 200
                except aiohttp.ClientError:
                    pass

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - t0
    return {"pages": ok, "seconds": round(elapsed, 2), "pages_per_s": round(ok / elapsed, 1)}


def load_fetch_at(rev: str):
    """``crawl/fetch.py`` as of git revision ``rev``, imported as a separate module."""
    src = subprocess.run(["git", "show", f"{rev}:crawl/fetch.py"], cwd=REPO, check=True,
                         capture_output=True).stdout
    path = Path(tempfile.mkdtemp(prefix="fetch_rev_")) / "fetch_baseline.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("fetch_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fetch_baseline"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def throughput_run(fetch_fn, cfg: CrawlConfig, urls: list[str], rule: str, concurrency: int,
                   root: Path, prefix: str) -> dict:
    """One fetch run at delay 0 between two ceiling runs; the ratio is against their mean."""
    before = asyncio.run(plain_loop(urls, rule, concurrency))
    t0 = time.monotonic()
    out = fetch_fn(cfg, fetchlist(urls), root=str(root), warc_prefix=prefix, now=datetime.now(UTC),
                   deadline_s=RUN_CAP_S)
    elapsed = time.monotonic() - t0
    # the ceiling is measured before and after ours and averaged: load from other work on a shared
    # box drifts within a minute, and a ceiling from one side only skews the ratio
    after = asyncio.run(plain_loop(urls, rule, concurrency))
    ceiling = round((before["pages_per_s"] + after["pages_per_s"]) / 2, 1)
    st = out.stats["status"]  # page rows only (robots.txt rows are counted apart)
    ours = st.get("fetched", 0) / elapsed
    return {
        "hosts": len({U.host_of(u) for u in urls}), "urls": len(urls), "fetched": st.get("fetched", 0),
        "status": st, "seconds": round(elapsed, 2), "pages_per_s": round(ours, 1),
        "requests_per_s_incl_robots": round((out.stats.get("requests", 0)
                                             + out.stats.get("robots_requests", 0)) / elapsed, 1),
        "fetch_loop_s": round(out.stats["fetch_loop_s"], 2), "warc_drain_s": round(out.stats["warc_drain_s"], 2),
        "segments": out.stats.get("segments", 0), "checkpoint_s": round(out.stats.get("checkpoint_s", 0.0), 3),
        "ceiling_pages_per_s": ceiling, "ceiling_before_after": [before["pages_per_s"], after["pages_per_s"]],
        "ratio_to_ceiling": round(ours / ceiling, 3) if ceiling else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=600, help="simulated hosts (>= 500 good ones at 600)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pages-per-host", type=int, default=20)
    ap.add_argument("--crawl-hosts", type=int, default=520, help="hosts in the throughput run")
    ap.add_argument("--urls-per-host", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=256, help="plain loop workers")
    ap.add_argument("--polite-hosts", type=int, default=100)
    ap.add_argument("--polite-pages", type=int, default=20, help="pages per host (capped so a run < 30 s)")
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--baseline-rev", default="", help="also run crawl/fetch.py of this git revision")
    ap.add_argument("--reps", type=int, default=1, help="throughput runs (pairs with --baseline-rev)")
    ap.add_argument("--checkpoints", action="store_true", help="also run with fetch checkpoints, interleaved")
    ap.add_argument("--checkpoint-every", type=int, default=500, help="rows per checkpoint (--checkpoints)")
    a = ap.parse_args()

    model = M.build(M.SimParams(seed=a.seed, hosts=a.hosts, pages_per_host=a.pages_per_host))
    work = Path(tempfile.mkdtemp(prefix="fetch_bench_"))
    proc, port, log = start_simweb(a.hosts, a.seed, a.pages_per_host, work)
    rule = f"*.sim.test=127.0.0.1:{port}"
    result: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.node(),
                    "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        all_good = [h.name for h in model.good_hosts()]  # no crawl-delay, robots.txt answers at once
        urls = pick_urls(model, all_good[: a.crawl_hosts], a.urls_per_host)
        # warm the server's render cache once so every run sees the same (warm) server
        asyncio.run(plain_loop(urls, rule, a.concurrency))
        cfg = CrawlConfig().replace(resolve=(rule,), politeness_delay_s=0.0, max_concurrent_hosts=512,
                                    sitemaps=False)
        baseline = load_fetch_at(a.baseline_rev).fetch_partition if a.baseline_rev else None

        def checkpointed(cfg: CrawlConfig, fl: pa.Table, **kw) -> object:
            """A round's fetch task's way: segments cut and checkpointed every --checkpoint-every rows."""
            ck = PartitionCheckpoints(Store(kw["root"], "bench"), 1, 0, fetchlist_key(fl) + kw["warc_prefix"])
            ck.remove()
            return fetch_partition(cfg.replace(fetch_checkpoint_every=a.checkpoint_every), fl,
                                   checkpoint=ck.save, **kw)

        runs: dict[str, list[dict]] = {"current": [], "baseline": [], "checkpointed": []}
        for rep in range(max(1, a.reps)):
            for name, fn in (("baseline", baseline), ("current", fetch_partition),
                             ("checkpointed", checkpointed if a.checkpoints else None)):
                if fn is None:
                    continue
                r = throughput_run(fn, cfg, urls, rule, a.concurrency, work / "root", f"bench/{name}{rep}")
                runs[name].append(r)
                print(json.dumps({"run": name, "rep": rep, "ratio_to_ceiling": r["ratio_to_ceiling"],
                                  "pages_per_s": r["pages_per_s"], "ceiling": r["ceiling_pages_per_s"],
                                  "seconds": r["seconds"], "segments": r["segments"],
                                  "checkpoint_s": r["checkpoint_s"]}),
                      flush=True)
        result["fetch_delay0"] = runs["current"][-1]
        result["fetch_delay0"]["ratios_current"] = [r["ratio_to_ceiling"] for r in runs["current"]]
        if baseline is not None:
            result["fetch_delay0"]["baseline_rev"] = a.baseline_rev
            result["fetch_delay0"]["ratios_baseline"] = [r["ratio_to_ceiling"] for r in runs["baseline"]]
        if a.checkpoints:
            result["fetch_delay0"]["checkpoint_every"] = a.checkpoint_every
            result["fetch_delay0"]["ratios_checkpointed"] = [r["ratio_to_ceiling"] for r in runs["checkpointed"]]
        print(json.dumps({"fetch_delay0": result["fetch_delay0"]}), flush=True)

        if a.polite_hosts <= 0:
            print(json.dumps(result))
            return 0
        # politeness-bound run on other hosts (fresh server state for them)
        per_host = min(a.polite_pages, int((RUN_CAP_S - 2) / max(a.delay, 1e-3)))
        # hosts with at least per_host pages, so every host has the same work and H/d is reachable
        purls = pick_urls(model, all_good[::-1], per_host)
        n_of = Counter(U.host_of(u) for u in purls)
        full = [h for h in all_good[::-1] if n_of.get(h, 0) == per_host][: a.polite_hosts]
        purls = [u for u in purls if U.host_of(u) in set(full)]
        hosts_used = {U.host_of(u) for u in purls}
        since = time.time()
        pcfg = cfg.replace(politeness_delay_s=a.delay)
        t0 = time.monotonic()
        pout = fetch_partition(pcfg, fetchlist(purls), root=str(work / "root"), warc_prefix="bench/polite",
                               now=datetime.now(UTC), deadline_s=RUN_CAP_S)
        pelapsed = time.monotonic() - t0
        time.sleep(1.5)  # access log flush
        rep = host_report(log, hosts_used, since)
        reqs = sum(r["requests"] for r in rep)
        # per-host pace: requests after the first over the span they took, against 1/d
        pace = [(r["requests"] - 1) * a.delay / (r["last_start"] - r["first_start"])
                for r in rep if r["requests"] > 1 and r["last_start"] > r["first_start"]]
        limit = len(hosts_used) / a.delay
        span = max(r["last_start"] for r in rep) - min(r["first_start"] for r in rep) + a.delay
        result["politeness_bound"] = {
            "hosts": len(hosts_used), "delay_s": a.delay, "urls": len(purls),
            "status": pout.stats["status"], "seconds": round(pelapsed, 2),
            "requests_incl_robots": reqs,
            "requests_per_s": round(reqs / span, 1), "limit_per_s": round(limit, 1),
            "ratio_to_limit": round(reqs / span / limit, 3),
            "mean_host_pace_ratio": round(sum(pace) / len(pace), 4) if pace else None,
            "server_min_gap_s": round(min(r["min_gap_s"] for r in rep if r["min_gap_s"] is not None), 4),
            "server_max_in_flight": max(r["max_in_flight"] for r in rep),
            "violations": sum(1 for r in rep if (r["min_gap_s"] is not None and r["min_gap_s"] < a.delay)
                              or r["max_in_flight"] > 1),
        }
        print(json.dumps({"politeness_bound": result["politeness_bound"]}), flush=True)
    finally:
        stop(proc)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
