"""Engine-only demo: crawl the simulated web for a few rounds on the embedded Dask cluster, then query it.

``make demo`` runs the same rounds through the Airflow DAG (``scripts/demo.py``); this one needs no
Airflow (``python -m crawl.demo``).

Starts ``python -m crawl.simweb serve`` on a free loopback port, runs the rounds through the same
engine calls the Airflow DAG makes, prints the named DuckDB queries over the output, and stops the
server it started (by its PID). The output stays in ``--root`` (default ``crawldata/``) for DuckDB.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from crawl import query
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.simweb.launch import launch
from crawl.simweb.launch import stop as stop_process


def print_summary(root: str, crawl_id: str) -> None:
    """The named DuckDB queries over a crawl's published output."""
    for name in ("summary", "status_mix", "pages_per_host", "duplicates", "freshness"):
        print(f"\n== {name} ==")
        print(query.format_table(query.run(root, crawl_id, name), max_rows=12))
    print(f"\nQuery it yourself: .venv/bin/python -m crawl query --root {root} --crawl-id {crawl_id} "
          f"\"SELECT count(*) FROM pages\"  (or DuckDB over {root}/index/)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="crawldata")
    ap.add_argument("--hosts", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-pages", type=int, default=1500)
    ap.add_argument("--delay", type=float, default=0.2)
    args = ap.parse_args(argv)

    root = Path(args.root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    proc, port = launch(args.hosts, args.seed, root / "simweb-access.jsonl")
    try:
        from crawl.simweb.model import SimParams, build

        seeds = build(SimParams(seed=args.seed, hosts=args.hosts)).seed_urls(8)
        cfg = load_config(overrides={
            "root": str(root), "crawl_id": "demo", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
            "politeness_delay_s": args.delay, "max_pages": args.max_pages, "partitions": 4,
            "round_duration_s": 30.0, "total_timeout_s": 10.0, "max_crawl_delay_s": 5.0,
        })
        print(f"simulated web: {args.hosts} hosts on 127.0.0.1:{port}; crawl root: {root}")
        start = datetime.now(UTC)
        with dask_client(cfg) as client:
            for i in range(args.rounds):
                t0 = time.monotonic()
                rnd.run_round(cfg, seeds if i == 0 else None, start + timedelta(hours=i), progress=print,
                              client=client)
                print(f"round {i + 1} wall time: {time.monotonic() - t0:.1f} s")
        print_summary(cfg.root, cfg.crawl_id)
    finally:
        stop_process(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
