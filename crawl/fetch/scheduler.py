"""Per-key scheduling of the fetcher: jobs, origins (hosts), politeness slots, the slot heap and gaps.

Why apart: it is the politeness logic (one queue per key, delay between starts, in-flight limit,
round-robin over a key's origins) and needs no socket; :class:`crawl.fetch.core._Fetcher` mixes it
in. See :mod:`crawl.fetch.core` for the whole design.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from crawl import url as U
from crawl.robots import RobotsPolicy

# Added to every non-zero gap: covers clock-rate differences between our monotonic clock and the
# server's wall clock (NTP slewing), so a gap we keep is never logged a hair short.
_GAP_MARGIN_S = 0.002


@dataclass
class _Job:
    url: str
    url_hash: int
    depth: int
    etag: str | None = None
    last_modified: str | None = None
    hops: int = 0
    robots: bool = False
    sitemap: bool = False  # a sitemap file of the host (crawler-control request, not a page)
    unit: str = ""  # the unit of work its rows belong to (crawl.checkpoint): input URL, robots, sitemaps
    followup: bool = False  # queued by another job of its unit (redirect hop, re-try, sitemap file)
    prev_digest: str | None = None  # payload digest of the stored copy the validators vouch for (a 304's)


@dataclass
class _Slot:
    """One politeness queue: the hosts sharing a politeness key (``cfg.politeness_key``).

    Gap, in-flight limit and 429/503 backoff belong to the slot, so with ``domain`` or ``ip`` keys all
    hosts of a domain (or on one address) are one queue to the server; robots.txt, errors and the
    URL queues stay per host (RFC 9309 scopes robots.txt to scheme + host + port). With the default
    ``host`` key a slot holds one host and this is the classic per-host queue.
    """

    key: str
    hosts: list[_Host] = field(default_factory=list)
    rr: int = 0  # round-robin position among the hosts
    next_at: float = 0.0
    delay: float = 0.0  # the strictest delay of its hosts (max of configured delay and Crawl-delays)
    in_flight: int = 0
    in_heap: bool = False
    retired: bool = False  # no longer counts against cfg.max_concurrent_hosts
    last_start: float = -1e9  # task-relative times of the last request start and answer
    last_answer: float = -1e9
    idle_since: float | None = None  # when its last request ended (its politeness wait starts)
    backoff_until: float = -1e9  # task-relative end of the wait a 429/503 asked for (this or an earlier round)

    def pick(self) -> _Host | None:
        """The next host (round-robin) that has a URL it may start now."""
        hosts = self.hosts
        n = len(hosts)
        if n == 1:
            h = hosts[0]
            return h if h.queue and not h.closed and not h.blocked else None
        for i in range(n):
            h = hosts[(self.rr + i) % n]
            if h.queue and not h.closed and not h.blocked:
                self.rr = (self.rr + i + 1) % n
                return h
        return None

    def has_work(self) -> bool:
        hosts = self.hosts
        if len(hosts) == 1:  # the default host key: no generator per call (three calls per request)
            h = hosts[0]
            return bool(h.queue) and not h.closed
        return any(h.queue and not h.closed for h in hosts)


@dataclass
class _Host:
    """One origin (scheme + host + port, RFC 9309 §2.3): its robots.txt, URL queue and error count.

    Several origins of one server (``http://h``, ``https://h``, ``http://h:8080``) each ask their own
    robots.txt but share the politeness slot of their key (the host by default).
    """

    host: str  # the host as the URL model gives it (the fetch rows' host column)
    origin: str  # scheme://host[:port] from the URL model, where robots.txt is asked for
    slot: _Slot
    queue: deque[_Job] = field(default_factory=deque)
    delay: float = 0.0
    blocked: bool = False  # robots.txt in flight: no page request may start
    errors: int = 0
    backoff_n: int = 0
    policy: RobotsPolicy | None = None
    closed: bool = False  # remaining URLs were settled (deferred/filtered); nothing more to start
    rng: random.Random = field(default_factory=random.Random)
    sitemaps_seen: set[str] = field(default_factory=set)  # sitemap URLs queued (capped per host)
    sitemap_entries: int = 0
    resume_sitemaps: bool = False  # robots.txt came from this partition's checkpoint, its sitemaps did not


_NO_SLOT = _Slot(key="")  # placeholder until build_slots groups the hosts by politeness key


def _origin(url: str, host: str | None, schemes: tuple[str, ...] = U.WEB_SCHEMES) -> tuple[str, str] | None:
    """(``scheme://host[:port]``, host) of ``url`` by the URL model; None if the model refuses it.

    Shortcut for the usual canonical URL ``scheme://host/...`` whose host column is already in the
    model's form (lower case, no userinfo, port or trailing dot): the prefix is the origin, no parse.
    Anything else is parsed, so a spelling (``user@HOST.:80``) never makes an origin of its own.
    """
    if host and "@" not in host and host[-1:] not in (".", "[") and host.islower():
        for scheme in ("http://", "https://"):
            if url.startswith(scheme) and url.startswith(host, len(scheme)):
                end = len(scheme) + len(host)
                if len(url) == end or url[end] in "/?#":
                    return url[:end], host
    try:
        u = U.parse_url(url, schemes=schemes)
    except U.InvalidURL:
        return None
    return u.origin, u.host


class _Scheduling:
    """The fetcher's per-key scheduling: the task clock, politeness keys, the slot heap, gaps and
    in-flight places. No sockets: the HTTP call and the outcomes live in their own modules."""

    # told each time a host's state a rerun must keep changes (a 429/503 wait, an error): tell_host
    on_host_state: Callable[[str | None, float, str, int, str, int], None] | None = None

    def mono(self) -> float:
        return time.monotonic() - self.t0

    def wall(self) -> datetime:
        """Fetch time: the task's ``now`` plus elapsed time, so a simulated round clock stays coherent."""
        return self.now0 + timedelta(seconds=self.mono())

    def key_of_host(self, host: str) -> str:
        """The politeness key of ``host``: the frontier's (fetch list ``pkey``, so a task's queues are
        exactly its partition's keys), else derived by the same rule (:func:`crawl.url.politeness_key`)."""
        key = self.pkeys.get(host)
        if key is None:
            mode = "host" if self.cfg.politeness_key == "ip" else self.cfg.politeness_key
            key = self.pkeys[host] = U.politeness_key(f"http://{host}/", mode) or host
        return key

    def _key_of_url(self, url: str) -> str | None:
        """The politeness key a request to ``url`` counts against (None: the URL model refuses it)."""
        try:
            return self.key_of_host(U.host_of(url, self.schemes))
        except U.InvalidURL:
            return None

    def build_slots(self, keys: Mapping[str, str]) -> None:
        for h in self.hosts.values():
            key = keys.get(h.host, h.host)
            s = self.slots.get(key)
            if s is None:
                s = self.slots[key] = _Slot(key=key, delay=self.cfg.politeness_delay_s)
            s.hosts.append(h)
            h.slot = s
        self.stats["politeness_keys"] = len(self.slots)

    def after_earlier_contact(self, last_contact_unix: float | None,
                              backoff_until_unix: Mapping[str, float] | None = None,
                              backoff_counts: Mapping[str, int] | None = None,
                              error_counts: Mapping[str, int] | None = None) -> None:
        """Count an earlier task's last contact with these keys (Unix time: the previous round's fetch
        ended then) as every slot's last start and answer, so back-to-back rounds keep each key's gap
        too: a slot's first request waits until that time + its delay, and a Crawl-delay learnt from
        robots.txt later in this task is counted from it as well (:meth:`_RobotsFetch.apply_policy`).
        ``backoff_until_unix`` (key -> Unix time): the waits 429/503 answers asked of the earlier round
        that had not ended with it; a key waits them out here too (one ending after this task's
        deadline defers the key's hosts when it is admitted; a key this task does not have is passed
        on as it is, so a round without URLs of the host does not end its wait). ``backoff_counts``
        (host -> count): a dead attempt's backoff counts of this partition's hosts, taken up so the next
        503 without Retry-After waits the next length of the series. ``error_counts`` (origin -> count):
        the errors a dead attempt counted against this partition's origins, so an origin gets at most
        ``cfg.max_host_errors`` failing requests in the round however often its task is rerun (the
        caller settles those already at the limit). Called once the slots are built, before any is
        queued."""
        now, wall = self.mono(), time.time()
        if backoff_counts:
            for h in self.hosts.values():
                h.backoff_n = max(h.backoff_n, int(backoff_counts.get(h.host, 0)))
        if error_counts:
            for h in self.hosts.values():
                h.errors = max(h.errors, int(error_counts.get(h.origin, 0)))
        self.backoff_elsewhere = {}
        for key, until in (backoff_until_unix or {}).items():
            s = self.slots.get(key)
            if s is None:
                if until > wall:
                    self.backoff_elsewhere[key] = until
            elif until > wall:
                s.backoff_until = max(s.backoff_until, now + until - wall)
                s.next_at = max(s.next_at, s.backoff_until)
        if last_contact_unix is None:
            return
        ref = now - max(0.0, wall - last_contact_unix)
        for s in self.slots.values():
            s.last_start = max(s.last_start, ref)
            s.last_answer = max(s.last_answer, ref)
            if s.delay > 0:
                s.next_at = max(s.next_at, ref + s.delay + _GAP_MARGIN_S)

    def back_off(self, s: _Slot, wait: float, h: _Host) -> None:
        """A 429/503 (its Retry-After, else the backoff) that host ``h`` answered: the key starts nothing
        for ``wait`` seconds, in this task and, when the wait outlasts it, in the next round's
        (:meth:`backoffs_left`); the wait is told at once (:meth:`tell_host`) with the Unix time it
        ends (a 429/503 is rare: no work on the path of other answers)."""
        s.backoff_until = max(s.backoff_until, self.mono() + wait)
        s.next_at = max(s.next_at, s.backoff_until)
        self.tell_host(h, s.key, round(time.time() + s.backoff_until - self.mono(), 3))

    def tell_host(self, h: _Host, key: str | None = None, until: float = 0.0) -> None:
        """Tell ``on_host_state`` (when set; :class:`crawl.tasks.PendingWaits` keeps it where a rerun
        after a crash finds it) the key's wait ``until`` (Unix time; ``key`` None: no wait) and host
        ``h``'s counts: its backoff count (``backoff_n``: the 503s without Retry-After so far, which set
        the next backoff's length) and its error count (``errors``, towards ``cfg.max_host_errors``).
        Called on a 429/503 and on every error counted against a host, never on other answers."""
        if self.on_host_state is not None:
            self.on_host_state(key, until, h.host, h.backoff_n, h.origin, h.errors)

    def backoffs_left(self) -> dict[str, float]:
        """Key -> Unix time its 429/503 wait ends, for the keys still waiting now (the next round's
        ``backoff_until_unix``)."""
        now, wall = self.mono(), time.time()
        left = {k: u for k, u in self.backoff_elsewhere.items() if u > wall}
        left.update({s.key: round(wall + s.backoff_until - now, 3) for s in self.slots.values() if s.backoff_until > now})
        return left

    def push(self, s: _Slot) -> None:
        if not s.in_heap and s.has_work():
            s.in_heap = True
            self.seq += 1
            heapq.heappush(self.heap, (s.next_at, self.seq, s.key))

    def retire(self, s: _Slot) -> None:
        """Free the slot's concurrency place once nothing is queued and nothing is in flight."""
        if not s.retired and s.in_flight == 0 and not s.has_work():
            s.retired = True
            self.active -= 1

    def _sent(self, s: _Slot) -> None:
        """With parallel requests per key, the gap runs from when the request really left."""
        if s.delay > 0:
            s.next_at = max(s.next_at, self.mono() + s.delay + _GAP_MARGIN_S)

    def _answered(self, s: _Slot) -> None:
        """One request per key: the gap runs from the end of the answer (its body read or cut, or the
        failure), so a body dripped until the total deadline is followed by ``delay`` of quiet too.

        Why not from the send time: the server stamps a request's start when it gets round to it,
        which may be some milliseconds after we sent it, so send + delay can look like a shorter gap
        in the server's log. The server's start is always before its answer reaches us, so answer +
        delay is a gap the server can never see as too short (Nutch also counts from the end).
        """
        s.last_answer = self.mono()
        if s.delay > 0 and self.one_in_flight:
            s.next_at = max(s.next_at, s.last_answer + s.delay + _GAP_MARGIN_S)

    async def _gap(self, h: _Host) -> None:
        """Wait for the slot's next start, then take it (a redirect hop is a request to the host too)."""
        s = h.slot
        wait = max(0.0, s.next_at - self.mono())
        self.stats["politeness_wait_s"] += wait
        await asyncio.sleep(wait)
        s.last_start = self.mono()
        s.next_at = s.last_start + s.delay + (_GAP_MARGIN_S if s.delay > 0 else 0.0)

    async def _acquire(self, s: _Slot) -> bool:
        """Take a start on another key's slot: wait for its gap and a free in-flight place (the
        dispatcher sees ``in_flight`` and keeps off meanwhile). False if that takes longer than one
        request may (two hosts whose robots.txt redirect to each other must not wait for each
        other forever) or the deadline comes first."""
        limit = self.cfg.max_in_flight_per_host
        until = min(self.deadline_s, self.mono() + s.delay + self.cfg.total_timeout_s)
        while s.in_flight >= limit or s.next_at > self.mono():
            if self.mono() >= until:
                return False
            await asyncio.sleep(max(0.001, min(s.next_at - self.mono(), 0.05)))
        s.in_flight += 1
        s.last_start = self.mono()
        s.next_at = s.last_start + s.delay + (_GAP_MARGIN_S if s.delay > 0 else 0.0)
        return True

    def _release(self, s: _Slot) -> None:
        s.in_flight -= 1
        if s.hosts:  # a slot of this task: let the dispatcher start its next URL
            self.push(s)
