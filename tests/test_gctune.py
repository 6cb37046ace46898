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
