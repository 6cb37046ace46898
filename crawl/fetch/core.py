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

Protocols: the scheme of a URL picks its handler. ``http``/``https`` go through the aiohttp session
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
import email.utils
import heapq
import logging
import queue
import random
import threading
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pyarrow as pa
import pyarrow.compute as pc

from crawl import records as R
from crawl import url as U
from crawl.checkpoint import (
    CKPT_FETCH_SCHEMA,
    CKPT_SITEMAP_SCHEMA,
    Resume,
    Segment,
    page_unit,
    robots_unit,
    sitemaps_unit,
)
from crawl.config import CrawlConfig
from crawl.digests import KnownDigests
from crawl.errors import FetchStopped
from crawl.fingerprint import payload_digest
from crawl.ftp import FtpLimits, fetch_ftp
from crawl.net import (
    GuardedResolver,
    PrivateAddressError,
    classify_error,
    guarded_connector,
    is_ip_key,
    politeness_ips,
)
from crawl.robots import RobotsPolicy, policy_from_response
from crawl.warc import RecordRef, WarcFile, stored_response_headers

log = logging.getLogger(__name__)

FTP_PREFIX = "ftp://"  # URLs the ftp handler (crawl.ftp) fetches
# Rows of the robots.txt TTL cache kept in crawl state (one per host and fetch).
ROBOTS_CACHE_SCHEMA = R.ROBOTS_CACHE_SCHEMA

SUBSET_WARC = "warc"
SUBSET_DIAG = "crawldiagnostics"
SUBSET_ROBOTS = "robotstxt"
SUBSET_SITEMAP = "sitemap"  # rows of sitemap requests; their records go in the robotstxt WARC file
# sitemaps.org: a sitemap file may be up to 50 MB uncompressed (and list 50,000 URLs); the cap applies
# to the decoded bytes, also for gzip'd .xml.gz files, and bounds each file's memory
SITEMAP_MAX_BYTES = 50_000_000
SITEMAP_MAX_ENTRIES_PER_HOST = 50_000  # entries kept per host and task, over all its sitemap files
ROBOTS_MAX_REDIRECTS = 5  # RFC 9309 §2.3.1.2: follow at least five consecutive redirects
# Added to every non-zero gap: covers clock-rate differences between our monotonic clock and the
# server's wall clock (NTP slewing), so a gap we keep is never logged a hair short.
_GAP_MARGIN_S = 0.002
_CHUNK = 65_536
_WRITE_QUEUE_BYTES = 64 << 20  # bodies queued for the WARC writer thread before fetching waits


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
        return any(h.queue and not h.closed for h in self.hosts)


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


@dataclass
class _Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    req_headers: list[tuple[str, str]]
    body: bytes
    truncated: str | None
    ip: str | None
    location: str | None
    retry_after: str | None


def _gunzip_capped(body: bytes, cap: int) -> tuple[bytes, bool]:
    """Decode a gzip'd sitemap (``.xml.gz`` served without Content-Encoding) up to ``cap`` bytes.

    Returns (bytes, truncated). A body that is not gzip is returned as is; a broken stream keeps
    what decoded. The cap is what makes a gzip bomb harmless.
    """
    if body[:2] != b"\x1f\x8b":
        return body, False
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(body, cap + 1)
    except zlib.error:
        return b"", True
    return out[:cap], len(out) > cap


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def backoff_delay(cfg: CrawlConfig, n: int, rng: random.Random) -> float:
    """The n-th (0-based) host backoff: base doubling, capped, with ±jitter (Nutch NUTCH-2946)."""
    base = min(cfg.backoff_cap_s, cfg.backoff_base_s * (2.0 ** min(n, 60)))
    return base * (1.0 + rng.uniform(-cfg.backoff_jitter, cfg.backoff_jitter))


def _row(job: _Job, host: str, fetch_time: datetime, status: str, **kw: Any) -> dict[str, Any]:
    row = {"url": job.url, "url_hash": job.url_hash, "host": host, "depth": job.depth,
           "fetch_time": fetch_time, "status": status, "http_status": 0, "unit": job.unit}
    row.update(kw)
    return row


def _fresh_robots(cache: pa.Table | None, now: datetime, ttl_s: float) -> dict[str, tuple[int, bytes]]:
    """Latest fresh cached robots answer per origin (vectorised filter, then a small dict)."""
    if cache is None or cache.num_rows == 0 or "origin" not in cache.column_names:
        return {}
    cutoff = pa.scalar(now - timedelta(seconds=ttl_s), R.TS)
    fresh = cache.filter(pc.and_(pc.greater(cache["fetched_at"].cast(R.TS), cutoff),
                                 pc.is_valid(cache["status"])))
    fresh = fresh.sort_by([("origin", "ascending"), ("fetched_at", "descending")])
    out: dict[str, tuple[int, bytes]] = {}
    for h, s, b in zip(fresh["origin"].to_pylist(), fresh["status"].to_pylist(),
                       fresh["body"].to_pylist(), strict=True):
        out.setdefault(h, (s, b or b""))
    return out


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


_NO_SLOT = _Slot(key="")  # placeholder until build_slots groups the hosts by politeness key


