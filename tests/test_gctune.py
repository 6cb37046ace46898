"""crawl.gctune.relaxed_gc: the young-generation threshold is raised while any user runs and the
thresholds found by the first user come back when the last one leaves (fetch and parse loops of
several tasks overlap in one Dask worker)."""

from __future__ import annotations

import gc
import threading

from crawl.gctune import GC_YOUNG_THRESHOLD, relaxed_gc


def test_nested_and_overlapping_users_restore_the_thresholds() -> None:
    before = gc.get_threshold()
    with relaxed_gc():
        raised = gc.get_threshold()
        assert raised == (max(before[0], GC_YOUNG_THRESHOLD), *before[1:])
        with relaxed_gc():
            assert gc.get_threshold() == raised
        assert gc.get_threshold() == raised  # an inner user leaving does not restore early
    assert gc.get_threshold() == before

    inside = threading.Barrier(3)
    leave = threading.Event()
    seen: list[tuple[int, int, int]] = []

    def user() -> None:
        with relaxed_gc():
            inside.wait()
            leave.wait()
            seen.append(gc.get_threshold())

    threads = [threading.Thread(target=user) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert gc.get_threshold() == raised
    leave.set()
    for t in threads:
        t.join()
    assert len(seen) == 2 and all(s == raised for s in seen)  # each read while itself inside
    assert gc.get_threshold() == before


def test_an_exception_inside_still_restores() -> None:
    before = gc.get_threshold()
    try:
        with relaxed_gc():
            raise RuntimeError("parse failed")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before


_FREEZE_PROBE = r"""
import gc, weakref
from crawl.gctune import relaxed_gc

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

before = cycle()  # alive at the first entry: moved to the permanent generation
assert gc.get_freeze_count() == 0, gc.get_freeze_count()
with relaxed_gc():
    frozen = gc.get_freeze_count()
    assert frozen > 0
    tracked = {id(o) for g in range(3) for o in gc.get_objects(g)}
    assert id(before) not in tracked and id(before.other) not in tracked
    later = [cycle() for _ in range(100)]  # made after the freeze: still collected as cyclic garbage
    dead = []
    refs = [weakref.ref(x, dead.append) for x in later]
    del later
    gc.collect()
    assert len(dead) == 100, len(dead)
mid = cycle()
with relaxed_gc():  # once per process: a second first user does not freeze again
    assert id(mid) in {id(o) for g in range(3) for o in gc.get_objects(g)}
print("ok")
"""


def test_first_user_freezes_startup_objects_once() -> None:
    """In a fresh process (the test session has frozen long ago): objects alive at the first
    relaxed_gc leave the collector's generations, cycles made later are still collected, and a later
    first user does not freeze again."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FREEZE_PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
