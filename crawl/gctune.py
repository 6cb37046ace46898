"""The cyclic garbage collector's young-generation threshold while a hot loop runs.

Why: the fetch loop (every request allocates a few dozen short-lived objects) and the parse loop
(each page keeps its parsed document, raw links and a few lists until the partition's tables are
built) make CPython's collector, at its default threshold of 700, run hundreds of young and tens of
middle collections per partition, each also scanning whatever a Dask worker holds: ~0.1 ms CPU per
fetched page (bench/fetch_cpu_bench.py) and ~4 % of parse (bench/RESULTS.md, "Parse CPU, session
4"). Garbage without cycles is freed by reference counting as before; cycles wait a little longer.

The threshold is process-wide, so :func:`relaxed_gc` is counted under a lock: with several fetch or
parse tasks in one worker, the first in saves the thresholds and the last out restores them. One
definition for every loop that uses it, so the count is shared.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

GC_YOUNG_THRESHOLD = 20_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def relaxed_gc() -> Iterator[None]:
    """Raise the young-generation GC threshold to :data:`GC_YOUNG_THRESHOLD` for the duration."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(_gc_saved[0], GC_YOUNG_THRESHOLD), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0 and _gc_saved is not None:
                gc.set_threshold(*_gc_saved)


__all__ = ["GC_YOUNG_THRESHOLD", "relaxed_gc"]
