"""The cyclic garbage collector while a hot loop runs: its young-generation threshold raised, or paused.

Why: the fetch loop (every request allocates a few dozen short-lived objects) and the parse loop
(each page keeps its parsed document, raw links and a few lists until the partition's tables are
built) make CPython's collector, at its default threshold of 700, run hundreds of young and tens of
middle collections per partition, each also scanning whatever a Dask worker holds: ~0.1 ms CPU per
fetched page (bench/fetch_cpu_bench.py) and ~4 % of parse (bench/RESULTS.md, "Parse CPU, session
4"). Garbage without cycles is freed by reference counting as before; cycles wait a little longer.

The threshold is process-wide, so :func:`relaxed_gc` is counted under a lock: with several fetch or
parse tasks in one worker, the first in saves the thresholds and the last out restores them. One
definition for every loop that uses it, so the count is shared.

The fetch loop goes further and pauses the collector (:func:`paused_gc`): with the threshold raised it
still spent ~19 µs a page in young collections at 20,000 pages (bench/RESULTS.md, "Fetch-only pass
against ceiling A (session 8, helper fetchonly)").
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
_pause_users = 0
_pause_was_enabled = False


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


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No automatic cyclic collection for the duration (``gc.disable``); the collector comes back as it
    was when the last user leaves, and its next collection finds whatever cycles were left meanwhile.

    Why, for the fetch loop: at 1,000 hosts / 20,000 pages the raised threshold still ran 43 young
    collections in one fetch pass, ~0.4 s of the event-loop thread's CPU with the GIL held (its
    in-flight requests, the rows and the records queued for the WARC writer are young, long-lived
    containers): ~19 µs a page of the thread that bounds a fetch task. Paused, the pass pays one
    collection of what survived (~0.1 s) when the collector comes back. The loop makes ~16 cyclic
    objects per 1,000 pages (Protego's rule objects), so little waits for that collection; other
    threads of the process (a Dask worker's) keep their cycles until then too. Counted like
    :func:`relaxed_gc`: several fetch tasks in one worker pause it together, the last one out
    re-enables it.
    """
    global _pause_users, _pause_was_enabled
    with _gc_lock:
        if _pause_users == 0:
            _pause_was_enabled = gc.isenabled()
            gc.disable()
        _pause_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _pause_users -= 1
            if _pause_users == 0 and _pause_was_enabled:
                gc.enable()


__all__ = ["GC_YOUNG_THRESHOLD", "paused_gc", "relaxed_gc"]
