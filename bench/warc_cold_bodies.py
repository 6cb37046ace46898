"""Does the WARC writer pay for bodies that went cold while queued? Its C work per body, hot vs from DRAM.

The writer thread hashes (payload SHA-1, block SHA-1) and deflates (ISA-L, ``crawl.warc._gzip``) each body
long after the event loop received it when it runs behind (a backlog of up to the write-queue bound). Here
one thread runs each pass over a ring of distinct copies of the simulated web's HTML pages: a ring of
``--small`` MB (the bodies stay in cache between uses) against one of ``--large`` MB (larger than L3:
every body comes from DRAM). Bodies are taken evenly from the same pages for both rings, and the time is
per 19.5 KB (the pages' mean), so only the cache state differs. Prints the median of ``--rounds``.

    python bench/warc_cold_bodies.py
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from writes_bench import _pages  # noqa: E402

from crawl.warc import _gzip  # noqa: E402


def _sha1(body: bytes) -> None:
    hashlib.sha1(body).digest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=float, default=0.25, help="hot ring, MB")
    ap.add_argument("--large", type=float, default=64.0, help="cold ring, MB")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    pages = [b for _, b, _ in _pages(60)]
    mean = sum(map(len, pages)) / len(pages)
    res: dict[tuple[str, float], list[float]] = {}
    for _ in range(args.rounds):
        for mb in (args.small, args.large):
            n = max(1, int(mb * 2**20 / mean))
            step = max(1, len(pages) // n)
            ring = [bytes(bytearray(pages[(i * step) % len(pages)])) for i in range(n)]  # distinct copies
            kb = sum(map(len, ring)) / len(ring) / 1024
            for name, fn in (("sha1", _sha1), ("isal deflate", _gzip)):
                k = max(3000, n)
                t0 = time.thread_time()
                for i in range(k):
                    fn(ring[i % n])
                res.setdefault((name, mb), []).append(1e6 * (time.thread_time() - t0) / k / kb * 19.5)
            del ring
    for (name, mb), v in sorted(res.items()):
        print(f"{name:12s} ring {mb:6.2f} MB: median {statistics.median(v):.1f} us per 19.5 KB  {[round(x, 1) for x in v]}")


if __name__ == "__main__":
    main()
