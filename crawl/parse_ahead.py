"""Parse a partition's documents in chunks on a side thread while its fetch goes on.

Why: a fetch task's event loop waits on the network most of the time (one request in flight per
host), leaving its core ~0.4-0.6 busy, and the parse of the bodies it kept in memory used to start
only after the fetch ended (bench/RESULTS.md, "Parse overlapped with the fetch"). Every step of
:func:`crawl.parse.parse_bodies` is per page (link resolution de-duplicates only as a cache,
fingerprints are per text), so a chunk of documents parsed alone gives the rows the whole partition
would give them; :func:`crawl.tasks._parse_and_mark` concatenates the chunks' tables, checking that
they are the partition's first documents in its parse order, else it parses everything as before.

Paced by the fetch loop's lag: the side thread shares the worker's GIL with the event loop, and on
its own it took half the GIL's turns (a uvloop callback waits up to the 5 ms switch interval for a
busy parse thread), so the fetch got ~1.5x slower and the round no shorter (bench/RESULTS.md,
"Round-end parse at scale"). A timer on the fetch loop measures how late it fires (every
:data:`TICK_S`); the thread parses the next document only while that lag is under :data:`LAG_S`,
else it sleeps (GIL released) until the loop is on time again: it uses the loop's slack, never its
turns. A shorter switch interval was measured and dropped: it is symmetric, so the busy parse thread
preempted the loop as often. When the fetch ends, :meth:`ParseAhead.finish` stops the thread after
the document in hand; the rest is parsed by the task's own thread with the partition's rest.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from crawl.media import MediaLimits, media_limits
from crawl.parse import parse_bodies
from crawl.records import FETCH_SCHEMA, FETCHED

CHUNK_BYTES = 16 << 20  # a chunk is also parsed once its payloads reach this size
TICK_S = 0.002  # the lag probe's period on the fetch loop
LAG_S = 0.002  # parse the next document only while the probe fired at most this late
FLUSH_S = 0.05  # no document for this long: parse the partial chunk
STALE_S = 0.05  # no probe for this long: the loop is gone (fetch ended) or stuck, do not wait on it


@dataclass
class Chunk:
    """One chunk's parse: the fetch rows (of the attempt) it holds, with the URL and content type it
    was parsed under, and its PAGE_SCHEMA / LINK_SCHEMA tables (no redirect links: those are the
    partition's, added by the last parse)."""

    rows: list[int]
    urls: list[str]
    cts: list[str | None]
    pages: pa.Table
    links: pa.Table


class ParseAhead:
    """A side thread parsing the held documents :meth:`feed` gives it, ``chunk_docs`` at a time.

    ``feed`` runs on the fetch's event loop and only appends to a queue (its first call starts the
    lag probe there); :meth:`finish` stops the thread and returns the chunks in arrival order: a
    prefix of the fed documents, the others left to the caller's parse.
    """

    def __init__(self, chunk_docs: int, max_outlinks: int, schemes: tuple[str, ...], limits: MediaLimits) -> None:
        self.chunk_docs = max(1, chunk_docs)
        self.max_outlinks, self.schemes, self.limits = max_outlinks, schemes, limits
        self.chunks: list[Chunk] = []
        self.busy_s = 0.0
        self.paced_s = 0.0  # time the thread waited for the loop's slack
        self.lag = float("inf")  # of the probe's last firing; none yet: wait for it
        self._due = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = False
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="parse-ahead", daemon=True)
        self._thread.start()

    def feed(self, row: int, url: str, ct: str | None, headers: Sequence[tuple[str, str]], payload: bytes) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._due = time.perf_counter() + TICK_S
            self._loop.call_later(TICK_S, self._tick)
        self._q.put((row, url, ct, headers, payload))

    def _tick(self) -> None:
        """The lag probe (on the fetch loop): how late this firing is, then the next one."""
        now = time.perf_counter()
        self.lag = now - self._due
        if not self._stop:
            self._due = now + TICK_S
            self._loop.call_later(TICK_S, self._tick)  # type: ignore[union-attr]

    def _paced(self, buf: list[tuple[int, str, str | None, Sequence[tuple[str, str]], bytes]],
               done: list[int]) -> Iterator[tuple[int, Sequence[tuple[str, str]], bytes]]:
        """``buf``'s bodies for ``parse_bodies``, each given once the loop is on time; stops early when
        :meth:`finish` asks (``done[0]``: how many were given, all of them parsed when it ends)."""
        for i, b in enumerate(buf):
            t = time.perf_counter()
            while self.lag > LAG_S and not self._stop and time.perf_counter() - self._due < STALE_S:
                time.sleep(TICK_S / 2)
            self.paced_s += time.perf_counter() - t
            if self._stop:
                return
            done[0] = i + 1
            yield i, b[3], b[4]

    def _run(self) -> None:
        buf: list[tuple[int, str, str | None, Sequence[tuple[str, str]], bytes]] = []
        size = 0
        with media_limits(self.limits):  # a ContextVar: a new thread does not inherit the task's
            while True:
                try:  # a partial chunk is parsed once documents stop coming for a while (a polite fetch)
                    item = self._q.get(timeout=FLUSH_S) if buf else self._q.get()
                except queue.Empty:
                    item = ()
                if self._stop or item is None:
                    return
                if item:
                    buf.append(item)
                    size += len(item[4])
                if buf and (not item or len(buf) >= self.chunk_docs or size >= CHUNK_BYTES):
                    self._parse(buf)
                    buf, size = [], 0

    def _parse(self, buf: list[tuple[int, str, str | None, Sequence[tuple[str, str]], bytes]]) -> None:
        t = time.thread_time()
        n = len(buf)
        urls = [b[1] for b in buf]
        cts = [b[2] for b in buf]
        table = pa.table({"url": pa.array(urls, FETCH_SCHEMA.field("url").type),
                          "url_hash": pa.array([0] * n, FETCH_SCHEMA.field("url_hash").type),  # set at the end
                          "content_type": pa.array(cts, pa.string()),
                          "status": pa.array([FETCHED] * n, pa.string()),
                          "redirect_location": pa.nulls(n, pa.string())})
        done = [0]
        pages, links = parse_bodies(table, self._paced(buf, done), self.max_outlinks, self.schemes)
        if k := done[0]:  # the pages of the first k documents (parse_bodies keeps their order)
            self.chunks.append(Chunk([b[0] for b in buf[:k]], urls[:k], cts[:k], pages, links))
        self.busy_s += time.thread_time() - t

    def finish(self) -> list[Chunk]:
        """Stop the thread after the document in hand and return the chunks (also after a failed fetch:
        idempotent). What it had not parsed is the caller's (``_parse_with_chunks`` parses the rest)."""
        if self._thread.is_alive():
            self._stop = True
            self._q.put(None)
            self._thread.join()
        return self.chunks


__all__ = ["CHUNK_BYTES", "LAG_S", "TICK_S", "Chunk", "ParseAhead"]
