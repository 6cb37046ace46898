"""crawl.gctune.relaxed_gc: the young-generation threshold is raised while any user runs and the
thresholds found by the first user come back when the last one leaves (fetch and parse loops of
several tasks overlap in one Dask worker)."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

from crawl.gctune import GC_YOUNG_THRESHOLD, paused_gc, relaxed_gc


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


def test_paused_gc_nests_overlaps_and_restores_the_collector() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner user leaving does not re-enable early
    assert gc.isenabled()

    inside = threading.Barrier(3)
    first_out = threading.Event()
    seen: list[bool] = []

    def user(wait: threading.Event | None) -> None:
        with paused_gc():
            inside.wait()
            if wait is not None:
                wait.wait()
            seen.append(gc.isenabled())
        if wait is None:
            first_out.set()

    early, late = threading.Thread(target=user, args=(None,)), threading.Thread(target=user, args=(first_out,))
    early.start(), late.start()
    inside.wait()
    early.join(), late.join()
    assert seen == [False, False]  # the later user still ran paused after the earlier one left
    assert gc.isenabled()

    try:
        with paused_gc():
            raise RuntimeError("fetch failed")
    except RuntimeError:
        pass
    assert gc.isenabled()

    gc.disable()  # a collector someone else turned off stays off
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_paused_collector_still_frees_cycles_within_its_interval(monkeypatch) -> None:
    """Paused for an hour-long fetch, the collector still frees reference cycles every
    PAUSED_GC_COLLECT_S (a side thread's young collections), and that thread ends with the pause."""
    import weakref

    from crawl import gctune

    monkeypatch.setattr(gctune, "PAUSED_GC_COLLECT_S", 0.05)

    class Node:
        pass

    with paused_gc():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the cyclic collector frees it
        gone = weakref.ref(a)
        del a, b
        deadline = time.monotonic() + 10
        while gone() is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gone() is None
        assert not gc.isenabled()
    assert gc.isenabled()
    deadline = time.monotonic() + 5
    while any(t.name == "paused-gc" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.name == "paused-gc" for t in threading.enumerate())


def test_the_fetch_loop_runs_with_the_collector_paused(simweb, tmp_path: Path) -> None:
    """fetch_partition's event loop runs without automatic cyclic collections (each cost ~9 ms of the
    loop thread with the GIL held at 20,000 pages) and gives the collector back when it returns."""
    from datetime import UTC, datetime

    from test_fetch import cfg_for, fetchlist

    from crawl.fetch import fetch_partition

    urls = [r["url"] for r in simweb.truth().to_pylist()
            if r["kind"] in ("news", "blog") and r["robots_allowed"] and r["content_type"] == "text/html"
            and not r["fault"] and not r["trap"] and not r["crawl_delay"] and r["host_robots"] not in ("timeout", "5xx")][:6]
    cfg = cfg_for(simweb, root=str(tmp_path), allow_private_networks=True, sitemaps=False, politeness_delay_s=0.0)
    during: list[bool] = []
    out = fetch_partition(cfg, fetchlist(urls), root=str(tmp_path), warc_prefix="r1/p0", now=datetime.now(UTC),
                          hold_bytes=1 << 24, on_hold=lambda *_: during.append(gc.isenabled()))
    assert out.stats["requests"] >= len(urls)
    assert during and not any(during)
    assert gc.isenabled()
