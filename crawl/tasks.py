"""The functions Dask runs per fetch-list partition: fetch, render and parse tasks, or one
:func:`fetch_parse_task` that parses the bodies it fetched from memory.

Each is a pure function of (config, round, partition, round time) plus files under the crawl root:
it reads its inputs from storage, writes its outputs at deterministic paths, and marks the
partition done last. A rerun (after a crash, a killed worker, or a retried Airflow task) skips
partitions already marked done and overwrites anything a dead attempt half-wrote. No worker keeps
state between tasks.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.config import CrawlConfig
from crawl.digests import DIGESTS_SCHEMA, load_known_digests, read_round_captures  # noqa: F401 - re-exported (update, tests)
from crawl.errors import FetchStopped
from crawl.lease import token_is_current
from crawl.records import (
    FETCH_SCHEMA,
    FETCHLIST_SCHEMA,
    LINK_SCHEMA,
    PAGE_PART_SCHEMA,
    PAGE_SCHEMA,
    ROBOTS_CACHE_SCHEMA,
    SITEMAP_SCHEMA,
)
from crawl.store import Store

if TYPE_CHECKING:
    from crawl.parse_ahead import Chunk

log = logging.getLogger(__name__)

# Fetch rows of crawler-control files (robots.txt, sitemaps): fetched like pages, but not documents
# to parse, index or enter the CrawlDb as pages.
CONTROL_SUBSETS = ("robotstxt", "sitemap")

def load_robots_cache(store: Store, version: int) -> pa.Table | None:
    """The robots.txt cache as of ``version``; None when there is none, or it is keyed by host (written
    before robots.txt was kept per origin: it is simply fetched again)."""
    if version <= 0 or not store.exists(store.robots_file(version)):
        return None
    t = store.read_table(store.robots_file(version))
    if "origin" not in t.column_names:
        return None
    return pa.table([t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
                     for f in ROBOTS_CACHE_SCHEMA], schema=ROBOTS_CACHE_SCHEMA)


def host_crawl_delays(store: Store, version: int, user_agent: str, robots_max_bytes: int) -> pa.Table | None:
    """(host, delay_s): the robots.txt Crawl-delay for ``user_agent`` of each host in the robots cache of
    ``version`` that sets one (None when there is no cache yet). robots.txt is per origin; a host takes
    the strictest Crawl-delay of its origins. Generate caps hosts by it; the dashboard shows it."""
    from crawl.robots import crawl_delay, decode_robots

    cache = load_robots_cache(store, version)
    if cache is None or cache.num_rows == 0:
        return None
    worst: dict[str, float] = {}
    for host, status, body in zip(cache.column("host").to_pylist(), cache.column("status").to_pylist(),
                                  cache.column("body").to_pylist(), strict=True):
        if status and 200 <= status < 300 and body:
            d = crawl_delay(decode_robots(body, robots_max_bytes), user_agent)
            if d:
                worst[host] = max(worst.get(host, 0.0), float(d))
    return pa.table({"host": pa.array(list(worst), pa.string()),
                     "delay_s": pa.array(list(worst.values()), pa.float64())})


def robots_keys(store: Store, version: int) -> dict[str, str]:
    """host -> politeness key of the host that answers its robots.txt, for hosts whose robots.txt
    redirects to another key's host (``robots_key`` in the robots cache of ``version``); generate
    queues such a host under that key (:func:`crawl.frontier.co_locate`)."""
    cache = load_robots_cache(store, version)
    if cache is None or cache.num_rows == 0:
        return {}
    rows = cache.filter(pc.is_valid(cache.column("robots_key"))).sort_by([("origin", "ascending")])
    out: dict[str, str] = {}
    for host, key in zip(rows.column("host").to_pylist(), rows.column("robots_key").to_pylist(), strict=True):
        out.setdefault(host, key)
    return out


def may_continue(store: Store, token: int | None) -> Callable[[], bool]:
    """The check a fetch task makes between requests: may it go on sending requests?

    No when the Dask worker running it is no longer connected to its scheduler (the round that
    submitted it is gone: a rerun may already be fetching the same hosts), or when the crawl's lease
    has moved past ``token`` (another attempt took the round over) or expired (its owner died).
    """
    def check() -> bool:
        return worker_connected() and (token is None or token_is_current(store, token))

    return check


def worker_connected() -> bool:
    """True outside a Dask worker; inside one, whether the worker is still running for a scheduler."""
    try:
        from distributed import get_worker
        from distributed.core import Status

        worker = get_worker()
    except (ImportError, ValueError):
        return True
    stream = getattr(worker, "batched_stream", None)
    comm = getattr(stream, "comm", None)
    return worker.status == Status.running and not (comm is not None and comm.closed())


def fetch_task(cfg: CrawlConfig, round_no: int, part: int, now: datetime, token: int | None = None,
               parse: bool = False) -> dict[str, Any]:
    """Fetch one partition: WARC files + fetch records + robots rows + sitemap entries, then the done
    marker (written last, so a partition with a marker has all its files).

    ``parse``: then parse the partition here too (:func:`fetch_parse_task`), from the bodies kept in
    memory (up to ``cfg.parse_in_fetch_max_bytes``; the rest, and those of segments an earlier attempt
    fetched, read back from the WARC files), writing what :func:`parse_task` would and its marker.

    Progress is checkpointed as it goes (:mod:`crawl.checkpoint`, unless both
    ``fetch_checkpoint_every`` and ``fetch_checkpoint_s`` are 0): a retry or rerun of a task that died
    keeps the rows and WARC segments of the work it finished and fetches only the rest. The 429/503
    waits hosts asked of it and the hosts' backoff and error counts are saved as they come
    (:class:`PendingWaits`), so the rerun keeps them too.

    ``token`` is the round's lease fencing token: the task stops between requests (raising
    :class:`~crawl.errors.FetchStopped`; checkpoints already written stay) once it is no longer current.
    """
    from crawl.checkpoint import PartitionCheckpoints, fetchlist_key
    from crawl.fetch import fetch_partition

    store = Store(cfg.root, cfg.crawl_id)
    if store.is_done(round_no, "fetched", part):
        PartitionCheckpoints(store, round_no, part, "").remove()  # left when killed just after the marker
        store.remove(pending_waits_path(store, round_no, part))  # likewise: the marker has them
        return store.read_json(store.part_file(round_no, "fetched", part, "done"))
    go_on = may_continue(store, token)
    if not go_on():
        raise FetchStopped(f"fetch of round {round_no} partition {part} not started: lease token {token} "
                           "is no longer current or the worker lost its scheduler")
    wait_after_dead_attempt(cfg, store, round_no, part, token)
    fetchlist = store.read_table(store.part_file(round_no, "fetchlist", part), FETCHLIST_SCHEMA)
    warc_prefix = store.staged(round_no, store.warc_prefix(round_no, part))  # moved there by publish
    checkpoints = resume = None
    if cfg.fetch_checkpoint_every or cfg.fetch_checkpoint_s:
        checkpoints = PartitionCheckpoints(store, round_no, part, fetchlist_key(fetchlist))
        resume = checkpoints.load(warc_prefix)
    ahead = None
    if parse and cfg.parse_overlap_docs > 0 and cfg.parse_in_fetch_max_bytes > 0:  # parse the held bodies as they come
        from crawl.media import MediaLimits
        from crawl.parse import install_parsers
        from crawl.parse_ahead import ParseAhead

        install_parsers(cfg.parsers)
        ahead = ParseAhead(cfg.parse_overlap_docs, cfg.max_outlinks_per_page, cfg.allowed_schemes,
                           MediaLimits.from_config(cfg))
    last_contact, backoff_until = previous_contact(store, round_no)
    told = PendingWaits(store, round_no, part, cfg.backoff_cap_s)  # those a dead attempt was told, and its counts
    for key, until in told.waits.items():
        backoff_until[key] = max(backoff_until.get(key, 0.0), until)
    try:
        out = fetch_partition(
            cfg,
            fetchlist,
            root=cfg.root,
            warc_prefix=warc_prefix,
            now=now,
            known_digests=load_known_digests(store, round_no - 1, fetchlist.column("prev_digest"),
                                             read_round_captures(store, round_no)),
            robots_cache=load_robots_cache(store, round_no - 1),
            should_continue=go_on,
            checkpoint=checkpoints.save if checkpoints is not None else None,
            resume=resume,
            hold_bytes=cfg.parse_in_fetch_max_bytes if parse else 0,
            on_hold=ahead.feed if ahead is not None else None,
            last_contact_unix=last_contact,
            backoff_until_unix=backoff_until,
            on_host_state=told.add,
            backoff_counts=told.counts,
            error_counts=told.errors,
        )
    finally:
        told.close()  # its last wait written, also when the fetch stopped or failed (a rerun reads it)
        if ahead is not None:
            waited = time.perf_counter()
            ahead.finish()
            waited = time.perf_counter() - waited
    chunks = None
    if ahead is not None:
        first = resume.fetches.num_rows if resume is not None else 0  # attempt rows -> the partition's rows
        chunks = [(c, [first + r for r in c.rows]) for c in ahead.chunks]
        out.stats["parse_ahead"] = sum(len(c.rows) for c in ahead.chunks)
        out.stats["parse_ahead_s"] = round(ahead.busy_s, 3)  # the side thread's CPU
        out.stats["parse_ahead_paced_s"] = round(ahead.paced_s, 3)  # it waited for the loop's slack
        out.stats["parse_ahead_wait_s"] = round(waited, 3)  # finish(): the document in hand
    # the rows name each WARC file by the path it will have once the round is published
    staging = store.staged(round_no, "")
    fetches = out.fetches.set_column(
        out.fetches.schema.get_field_index("warc_filename"), "warc_filename",
        pc.replace_substring(out.fetches.column("warc_filename"), staging, "", max_replacements=1))
    out.stats["warc_files"] = [store.unstaged(round_no, v) for v in out.stats.get("warc_files", [])]
    fetches = fetches.cast(FETCH_SCHEMA)
    store.write_table(store.part_file(round_no, "fetched", part), fetches, scratch=True)
    robots_rows = out.robots_rows
    if robots_rows is None or robots_rows.num_rows == 0:
        robots_rows = ROBOTS_CACHE_SCHEMA.empty_table()
    store.write_table(store.part_file(round_no, "robots", part), robots_rows.select(ROBOTS_CACHE_SCHEMA.names)
                      .cast(ROBOTS_CACHE_SCHEMA), scratch=True)
    sitemap_rows = out.sitemap_rows if out.sitemap_rows is not None else SITEMAP_SCHEMA.empty_table()
    store.write_table(store.part_file(round_no, "sitemaps", part),
                      sitemap_rows.select(SITEMAP_SCHEMA.names).cast(SITEMAP_SCHEMA), scratch=True)
    stats = {"part": part, **_json_safe(out.stats)}
    store.mark_done(round_no, "fetched", part, stats)
    if checkpoints is not None:  # the partition's rows are in its fetched file now
        checkpoints.remove()
    told.remove()  # the marker's host_backoff_until carries the waits still running
    if parse:  # after the fetch marker: a crash from here on leaves a fetched partition to parse_task
        _parse_and_mark(cfg, store, round_no, part, fetches, out.bodies, chunks)
    return stats


def fetch_parse_task(cfg: CrawlConfig, round_no: int, part: int, now: datetime,
                     token: int | None = None) -> dict[str, Any]:
    """Fetch and parse one partition in one task: ``{"fetch": stats, "parse": stats}``.

    Why: the bodies the fetch just downloaded are parsed from memory, with no second task reading the
    WARC files back (bench/RESULTS.md, "parse in the fetch task"). The outputs are exactly
    :func:`parse_task`'s (the same function parses both, bodies in the same order). Used when nothing of
    the partition may be rendered (a render task must come between fetch and parse;
    ``crawl.round._render_parts``) and ``parse_in_fetch_max_bytes`` > 0. A rerun skips what is marked done: a partition fetched but not
    parsed (killed in between) is parsed from its WARC files, as by :func:`parse_task`.
    """
    fetch_stats = fetch_task(cfg, round_no, part, now, token, parse=True)
    return {"fetch": fetch_stats, "parse": parse_task(cfg, round_no, part)}


def previous_contact(store: Store, round_no: int, back: int = 10) -> tuple[float | None, dict[str, float]]:
    """When the fetch of the latest earlier round that had one ended (Unix time: the latest
    ``fetch_end_unix`` of its fetch tasks' markers), looking back at most ``back`` rounds, and the
    politeness keys a 429/503 still held back then (key -> Unix time its wait ends, the latest over
    the partitions: the markers' ``host_backoff_until``); ``(None, {})`` if no round recorded them.

    Why: a round's fetch tasks start with fresh politeness queues, and rounds may run back to back
    (``crawl run``; update and reprioritise take well under a second on a small crawl), so without it
    the first request to a host could follow the previous round's last one within the host's delay
    (tests/test_ftp.py judges that gap in the server's own session log), or come before the end of a
    ``Retry-After`` (or backoff) the host asked for in the previous round (tests/test_limits.py). The
    latest end over all partitions bounds every host's last contact, whichever partition it was in then."""
    for r in range(round_no - 1, max(0, round_no - 1 - back), -1):
        ends = []
        backoff: dict[str, float] = {}
        for path in store.fs.glob(store.abs(store.round_dir(r, "fetched", "part=*.done"))):
            with store.fs.open(path, "rb") as fh:
                marker = json.loads(fh.read())
            end = marker.get("fetch_end_unix")
            if isinstance(end, int | float):
                ends.append(float(end))
            for key, until in (marker.get("host_backoff_until") or {}).items():
                backoff[key] = max(backoff.get(key, 0.0), float(until))
        if ends:
            return max(ends), backoff
    return None, {}


def pending_waits_path(store: Store, round_no: int, part: int) -> str:
    return store.part_file(round_no, "fetched", part, "waits.json")


class PendingWaits:
    """The 429/503 waits a fetch attempt of a partition was told, and its hosts' backoff and error
    counts, kept from when each is set until the partition's done marker (whose ``host_backoff_until``
    carries the waits on to the next round; the counts are the round's only).

    Why: the fetcher keeps a wait in memory and writes it into the marker when the task ends. A task
    killed meanwhile (SIGKILL, OOM, a lost worker) took it along, and its rerun (an Airflow or Dask
    retry, ``crawl step fetch_parse`` again) asked the host again after one quiet period
    (:func:`wait_after_dead_attempt`), before its ``Retry-After`` had passed (tests/test_limits.py).

    One small JSON file per partition (key -> Unix time the wait ends), at a deterministic path beside
    the marker, rewritten whole (atomically). Not on the event loop: :meth:`add` only notes the wait and
    wakes a writer thread, which writes the latest waits (several set meanwhile in one write). Why: a
    write is an fsync on a local disk (~2 ms) and a PUT on an object store (tens of ms); when many hosts
    answer 503 at once (a CDN's outage), writing on the loop stalled every other host's requests for
    the sum of them. It is not a checkpoint (:mod:`crawl.checkpoint`): it holds even with checkpoints
    off or for another fetch list, since a host's wait does not depend on which URLs are asked. Read
    back, a wait is capped at ``backoff_cap_s`` from now (as when it was set) and an ended one dropped.

    With the waits, each answering host's backoff count (``counts``, host -> the 503s without
    Retry-After so far): a rerun that lost it began the host's exponential backoff again at
    ``backoff_base_s`` (the fetcher keeps the count for the whole task, so it is kept here until the
    partition's marker, also after the wait it set has ended). And each origin's error count
    (``errors``, origin -> errors counted towards ``max_host_errors``, told on every error, 429/503 or
    not): a rerun that lost it could ask a failing host up to ``max_host_errors`` times more in the same
    round, after every crash. Keyed by origin because the fetcher counts errors per origin
    (``http://h`` and ``https://h`` each have their own). Told on the event loop and written by the
    same writer thread, so a crash within the few milliseconds between an error and its write loses
    that one error (the host's next request is a politeness delay later).
    """

    def __init__(self, store: Store, round_no: int, part: int, cap_s: float) -> None:
        self.store = store
        self.rel = pending_waits_path(store, round_no, part)
        now = time.time()
        try:
            raw = store.read_json(self.rel, {}) or {}
        except (ValueError, OSError):  # damaged outside the crawler: the earlier attempt's waits are lost
            raw = {}
        raw = raw if isinstance(raw, dict) else {}
        self.waits: dict[str, float] = {}
        for key, until in (raw.get("waits") or {}).items():
            if isinstance(until, int | float) and until > now:
                self.waits[str(key)] = min(float(until), now + cap_s)
        self.counts: dict[str, int] = {str(h): n for h, n in (raw.get("backoff_n") or {}).items()
                                       if isinstance(n, int) and n > 0}
        self.errors: dict[str, int] = {str(o): n for o, n in (raw.get("errors") or {}).items()
                                       if isinstance(n, int) and n > 0}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._version = 0  # waits set so far; the writer writes until it has written the latest
        self._closing = False
        self._writer: threading.Thread | None = None

    def add(self, key: str | None, until: float = 0.0, host: str | None = None, backoff_n: int = 0,
            origin: str | None = None, errors: int = 0) -> None:
        """A wait just set (``key`` None: none) and the host's counts
        (:meth:`crawl.fetch.scheduler._Scheduling.tell_host`, on the event loop): noted, and written by
        the writer thread as soon as it gets to it."""
        now = time.time()
        with self._lock:
            if key is not None:
                self.waits = {k: u for k, u in self.waits.items() if u > now}
                self.waits[key] = max(self.waits.get(key, 0.0), until)
            if host is not None and backoff_n > 0:
                self.counts[host] = max(self.counts.get(host, 0), backoff_n)
            if origin is not None and errors > 0:
                self.errors[origin] = max(self.errors.get(origin, 0), errors)
            self._version += 1
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_latest, name="pending-waits", daemon=True)
            self._writer.start()
        self._wake.set()

    def _write_latest(self) -> None:
        written = 0
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                version, waits, counts, errors = self._version, dict(self.waits), dict(self.counts), dict(self.errors)
            if version != written:
                try:
                    self.store.write_json(self.rel, {"waits": waits, "backoff_n": counts, "errors": errors})
                except Exception:  # the wait holds in this attempt all the same; only a rerun would not know it
                    log.warning("could not save the 429/503 waits to %s", self.rel, exc_info=True)
                written = version
            with self._lock:
                if self._closing and written == self._version:
                    return
                if written != self._version:
                    self._wake.set()  # set while writing: write again

    def close(self) -> None:
        """Wait for the writer to have written the last wait set (the fetch has ended, so none comes)."""
        if self._writer is None:
            return
        with self._lock:
            self._closing = True
        self._wake.set()
        self._writer.join()

    def remove(self) -> None:
        self.close()
        self.store.remove(self.rel)


def wait_after_dead_attempt(cfg: CrawlConfig, store: Store, round_no: int, part: int,
                            token: int | None = None) -> float:
    """Mark this fetch attempt; if an earlier one started and never finished, wait out its politeness.

    An attempt dies with its worker (SIGKILL, OOM) or an exception, possibly just after a request to
    one of the partition's hosts. Its rerun knows nothing of that request, so without this wait its first
    request to the same host could follow within the host's delay. Any host's delay is at most
    :func:`crawl.lease.quiet_s` (hosts asking for more are deferred).

    How long: when the earlier attempt ran under an older lease ``token`` (a dead owner; a rerun), its
    fetchers stopped within a check interval of that lease ending, so it waits only until
    :func:`crawl.lease.quiet_since` -- already waited out by the lease's ``wait_quiet`` before the
    rerun fetches, so one quiet period in all, not two. Under the same token (Dask retried the task
    after its worker died, the lease still live) or when that cannot be told, a full quiet period from
    now: the dead attempt sends nothing more. Returns the seconds waited (0 on a first attempt).
    """
    from crawl.lease import quiet_s, quiet_since

    marker = store.part_file(round_no, "fetched", part, "attempt")
    earlier = store.read_json(marker) if store.exists(marker) else None
    waited = 0.0
    if earlier is not None:
        before = earlier.get("token")
        quiet_at = (quiet_since(store, before, quiet_s(cfg))
                    if token is not None and isinstance(before, int) and before < token else None)
        waited = quiet_s(cfg) if quiet_at is None else max(0.0, quiet_at - time.time())
        if waited > 0:
            time.sleep(waited)
    store.write_json(marker, {"started": datetime.now(UTC).isoformat(), "token": token, "waited_s": round(waited, 3),
                              "earlier": earlier and {"token": earlier.get("token"), "started": earlier.get("started")}})
    return waited


def render_task(cfg: CrawlConfig, round_no: int, part: int, fetch_stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """Render the partition's chosen pages in a headless browser (:mod:`crawl.render`): a conversion
    WARC file and the ``rendered`` rows, then the done marker. Runs on a worker with ``browser=1``."""
    from crawl.render import RENDER_SCHEMA, render_partition, robots_policies

    store = Store(cfg.root, cfg.crawl_id)
    if store.is_done(round_no, "rendered", part):
        return store.read_json(store.part_file(round_no, "rendered", part, "done"))
    fetched = store.read_table(store.part_file(round_no, "fetched", part), FETCH_SCHEMA)
    # before publish the WARC files are in the round's staging folder; the rows name final paths
    fetched = fetched.set_column(fetched.schema.get_field_index("warc_filename"), "warc_filename",
                                 pc.binary_join_element_wise(store.staged(round_no, ""),
                                                             fetched.column("warc_filename"), ""))
    this_round = store.part_file(round_no, "robots", part)
    robots = robots_policies(cfg, [load_robots_cache(store, round_no - 1),
                                   store.read_table(this_round, ROBOTS_CACHE_SCHEMA)
                                   if store.exists(this_round) else None])
    final = store.warc_prefix(round_no, part) + "-rendered.warc.gz"
    table, stats = render_partition(cfg, fetched, cfg.root, store.staged(round_no, final), robots)
    table = table.set_column(table.schema.get_field_index("warc_filename"), "warc_filename",  # moved by publish
                             pc.replace_substring(table.column("warc_filename"), store.staged(round_no, ""), "",
                                                  max_replacements=1))
    store.write_table(store.part_file(round_no, "rendered", part), table.cast(RENDER_SCHEMA))
    stats = {"part": part, **_json_safe(stats)}
    store.mark_done(round_no, "rendered", part, stats)
    return stats


def parse_task(cfg: CrawlConfig, round_no: int, part: int, fetch_stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """Parse one fetched partition (bodies read back from its WARC files): pages + raw links."""
    store = Store(cfg.root, cfg.crawl_id)
    if store.is_done(round_no, "parsed", part):
        return store.read_json(store.part_file(round_no, "parsed", part, "done"))
    fetched = store.read_table(store.part_file(round_no, "fetched", part), FETCH_SCHEMA)
    return _parse_and_mark(cfg, store, round_no, part, fetched)


def _parse_and_mark(cfg: CrawlConfig, store: Store, round_no: int, part: int, fetched: pa.Table,
                    held: dict[int, tuple[list[tuple[str, str]], bytes]] | None = None,
                    chunks: list[tuple[Chunk, list[int]]] | None = None) -> dict[str, Any]:
    """Parse the documents of a partition's fetch rows (``fetched``: as in its fetched file), write
    pages (without their text: PAGE_PART_SCHEMA) + raw links and the partition's text and images files (:func:`crawl.index.write_part_texts`),
    then the parsed marker. ``held``: bodies in memory by row of ``fetched``
    (:attr:`crawl.fetch.FetchOutput.bodies`); the others are read back from the WARC files.
    ``chunks``: documents parsed during the fetch (:mod:`crawl.parse_ahead`), each with its rows of
    ``fetched``; used when they are the first documents in parse order (:func:`_parse_with_chunks`)."""
    from crawl.index import write_part_texts
    from crawl.media import MediaLimits, media_limits
    from crawl.parse import install_parsers

    install_parsers(cfg.parsers)  # plugins: recrawl.parsers entry points, then the config's list
    # pages and their diagnostics (redirect rows give redirect links); robots.txt and sitemap files
    # are fetched with status 'fetched' too, but they are not documents
    is_document = pc.invert(pc.is_in(fetched.column("subset"), pa.array(CONTROL_SUBSETS)))
    documents = fetched.filter(is_document)
    rendered_rel = store.part_file(round_no, "rendered", part)
    if store.exists(rendered_rel):  # rendered pages: parse the DOM the browser built (crawl.render)
        from crawl.render import RENDER_SCHEMA, apply_rendered

        documents = apply_rendered(documents, store.read_table(rendered_rel, RENDER_SCHEMA))
        held = chunks = None  # a rendered page's body is its DOM, in the rendered WARC file
    by_doc_row: dict[int, tuple[list[tuple[str, str]], bytes]] = {}
    doc_chunks: list[tuple[Chunk, list[int]]] = []
    if held:  # rows of `fetched` -> rows of `documents`
        kept = np.flatnonzero(pc.fill_null(is_document, False).to_numpy(zero_copy_only=False))
        by_doc_row = {d: held[int(f)] for d, f in enumerate(kept) if int(f) in held}
        to_doc = {int(f): d for d, f in enumerate(kept)} if chunks else {}
        for c, rows in chunks or ():  # a revisit's body was parsed too (told on the writer thread): dropped
            keep = np.array([r in to_doc and to_doc[r] in by_doc_row for r in rows], bool)
            if keep.any():
                doc_chunks.append((_keep_pages(c, keep), [to_doc[r] for r, k in zip(rows, keep, strict=True) if k]))
    # before publish the WARC files are still in the round's staging folder
    documents = documents.set_column(
        documents.schema.get_field_index("warc_filename"), "warc_filename",
        pc.binary_join_element_wise(store.staged(round_no, ""), documents.column("warc_filename"), ""))
    with media_limits(MediaLimits.from_config(cfg)):
        pages, links, n_ahead = _parse_with_chunks(cfg, documents, by_doc_row, doc_chunks)
    pages = pages.cast(PAGE_SCHEMA)
    # the text and title go to the text file only (stored once): the part file is PAGE_PART_SCHEMA
    store.write_table(store.part_file(round_no, "pages", part), pages.select(PAGE_PART_SCHEMA.names), scratch=True)
    store.write_table(store.part_file(round_no, "rawlinks", part), links.cast(LINK_SCHEMA), scratch=True)
    write_part_texts(store, round_no, part, fetched, pages)  # here, in parallel, not in update's driver
    stats = {"part": part, "pages": pages.num_rows, "links": links.num_rows, "bodies_from_memory": len(by_doc_row),
             "parsed_ahead": n_ahead}
    store.mark_done(round_no, "parsed", part, stats)
    return stats


def _keep_pages(c: Chunk, keep: np.ndarray) -> Chunk:
    """The chunk without the pages ``keep`` drops, nor their links (a page's links are contiguous, in
    page order, ``outlink_count`` of them)."""
    if keep.all():
        return c
    from crawl.parse_ahead import Chunk

    counts = c.pages.column("outlink_count").to_numpy(zero_copy_only=False)
    return Chunk([r for r, k in zip(c.rows, keep, strict=True) if k], [u for u, k in zip(c.urls, keep, strict=True) if k],
                 [t for t, k in zip(c.cts, keep, strict=True) if k], c.pages.filter(pa.array(keep)),
                 c.links.filter(pa.array(np.repeat(keep, counts))))


def _parse_with_chunks(cfg: CrawlConfig, documents: pa.Table,
                       held: dict[int, tuple[list[tuple[str, str]], bytes]],
                       chunks: list[tuple[Chunk, list[int]]]) -> tuple[pa.Table, pa.Table, int]:
    """``parse_bodies`` of ``documents``, taking the tables of ``chunks`` (rows of ``documents``) for
    the documents they parsed: used only when those are, in order, the first bodies
    :func:`crawl.parse.held_bodies` gives, under the same URL and content type (each page's rows
    depend on that page alone, so the concatenation is the whole parse's tables); otherwise every
    document is parsed here, as without chunks. Returns (pages, links, documents taken from chunks)."""
    from crawl.parse import held_bodies, parse_bodies

    ahead = [r for _, rows in chunks for r in rows]
    usable = bool(ahead)
    if usable:
        take = pa.array(np.asarray(ahead, np.int64))
        usable = (documents.column("url").take(take).to_pylist() == [u for c, _ in chunks for u in c.urls]
                  and documents.column("content_type").take(take).to_pylist() == [t for c, _ in chunks for t in c.cts])
    bodies = held_bodies(cfg.root, documents, held)
    if usable:
        for r in ahead:  # held rows (no WARC read) while they match
            b = next(bodies, None)
            if b is None or b[0] != r:
                usable = False
                break
    if not usable:  # no chunks (the default), or not the first documents: the whole partition here
        return (*parse_bodies(documents, held_bodies(cfg.root, documents, held) if ahead else bodies,
                              cfg.max_outlinks_per_page, cfg.allowed_schemes), 0)
    rest_pages, rest_links = parse_bodies(documents, bodies, cfg.max_outlinks_per_page, cfg.allowed_schemes)
    parts = []
    for c, rows in chunks:  # URL and hash from the fetch rows, as parse_bodies takes them
        ids = documents.select(["url", "url_hash"]).take(pa.array(np.asarray(rows, np.int64)))
        p = c.pages
        for name in ("url", "url_hash"):
            p = p.set_column(p.schema.get_field_index(name), p.schema.field(name),
                             ids.column(name).cast(p.schema.field(name).type))
        parts.append(p)
    pages = pa.concat_tables([*parts, rest_pages.cast(parts[0].schema)]).combine_chunks()
    links = pa.concat_tables([*(c.links for c, _ in chunks), rest_links.cast(chunks[0][0].links.schema)])
    return pages, links.combine_chunks(), len(ahead)


def count_status(fetches: pa.Table) -> dict[str, int]:
    vc = pc.value_counts(fetches.column("status")).to_pylist() if fetches.num_rows else []
    return {d["values"]: int(d["counts"]) for d in vc}


def _json_safe(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, int | float | str | bool) or v is None:
            out[k] = v
        elif isinstance(v, dict):
            out[k] = _json_safe(v)
        elif isinstance(v, list):
            out[k] = [x if isinstance(x, int | float | str | bool) else str(x) for x in v]
        else:
            out[k] = str(v)
    return out
