"""WARC writing for the fetcher: one writer thread, segment files and cuts (:mod:`crawl.checkpoint`),
request/response/revisit/resource records and the rows' digests and offsets.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from crawl.checkpoint import (
    CKPT_FETCH_SCHEMA,
    CKPT_SITEMAP_SCHEMA,
    Segment,
)
from crawl.fetch.http import FTP_PREFIX, _Response
from crawl.fetch.outcome import SUBSET_DIAG, SUBSET_ROBOTS, SUBSET_WARC, _header
from crawl.fingerprint import payload_digest
from crawl.records import ROBOTS_CACHE_SCHEMA
from crawl.warc import REVISIT_NOT_MODIFIED, REVISIT_PROFILE, RecordRef, WarcFile

_WRITE_QUEUE_BYTES = 64 << 20  # bodies queued for the WARC writer thread before fetching waits


def _resolve(row: dict[str, Any], refs: list[Any]) -> bool:
    """Fill a row's digest, revisit columns and WARC offsets from its written record; True for a revisit
    (of either profile: a 304's is one even when the copy it names was not found)."""
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
        return kind == "revisit"
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


def _parse_iso(value: str) -> datetime:
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


class _WarcOutput:
    """The fetcher's WARC side: files per subset and segment, segment cuts with their checkpoint,
    records queued to the writer thread, and the rows' WARC columns filled at the end."""

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

    def _enlive(self, unit: str) -> None:
        live = self.live
        live[unit] = live.get(unit, 0) + 1

    def _unlive(self, unit: str) -> None:
        live = self.live
        n = live.get(unit, 0) - 1
        if n > 0:
            live[unit] = n
        else:
            live.pop(unit, None)

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
        self._flush_sitemap_entries()
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

    def _store(self, subset: str, url: str, t: datetime, r: _Response, dedup: bool = False,
               not_modified_of: str | None = None) -> dict[str, Any]:
        """Queue request + response (or revisit) records; return the row's WARC file and a handle.

        The records are written by one background thread, in submission order: WARC serialisation
        and gzip cost about as much CPU as the HTTP exchange, and zlib/sha1 release the GIL. The
        payload digest and the revisit decision (``known`` digests, also in submission order) are
        made there too, off the event loop; digests, revisit columns and byte offsets are filled
        into the rows at the end (:meth:`finish_rows`).

        ``not_modified_of``: the payload digest of the stored copy a 304 vouched for. The 304 is then
        a revisit with the server-not-modified profile naming that digest's first capture (``known``,
        the same lookup as an identical payload's; the 304's headers are the block), never a response.
        """
        known = self.known
        if url.startswith(FTP_PREFIX):
            return self._store_resource(subset, url, t, r) if dedup else {}

        def write() -> tuple[RecordRef, str | None, tuple[str, str] | None]:
            w = self._file(subset)  # the segment's file, looked up in the writer's order
            prior = digest = None
            profile = REVISIT_PROFILE
            if not_modified_of is not None:
                digest, profile = not_modified_of, REVISIT_NOT_MODIFIED
                prior = known.get(digest)
            elif dedup:
                digest = payload_digest(r.body)
                prior = known.get(digest)
                if prior is None:
                    known[digest] = (url, t.isoformat())
            req = w.write_request(url, t, "GET", r.req_headers, ip=r.ip)
            if prior is not None or not_modified_of is not None:
                to_url, to_date = (prior[0], _parse_iso(prior[1])) if prior is not None else (None, None)
                return (w.write_revisit(url, t, r.status, r.reason, r.headers, digest, to_url, to_date,
                                        ip=r.ip, profile=profile), digest, prior)
            ref = w.write_response(url, t, r.status, r.reason, r.headers, r.body, r.ip, r.truncated,
                                   concurrent_to=req.record_id, digest=digest)
            return ref, ref.digest, None

        out = {"warc_filename": self.names[subset], "_ref": self.writer.submit(write, len(r.body) + 1024)}
        if not_modified_of is not None:
            out["_wtype"] = "revisit"
        return out

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
        """Bound the memory of bodies waiting for the writer: wait for it when too much is queued.

        One 5 ms poll for all waiting requests, which it wakes together once the queue is back under
        the bound. Why not a ``sleep(0.005)`` loop per request: at delay 0 the writer runs behind and
        hundreds of requests wait at once; their timers and wake-ups were 3.6 a page on the loop
        thread (bench/RESULTS.md "Fetch loop thread: uvloop's C and the kernel per page")."""
        w = self.writer
        if w.submitted_bytes - w.written_bytes <= _WRITE_QUEUE_BYTES or w.error is not None:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self.bp_waiters.append(fut)
        if len(self.bp_waiters) == 1:  # the poll runs while anyone waits
            loop.call_later(0.005, self._backpressure_poll, loop)
        await fut

    def _backpressure_poll(self, loop: asyncio.AbstractEventLoop) -> None:
        w = self.writer
        if w.submitted_bytes - w.written_bytes > _WRITE_QUEUE_BYTES and w.error is None:
            loop.call_later(0.005, self._backpressure_poll, loop)
            return
        waiters, self.bp_waiters = self.bp_waiters, []
        for fut in waiters:
            if not fut.done():  # a cancelled waiter is left out
                fut.set_result(None)

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
