"""``make demo``: a few crawl rounds of the simulated web through the ``recrawl`` Airflow DAG.

What users do, minus the web server: each round is one run of the real DAG (``dag.test`` with the
trigger form's conf: real tasks, the real engine, the embedded Dask cluster started by the
fetch_parse task), against the simulated web on loopback. Then the output is queried with DuckDB.

- Airflow's metadata DB is a SQLite file in ``.airflow/demo/`` (migrated on first use);
- the crawl root is ``crawldata/`` (override with ``CRAWL_ROOT``), crawl id ``demo``;
- the simulated web is started here on a free port and stopped by its PID at the end.

    .venv/bin/python scripts/demo.py [--rounds 3] [--hosts 60] [--max-pages 1500]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def configure_airflow(home: Path) -> None:
    """Airflow settings must be in the environment before anything imports airflow."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "RECRAWL_SCHEDULE": "none",
        "RECRAWL_TASK_RETRIES": "0",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    })
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-pages", type=int, default=1500)
    ap.add_argument("--delay", type=float, default=0.2)
    args = ap.parse_args(argv)

    root = Path(os.environ.get("CRAWL_ROOT", REPO / "crawldata")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    configure_airflow(REPO / ".airflow" / "demo")

    from crawl.demo import print_summary
    from crawl.simweb.launch import launch
    from crawl.simweb.launch import stop as stop_process
    from crawl.simweb.model import SimParams, build
    from crawl.store import Store

    proc, port = launch(args.hosts, args.seed, root / "simweb-access.jsonl")
    try:
        os.environ.update({
            "CRAWL_ROOT": str(root),
            "CRAWL_RESOLVE": f"*.sim.test=127.0.0.1:{port}",
            # bounded limits for the demo's hostile hosts, so a round takes seconds, not minutes
            "CRAWL_ROUND_DURATION_S": "30", "CRAWL_TOTAL_TIMEOUT_S": "10", "CRAWL_MAX_CRAWL_DELAY_S": "5",
            "CRAWL_PARTITIONS": "4",
        })
        from airflow.dag_processing.dagbag import DagBag
        from airflow.utils import db

        t0 = time.monotonic()
        db.initdb()
        bag = DagBag(dag_folder=str(REPO / "dags"))
        if bag.import_errors:
            raise SystemExit(f"DAG import errors: {bag.import_errors}")
        dag = bag.dags["recrawl"]
        print(f"Airflow ready in {time.monotonic() - t0:.1f} s; simulated web: {args.hosts} hosts on "
              f"127.0.0.1:{port}; crawl root: {root}", flush=True)
        seeds = build(SimParams(seed=args.seed, hosts=args.hosts)).seed_urls(8)
        for i in range(args.rounds):
            conf = {"crawl_id": "demo", "max_pages": args.max_pages, "politeness_delay_s": args.delay}
            if i == 0:
                conf["seeds"] = seeds
            t0 = time.monotonic()
            run = dag.test(run_conf=conf)
            print(f"DAG run {i + 1}/{args.rounds} ({run.run_id}): {run.state} in {time.monotonic() - t0:.1f} s",
                  flush=True)
            if run.state != "success":
                return 1
            store = Store(str(root), "demo")
            m = store.read_json(store.round_dir(store.current_round(), "manifest.json"))
            fp, up = m["fetch_parse"], m["update"]
            print(f"  round {m['round']}: {fp['fetched']} fetched ({fp['pages_per_s']} pages/s), "
                  f"{up['new_urls']} new URLs, {up['duplicates']} duplicates, {up['near_duplicates']} "
                  f"near-duplicates, {up['known']} known", flush=True)
        print_summary(str(root), "demo")
    finally:
        stop_process(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
