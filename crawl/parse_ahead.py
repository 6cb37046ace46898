"""Parse a partition's documents in chunks on a side thread while its fetch goes on.

Why: a fetch task's event loop waits on the network most of the time (one request in flight per
host), leaving its core ~0.4-0.6 busy, and the parse of the bodies it kept in memory used to start
only after the fetch ended (bench/RESULTS.md, "Parse overlapped with the fetch"). Every step of
:func:`crawl.parse.parse_bodies` is per page (link resolution de-duplicates only as a cache,
fingerprints are per text), so a chunk of documents parsed alone gives the rows the whole partition
would give them; :func:`crawl.tasks._parse_and_mark` concatenates the chunks' tables, checking that
they are the partition's first documents in its parse order, else it parses everything as before.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from crawl.media import MediaLimits, media_limits
from crawl.parse import parse_bodies
from crawl.records import FETCH_SCHEMA, FETCHED

CHUNK_BYTES = 16 << 20  # a chunk is also parsed once its payloads reach this size


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

    ``feed`` runs on the fetch's event loop and only appends to a queue; :meth:`finish` parses what
    is still buffered and returns the chunks in arrival order.
    """

    def __init__(self, chunk_docs: int, max_outlinks: int, schemes: tuple[str, ...], limits: MediaLimits) -> None:
        self.chunk_docs = max(1, chunk_docs)
        self.max_outlinks, self.schemes, self.limits = max_outlinks, schemes, limits
        self.chunks: list[Chunk] = []
        self.busy_s = 0.0
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="parse-ahead", daemon=True)
        self._thread.start()

    def feed(self, row: int, url: str, ct: str | None, headers: Sequence[tuple[str, str]], payload: bytes) -> None:
        self._q.put((row, url, ct, headers, payload))

    def _run(self) -> None:
        buf: list[tuple[int, str, str | None, Sequence[tuple[str, str]], bytes]] = []
        size = 0
        with media_limits(self.limits):  # a ContextVar: a new thread does not inherit the task's
            while True:
                item = self._q.get()
                if item is not None:
                    buf.append(item)
                    size += len(item[4])
                if buf and (item is None or len(buf) >= self.chunk_docs or size >= CHUNK_BYTES):
                    self._parse(buf)
                    buf, size = [], 0
                if item is None:
                    return

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
        pages, links = parse_bodies(table, ((i, b[3], b[4]) for i, b in enumerate(buf)),
                                    self.max_outlinks, self.schemes)
        self.chunks.append(Chunk([b[0] for b in buf], urls, cts, pages, links))
        self.busy_s += time.thread_time() - t

    def finish(self) -> list[Chunk]:
        """Parse what is buffered, stop the thread and return the chunks (also after a failed fetch:
        idempotent)."""
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()
        return self.chunks


__all__ = ["CHUNK_BYTES", "Chunk", "ParseAhead"]
