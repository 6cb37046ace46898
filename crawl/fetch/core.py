"""The polite per-partition fetcher: one fetch list in, fetch rows + WARC files out.

Why this shape: a Dask task calls :func:`fetch_partition` (a plain sync function) with one partition
of the fetch list; the partition holds whole hosts, so all politeness state (next-allowed time, robots
policy, error count, backoff) lives here, in one event loop, and nothing is shared between workers.

Scheduling (Nutch/StormCrawler style, one queue per politeness key): a min-heap of queues keyed by the
time the queue may next start a request. The key is ``cfg.politeness_key``: the host (default), its
registered domain, or its IP address (resolved once per host at the start of the task). For host and
domain the fetcher takes the key the frontier partitioned by (the fetch list's ``pkey``), so a key's
hosts are all in one task and ``user@HOST:80``, ``host`` and ``HOST.`` are one queue (the URL model
gives them one host); for ip the frontier resolves each host once (through the same guarded resolver,
:func:`crawl.net.politeness_ips`) and partitions by address, so hosts sharing an address share one
queue in one task across the whole round. Gap, in-flight limit and 429/503 backoff are per key; robots.txt, error
counts and URL queues are per origin (scheme + host + port, RFC 9309 §2.3), taken round-robin within a
key. A robots.txt redirect to another key waits for that key's gap and in-flight place when the key
belongs to this task (or is reached only through such redirects); a task cannot see another task's
queue, so a robots.txt redirect to a host fetched by another partition in the same round may come
closer than the gap to that host's own requests (once per robots TTL). Sitemap redirects and sitemap
entries leave the origin never (they are dropped), page redirects to another origin go to the CrawlDb. The dispatcher pops a due queue, starts its next URL and pushes the
queue back at ``start + delay``. ``delay = max(cfg.politeness_delay_s, robots Crawl-delay)`` (the
largest among a key's hosts), measured between the *starts* of two requests, robots.txt and sitemap
files included. With one request in flight per key (the default) the next start is also held until
``delay`` after the previous answer arrived, so the gap the *server* logs between its request starts
can never be shorter than the delay, whatever its own scheduling latency; with several in flight,
from when the request headers were written. At most ``cfg.max_concurrent_hosts`` keys are active at
once and at most ``cfg.max_in_flight_per_host`` requests run per key.

Failures belong to the host: 429/503 push the host's next-allowed time (``Retry-After`` or exponential
backoff with jitter), and after ``cfg.max_host_errors`` errors the host's remaining URLs are deferred to
a later round. Every input URL ends with at least one output row; a URL retried inside the task has one
row per attempt (the consumer takes the latest ``fetch_time`` per URL).

Protocols: the scheme of a URL picks its handler. ``http``/``https`` go through the lean HTTP/1.1 client (:mod:`.h1`)
(:meth:`_Fetcher._request`); ``ftp`` (opt-in: config ``allowed_schemes``) through :mod:`crawl.ftp`
(:meth:`_Fetcher._ftp_request`), one anonymous session per URL, whose answer is shaped like an HTTP
one, so the outcome logic (rows, redirects, 404s, 503 backoff, host error counts) is the same code.
Politeness is the same too: an ftp origin is a host in its key's slot, with the gap counted from the
end of the previous session. FTP has no robots.txt: an ftp origin starts with an allow-all policy and
no robots or sitemap request (see :mod:`crawl.ftp`); its captures are WARC ``resource`` records.

Where the time goes (in the task's stats, summed over queues, so they can exceed the wall time):
``request_s`` is time inside HTTP requests (connect to last byte kept); ``politeness_wait_s`` is
time a queue with work left sat between its requests (delay, Crawl-delay, 429/503 backoff).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
import threading
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from crawl import records as R
from crawl.checkpoint import (
    Resume,
    Segment,
    page_unit,
    robots_unit,
    sitemaps_unit,
)
from crawl.config import CrawlConfig
from crawl.digests import KnownDigests
from crawl.errors import FetchStopped
from crawl.fetch.h1 import H1Client
from crawl.fetch.http import FTP_PREFIX, _HttpCalls, _TotalBounds
from crawl.fetch.outcome import (
    SUBSET_DIAG,
    SUBSET_ROBOTS,
    SUBSET_SITEMAP,
    SUBSET_WARC,
    _Outcomes,
    _row,
    backoff_delay,
    parse_retry_after,
)
from crawl.fetch.robots import _fresh_robots, _RobotsFetch
from crawl.fetch.scheduler import _GAP_MARGIN_S, _NO_SLOT, _Host, _Job, _origin, _Scheduling, _Slot
from crawl.fetch.sitemaps import _SitemapEntries, _SitemapFetch
from crawl.fetch.warcwriter import _WarcOutput, _WarcWriter
from crawl.gctune import paused_gc
from crawl.net import (
    GuardedResolver,
    is_ip_key,
    politeness_ips,
)
from crawl.robots import policy_from_response
from crawl.warc import WarcFile

log = logging.getLogger(__name__)

# Rows of the robots.txt TTL cache kept in crawl state (one per host and fetch).
ROBOTS_CACHE_SCHEMA = R.ROBOTS_CACHE_SCHEMA


@dataclass
class FetchOutput:
    """What a fetch task returns: per-attempt rows, new robots cache rows, counters and sitemap entries.

    ``sitemap_rows`` (:data:`crawl.records.SITEMAP_SCHEMA`) are the ``<url>`` entries read from the
    sitemaps of hosts whose robots.txt was fetched fresh in this task; update ingests them.
    """

    fetches: pa.Table
    robots_rows: pa.Table
    stats: dict[str, Any]
    sitemap_rows: pa.Table = field(default_factory=R.SITEMAP_SCHEMA.empty_table)
    # row of ``fetches`` -> (HTTP headers, payload) as the WARC read-back gives them, for the stored
    # documents whose bodies were kept in memory (``hold_bytes``): the fetch task parses them directly
    bodies: dict[int, tuple[list[tuple[str, str]], bytes]] = field(default_factory=dict)


class _Fetcher(_Scheduling, _HttpCalls, _Outcomes, _RobotsFetch, _SitemapFetch, _WarcOutput):
    """One task's state: the slot heap, the HTTP client, the WARC writers and the output rows.

    The state lives here; the behaviour is mixed in from one module per job: :mod:`.scheduler` (slots,
    heap, gaps), :mod:`.http` (the request), :mod:`.outcome` (rows of pages), :mod:`.robots`,
    :mod:`.sitemaps` and :mod:`.warcwriter` (records, segments). This module keeps the setup, the
    dispatcher loop and :func:`fetch_partition`.
    """

    def __init__(self, cfg: CrawlConfig, root: str, warc_prefix: str, now: datetime,
                 known: Mapping[str, tuple[str, str]] | None, deadline_s: float,
                 checkpoint: Callable[[Segment], None] | None = None, first_segment: int = 0) -> None:
        self.cfg = cfg
        self.schemes = tuple(cfg.allowed_schemes)
        self.root = root
        self.now0 = now if now.tzinfo else now.replace(tzinfo=UTC)
        # a KnownDigests (crawl.digests) looks digests up in the table; a plain mapping is copied
        self.known: MutableMapping[str, tuple[str, str]] = known if isinstance(known, KnownDigests) \
            else dict(known or {})
        self.deadline_s = deadline_s
        self.rows: list[dict[str, Any]] = []
        self.robots_rows: list[dict[str, Any]] = []
        # robots.txt URL -> the (status, body) its chain ended in, for answers this task may reuse:
        # fresh cache rows (load) and the files it asked (crawl.fetch.robots)
        self.robots_answers: dict[str, tuple[int | None, bytes | None]] = {}
        self.sitemap_parts: list[pa.Table] = []  # CKPT_SITEMAP_SCHEMA (entries + their unit)
        self.sitemap_entries = _SitemapEntries()  # entries not yet in sitemap_parts
        self.hosts: dict[str, _Host] = {}  # by origin
        self.slots: dict[str, _Slot] = {}  # by politeness key
        self.pkeys: dict[str, str] = {}  # host -> politeness key given by the frontier (fetch list)
        self.heap: list[tuple[float, int, str]] = []
        self.seq = 0
        self.stats: Counter[str] = Counter()
        # segments (crawl.checkpoint): with a checkpoint callback the WARC files are cut every
        # cfg.fetch_checkpoint_every rows / cfg.fetch_checkpoint_s seconds and numbered; without one
        # a task writes one file per subset, as before
        self.prefix = warc_prefix
        self.on_segment = checkpoint
        self.seg = self.attempt = first_segment
        self.names = self._names(self.seg)
        # units with a job in flight or a follow-up queued (a dict: Counter's Python-level
        # __missing__/__delitem__ ran for every page's unit)
        self.live: dict[str, int] = {}
        self.cut_rows = self.cut_robots = self.cut_sitemaps = 0  # what the last cut took
        self.cut_at = 0.0
        # writer thread only: the current segment's open files and every file placed so far
        self.warcs: dict[str, WarcFile] = {}
        self.wseg = first_segment
        self.placed: list[str] = []
        self.checkpoint_s = 0.0  # time the writer thread spent cutting segments (closing + checkpoint)
        self.writer = _WarcWriter()
        self.bp_waiters: list[asyncio.Future[None]] = []  # requests waiting for the writer (_backpressure)
        self.resolver = GuardedResolver(cfg.resolve, allow_private_networks=cfg.allow_private_networks)
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.active = 0  # admitted slots not yet retired
        self.one_in_flight = cfg.max_in_flight_per_host == 1
        self.should_continue: Callable[[], bool] | None = None
        self.stopped = False  # set by the watch thread: no request starts after it
        # bodies of fetched pages kept for the fetch task's parse (row -> headers, payload), until
        # the first that does not fit in what is left of the budget (the rest are read back)
        self.held: dict[int, tuple[list[tuple[str, str]], bytes]] = {}
        self.hold_left = 0
        # called with (row, url, content type, headers, payload) of each held document (fetch_partition's on_hold)
        self.on_hold: Callable[[int, str, str | None, list[tuple[str, str]], bytes], None] | None = None
        self.last_contact_unix: float | None = None  # an earlier task's last contact (fetch_partition)
        self.backoff_until_unix: Mapping[str, float] | None = None  # its keys' 429/503 waits (fetch_partition)
        self.backoff_counts: Mapping[str, int] | None = None  # a dead attempt's hosts' backoff counts (ditto)
        self.error_counts: Mapping[str, int] | None = None  # and its origins' error counts (ditto)
        self.backoff_elsewhere: dict[str, float] = {}  # those of keys not in this task, passed on as they are

    # -- may we go on? (lease fencing / scheduler connection, see crawl.tasks.may_continue) -----
    def _watch(self, loop: asyncio.AbstractEventLoop, done: threading.Event) -> None:
        """Ask ``should_continue`` every second, off the event loop (it may read object storage)."""
        from crawl.lease import CHECK_INTERVAL_S

        while not done.wait(CHECK_INTERVAL_S):
            try:
                ok = self.should_continue()  # type: ignore[misc]
            except Exception:  # cannot tell: stopping is the safe side
                log.warning("should_continue failed: stopping the fetch", exc_info=True)
                ok = False
            if not ok:
                self.stopped = True
                loop.call_soon_threadsafe(self.wake.set)
                return


    # -- setup --------------------------------------------------------------------------------
    def load(self, fetchlist: pa.Table, robots_cache: pa.Table | None, resume: Resume | None = None) -> None:
        """Group the fetch list by origin (robots.txt scope) and remember each host's politeness key.

        The origin comes from the URL model; the common case (``scheme://host/...`` with the host
        column's spelling, which canonical URLs have) is recognised by a prefix test instead of a
        parse per URL. A URL the model refuses gets an ``invalid_url`` row and is not fetched.

        ``resume`` (earlier attempts' checkpoints, :mod:`crawl.checkpoint`): its done URLs are left
        out, its robots.txt answers are this task's own (so not asked again; their hosts' sitemaps
        are fetched unless that was done too) and its stored payload digests count as known.
        """
        names = ["url", "url_hash", "host", "depth", "etag", "last_modified"]
        pk = fetchlist.column("pkey").to_pylist() if "pkey" in fetchlist.column_names else None
        cols = [c.to_pylist() for c in fetchlist.select(names).columns]
        prev = fetchlist.column("prev_digest").to_pylist() if "prev_digest" in fetchlist.column_names \
            else [None] * fetchlist.num_rows
        cached = _fresh_robots(robots_cache, self.now0, self.cfg.robots_ttl_s)
        done: frozenset[str] = frozenset()
        mine: dict[str, tuple[int, bytes]] = {}
        if resume is not None:
            done = resume.done
            mine = _fresh_robots(resume.robots_rows, self.now0, self.cfg.robots_ttl_s)
            self._known_from(resume.fetches)
        for origin, answer in (*cached.items(), *mine.items()):
            self.robots_answers[origin + "/robots.txt"] = answer
        for i, (url, uh, host, depth, etag, lm) in enumerate(zip(*cols, strict=True)):
            if url in done:
                self.stats["resumed_urls"] += 1
                continue
            job = _Job(url, uh, depth if depth is not None else 0, etag, lm, unit=page_unit(url),
                       prev_digest=prev[i])
            where = _origin(url, host, self.schemes)
            if where is None:
                self.rows.append(_row(job, host, self.now0, R.FILTERED, error="invalid_url",
                                      subset=SUBSET_DIAG))
                continue
            origin, model_host = where
            # the frontier's key, as long as its host column agrees with the URL model
            if pk is not None and pk[i] and model_host == host and host not in self.pkeys:
                self.pkeys[host] = pk[i]
            h = self.hosts.get(origin)
            if h is None:
                h = self._new_host(origin, model_host, cached, mine, done)
            h.queue.append(job)
        if self.cfg.sitemaps and resume is not None:  # hosts done but for their sitemaps
            hosts = dict(zip(resume.robots_rows.column("origin").to_pylist(),
                             resume.robots_rows.column("host").to_pylist(), strict=True))
            for origin in mine:
                if origin not in self.hosts and sitemaps_unit(origin) not in done and origin in hosts:
                    self._new_host(origin, hosts[origin], cached, mine, done)
        self.stats["input_urls"] = fetchlist.num_rows
        self.stats["hosts"] = len({h.host for h in self.hosts.values()})
        self.stats["origins"] = len(self.hosts)

    def _new_host(self, origin: str, host: str, cached: Mapping[str, tuple[int, bytes]],
                  mine: Mapping[str, tuple[int, bytes]], done: frozenset[str]) -> _Host:
        h = _Host(host=host, origin=origin, slot=_NO_SLOT, delay=self.cfg.politeness_delay_s,
                  rng=random.Random(zlib.crc32(origin.encode())))
        cfg = self.cfg
        if origin.startswith(FTP_PREFIX):  # no robots.txt in FTP: allowed unless config denies
            h.policy = policy_from_response(404, b"", cfg.robots_max_bytes, cfg.robots_agent)
        elif origin in mine:  # asked by an earlier attempt of this task: its sitemaps may be missing
            st, body = mine[origin]
            h.policy = policy_from_response(st, body, cfg.robots_max_bytes, cfg.robots_agent)
            h.resume_sitemaps = cfg.sitemaps and sitemaps_unit(origin) not in done
            self.stats["robots_resumed"] += 1
        elif origin in cached:
            st, body = cached[origin]
            h.policy = policy_from_response(st, body, cfg.robots_max_bytes, cfg.robots_agent)
            self.stats["robots_cached"] += 1
        self.hosts[origin] = h
        return h

    def _known_from(self, fetches: pa.Table) -> None:
        """Payload digests an earlier attempt stored (``response`` and ``resource`` records) are known."""
        stored = fetches.filter(pc.fill_null(pc.is_in(fetches.column("warc_type"),
                                                      pa.array(["response", "resource"])), False))
        for digest, url, t in zip(stored.column("payload_digest").to_pylist(), stored.column("url").to_pylist(),
                                  stored.column("fetch_time").to_pylist(), strict=True):
            if digest:
                self.known[digest] = (url, t.isoformat())


    async def _politeness_keys(self) -> dict[str, str]:
        """host -> politeness key. ``ip``: the address the frontier resolved (the fetch list's pkey);
        a host without one (an older fetch list, or one the frontier could not resolve) is resolved
        here by the same rule (:func:`crawl.net.politeness_ips`)."""
        hosts = {h.host for h in self.hosts.values()}
        if self.cfg.politeness_key != "ip":
            return {name: self.key_of_host(name) for name in hosts}
        keys = {n: self.pkeys[n] for n in hosts if n in self.pkeys and is_ip_key(self.pkeys[n])}
        todo = [n for n in hosts if n not in keys]
        if todo:
            keys.update(await politeness_ips(self.resolver, todo, self.cfg.connect_timeout_s))
        self.pkeys.update(keys)
        return keys


    # -- main loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        self.t0 = time.monotonic()
        cfg = self.cfg
        # cfg.total_timeout_s bounds a whole request, body included: one timer for every request
        # (_TotalBounds: a total of 5 s or more ends at the loop clock's next whole second)
        self.bounds = _TotalBounds(cfg.total_timeout_s)
        self.build_slots(await self._politeness_keys())
        self.after_earlier_contact(self.last_contact_unix, self.backoff_until_unix, self.backoff_counts,
                                   self.error_counts)
        if self.error_counts:  # origins a dead attempt had already given up on: not one request more
            for h in self.hosts.values():
                if h.errors >= cfg.max_host_errors:
                    self.settle_host(h, R.DEFERRED, "host_errors")
        done = threading.Event()
        if self.should_continue is not None:
            threading.Thread(target=self._watch, args=(asyncio.get_running_loop(), done),
                             name="fetch-watch", daemon=True).start()
        # the SSRF guard sits at every socket the client opens (crawl.fetch.h1); idle keep-alive
        # connections: one per in-flight place of every active key
        self.client = H1Client(self.resolver, user_agent=cfg.user_agent, connect_timeout=cfg.connect_timeout_s,
                               read_timeout=cfg.read_timeout_s, verify_tls=cfg.verify_tls,
                               max_idle=cfg.max_concurrent_hosts * cfg.max_in_flight_per_host,
                               max_idle_per_origin=cfg.max_in_flight_per_host)
        try:
            await self._dispatch()
            left = self.backoffs_left()
            if left:  # the next round's tasks wait these out (crawl.tasks.previous_contact)
                self.stats["host_backoff_until"] = left
        finally:
            done.set()
            self.bounds.close()
            self.client.close()
        await self.resolver.close()

    async def _dispatch(self) -> None:
        cfg = self.cfg
        max_in_flight = cfg.max_in_flight_per_host
        pending = deque(self.slots.values())
        heap = self.heap
        slots = self.slots
        loop = asyncio.get_running_loop()
        while True:
            now = self.mono()
            if now >= self.deadline_s or self.stopped or self.writer.error is not None:
                break  # a failed WARC write (disk full...) fails the task: no request is worth more
            while self.active < cfg.max_concurrent_hosts and pending:
                s = pending.popleft()
                self.active += 1
                if s.backoff_until >= self.deadline_s:  # an earlier round's 429/503 wait outlasts this task
                    for h in s.hosts:
                        self.settle_host(h, R.DEFERRED, "host_backoff", retry_after=s.backoff_until - now)
                for h in s.hosts:
                    if h.closed:
                        continue
                    if h.policy is None:
                        h.queue.appendleft(_Job(h.origin + "/robots.txt", 0, 0, robots=True,
                                                unit=robots_unit(h.origin)))
                    else:
                        self.apply_policy(h)
                        if h.resume_sitemaps and not h.closed:  # as _robots does after a fresh robots.txt
                            self._queue_sitemaps(h, h.policy.sitemaps or [h.origin + "/sitemap.xml"])
                self.push(s)
                self.retire(s)
            if not heap and not self.tasks and not pending:
                break
            if self.on_segment is not None:
                self._maybe_cut()
            if heap and heap[0][0] <= now:
                _, _, key = heapq.heappop(heap)
                s = slots[key]
                s.in_heap = False
                if s.in_flight >= max_in_flight:
                    continue  # re-pushed when its in-flight request ends
                if s.next_at > now + 1e-9:  # gate moved later (answer/headers-sent time): re-key lazily
                    self.push(s)
                    continue
                h = s.pick()
                if h is None:
                    continue  # hosts blocked by robots.txt in flight: re-pushed when it ends
                job = h.queue.popleft()
                if not job.followup:  # a follow-up was counted when it was queued
                    self._enlive(job.unit)
                if s.idle_since is not None and s.in_flight == 0:
                    self.stats["politeness_wait_s"] += now - s.idle_since
                    s.idle_since = None
                s.in_flight += 1
                if job.robots:
                    h.blocked = True
                s.next_at = now + s.delay + (_GAP_MARGIN_S if s.delay > 0 else 0.0)
                s.last_start = now
                task = loop.create_task(self._run_job(h, job))
                self.tasks.add(task)
                task.add_done_callback(self._task_done)
                if s.in_flight < max_in_flight:
                    self.push(s)
                continue
            wait = self.deadline_s - now
            if heap:
                wait = min(wait, heap[0][0] - now)
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=max(wait, 0.0005))
            except TimeoutError:
                pass
        if self.stopped:  # not ours any more: no request may start, in-flight ones are cut
            for t in list(self.tasks):
                t.cancel()
        # deadline reached (or all done): settle everything not started, let in-flight requests end
        for h in self.hosts.values():
            if h.queue:
                self.settle_host(h, R.DEFERRED, "deadline")
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
        for h in self.hosts.values():  # redirect hops queued by requests that ended after the deadline
            if h.queue:
                self.settle_host(h, R.DEFERRED, "deadline")


    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug, not a network failure
            self.stats["internal_errors"] += 1
            exc = task.exception()
            log.error("fetch task failed internally", exc_info=(type(exc), exc, exc.__traceback__))
        self.wake.set()


    async def _run_job(self, h: _Host, job: _Job) -> None:
        s = h.slot
        try:
            if job.robots:
                await self._robots(h, job)
            elif job.sitemap:
                await self._sitemap(h, job)
            else:
                await self._page(h, job)
            await self._backpressure()
        except Exception as exc:  # a bug of ours must still leave a row for the URL (never lose one)
            self.stats["internal_errors"] += 1
            log.exception("internal error fetching %s", job.url)  # the traceback, not only the count
            subset = SUBSET_ROBOTS if job.robots else SUBSET_SITEMAP if job.sitemap else SUBSET_DIAG
            self.rows.append(_row(job, h.host, self.wall(), R.RETRY, error=f"internal:{type(exc).__name__}",
                                  subset=subset))
            if job.robots:
                self.settle_host(h, R.DEFERRED, "robots_unavailable")
        finally:
            s.in_flight -= 1
            if s.in_flight == 0:
                s.idle_since = self.mono()
            if job.robots:
                h.blocked = False
            self.push(s)
            self.retire(s)
            self._unlive(job.unit)
            if self.on_segment is not None:
                self._maybe_cut()


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop for the fetch loop when installed (None: asyncio's default loop).

    Why: the fetch loop's own CPU (event loop, transports, timers) is a fixed share of every request;
    bench/loop_bench.py measures uvloop against asyncio's loop on the same fetch list, same run.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def fetch_partition(
    cfg: CrawlConfig,
    fetchlist: pa.Table,
    *,
    root: str,
    warc_prefix: str,
    now: datetime,
    known_digests: Mapping[str, tuple[str, str]] | None = None,
    robots_cache: pa.Table | None = None,
    deadline_s: float | None = None,
    should_continue: Callable[[], bool] | None = None,
    checkpoint: Callable[[Segment], None] | None = None,
    resume: Resume | None = None,
    hold_bytes: int = 0,
    on_hold: Callable[[int, str, str | None, list[tuple[str, str]], bytes], None] | None = None,
    last_contact_unix: float | None = None,
    backoff_until_unix: Mapping[str, float] | None = None,
    on_host_state: Callable[[str | None, float, str, int, str, int], None] | None = None,
    backoff_counts: Mapping[str, int] | None = None,
    error_counts: Mapping[str, int] | None = None,
) -> FetchOutput:
    """Fetch one fetch-list partition politely; write its WARC files under ``root``; return rows.

    Sitemaps (``cfg.sitemaps``): a host whose robots.txt is fetched here (not taken from
    ``robots_cache``) and allows crawling gets its ``Sitemap:`` files, or ``/sitemap.xml`` when it names
    none, fetched as ordinary scheduled requests of its politeness queue before its pages; sitemap
    indexes are followed breadth-first up to ``cfg.max_sitemaps_per_host`` files. Their fetch rows have
    subset ``"sitemap"`` and their WARC records go in the robotstxt file (crawler-control files, as
    Common Crawl keeps robots.txt apart from pages); their entries come back as ``sitemap_rows``.

    Sync on purpose (Dask calls it): it runs its own event loop with one HTTP client (:mod:`.h1`). The WARC
    paths depend only on ``warc_prefix``, and files are placed atomically, so a rerun overwrites the
    earlier attempt. ``known_digests`` (digest -> (url, ISO date)) turns an already stored body into a
    revisit record, and names the stored copy a 304 confirmed (the fetch list's ``prev_digest``: the 304
    is a server-not-modified revisit of it); digests stored here are added for the rest of the task.

    Without ``checkpoint`` there is one WARC file per subset (``<prefix>-warc.warc.gz``,
    ``-crawldiagnostics``, ``-robotstxt``), placed at the end. With it, the output is cut into
    segments (:mod:`crawl.checkpoint`) every ``cfg.fetch_checkpoint_every`` rows or
    ``cfg.fetch_checkpoint_s`` seconds: the segment's files (``<prefix>-SSSS-<subset>.warc.gz``, only
    subsets with records) are placed, then ``checkpoint`` gets its rows, on the WARC writer thread.
    ``resume`` (what earlier attempts' checkpoints left) is applied first: its URLs are not fetched
    again, its rows lead the returned ones and segment numbers continue after its last.

    ``should_continue`` is asked about once a second (:data:`crawl.lease.CHECK_INTERVAL_S`) from a
    side thread; once it answers False no further request starts, in-flight ones are cancelled and
    :class:`~crawl.errors.FetchStopped` is raised (the current segment's files are aborted, nothing is
    returned; segments already cut stay, with their checkpoints).

    ``hold_bytes`` > 0: keep the bodies of fetched pages in memory, up to that many bytes in all, and
    return those of the stored documents (not revisits) in ``bodies``, so the caller can parse them
    without reading the WARC files back (:func:`crawl.parse.held_bodies`). ``on_hold`` is called (on
    the event loop) with each held document's row of this attempt (before ``resume``'s rows are put
    first), URL, content type, headers and payload, so it can be parsed while the fetch goes on
    (:class:`crawl.parse_ahead.ParseAhead`).

    ``last_contact_unix``: when an earlier task may last have talked to these hosts (Unix time; the
    previous round's fetch end, ``stats["fetch_end_unix"]``): each politeness key's first request waits
    for its delay from then, as if that contact were this task's (rounds run back to back).
    ``backoff_until_unix``: politeness key -> Unix time until which a 429/503 of an earlier round asked
    it to wait (the previous round's ``stats["host_backoff_until"]``, which lists the keys whose wait
    outlasted that task): the key's first request waits for it, and a key whose wait ends after this
    task's deadline has its URLs deferred (``host_backoff``) without a request.
    ``on_host_state(key, until, host, backoff_n, origin, errors)``: called (on the event loop) each time
    a 429/503 sets a key's wait (with the Unix time it ends) and each time an error is counted against
    an origin (``key`` None when it set no wait), with the host's backoff count and the origin's error
    count, so the caller can keep them where a rerun after a crash finds them
    (:func:`crawl.tasks.fetch_task`); never on other answers. ``backoff_counts`` (host -> count) and
    ``error_counts`` (origin -> count): what an earlier attempt of this partition had counted, so a
    host that goes on answering 503 without Retry-After continues its exponential backoff instead of
    starting it again, and an origin gets at most ``cfg.max_host_errors`` failing requests in the
    round in all (one at the limit gets none: its URLs are deferred, ``host_errors``).
    """
    f = _Fetcher(cfg, root, warc_prefix, now, known_digests,
                 cfg.round_duration_s if deadline_s is None else deadline_s,
                 checkpoint, resume.next_segment if resume is not None else 0)
    f.should_continue = should_continue
    f.hold_left = max(0, hold_bytes)
    f.on_hold = on_hold
    f.last_contact_unix = last_contact_unix
    f.backoff_until_unix = backoff_until_unix
    f.on_host_state = on_host_state
    f.backoff_counts = backoff_counts
    f.error_counts = error_counts
    f.load(fetchlist, robots_cache, resume)
    started = time.monotonic()
    try:
        f._file(SUBSET_WARC)  # opened before any request: an unwritable root fails here, not after
        if checkpoint is not None:  # a segment holds only the subsets it has records of
            f.abort_files()

        with f.writer:  # exits first: every queued record (and segment cut) is written
            with paused_gc(), asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                runner.run(f.run())
            f.stats["fetch_end_unix"] = time.time()  # no request of this task after it: the next round's gap starts
            if f.stopped:
                raise FetchStopped(f"fetch of {warc_prefix} stopped after {f.stats.get('requests', 0)} requests: "
                                   "the round is no longer this task's (lease or scheduler gone)")
            f.stats["fetch_loop_s"] = time.monotonic() - started
            if checkpoint is not None and len(f.rows) > f.cut_rows:
                f.cut()  # the last segment: placed and checkpointed like the others
        if f.writer.error is not None:  # a failed write: the open files are aborted, not placed
            raise f.writer.error
        f.close_files(every_subset=checkpoint is None)
        f.finish_rows()
    except BaseException:
        f.writer.close()
        f.abort_files()
        raise
    elapsed = time.monotonic() - started
    f._flush_sitemap_entries()
    fetches = pa.Table.from_pylist(f.rows, schema=R.FETCH_SCHEMA) if f.rows else R.empty(R.FETCH_SCHEMA)
    parts = [t.select(R.SITEMAP_SCHEMA.names) for t in f.sitemap_parts]
    robots_rows = (pa.Table.from_pylist(f.robots_rows, schema=ROBOTS_CACHE_SCHEMA) if f.robots_rows
                   else ROBOTS_CACHE_SCHEMA.empty_table())
    if resume is not None:  # earlier attempts' rows first, as if this attempt had made them
        fetches = pa.concat_tables([resume.fetches.cast(R.FETCH_SCHEMA), fetches])
        robots_rows = pa.concat_tables([resume.robots_rows.cast(ROBOTS_CACHE_SCHEMA), robots_rows])
        parts.insert(0, resume.sitemap_rows.select(R.SITEMAP_SCHEMA.names).cast(R.SITEMAP_SCHEMA))
    sitemap_rows = pa.concat_tables(parts) if parts else R.SITEMAP_SCHEMA.empty_table()
    stats: dict[str, Any] = dict(f.stats)
    subset = fetches["subset"]
    is_robots = pc.equal(subset, SUBSET_ROBOTS)
    is_sitemap = pc.equal(subset, SUBSET_SITEMAP)
    is_page = pc.invert(pc.or_(is_robots, is_sitemap))
    for key, part in (("status", fetches.filter(is_page)), ("robots_status", fetches.filter(is_robots)),
                      ("sitemap_status", fetches.filter(is_sitemap))):
        counts = pc.value_counts(part["status"]).to_pylist() if part.num_rows else []
        stats[key] = {c["values"]: c["counts"] for c in counts}
    stats["elapsed_s"] = elapsed
    stats["warc_drain_s"] = elapsed - stats["fetch_loop_s"]  # writer thread still busy after the loop
    stats["pages_per_s"] = stats.get("requests", 0) / elapsed if elapsed > 0 else 0.0
    stats["dns_lookups"] = f.resolver.lookups
    stats["checkpoint_s"] = f.checkpoint_s
    stats["warc_files"] = (resume.warc_files if resume is not None else []) + f.placed
    bodies: dict[int, tuple[list[tuple[str, str]], bytes]] = {}
    if f.held:  # documents only: a revisit's row has no record to parse
        first = resume.fetches.num_rows if resume is not None else 0
        for i, body in f.held.items():
            if f.rows[i].get("warc_type") in ("response", "resource"):
                bodies[first + i] = body
        stats["parse_held"] = len(bodies)
        stats["parse_held_bytes"] = sum(len(b) for _, b in bodies.values())
    return FetchOutput(fetches=fetches, robots_rows=robots_rows, stats=stats, sitemap_rows=sitemap_rows,
                       bodies=bodies)


__all__ = ["ROBOTS_CACHE_SCHEMA", "FetchOutput", "backoff_delay", "event_loop_factory", "fetch_partition",
           "parse_retry_after"]
