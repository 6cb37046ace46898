"""How fast the simulated web's model is built (the unit tests no longer time it).

Builds the model at a small baseline size and at the sizes the tests use (200 and 1000 hosts,
50 pages per host), best of ``--repeat`` runs each, and prints one JSON line: seconds, pages, µs per
page, and each size's per-page cost as a ratio to the baseline's in the same run (about 1 when the
build scales linearly). The budgets the tests used to assert (3 s for 200 hosts, 12 s for 1000) are
printed next to the times, as ``within_budget``, for a person to read, not to fail on.

    .venv/bin/python bench/simweb_model_bench.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crawl.simweb import model as M  # noqa: E402

BUDGETS_S = {200: 3.0, 1000: 12.0}


def best_build(hosts: int, seed: int, pages_per_host: int, repeat: int) -> tuple[float, int]:
    best, pages = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        m = M.build(M.SimParams(seed=seed, hosts=hosts, pages_per_host=pages_per_host))
        best = min(best, time.perf_counter() - t)
        pages = m.n_pages
    return best, pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-hosts", type=int, default=40)
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--pages-per-host", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    base_s, base_pages = best_build(a.baseline_hosts, 1, a.pages_per_host, a.repeat)
    base_us = base_s / base_pages * 1e6
    runs = []
    for hosts in a.sizes:
        s, pages = best_build(hosts, 1 if hosts <= 200 else 5, a.pages_per_host, a.repeat)
        us = s / pages * 1e6
        budget = BUDGETS_S.get(hosts)
        runs.append({"hosts": hosts, "pages": pages, "seconds": round(s, 3), "us_per_page": round(us, 1),
                     "per_page_vs_baseline": round(us / base_us, 2), "budget_s": budget,
                     "within_budget": None if budget is None else s <= budget})
    print(json.dumps({
        "bench": "simweb_model_build", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "baseline": {"hosts": a.baseline_hosts, "pages": base_pages, "seconds": round(base_s, 3),
                     "us_per_page": round(base_us, 1)},
        "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
