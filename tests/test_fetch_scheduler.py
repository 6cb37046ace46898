"""The fetcher's per-key scheduler (crawl.fetch.scheduler) on its own: no sockets, no server.

The politeness rules the fetch tests check through a simulated web's access log are checked here at
their source: one heap entry per key, round-robin over a key's origins that skips blocked/closed
ones, a gap of at least the key's delay between starts, and the in-flight limit of a key.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime

from crawl.config import CrawlConfig
from crawl.fetch.scheduler import _NO_SLOT, _Host, _Job, _Scheduling, _Slot


class _Sched(_Scheduling):
    """The scheduling mixin with the state the fetcher gives it (crawl.fetch.core._Fetcher.__init__)."""

    def __init__(self, cfg: CrawlConfig) -> None:
        self.cfg = cfg
        self.heap: list[tuple[float, int, str]] = []
        self.seq = 0
        self.stats: Counter[str] = Counter()
        self.active = 0
        self.one_in_flight = cfg.max_in_flight_per_host == 1
        self.pkeys: dict[str, str] = {}
        self.hosts: dict[str, _Host] = {}
        self.slots: dict[str, _Slot] = {}
        self.schemes = tuple(cfg.allowed_schemes)
        self.deadline_s = 60.0
        self.t0 = time.monotonic()
        self.now0 = datetime.now(UTC)


def _host(sched: _Sched, name: str, n_jobs: int) -> _Host:
    h = _Host(host=name, origin=f"http://{name}", slot=_NO_SLOT)
    for i in range(n_jobs):
        h.queue.append(_Job(f"http://{name}/{i}", i, 0))
    sched.hosts[h.origin] = h
    return h


def test_one_heap_entry_per_key_and_domain_keys_share_a_slot() -> None:
    sched = _Sched(CrawlConfig().replace(politeness_key="domain"))
    a = _host(sched, "a.example.com", 2)
    b = _host(sched, "b.example.com", 1)
    idle = _host(sched, "other.org", 0)
    sched.build_slots({h.host: sched.key_of_host(h.host) for h in sched.hosts.values()})
    assert a.slot is b.slot and a.slot is not idle.slot
    assert sched.stats["politeness_keys"] == 2
    for s in sched.slots.values():
        sched.push(s)
        sched.push(s)  # a second push of a queued key adds nothing
    assert [key for _, _, key in sched.heap] == [a.slot.key]  # the key without work is not queued


def test_pick_round_robin_skips_blocked_and_closed_origins() -> None:
    sched = _Sched(CrawlConfig())
    a = _host(sched, "a", 2)
    _host(sched, "b", 1)
    c = _host(sched, "c", 1)
    sched.build_slots({"a": "k", "b": "k", "c": "k"})
    s = a.slot
    c.blocked = True  # its robots.txt is in flight
    picked = []
    while (h := s.pick()) is not None:
        picked.append(h.host)
        h.queue.popleft()
    assert picked == ["a", "b", "a"]
    assert s.has_work()  # c still has its URL
    c.closed = True
    assert not s.has_work()


def test_gap_between_starts_is_at_least_the_delay() -> None:
    sched = _Sched(CrawlConfig())
    h = _host(sched, "a", 3)
    sched.build_slots({"a": "a"})
    h.slot.delay = 0.05

    async def starts() -> list[float]:
        out = []
        for _ in range(3):
            await sched._gap(h)
            out.append(h.slot.last_start)
        return out

    t = asyncio.run(starts())
    assert all(later - earlier >= 0.05 for earlier, later in zip(t, t[1:], strict=False))
    assert sched.stats["politeness_wait_s"] > 0


def test_acquire_respects_the_in_flight_limit_and_the_gap() -> None:
    sched = _Sched(CrawlConfig().replace(total_timeout_s=0.05))
    h = _host(sched, "a", 1)
    sched.build_slots({"a": "a"})
    s = h.slot
    s.delay = 0.02
    s.in_flight = 1  # the key's one place is taken: no second request may start
    assert asyncio.run(sched._acquire(s)) is False
    assert s.in_flight == 1
    s.in_flight = 0
    gate = s.next_at = sched.mono() + 0.02
    assert asyncio.run(sched._acquire(s)) is True
    assert s.in_flight == 1
    assert s.last_start >= gate  # started no earlier than its gap allowed
    assert s.next_at >= s.last_start + s.delay
    sched._release(s)
    assert s.in_flight == 0