class _Fetcher:
    """One task's state: the slot heap, the session, the WARC writers and the output rows."""

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
        self.sitemap_parts: list[pa.Table] = []  # CKPT_SITEMAP_SCHEMA (entries + their unit)
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
        self.live: Counter[str] = Counter()  # units with a job in flight or a follow-up queued
        self.cut_rows = self.cut_robots = self.cut_sitemaps = 0  # what the last cut took
        self.cut_at = 0.0
        # writer thread only: the current segment's open files and every file placed so far
        self.warcs: dict[str, WarcFile] = {}
        self.wseg = first_segment
        self.placed: list[str] = []
        self.checkpoint_s = 0.0  # time the writer thread spent cutting segments (closing + checkpoint)
        self.writer = _WarcWriter()
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

    # -- may we go on? (lease fencing / scheduler connection, see crawl.tasks.may_continue) -----
    def _watch(self, loop: asyncio.AbstractEventLoop, done: threading.Event) -> None:
        """Ask ``should_continue`` every second, off the event loop (it may read object storage)."""
        from crawl.lease import CHECK_INTERVAL_S

        while not done.wait(CHECK_INTERVAL_S):
            try:
                ok = self.should_continue()  # type: ignore[misc]
            except Exception:  # cannot tell: stopping is the safe side
                ok = False
            if not ok:
                self.stopped = True
                loop.call_soon_threadsafe(self.wake.set)
                return

    # -- segments (crawl.checkpoint) ----------------------------------------------------------
    def _names(self, seg: int) -> dict[str, str]:
        """The WARC file of each subset in segment ``seg`` (no number without checkpoints)."""
        tag = f"-{seg:04d}" if self.on_segment is not None else ""
        return {s: f"{self.prefix}{tag}-{n}.warc.gz" for s, n in (
            (SUBSET_WARC, "warc"), (SUBSET_DIAG, "crawldiagnostics"), (SUBSET_ROBOTS, "robotstxt"))}

    def _file(self, subset: str) -> WarcFile:
        """Writer thread: the current segment's file of ``subset``, opened on its first record."""
        w = self.warcs.get(subset)
        if w is None:
            w = self.warcs[subset] = WarcFile.open(self.root, self._names(self.wseg)[subset],
                                                   user_agent=self.cfg.user_agent)
        return w

    def close_files(self, every_subset: bool) -> list[str]:
        """Writer thread (or after it stopped): place the current segment's files; returns them.
        ``every_subset``: also the subsets without a record (one file per subset, as without
        checkpoints)."""
        if every_subset:
            for subset in self._names(self.wseg):
                self._file(subset)
        placed = []
        for w in self.warcs.values():
            w.close()
            placed.append(w.rel_path)
        self.warcs = {}
        self.placed.extend(placed)
        return placed

    def abort_files(self) -> None:
        for w in self.warcs.values():
            w.abort()
        self.warcs = {}

    def _unlive(self, unit: str) -> None:
        n = self.live[unit] - 1
        if n > 0:
            self.live[unit] = n
        else:
            del self.live[unit]

    def _maybe_cut(self) -> None:
        """Cut a segment when enough rows or time have passed since the last cut."""
        if self.on_segment is None or self.stopped:
            return
        n = len(self.rows) - self.cut_rows
        every, secs = self.cfg.fetch_checkpoint_every, self.cfg.fetch_checkpoint_s
        if (every and n >= every) or (secs and n and self.mono() - self.cut_at >= secs):
            self.cut()

    def cut(self) -> None:
        """End the current segment: queue, behind every record already queued, the closing of its
        WARC files and the writing of its checkpoint (the writer thread does both, off the loop).
        The rows are copied now (they are complete: a row is appended with its record submitted)."""
        rows = [dict(r) for r in self.rows[self.cut_rows:]]
        robots = self.robots_rows[self.cut_robots:]
        sitemaps = self.sitemap_parts[self.cut_sitemaps:]
        self.cut_rows, self.cut_robots, self.cut_sitemaps = len(self.rows), len(self.robots_rows), \
            len(self.sitemap_parts)
        open_units = list(self.live)
        seg = self.seg
        self.seg += 1
        self.names = self._names(self.seg)
        self.cut_at = self.mono()
        self.stats["segments"] += 1

        def close() -> None:
            started = time.monotonic()
            files = self.close_files(every_subset=False)
            self.wseg = seg + 1
            refs = self.writer.refs
            for r in rows:
                _resolve(r, refs)
            segment = Segment(
                number=seg, attempt=self.attempt,
                fetches=pa.Table.from_pylist(rows, schema=CKPT_FETCH_SCHEMA) if rows
                else CKPT_FETCH_SCHEMA.empty_table(),
                robots=pa.Table.from_pylist(robots, schema=ROBOTS_CACHE_SCHEMA) if robots
                else ROBOTS_CACHE_SCHEMA.empty_table(),
                sitemaps=pa.concat_tables(sitemaps) if sitemaps else CKPT_SITEMAP_SCHEMA.empty_table(),
                open_units=open_units, warc_files=files)
            self.on_segment(segment)  # type: ignore[misc]
            self.checkpoint_s += time.monotonic() - started

        self.writer.submit(close, 0)

    # -- clock -------------------------------------------------------------------------------
    def mono(self) -> float:
        return time.monotonic() - self.t0

    def wall(self) -> datetime:
        """Fetch time: the task's ``now`` plus elapsed time, so a simulated round clock stays coherent."""
        return self.now0 + timedelta(seconds=self.mono())

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
        cached = _fresh_robots(robots_cache, self.now0, self.cfg.robots_ttl_s)
        done: frozenset[str] = frozenset()
        mine: dict[str, tuple[int, bytes]] = {}
        if resume is not None:
            done = resume.done
            mine = _fresh_robots(resume.robots_rows, self.now0, self.cfg.robots_ttl_s)
            self._known_from(resume.fetches)
        for i, (url, uh, host, depth, etag, lm) in enumerate(zip(*cols, strict=True)):
            if url in done:
                self.stats["resumed_urls"] += 1
                continue
            job = _Job(url, uh, depth if depth is not None else 0, etag, lm, unit=page_unit(url))
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

    def key_of_host(self, host: str) -> str:
        """The politeness key of ``host``: the frontier's (fetch list ``pkey``, so a task's queues are
        exactly its partition's keys), else derived by the same rule (:func:`crawl.url.politeness_key`)."""
        key = self.pkeys.get(host)
        if key is None:
            mode = "host" if self.cfg.politeness_key == "ip" else self.cfg.politeness_key
            key = self.pkeys[host] = U.politeness_key(f"http://{host}/", mode) or host
        return key

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

    def build_slots(self, keys: Mapping[str, str]) -> None:
        for h in self.hosts.values():
            key = keys.get(h.host, h.host)
            s = self.slots.get(key)
            if s is None:
                s = self.slots[key] = _Slot(key=key, delay=self.cfg.politeness_delay_s)
            s.hosts.append(h)
            h.slot = s
        self.stats["politeness_keys"] = len(self.slots)

    # -- heap ---------------------------------------------------------------------------------
    def push(self, s: _Slot) -> None:
        if not s.in_heap and s.has_work():
            s.in_heap = True
            self.seq += 1
            heapq.heappush(self.heap, (s.next_at, self.seq, s.key))

    def settle_host(self, h: _Host, status: str, error: str, retry_after: float | None = None) -> None:
        """Give every queued URL of the host a final row without fetching it (never lose a URL).

        Queued robots.txt and sitemap requests get their own subset's row, so no consumer mistakes
        them for pages."""
        t = self.wall()
        while h.queue:
            job = h.queue.popleft()
            if job.followup:
                self._unlive(job.unit)
            subset = SUBSET_ROBOTS if job.robots else SUBSET_SITEMAP if job.sitemap else SUBSET_DIAG
            self.rows.append(_row(job, h.host, t, status, error=error, subset=subset,
                                  retry_after_s=retry_after))
        h.closed = True

    def apply_policy(self, h: _Host) -> None:
        """Robots decided: defer, slow down, or mark disallowed URLs before they take a slot."""
        p = h.policy
        assert p is not None
        if p.defer_host:
            self.settle_host(h, R.DEFERRED, "robots_unavailable")
            return
        cd = p.crawl_delay
        if cd is not None and cd > self.cfg.max_crawl_delay_s:
            self.settle_host(h, R.DEFERRED, "crawl_delay_above_cap")
            return
        h.delay = max(self.cfg.politeness_delay_s, cd or 0.0)
        s = h.slot
        s.delay = max(s.delay, h.delay)
        if s.delay > 0:  # the robots.txt request itself counts: gap from it with the new delay
            ref = s.last_answer if self.one_in_flight else s.last_start
            s.next_at = max(s.next_at, ref + s.delay + _GAP_MARGIN_S, s.last_start + s.delay)
        keep: deque[_Job] = deque()
        t = self.wall()
        for job in h.queue:
            if job.robots or p.allowed(job.url):
                keep.append(job)
            else:
                if job.followup:
                    self._unlive(job.unit)
                self.rows.append(_row(job, h.host, t, R.ROBOTS_DENIED, error="robots",
                                      subset=SUBSET_SITEMAP if job.sitemap else SUBSET_DIAG))
        h.queue = keep

    # -- main loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        self.t0 = time.monotonic()
        cfg = self.cfg
        # the headers-sent hook only matters with parallel requests per key; a trace hook costs
        # two coroutine calls per request, so it is left out otherwise
        traces = []
        if not self.one_in_flight:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(self._on_headers_sent)
            traces.append(trace)
        connector = guarded_connector(  # the SSRF guard sits at every socket this session opens
            self.resolver, verify_tls=cfg.verify_tls,
            limit=cfg.max_concurrent_hosts * cfg.max_in_flight_per_host,
            limit_per_host=cfg.max_in_flight_per_host,
        )
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout_s,
                                             connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s)
        self.build_slots(await self._politeness_keys())
        done = threading.Event()
        if self.should_continue is not None:
            threading.Thread(target=self._watch, args=(asyncio.get_running_loop(), done),
                             name="fetch-watch", daemon=True).start()
        async with aiohttp.ClientSession(
            connector=connector, auto_decompress=True, trace_configs=traces,
            headers={"User-Agent": cfg.user_agent}, cookie_jar=aiohttp.DummyCookieJar(),
            max_field_size=16_384, read_bufsize=_CHUNK,
        ) as self.session:
            try:
                await self._dispatch()
            finally:
                done.set()
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
                for h in s.hosts:
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
                    self.live[job.unit] += 1
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

    def retire(self, s: _Slot) -> None:
        """Free the slot's concurrency place once nothing is queued and nothing is in flight."""
        if not s.retired and s.in_flight == 0 and not s.has_work():
            s.retired = True
            self.active -= 1

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug, not a network failure
            self.stats["internal_errors"] += 1
            exc = task.exception()
            log.error("fetch task failed internally", exc_info=(type(exc), exc, exc.__traceback__))
        self.wake.set()

    async def _on_headers_sent(self, session: Any, ctx: Any, params: Any) -> None:
        """With parallel requests per key, the gap runs from when the request really left."""
        s = ctx.trace_request_ctx
        if isinstance(s, _Slot) and s.delay > 0:
            s.next_at = max(s.next_at, self.mono() + s.delay + _GAP_MARGIN_S)

    def _answered(self, s: _Slot) -> None:
        """One request per key: the gap runs from the answer (response headers, or the failure).

        Why not from the send time: the server stamps a request's start when it gets round to it,
        which may be some milliseconds after we sent it, so send + delay can look like a shorter gap
        in the server's log. The server's start is always before its answer reaches us, so answer +
        delay is a gap the server can never see as too short (Nutch also counts from the end).
        """
        s.last_answer = self.mono()
        if s.delay > 0 and self.one_in_flight:
            s.next_at = max(s.next_at, s.last_answer + s.delay + _GAP_MARGIN_S)

    # -- one request --------------------------------------------------------------------------
    async def _request(self, h: _Host, url: str, headers: dict[str, str], cap: int,
                       slot: _Slot | None = None) -> _Response:
        """One GET, no redirects followed; ``slot`` (default the origin's) is the politeness queue
        the request counts against (a robots.txt redirect to another host counts against that
        host's)."""
        if self.stopped:  # redirect hops and robots/sitemap follow-ups too
            raise FetchStopped("fetch stopped")
        s = slot or h.slot
        body = bytearray()
        truncated: str | None = None
        resp: aiohttp.ClientResponse | None = None
        meta: dict[str, Any] = {}
        started = self.mono()
        try:
            async with asyncio.timeout(self.cfg.total_timeout_s):
                async with self.session.get(url, headers=headers, allow_redirects=False,
                                            timeout=self.timeout, trace_request_ctx=s) as resp:
                    self._answered(s)
                    meta["status"] = resp.status
                    meta["reason"] = resp.reason or ""
                    meta["headers"] = [(k.decode("latin-1"), v.decode("latin-1"))
                                       for k, v in resp.raw_headers]
                    meta["req_headers"] = list(resp.request_info.headers.items())
                    meta["location"] = resp.headers.get("Location")
                    meta["retry_after"] = resp.headers.get("Retry-After")
                    peer = resp.connection.transport.get_extra_info("peername") \
                        if resp.connection and resp.connection.transport else None
                    meta["ip"] = peer[0] if peer else None
                    try:
                        async for chunk in resp.content.iter_chunked(_CHUNK):
                            body += chunk
                            if len(body) >= cap:
                                if len(body) > cap or not resp.content.at_eof():
                                    truncated = "length"
                                del body[cap:]
                                break
                    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                            aiohttp.ClientOSError, ConnectionError):
                        truncated = "disconnect"
                    except (aiohttp.ServerTimeoutError, aiohttp.SocketTimeoutError):
                        truncated = "time"
        except TimeoutError:
            if "status" not in meta:
                self._answered(s)
                raise
            truncated = "time"
        except BaseException:
            if "status" not in meta:
                self._answered(s)
            raise
        finally:
            self.stats["request_s"] += self.mono() - started
        return _Response(meta["status"], meta["reason"], meta["headers"], meta["req_headers"],
                         bytes(body), truncated, meta["ip"], meta["location"], meta["retry_after"])

    async def _ftp_request(self, h: _Host, url: str, cap: int) -> _Response:
        """One FTP session (:func:`crawl.ftp.fetch_ftp`) as a :class:`_Response`. The gap to the
        next request of the key runs from the end of the session (``_answered``), so the server
        never has two of our sessions open and sees them at least ``delay`` apart."""
        if self.stopped:
            raise FetchStopped("fetch stopped")
        started = self.mono()
        try:
            r = await fetch_ftp(url, FtpLimits.from_config(self.cfg, cap), self.resolver)
        finally:
            self._answered(h.slot)
            self.stats["request_s"] += self.mono() - started
            self.stats["ftp_requests"] += 1
        headers = [("Content-Type", r.content_type)] if r.content_type else []
        if r.location:
            headers.append(("Location", r.location))
        return _Response(r.status, r.reason, headers, [], r.body, r.truncated, r.ip, r.location, None)

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

    async def _gap(self, h: _Host) -> None:
        """Wait for the slot's next start, then take it (a redirect hop is a request to the host too)."""
        s = h.slot
        wait = max(0.0, s.next_at - self.mono())
        self.stats["politeness_wait_s"] += wait
        await asyncio.sleep(wait)
        s.last_start = self.mono()
        s.next_at = s.last_start + s.delay + (_GAP_MARGIN_S if s.delay > 0 else 0.0)

    def _key_of_url(self, url: str) -> str | None:
        """The politeness key a request to ``url`` counts against (None: the URL model refuses it)."""
        try:
            return self.key_of_host(U.host_of(url, self.schemes))
        except U.InvalidURL:
            return None

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

    # -- robots.txt ---------------------------------------------------------------------------
    async def _robots(self, h: _Host, job: _Job) -> None:
        cfg = self.cfg
        url = job.url
        status: int | None = None
        body: bytes | None = None
        robots_key: str | None = None  # the key of the host that answered, when it is not h's
        for hop in range(ROBOTS_MAX_REDIRECTS + 1):
            other: _Slot | None = None  # the slot of another politeness key a hop goes to
            if hop:  # a redirect hop is a request too: obey the gap of the host it goes to
                key = self._key_of_url(url)
                robots_key = key if key != h.slot.key else None
                target = self.slots.get(key) if robots_key else None
                if robots_key is None:
                    await self._gap(h)
                elif target is None:
                    # another task may be fetching that host now: do not ask it from here. The
                    # cache row names the key, so the frontier puts this host in that key's queue
                    # from the next round on, where the redirect is followed at that host's pace.
                    self.stats["robots_redirect_other_partition"] += 1
                    self.rows.append(_row(_Job(url, U.url_hash(url), 0, unit=job.unit), h.host, self.wall(), R.DEFERRED,
                                          error="robots_other_partition", subset=SUBSET_ROBOTS))
                    self.robots_rows.append({"origin": h.origin, "host": h.host, "fetched_at": self.wall(),
                                             "status": None, "body": None, "robots_key": robots_key})
                    self.settle_host(h, R.DEFERRED, "robots_other_partition")
                    return
                elif await self._acquire(target):
                    other = target
                    self.stats["robots_redirect_other_key"] += 1
                else:
                    self.rows.append(_row(_Job(url, U.url_hash(url), 0, unit=job.unit), h.host, self.wall(), R.RETRY,
                                          error="robots_redirect_busy", subset=SUBSET_ROBOTS))
                    status, body = None, None
                    break
            t = self.wall()
            rjob = _Job(url, U.url_hash(url), 0, unit=job.unit)
            self.stats["robots_requests"] += 1
            try:
                r = await self._request(h, url, {}, cfg.robots_max_bytes, slot=other)
            except Exception as exc:  # noqa: BLE001 - every failure is an answer: "unreachable"
                code = classify_error(exc)
                if code == "private_address" and hop == 0:  # the host itself is refused
                    self.rows.append(_row(rjob, h.host, t, R.FILTERED, error=code, subset=SUBSET_ROBOTS))
                    self.settle_host(h, R.FILTERED, code)
                    return
                if code == "dns" and hop == 0:  # retried in a later round, like its URLs
                    self.rows.append(_row(rjob, h.host, t, R.RETRY, error=code, subset=SUBSET_ROBOTS))
                    self.settle_host(h, R.RETRY, code)
                    return
                self.rows.append(_row(rjob, h.host, t, R.RETRY, error=code, subset=SUBSET_ROBOTS))
                status, body = None, None
                break
            finally:
                if other is not None:
                    self._release(other)
            row = _row(rjob, h.host, t, R.FETCHED if 200 <= r.status < 300 else R.HTTP_ERROR,
                       http_status=r.status, content_type=_header(r.headers, "content-type"),
                       content_length=len(r.body), truncated=r.truncated, subset=SUBSET_ROBOTS,
                       **self._store(SUBSET_ROBOTS, url, t, r))
            status, body = r.status, r.body
            if 300 <= r.status < 400 and r.location:
                target = U.resolve(r.location, url)
                row.update(status=R.REDIRECT, redirect_location=target)
                self.rows.append(row)
                if target is None or hop == ROBOTS_MAX_REDIRECTS:
                    break  # unresolved 3xx: "unavailable", allow all
                url = target
                continue
            self.rows.append(row)
            break
        h.policy = policy_from_response(status, body, cfg.robots_max_bytes, cfg.robots_agent)
        if not h.policy.defer_host:  # an unavailable robots.txt (5xx, 429, unreachable) is not cached
            self.robots_rows.append({"origin": h.origin, "host": h.host, "fetched_at": self.wall(),
                                     "status": status, "body": body, "robots_key": robots_key})
        self.apply_policy(h)
        if cfg.sitemaps and not h.closed:
            self._queue_sitemaps(h, h.policy.sitemaps or [h.origin + "/sitemap.xml"])

    # -- sitemaps -----------------------------------------------------------------------------
    def _queue_sitemaps(self, h: _Host, urls: list[str], after_queued: bool = False) -> None:
        """Queue sitemap files of the host as its next requests (same gap rules as pages).

        Only the host's own files (scheme + host + port of its robots.txt origin: a sitemap may
        only list URLs under its own location), allowed by its robots.txt, each once, at most
        ``cfg.max_sitemaps_per_host``. Root files go first in the host's queue; index children
        (``after_queued``) go behind the sitemaps already queued, so an index is read
        breadth-first and the cap keeps the shallowest files.
        """
        prefix = h.origin.lower() + "/"
        p = h.policy
        jobs: list[_Job] = []
        for url in urls:
            if not url.lower().startswith(prefix):
                self.stats["sitemaps_cross_host"] += 1
                continue
            if url in h.sitemaps_seen:
                continue
            if len(h.sitemaps_seen) >= self.cfg.max_sitemaps_per_host:
                self.stats["sitemaps_over_cap"] += 1
                continue
            h.sitemaps_seen.add(url)
            job = _Job(url, U.url_hash(url), 0, sitemap=True, unit=sitemaps_unit(h.origin), followup=True)
            if p is not None and not p.allowed(url):
                self.rows.append(_row(job, h.host, self.wall(), R.ROBOTS_DENIED, error="robots",
                                      subset=SUBSET_SITEMAP))
                continue
            jobs.append(job)
        if not jobs:
            return
        at = 0
        if after_queued:
            while at < len(h.queue) and h.queue[at].sitemap:
                at += 1
        for i, job in enumerate(jobs):
            h.queue.insert(at + i, job)
            self.live[job.unit] += 1
        self.push(h.slot)

    async def _sitemap(self, h: _Host, job: _Job) -> None:
        """Fetch one sitemap file (stored in the robotstxt WARC: a crawler-control file) and read it."""
        t = self.wall()
        self.stats["sitemap_requests"] += 1
        try:
            r = await self._request(h, job.url, {}, SITEMAP_MAX_BYTES)
        except Exception as exc:  # noqa: BLE001 - network failures become rows
            self.rows.append(_row(job, h.host, t, R.RETRY, error=classify_error(exc), subset=SUBSET_SITEMAP))
            return
        s = r.status
        base = dict(http_status=s, content_type=_header(r.headers, "content-type"),
                    etag=_header(r.headers, "etag"), last_modified=_header(r.headers, "last-modified"),
                    content_length=len(r.body), truncated=r.truncated, subset=SUBSET_SITEMAP,
                    **self._store(SUBSET_ROBOTS, job.url, t, r))
        if 200 <= s < 300:
            self.rows.append(_row(job, h.host, t, R.FETCHED, **base))
            self._read_sitemap(h, job, t, r.body)
        elif 300 <= s < 400:
            target = U.resolve(r.location, job.url) if r.location else None
            self.rows.append(_row(job, h.host, t, R.REDIRECT, redirect_location=target, **base))
            if target is not None:  # counts against the per-host cap like any sitemap file
                self._queue_sitemaps(h, [target], after_queued=True)
        elif s in (429, 503):  # the server asks us to slow down: the whole key waits
            wait = parse_retry_after(r.retry_after, datetime.now(UTC))
            if wait is None:
                wait = backoff_delay(self.cfg, h.backoff_n, h.rng)
                h.backoff_n += 1
            h.slot.next_at = max(h.slot.next_at, self.mono() + wait)
            self.rows.append(_row(job, h.host, t, R.RETRY, error=f"http_{s}", retry_after_s=wait, **base))
        else:
            self.rows.append(_row(job, h.host, t, R.GONE if s in (404, 410) else R.HTTP_ERROR, **base))

    def _read_sitemap(self, h: _Host, job: _Job, t: datetime, body: bytes) -> None:
        try:
            from crawl.sitemaps import parse_sitemap  # the freshness side owns the parser
        except ImportError:  # not installed in this checkout: the fetch rows and WARC records stay
            self.stats["sitemaps_unparsed"] += 1
            return
        data, cut = _gunzip_capped(body, SITEMAP_MAX_BYTES)
        if cut:
            self.stats["sitemaps_truncated"] += 1
        try:
            entries, children = parse_sitemap(data, job.url)
        except Exception:  # noqa: BLE001 - a broken sitemap is the site's problem, not the round's
            self.stats["sitemaps_unparsed"] += 1
            return
        if children:
            self._queue_sitemaps(h, children, after_queued=True)
        room = SITEMAP_MAX_ENTRIES_PER_HOST - h.sitemap_entries
        if not entries or room <= 0:
            if entries:
                self.stats["sitemap_entries_over_cap"] += len(entries)
            return
        if len(entries) > room:
            self.stats["sitemap_entries_over_cap"] += len(entries) - room
            entries = entries[:room]
        locs = pa.array([e[0] for e in entries], pa.string())
        # sitemaps.org: a file may only list URLs under its own host (and scheme, port)
        own = pc.starts_with(pc.utf8_lower(locs), h.origin.lower() + "/")
        n = len(entries)
        tbl = pa.table({
            "host": pa.array([h.host] * n, pa.string()),
            "sitemap_url": pa.array([job.url] * n, pa.string()),
            "loc": locs,
            "lastmod": pa.array([e[1] for e in entries], R.TS),
            "changefreq": pa.array([e[2] for e in entries], pa.string()),
            "fetch_time": pa.array([t] * n, R.TS),
            "unit": pa.array([job.unit] * n, pa.string()),
        }, schema=CKPT_SITEMAP_SCHEMA).filter(own)
        self.stats["sitemap_entries_foreign"] += n - tbl.num_rows
        h.sitemap_entries += tbl.num_rows
        self.stats["sitemap_entries"] += tbl.num_rows
        self.sitemap_parts.append(tbl)

    # -- pages --------------------------------------------------------------------------------
    async def _page(self, h: _Host, job: _Job) -> None:
        cfg = self.cfg
        t = self.wall()
        self.stats["requests"] += 1
        headers: dict[str, str] = {}
        if job.etag:
            headers["If-None-Match"] = job.etag
        if job.last_modified:
            headers["If-Modified-Since"] = job.last_modified
        try:
            if job.url.startswith(FTP_PREFIX):
                r = await self._ftp_request(h, job.url, cfg.max_body_bytes)
            else:
                r = await self._request(h, job.url, headers, cfg.max_body_bytes)
        except Exception as exc:  # noqa: BLE001 - network failures become rows
            self._failed(h, job, t, exc)
            return
        base = dict(http_status=r.status, content_type=_header(r.headers, "content-type"),
                    etag=_header(r.headers, "etag"), last_modified=_header(r.headers, "last-modified"),
                    x_robots_tag=_header(r.headers, "x-robots-tag"))
        s = r.status
        if 200 <= s < 300:
            self._fetched(h, job, t, r, base)
            return
        base.update(subset=SUBSET_DIAG, content_length=len(r.body), truncated=r.truncated,
                    **self._store(SUBSET_DIAG, job.url, t, r))
        if s == 304:
            self.rows.append(_row(job, h.host, t, R.NOT_MODIFIED, **base))
        elif 300 <= s < 400:
            self._redirect(h, job, t, r, base)
        elif s in (429, 503):
            # an HTTP-date is the server's real clock, so compare with ours, not the task's `now`
            wait = parse_retry_after(r.retry_after, datetime.now(UTC))
            if wait is None:
                wait = backoff_delay(cfg, h.backoff_n, h.rng)
                h.backoff_n += 1
            self._host_error(h, job, t, f"http_{s}", base, wait)
        elif s in (404, 410):
            self.rows.append(_row(job, h.host, t, R.GONE, **base))
        elif s >= 500:
            self._host_error(h, job, t, f"http_{s}", base, None)
        else:
            self.rows.append(_row(job, h.host, t, R.HTTP_ERROR, **base))

    def _fetched(self, h: _Host, job: _Job, t: datetime, r: _Response, base: dict[str, Any]) -> None:
        cols = self._store(SUBSET_WARC, job.url, t, r, dedup=True)
        self.stats["bytes"] += len(r.body)
        if self.hold_left:
            self._hold(job.url, r)
        self.rows.append(_row(job, h.host, t, R.FETCHED, subset=SUBSET_WARC, content_length=len(r.body),
                              truncated=r.truncated, **base, **cols))

    def _hold(self, url: str, r: _Response) -> None:
        """Keep the body of the row about to be appended for the task's parse, with the headers its
        WARC record gives back (FTP ``resource`` records have none); once a body does not fit in the
        budget, keep no more. A record whose headers may not round-trip verbatim is not kept."""
        size = len(r.body)
        if size > self.hold_left:
            self.hold_left = 0
            self.stats["parse_held_over_budget"] = 1
            return
        headers = [] if url.startswith(FTP_PREFIX) else stored_response_headers(r.headers, size)
        if headers is None:
            self.stats["parse_held_not_verbatim"] += 1
            return
        self.held[len(self.rows)] = (headers, r.body)
        self.hold_left -= size

    def _redirect(self, h: _Host, job: _Job, t: datetime, r: _Response, base: dict[str, Any]) -> None:
        target = U.resolve(r.location, job.url, self.schemes) if r.location else None
        if target is None:
            self.rows.append(_row(job, h.host, t, R.HTTP_ERROR, error="redirect_without_location", **base))
            return
        self.rows.append(_row(job, h.host, t, R.REDIRECT, redirect_location=target, **base))
        canon = U.canonicalize(target, self.cfg.tracking_params, self.schemes) or target
        where = _origin(canon, h.host, self.schemes)
        if where is None or where[0] != h.origin:  # another origin has its own robots.txt to ask first
            self.stats["redirect_cross_host"] += 1
            return  # a new URL for the CrawlDb (update turns redirect rows into links)
        hop = _Job(canon, U.url_hash(canon), job.depth, hops=job.hops + 1, unit=job.unit, followup=True)
        if hop.hops > self.cfg.max_redirects:
            self.rows.append(_row(hop, h.host, t, R.FILTERED, error="max_redirects", subset=SUBSET_DIAG))
            return
        reason = U.filter_reason(canon, job.depth, self.cfg)
        if reason is not None:
            self.rows.append(_row(hop, h.host, t, R.FILTERED, error=reason, subset=SUBSET_DIAG))
            return
        if h.policy is not None and not h.policy.allowed(canon):
            self.rows.append(_row(hop, h.host, t, R.ROBOTS_DENIED, error="robots", subset=SUBSET_DIAG))
            return
        if not h.closed:
            h.queue.appendleft(hop)  # next request of this host, after the delay
            self.live[hop.unit] += 1
        else:
            self.rows.append(_row(hop, h.host, t, R.DEFERRED, error="host_closed", subset=SUBSET_DIAG))

    def _failed(self, h: _Host, job: _Job, t: datetime, exc: BaseException) -> None:
        code = classify_error(exc)
        if isinstance(exc, PrivateAddressError) or code == "private_address":
            self.rows.append(_row(job, h.host, t, R.FILTERED, error=code, subset=SUBSET_DIAG))
            self.settle_host(h, R.FILTERED, code)  # the whole host resolves there
            return
        if code == "dns":
            self.rows.append(_row(job, h.host, t, R.RETRY, error=code, subset=SUBSET_DIAG))
            self.settle_host(h, R.RETRY, code)  # every URL of the host would fail the same way
            return
        if code == "invalid_url":
            self.rows.append(_row(job, h.host, t, R.FILTERED, error=code, subset=SUBSET_DIAG))
            return
        self._host_error(h, job, t, code, {"subset": SUBSET_DIAG}, None)

    def _host_error(self, h: _Host, job: _Job, t: datetime, error: str, base: dict[str, Any],
                    wait: float | None) -> None:
        """Count an error against the host; on 429/503 push its next-allowed time by ``wait``."""
        h.errors += 1
        self.stats["host_errors"] += 1
        if wait is not None:
            h.slot.next_at = max(h.slot.next_at, self.mono() + wait)
            if h.slot.next_at < self.deadline_s and h.errors < self.cfg.max_host_errors:
                self.rows.append(_row(job, h.host, t, R.RETRY, error=error, retry_after_s=wait, **base))
                h.queue.appendleft(_Job(job.url, job.url_hash, job.depth, job.etag, job.last_modified,
                                        job.hops, unit=job.unit, followup=True))
                self.live[job.unit] += 1
                return
            self.rows.append(_row(job, h.host, t, R.RETRY, error=error, retry_after_s=wait, **base))
            self.settle_host(h, R.DEFERRED, "host_backoff", retry_after=wait)
            return
        self.rows.append(_row(job, h.host, t, R.RETRY, error=error, **base))
        if h.errors >= self.cfg.max_host_errors:
            self.settle_host(h, R.DEFERRED, "host_errors")

    # -- WARC ---------------------------------------------------------------------------------
    def _store(self, subset: str, url: str, t: datetime, r: _Response, dedup: bool = False) -> dict[str, Any]:
        """Queue request + response (or revisit) records; return the row's WARC file and a handle.

        The records are written by one background thread, in submission order: WARC serialisation
        and gzip cost about as much CPU as the HTTP exchange, and zlib/sha1 release the GIL. The
        payload digest and the revisit decision (``known`` digests, also in submission order) are
        made there too, off the event loop; digests, revisit columns and byte offsets are filled
        into the rows at the end (:meth:`finish_rows`).
        """
        known = self.known
        if url.startswith(FTP_PREFIX):
            return self._store_resource(subset, url, t, r) if dedup else {}

        def write() -> tuple[RecordRef, str | None, tuple[str, str] | None]:
            w = self._file(subset)  # the segment's file, looked up in the writer's order
            prior = digest = None
            if dedup:
                digest = payload_digest(r.body)
                prior = known.get(digest)
                if prior is None:
                    known[digest] = (url, t.isoformat())
            req = w.write_request(url, t, "GET", r.req_headers, ip=r.ip)
            if prior is not None:
                return (w.write_revisit(url, t, r.status, r.reason, r.headers, digest, prior[0],
                                        _parse_iso(prior[1]), ip=r.ip), digest, prior)
            ref = w.write_response(url, t, r.status, r.reason, r.headers, r.body, r.ip, r.truncated,
                                   concurrent_to=req.record_id, digest=digest)
            return ref, ref.digest, None

        return {"warc_filename": self.names[subset], "_ref": self.writer.submit(write, len(r.body) + 1024)}

    def _store_resource(self, subset: str, url: str, t: datetime, r: _Response) -> dict[str, Any]:
        """An FTP capture: one ``resource`` record (no HTTP exchange, so no request record), or a
        ``revisit`` without HTTP headers when the payload digest is known, as for HTTP. FTP
        failures (404, 503...) store nothing; their row says what happened."""
        ctype = _header(r.headers, "content-type") or "application/octet-stream"
        known = self.known

        def write() -> tuple[RecordRef, str | None, tuple[str, str] | None]:
            w = self._file(subset)
            digest = payload_digest(r.body)
            prior = known.get(digest)
            if prior is not None:
                return (w.write_revisit(url, t, None, "", [], digest, prior[0], _parse_iso(prior[1]), ip=r.ip),
                        digest, prior)
            known[digest] = (url, t.isoformat())
            ref = w.write_resource(url, t, ctype, r.body, r.ip, r.truncated, digest=digest)
            return ref, digest, None

        return {"warc_filename": self.names[subset], "_ref": self.writer.submit(write, len(r.body) + 1024),
                "_wtype": "resource"}

    async def _backpressure(self) -> None:
        """Bound the memory of bodies waiting for the writer: wait for it when too much is queued."""
        w = self.writer
        while w.submitted_bytes - w.written_bytes > _WRITE_QUEUE_BYTES and w.error is None:
            await asyncio.sleep(0.005)

    def finish_rows(self) -> None:
        """Fill digests, revisit columns and WARC offsets of the rows from the writer's results.

        Raises the writer's error, if a write failed, so the WARC files are aborted, not published.
        """
        if self.writer.error is not None:
            raise self.writer.error
        refs = self.writer.refs
        for row in self.rows:
            if _resolve(row, refs):
                self.stats["revisits"] += 1


