"""The fetcher's request call: one GET (no redirects followed) or FTP session, body read up to a cap.

Why apart: what goes over the wire (timeouts, caps, truncation kinds, the peer address) is one
concern; what the answer means is :mod:`crawl.fetch.outcome`'s.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import zlib
from collections import deque
from dataclasses import dataclass

import aiohttp
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from crawl.errors import FetchStopped
from crawl.fetch.scheduler import _Host, _Slot
from crawl.ftp import FtpLimits, fetch_ftp

FTP_PREFIX = "ftp://"  # URLs the ftp handler (crawl.ftp) fetches
_CHUNK = 65_536

# An http(s) URL that yarl's parser gives back unchanged (:func:`request_url`): a lower-case ASCII host
# name with no user info or port, a path of characters yarl's path quoter keeps as they are (no '%'),
# an optional query of characters its query quoter keeps, no fragment; dot segments are checked apart.
_PLAIN_URL = re.compile(r"(https?)://([a-z0-9-]+(?:\.[a-z0-9-]+)*)(/[A-Za-z0-9._~!$&'()*+,;=:@/-]*)"
                        r"(?:\?([A-Za-z0-9._~!$'()*,;:@/?=&-]+))?")
_DOT_SEGMENT = re.compile(r"/\.\.?(?:/|$)")


def request_url(url: str) -> URL | str:
    """What the fetcher hands aiohttp for ``url``: a prebuilt ``yarl.URL`` (``encoded=True``) when
    yarl's own parse of the string would give the same URL (:data:`_PLAIN_URL`, as canonical URLs of
    ordinary sites are), else the string, for aiohttp to parse and quote as before.

    Why: aiohttp parses every request's URL string with yarl (split, requote, normalise the path:
    ~3.5 us a request); building it from the already canonical parts costs ~1 us. The request line
    and Host header are the same (tests/test_fetch_request_url.py compares both ways over generated URLs).
    """
    m = _PLAIN_URL.fullmatch(url)
    if m is None or _DOT_SEGMENT.search(m.group(3)):
        return url
    scheme, host, path, query = m.groups()
    return URL.build(scheme=scheme, host=host, path=path, query_string=query or "", encoded=True)


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


class _ReadTimerHandler(ResponseHandler):
    """aiohttp's client protocol with the same ``sock_read`` deadline, kept by one timer per connection.

    aiohttp cancels its read timer and starts a new one on every chunk that arrives (``call_later``
    per ``data_received``: ~3.8 per page on the simulated web, ~2.5 us each, 3-5 % of the fetch
    loop), and starts one per request and cancels it at the end of each body (~2 us a pair). Here a
    chunk or a new request only moves the deadline (last data + ``sock_read``, as before) and the end
    of a body (or a pause of reading) only clears it; the one timer of the connection, when it fires
    before the deadline moved past it, is set again for the rest, and when it finds no deadline it
    lapses. So the timeout still fires when no data came for ``sock_read`` seconds while a response
    is read, never earlier, never while none is; closing the connection cancels the timer. aiohttp is
    pinned (requirements.lock); tests/test_fetch_read_timer.py checks the behaviour against a real
    server.
    """

    _read_deadline: float | None = None  # loop time the read timeout is due (None: no read timed now)
    _read_timer_at = 0.0  # loop time the armed timer fires

    def _reschedule_timeout(self) -> None:
        timeout = self._read_timeout
        if not timeout:
            self._drop_timeout()
            return
        loop = self._loop
        self._read_deadline = when = loop.time() + timeout
        if self._read_timeout_handle is None or when < self._read_timer_at:
            if self._read_timeout_handle is not None:
                self._read_timeout_handle.cancel()
            self._read_timer_at = when
            self._read_timeout_handle = loop.call_at(when, self._on_read_timeout)

    def _drop_timeout(self) -> None:
        self._read_deadline = None  # the armed timer (if any) lapses when it fires

    def _cancel_timer(self) -> None:
        self._read_deadline = None
        if self._read_timeout_handle is not None:
            self._read_timeout_handle.cancel()
            self._read_timeout_handle = None

    def _on_read_timeout(self) -> None:
        when = self._read_deadline
        if when is None:  # no response read since the timer was set: nothing to time
            self._read_timeout_handle = None
            return
        if self._loop.time() < when:  # data came after the timer was set: wait for the rest
            self._read_timer_at = when
            self._read_timeout_handle = self._loop.call_at(when, self._on_read_timeout)
            return
        self._read_timeout_handle = None
        super()._on_read_timeout()

    def close(self) -> None:
        super().close()
        self._cancel_timer()

    def abort(self) -> None:
        super().abort()
        self._cancel_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)


def use_read_timer(connector: aiohttp.TCPConnector) -> aiohttp.TCPConnector:
    """Make ``connector``'s connections use :class:`_ReadTimerHandler` (aiohttp's protocol factory
    attribute, the one its own ``__init__`` sets)."""
    connector._factory = functools.partial(_ReadTimerHandler, loop=connector._loop)  # noqa: SLF001
    return connector


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
    """One request of the fetcher: an HTTP GET through the task's aiohttp session (capped body read)
    or one FTP session (:mod:`crawl.ftp`), both answered as a :class:`_Response`."""

    async def _request(self, h: _Host, url: str, headers: dict[str, str], cap: int,
                       slot: _Slot | None = None) -> _Response:
        """One GET, no redirects followed; ``slot`` (default the origin's) is the politeness queue
        the request counts against (a robots.txt redirect to another host counts against that
        host's)."""
        if self.stopped:  # redirect hops and robots/sitemap follow-ups too
            raise FetchStopped("fetch stopped")
        s = slot or h.slot
        parts: list[bytes] = []
        truncated: str | None = None
        status: int | None = None
        started = self.mono()
        # the whole request (connect, headers, body) is bounded by cfg.total_timeout_s through
        # one timer for all requests (_TotalBounds), not aiohttp's per-request one
        bound = self.bounds.start()
        try:
            async with self.session.get(request_url(url), headers=headers, allow_redirects=False,
                                        trace_request_ctx=s) as resp:
                self._answered(s)
                status = resp.status
                reason = resp.reason or ""
                raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.raw_headers]
                req_headers = list(resp.request_info.headers.items())
                got = resp.headers
                location = got.get("Location")
                retry_after = got.get("Retry-After")
                conn = resp.connection
                peer = conn.transport.get_extra_info("peername") if conn and conn.transport else None
                ip = peer[0] if peer else None
                content = resp.content
                size = 0
                try:
                    # up to the cap in as few reads as the data allows: each read takes all that is
                    # buffered (up to what is left), instead of fixed-size chunks copied into a
                    # bytearray; exactly at the cap, data not yet read means "length". A body
                    # whose end has arrived is done without one more read() to learn it (most
                    # pages come whole in the first read: one coroutine call less per page)
                    while size < cap:
                        chunk = await content.read(cap - size)
                        if not chunk:
                            break
                        parts.append(chunk)
                        size += len(chunk)
                        if content.at_eof():
                            break
                    else:
                        if not content.at_eof():
                            truncated = "length"
                except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                        aiohttp.ClientOSError, ConnectionError):
                    truncated = "disconnect"
                except (aiohttp.ServerTimeoutError, aiohttp.SocketTimeoutError):
                    truncated = "time"
                finally:
                    bound.waiting = False  # the body is in: releasing the connection is not bounded
        except TimeoutError:
            if status is None:
                self._answered(s)
                raise
            truncated = "time"  # the total timeout ran out while the body came
        except asyncio.CancelledError:
            # the total bound ran out (and no one else cancelled the task): a TimeoutError, as
            # aiohttp's own total timer turns its cancel into one
            if not bound.fired or bound.task.uncancel() > bound.cancelling:
                if status is None:
                    self._answered(s)
                raise
            if status is None:
                self._answered(s)
                raise TimeoutError from None
            truncated = "time"  # the total timeout ran out while the body came
        except BaseException:
            if status is None:
                self._answered(s)
            raise
        finally:
            self.bounds.end(bound)
            self.stats["request_s"] += self.mono() - started
        return _Response(status, reason, raw, req_headers, b"".join(parts), truncated, ip, location,
                         retry_after)

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
