"""The fetcher's request call: one GET (no redirects followed) or FTP session, body read up to a cap.

Why apart: what goes over the wire (timeouts, caps, truncation kinds, the peer address) is one
concern; what the answer means is :mod:`crawl.fetch.outcome`'s.
"""

from __future__ import annotations

import asyncio
import functools
import math
import zlib
from collections import deque
from dataclasses import dataclass

from crawl.errors import FetchStopped
from crawl.fetch.h1 import Response
from crawl.fetch.scheduler import _Host, _Slot
from crawl.ftp import FtpLimits, fetch_ftp

FTP_PREFIX = "ftp://"  # URLs the ftp handler (crawl.ftp) fetches


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


class _Bound:
    """One request's place in :class:`_TotalBounds`."""

    __slots__ = ("cancelling", "fired", "n", "task", "waiting")

    def __init__(self, n: int, task: asyncio.Task[object]) -> None:
        self.n = n
        self.task = task
        self.waiting = True  # on the network (connect, send, answer, body): the bound may cancel it
        self.fired = False  # the bound ran out and cancelled the request
        # the task's cancel requests when the request started (asyncio.Task.cancelling): more than
        # that after ours is undone means someone else cancelled it too (as aiohttp's TimerContext)
        self.cancelling = task.cancelling()


class _TotalBounds:
    """The whole-request time bound (``cfg.total_timeout_s``) of every HTTP request of a fetcher,
    kept by one timer for all of them.

    Why not aiohttp's ``ClientTimeout(total=...)``: it costs each request a ``TimeoutHandle`` with a
    ``call_at`` and its cancel, and a ``TimerContext`` entered around every wait (8-13 us per page,
    bench/RESULTS.md "Fetch loop CPU (session 7)"). A fetcher's requests all have the same bound, so
    their deadlines come in start order: a FIFO of (deadline, id) and one timer armed for the oldest
    live request do. Same rule as aiohttp's: the deadline is start + total, rounded up to the loop
    clock's next whole second when total >= 5 s (its ``ceil_threshold``); at the deadline a request
    still on the network is cancelled and :meth:`_HttpCalls._request` answers ``TimeoutError``, as
    aiohttp's ``TimerContext`` does (a cancel from elsewhere at the same time still propagates).
    """

    CEIL_THRESHOLD = 5.0  # aiohttp's ClientTimeout.ceil_threshold default

    def __init__(self, total: float | None) -> None:
        self.total = total if total and total > 0 else None
        self.live: dict[int, _Bound] = {}
        self.q: deque[tuple[float, int]] = deque()  # (deadline, id) in start order
        self.n = 0
        self.handle: asyncio.TimerHandle | None = None

    def start(self) -> _Bound:
        """The bound of the request the current task starts now."""
        task = asyncio.current_task()
        assert task is not None
        self.n += 1
        b = _Bound(self.n, task)
        if self.total is None:
            return b
        loop = task.get_loop()
        when = loop.time() + self.total
        if self.total >= self.CEIL_THRESHOLD:
            when = math.ceil(when)
        q = self.q
        while q and q[0][1] not in self.live:  # ended requests at the head
            q.popleft()
        self.live[b.n] = b
        q.append((when, b.n))
        if self.handle is None:
            self.handle = loop.call_at(when, self._fire)
        return b

    def end(self, b: _Bound) -> None:
        self.live.pop(b.n, None)

    def _fire(self) -> None:
        self.handle = None
        q, live = self.q, self.live
        now = None
        while q:
            when, n = q[0]
            b = live.get(n)
            if b is None:
                q.popleft()
                continue
            if now is None:
                now = b.task.get_loop().time()
            if when > now:
                self.handle = b.task.get_loop().call_at(when, self._fire)
                return
            q.popleft()
            del live[n]
            if b.waiting and not b.task.done():
                b.fired = True
                b.task.cancel()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class _HttpCalls:
    """One request of the fetcher: an HTTP GET through the task's client (:mod:`crawl.fetch.h1`,
    capped body read) or one FTP session (:mod:`crawl.ftp`), both answered as a :class:`_Response`."""

    async def _request(self, h: _Host, url: str, headers: dict[str, str], cap: int,
                       slot: _Slot | None = None) -> _Response:
        """One GET, no redirects followed; ``slot`` (default the origin's) is the politeness queue
        the request counts against (a robots.txt redirect to another host counts against that
        host's)."""
        if self.stopped:  # redirect hops and robots/sitemap follow-ups too
            raise FetchStopped("fetch stopped")
        s = slot or h.slot
        resp: Response | None = None
        truncated: str | None = None
        started = self.mono()
        # the whole request (connect, headers, body) is bounded by cfg.total_timeout_s through
        # one timer for all requests (_TotalBounds)
        bound = self.bounds.start()
        try:
            # with parallel requests per key the gap runs from when the request left (_sent)
            resp = await self.client.get(url, headers, cap, None if self.one_in_flight else
                                         functools.partial(self._sent, s))
            try:
                body, truncated = await resp.read()
            finally:
                bound.waiting = False  # the body is in: releasing the connection is not bounded
                # the gap to the key's next request runs from the end of the answer, body included:
                # a body dripped until the deadline is not followed by a request at once
                self._answered(s)
        except asyncio.CancelledError:
            # the total bound ran out (and no one else cancelled the task): a TimeoutError, as
            # aiohttp's total timer turned its cancel into one
            if not bound.fired or bound.task.uncancel() > bound.cancelling:
                if resp is None:
                    self._answered(s)
                raise
            if resp is None:
                self._answered(s)
                raise TimeoutError from None
            body, truncated = b"".join(resp.body), "time"  # the total timeout ran out while the body came
        except BaseException:
            if resp is None:
                self._answered(s)
            raise
        finally:
            if resp is not None:
                resp.release()
            self.bounds.end(bound)
            self.stats["request_s"] += self.mono() - started
        return _Response(resp.status, resp.reason, resp.headers, resp.req_headers, body, truncated, resp.ip,
                         resp.header("Location"), resp.header("Retry-After"))

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