def _resolve(row: dict[str, Any], refs: list[Any]) -> bool:
    """Fill a row's digest, revisit columns and WARC offsets from its written record; True for a revisit."""
    i = row.pop("_ref", None)
    if i is None:
        return False
    ref, digest, prior = refs[i]
    row["warc_record_offset"] = ref.offset
    row["warc_record_length"] = ref.length
    row["payload_digest"] = digest
    kind = row.pop("_wtype", "response")
    if prior is None:
        row["warc_type"] = kind
        return False
    row.update(warc_type="revisit", revisit_of_url=prior[0], revisit_of_date=prior[1])
    return True


class _WarcWriter:
    """One thread writing WARC records in submission order, fed through a lock-free hand-off.

    Why not a ``ThreadPoolExecutor``: its ``submit`` takes two locks and a ``Future`` condition per
    record, and with the writer thread holding the GIL half the time those acquisitions convoyed
    (about a fifth of the event loop's time at delay 0). Here the loop only appends to a
    ``SimpleQueue``; each counter is written by one thread only, so no lock is needed.
    """

    def __init__(self) -> None:
        self.q: queue.SimpleQueue[tuple[int, Any, int] | None] = queue.SimpleQueue()
        self.refs: list[Any] = []
        self.submitted_bytes = 0  # event-loop thread only
        self.written_bytes = 0  # writer thread only
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="warc-writer", daemon=True)

    def __enter__(self) -> _WarcWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, fn: Any, size: int) -> int:
        i = len(self.refs)
        self.refs.append(None)
        self.submitted_bytes += size
        self.q.put((i, fn, size))
        return i

    def close(self) -> None:
        """Write everything queued, then stop the thread (idempotent)."""
        if self.thread.is_alive():
            self.q.put(None)
            self.thread.join()

    def _loop(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            i, fn, size = item
            if self.error is None:  # after a failure the files are aborted anyway: skip the rest
                try:
                    self.refs[i] = fn()
                except BaseException as exc:  # noqa: BLE001 - re-raised by finish_rows
                    self.error = exc
            self.written_bytes += size


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _parse_iso(value: str) -> datetime:
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


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
) -> FetchOutput:
    """Fetch one fetch-list partition politely; write its WARC files under ``root``; return rows.

    Sitemaps (``cfg.sitemaps``): a host whose robots.txt is fetched here (not taken from
    ``robots_cache``) and allows crawling gets its ``Sitemap:`` files, or ``/sitemap.xml`` when it names
    none, fetched as ordinary scheduled requests of its politeness queue before its pages; sitemap
    indexes are followed breadth-first up to ``cfg.max_sitemaps_per_host`` files. Their fetch rows have
    subset ``"sitemap"`` and their WARC records go in the robotstxt file (crawler-control files, as
    Common Crawl keeps robots.txt apart from pages); their entries come back as ``sitemap_rows``.

    Sync on purpose (Dask calls it): it runs its own event loop with one ``ClientSession``. The WARC
    paths depend only on ``warc_prefix``, and files are placed atomically, so a rerun overwrites the
    earlier attempt. ``known_digests`` (digest -> (url, ISO date)) turns an already stored body into a
    revisit record; digests stored here are added for the rest of the task.

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
    without reading the WARC files back (:func:`crawl.parse.held_bodies`).
    """
    f = _Fetcher(cfg, root, warc_prefix, now, known_digests,
                 cfg.round_duration_s if deadline_s is None else deadline_s,
                 checkpoint, resume.next_segment if resume is not None else 0)
    f.should_continue = should_continue
    f.hold_left = max(0, hold_bytes)
    f.load(fetchlist, robots_cache, resume)
    started = time.monotonic()
    try:
        f._file(SUBSET_WARC)  # opened before any request: an unwritable root fails here, not after
        if checkpoint is not None:  # a segment holds only the subsets it has records of
            f.abort_files()

        with f.writer:  # exits first: every queued record (and segment cut) is written
            with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                runner.run(f.run())
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


__all__ = ["ROBOTS_CACHE_SCHEMA", "FetchOutput", "backoff_delay", "fetch_partition", "parse_retry_after"]
