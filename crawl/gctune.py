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
_pause_stop: threading.Event | None = None

#: While the collector is paused, generations 0-1 are still collected this often (seconds), from a side
#: thread: a fetch may run for a round's whole duration (an hour by default), and the cycles it makes
#: (Protego's rules; an exception kept with its traceback on a host that fails) would otherwise wait
#: for its end. Each collection scans only what was allocated since the previous one (survivors move
#: to the old generation, which waits for the end), so it stays ~1 % of the loop's time or less.
PAUSED_GC_COLLECT_S = 30.0


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
    re-enables it. Meanwhile generations 0-1 are still collected every :data:`PAUSED_GC_COLLECT_S`, so
    what a long fetch leaves in cycles stays bounded.
    """
    global _pause_users, _pause_was_enabled, _pause_stop
    with _gc_lock:
        if _pause_users == 0:
            _pause_was_enabled = gc.isenabled()
            gc.disable()
            _pause_stop = threading.Event()
            threading.Thread(target=_collect_young_until, args=(_pause_stop,), name="paused-gc",
                             daemon=True).start()
        _pause_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _pause_users -= 1
            if _pause_users == 0:
                if _pause_stop is not None:
                    _pause_stop.set()
                    _pause_stop = None
                if _pause_was_enabled:
                    gc.enable()


def _collect_young_until(stop: threading.Event) -> None:
    """Collect generations 0-1 every :data:`PAUSED_GC_COLLECT_S` until ``stop`` is set: the bound on
    what a paused collector leaves waiting (read at each wait, so a test can shorten it)."""
    while not stop.wait(PAUSED_GC_COLLECT_S):
        gc.collect(1)


__all__ = ["GC_YOUNG_THRESHOLD", "paused_gc", "relaxed_gc"]
