"""``allowed_hosts`` matching time on a pathological pattern: RE2 (crawl.scope) vs Python's backtracking re.

``^(a+)+$`` searched in ``"a" * n + ".example"`` makes Python's re try every split of the a's (time
doubles with each extra ``a``); RE2 stays linear. The figure to compare across runs is the ratio
``re time / RE2 time`` at the same ``n`` in the same run (absolute times on a shared box are noise), and
RE2's time at a host 200x longer, which stays in microseconds. Python's re is only run up to
``--max-re-n`` (each step doubles its time).

    .venv/bin/python bench/scope_bench.py [--max-re-n 22]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

from crawl.scope import host_allowed, hosts_allowed  # noqa: E402

PATTERN = r"^(a+)+$"


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-re-n", type=int, default=22)
    args = ap.parse_args()
    rx = re.compile(PATTERN)
    print(f"pattern {PATTERN!r} searched in 'a' * n + '.example'")
    print(f"{'n':>6} {'python re (s)':>14} {'RE2 (s)':>10} {'re / RE2':>10}")
    for n in range(args.max_re_n - 6, args.max_re_n + 1, 2):
        host = "a" * n + ".example"
        t_re = timed(lambda h=host: rx.search(h), 1)
        t_re2 = timed(lambda h=host: host_allowed(h, PATTERN))
        print(f"{n:>6} {t_re:>14.4f} {t_re2:>10.6f} {t_re / t_re2:>10.0f}")
    for n in (40, 1000, 5000):
        host = "a" * n + ".example"
        print(f"{n:>6} {'(not run)':>14} {timed(lambda h=host: host_allowed(h, PATTERN)):>10.6f}")
    hosts = pa.array([("a" * (i % 60)) + ".example" if i % 2 else "a" * (i % 60 + 1) for i in range(100_000)])
    t_col = timed(lambda: hosts_allowed(hosts, PATTERN))
    print(f"column of {len(hosts):,} hosts (Arrow's RE2): {t_col:.4f} s, "
          f"{int(hosts_allowed(hosts, PATTERN).sum()):,} in scope")


if __name__ == "__main__":
    main()
