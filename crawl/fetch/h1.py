"""A lean HTTP/1.1 client for the fetcher: keep-alive GETs over asyncio Protocols, parsed by httptools.

Why not aiohttp: the fetch loop thread spent ~0.17-0.20 ms of CPU a page and py-spy put our own code
at ~3 % of it; the rest was aiohttp's request/response machinery (ClientSession._request,
ClientRequest, the connector, yarl, its response object, StreamReader, timers). The fetcher needs
one thing of it: a GET with no redirects, read up to a cap, over a pooled connection per origin. This
module does that and nothing else, with llhttp (``httptools``, the parser aiohttp's C parser also
wraps) doing the parsing; bench/RESULTS.md "A lean HTTP/1.1 client for the fetcher (session 10)" has
the figures.

What it keeps of aiohttp's behaviour (the fetcher's tests are the oracle):

- the SSRF guard at every socket: names through :meth:`GuardedResolver.resolve` (resolve rules,
  blocked answers dropped), IP literals through :meth:`GuardedResolver.check_literal`, and
  ``guard.check(ip, port)`` on the very address each socket then connects to;
- the same request headers in the same order (Host, User-Agent, the caller's, Accept,
  Accept-Encoding: what aiohttp sent, and what the WARC request record shows);
- limits: status line 8190 bytes, a header field (name + value) 16 KB, 128 header fields (aiohttp's
  ``max_line_size``, the fetcher's ``max_field_size``, ``max_headers``); a broken answer is a
  :class:`ProtocolError`;
- Content-Encoding gzip, deflate (zlib or raw) and br decoded, the body cap applied to the decoded
  bytes (a bomb stops at the cap); chunked, Content-Length and read-to-close bodies, 1xx answers
  skipped, no body for 204/304;
- timeouts: connect (DNS, TCP and TLS together), read (no data for ``read_timeout`` while an answer
  is awaited or read; one timer per connection whose deadline data moves, not a timer per chunk);
- keep-alive per origin, idle connections closed after ``idle_timeout`` and bounded in number; a
  connection whose answer was not read to its end is closed, never reused; a GET on a reused
  connection that the server closed before any answer is sent again once on a new connection
  (RFC 9112 section 9.3.1, as aiohttp does), so a server's own keep-alive timeout is not a fetch error.

Errors are :class:`crawl.net.NetError` subclasses carrying the fetch row's code (``connect``,
``connect_timeout``, ``timeout``, ``reset``, ``protocol``), so :func:`crawl.net.classify_error` needs
no list of this module's classes.
"""

from __future__ import annotations

import asyncio
import functools
import re
import socket
import ssl
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable

import brotli
import httptools

from crawl.net import GuardedResolver, NetError
from crawl.url import parse as U
from crawl.warc import _request_target

ACCEPT_ENCODING = "gzip, deflate, br"  # what aiohttp advertised (with brotli installed)
MAX_LINE = 8190  # status line (aiohttp's max_line_size)
MAX_FIELD = 16_384  # one header field, name + value (the fetcher's aiohttp max_field_size)
MAX_HEADERS = 128  # header fields (aiohttp's max_headers)
# bytes of a header block that can satisfy the limits above: more (or a line longer than a field)
# is refused as it comes, since httptools buffers a field until the field ends
MAX_HEAD = MAX_LINE + MAX_HEADERS * (MAX_FIELD + 4) + 4
IDLE_TIMEOUT_S = 15.0  # aiohttp's keepalive_timeout default


class HttpError(NetError):
    """A request failed on the network; ``code`` is the fetch row's error code."""

    code = "protocol"


class ConnectError(HttpError):
    code = "connect"


class ConnectTimeout(HttpError, TimeoutError):
    code = "connect_timeout"


class ReadTimeout(HttpError, TimeoutError):
    code = "timeout"


class Disconnected(HttpError, ConnectionError):
    code = "reset"


class ProtocolError(HttpError):
    code = "protocol"


# a host name the URL model gives for ordinary canonical URLs: no userinfo, port, brackets
_SIMPLE = re.compile(r"(https?)://([a-z0-9-]+(?:\.[a-z0-9-]+)*)(?=[/?#]|$)")


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, request target) of an http(s) URL; the target is the one the WARC
    request record shows (:func:`crawl.warc._request_target`), so the wire and the record agree."""
    m = _SIMPLE.match(url)
    if m is not None:
        scheme, host = m.groups()
        return scheme, host, 443 if scheme == "https" else 80, _request_target(url)
    u = U.parse_url(url)
    if u.scheme not in ("http", "https"):
        raise U.InvalidURL(f"not an http(s) URL: {url}")
    port = u.port if u.port is not None else 443 if u.scheme == "https" else 80
    return u.scheme, u.host, port, (f"{u.path}?{u.query}" if u.query else u.path) or "/"


def _host_header(scheme: str, host: str, port: int) -> str:
    default = 443 if scheme == "https" else 80
    return host if port == default else f"{host}:{port}"


class _Decoder:
    """Content-Encoding of a body, decoded with its output capped (a bomb costs at most the cap)."""

    __slots__ = ("br", "first", "z")

    def __init__(self, encoding: str) -> None:
        self.br = brotli.Decompressor() if encoding == "br" else None
        self.z = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None
        self.first = encoding == "deflate"  # zlib-wrapped or raw: told by the first bytes

    def decode(self, data: bytes, limit: int) -> bytes:
        """Up to ``limit`` decoded bytes of ``data`` (more may come: the caller stops at its cap)."""
        if self.first:
            self.first = False
            # zlib header (RFC 1950) when the first two bytes make a valid one, else raw deflate
            ok = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self.z = zlib.decompressobj(zlib.MAX_WBITS if ok else -zlib.MAX_WBITS)
        try:
            if self.br is not None:
                return self.br.process(data, output_buffer_limit=limit)
            assert self.z is not None
            return self.z.decompress(data, limit)
        except (zlib.error, brotli.error) as exc:
            raise ProtocolError(f"cannot decode the body: {exc}") from None


class Response:
    """One answer: status, reason, raw headers in order (latin-1), and the body read so far.

    :meth:`H1Client.get` returns it when the headers are in; :meth:`read` waits for the body.
    """

    __slots__ = ("body", "cap", "conn", "decoder", "done", "error", "headers", "ip", "keep", "reason",
                 "req_headers", "size", "status", "truncated", "waiter")

    def __init__(self, conn: _Conn, cap: int, req_headers: list[tuple[str, str]]) -> None:
        self.conn = conn
        self.cap = cap
        self.req_headers = req_headers
        self.ip = conn.ip
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.body: list[bytes] = []
        self.size = 0
        self.decoder: _Decoder | None = None
        self.done = False  # the body ended (complete, cut at the cap, or broken)
        self.truncated: str | None = None
        self.error: BaseException | None = None  # before the headers: what get() raises
        self.keep = False  # the connection may serve another request
        self.waiter: asyncio.Future[None] | None = None

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), as aiohttp's ``headers.get``."""
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    async def read(self) -> tuple[bytes, str | None]:
        """(body up to the cap, truncation: None, ``"length"``, ``"disconnect"`` or ``"time"``)."""
        if not self.done:
            self.waiter = self.conn.loop.create_future()
            await self.waiter
        return b"".join(self.body), self.truncated

    def release(self) -> None:
        """Give the connection back: to the pool when the answer was read to its end and the server
        keeps it alive, else closed (an unread or partial body must never reach the next request)."""
        conn = self.conn
        if conn.resp is not self:
            return
        conn.resp = None
        conn.read_deadline = None
        if self.done and self.keep and self.truncated is None and not conn.closed:
            conn.client._put(conn)
        else:
            conn.close()


class _Conn(asyncio.Protocol):
    """One connection: the transport, its parser, the answer being read, one read timer."""

    def __init__(self, client: H1Client, key: tuple[str, str, int], ip: str) -> None:
        self.client = client
        self.loop = client.loop
        self.key = key
        self.ip = ip
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.resp: Response | None = None
        self.closed = False
        self.idle_since = 0.0
        self.head_bytes = 0  # bytes fed while the current answer's headers were not complete
        self.line_bytes = 0  # of them, the bytes of the line not yet ended
        self.in_head = False
        self.skip = False  # a 1xx answer is being parsed: it is not the response
        self.reason = b""
        self.read_deadline: float | None = None  # loop time the read timeout is due
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        r = self.resp
        if r is None or r.done:  # bytes nobody asked for (after an answer, while idle): broken
            self.close()
            return
        if self.read_deadline is not None:  # data moves the read deadline (the timer follows lazily)
            self.read_deadline = self.loop.time() + self.client.read_timeout
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if not r.done:
                self._end(keep=False)
        except httptools.HttpParserError as exc:
            err = exc.__context__ if isinstance(exc.__context__, HttpError) else ProtocolError(str(exc))
            self._fail(err)
            return
        if r.done:
            if r.truncated == "length":
                self.close()
        elif self.in_head:  # httptools holds a header field until it ends: refuse an endless one early
            self.head_bytes += len(data)
            nl = data.rfind(b"\n")
            self.line_bytes = self.line_bytes + len(data) if nl < 0 else len(data) - nl - 1
            if self.head_bytes > MAX_HEAD or self.line_bytes > MAX_FIELD + 4:
                self._fail(ProtocolError("header block too large"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self.client._forget(self)
        r = self.resp
        if r is None or r.done:
            return
        if r.status == 0 or self.skip:
            self._fail(Disconnected("server disconnected before an answer"))
            return
        # the body ends with the connection: complete when its length is the connection's (no
        # Content-Length, not chunked), else cut short
        framed = r.header("content-length") is not None or "chunked" in (r.header("transfer-encoding") or "").lower()
        self._end(keep=False, truncated="disconnect" if framed else None)

    # -- httptools callbacks --------------------------------------------------------------------
    def on_message_begin(self) -> None:
        r = self.resp
        if r is not None and r.done:  # more after the answer: the connection is not reusable
            r.keep = False
            return
        self.in_head = True
        self.reason = b""
        self.skip = False

    def on_status(self, status: bytes) -> None:
        self.reason += status
        if len(self.reason) > MAX_LINE:
            raise ProtocolError("status line too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        r = self.resp
        if r is None or r.done:
            return
        if len(name) + len(value) > MAX_FIELD:
            raise ProtocolError("header field too long")
        r.headers.append((name.decode("latin-1"), value.decode("latin-1")))
        if len(r.headers) > MAX_HEADERS:
            raise ProtocolError("too many headers")

    def on_headers_complete(self) -> None:
        r = self.resp
        if r is None or r.done:
            return
        status = self.parser.get_status_code()
        self.in_head = False
        self.head_bytes = self.line_bytes = 0
        if 100 <= status < 200 and status != 101:  # an interim answer: the response comes after it
            self.skip = True
            r.headers = []
            return
        r.status = status
        r.reason = self.reason.decode("latin-1").strip()
        enc = r.header("content-encoding")
        if enc:
            enc = enc.lower()
            if enc in ("gzip", "deflate", "br"):
                r.decoder = _Decoder(enc)
        w = r.waiter
        if w is not None and not w.done():
            w.set_result(None)
        r.waiter = None

    def on_body(self, data: bytes) -> None:
        r = self.resp
        if r is None or r.done:
            return
        left = r.cap - r.size
        if r.decoder is not None:
            data = r.decoder.decode(data, left + 1)
        if len(data) > left:
            data = data[:left]
            r.body.append(data)
            r.size += left
            self._end(keep=False, truncated="length")
            return
        if data:
            r.body.append(data)
            r.size += len(data)

    def on_message_complete(self) -> None:
        if self.skip:
            self.skip = False
            return
        r = self.resp
        if r is None or r.done:
            return
        self._end(keep=self.parser.should_keep_alive() and r.status != 101)

    # -- state ----------------------------------------------------------------------------------
    def _end(self, keep: bool, truncated: str | None = None) -> None:
        r = self.resp
        assert r is not None
        r.done = True
        r.keep = keep
        r.truncated = truncated
        self.read_deadline = None
        w = r.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, err: BaseException) -> None:
        """The answer cannot be read on: before its headers ``get`` raises ``err``; after them the
        body is cut (``"time"`` for a read timeout, ``"disconnect"`` otherwise)."""
        r = self.resp
        if r is not None and not r.done:
            if r.status == 0:
                r.error = err
                r.done = True
                w = r.waiter
                if w is not None and not w.done():
                    w.set_result(None)
            else:
                self._end(keep=False, truncated="time" if isinstance(err, ReadTimeout) else "disconnect")
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.client._forget(self)
            if self.transport is not None:
                self.transport.abort()
        self._cancel_timer()

    # -- the read timer: one per connection, moved by a deadline, not re-armed per chunk ---------
    def start_read_timer(self) -> None:
        timeout = self.client.read_timeout
        if not timeout:
            return
        self.read_deadline = when = self.loop.time() + timeout
        if self.timer is None or when < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = when
            self.timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        when = self.read_deadline
        if when is None:  # nothing read since it was set: lapse
            return
        if self.loop.time() < when:  # data came meanwhile: wait for the rest
            self.timer_at = when
            self.timer = self.loop.call_at(when, self._on_timer)
            return
        self._fail(ReadTimeout(f"no data for {self.client.read_timeout} s"))

    def _cancel_timer(self) -> None:
        self.read_deadline = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def _same(conn: _Conn) -> _Conn:
    return conn


class H1Client:
    """Keep-alive HTTP/1.1 GETs for one fetch task: a pool of idle connections per origin.

    ``max_idle`` bounds the idle connections kept in all (the oldest is closed first),
    ``max_idle_per_origin`` per origin; an idle connection older than ``idle_timeout`` is closed.
    """

    def __init__(self, resolver: GuardedResolver, *, user_agent: str, connect_timeout: float | None,
                 read_timeout: float | None, verify_tls: bool = True, max_idle: int = 100,
                 max_idle_per_origin: int = 1, idle_timeout: float = IDLE_TIMEOUT_S) -> None:
        self.loop = asyncio.get_running_loop()
        self.resolver = resolver
        self.user_agent = user_agent
        self.connect_timeout = connect_timeout or None
        self.read_timeout = read_timeout or 0.0
        self.verify_tls = verify_tls
        self.max_idle = max(0, max_idle)
        self.max_idle_per_origin = max(1, max_idle_per_origin)
        self.idle_timeout = idle_timeout
        # origin -> its idle connections (most recent last); all idle ones in release order
        self.idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self.lru: OrderedDict[_Conn, None] = OrderedDict()
        self.conns: set[_Conn] = set()
        self.sweeper: asyncio.TimerHandle | None = None
        self._ssl: ssl.SSLContext | None = None
        self.connects = 0  # connections opened, for stats and tests
        self._ua = ("User-Agent", user_agent)
        self._head_ua = f"\r\nUser-Agent: {user_agent}\r\n"
        self._tail = f"Accept: */*\r\nAccept-Encoding: {ACCEPT_ENCODING}\r\n\r\n"

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            if self.verify_tls:
                ctx = ssl.create_default_context()
            else:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                ctx.set_default_verify_paths()
            ctx.options |= ssl.OP_NO_COMPRESSION
            self._ssl = ctx
        return self._ssl

    async def get(self, url: str, headers: dict[str, str], cap: int,
                  on_sent: Callable[[], None] | None = None) -> Response:
        """GET ``url`` (no redirects followed) with ``headers`` after Host and User-Agent; return
        when the answer's headers are in (read its body with :meth:`Response.read`, then
        :meth:`Response.release`). ``on_sent`` is called once the request is written."""
        scheme, host, port, target = split_url(url)
        key = (scheme, host, port)
        hh = _host_header(scheme, host, port)
        extra = ""
        for k, v in headers.items():
            if "\r" in v or "\n" in v or "\r" in k or "\n" in k:
                raise ValueError("Newline or carriage return character detected in HTTP header")
            extra += f"{k}: {v}\r\n"
        data = f"GET {target} HTTP/1.1\r\nHost: {hh}{self._head_ua}{extra}{self._tail}".encode()
        req_headers = [("Host", hh), self._ua, *headers.items(), ("Accept", "*/*"),
                       ("Accept-Encoding", ACCEPT_ENCODING)]
        conn = self._take(key)
        reused = conn is not None
        while True:
            if conn is None:
                conn = await self._connect(key)
            r = Response(conn, cap, req_headers)
            conn.resp = r
            conn.in_head = True
            conn.head_bytes = conn.line_bytes = 0
            try:
                assert conn.transport is not None
                conn.transport.write(data)
                if on_sent is not None:
                    on_sent()
                conn.start_read_timer()
                if r.status == 0 and r.error is None:
                    r.waiter = self.loop.create_future()
                    await r.waiter
            except BaseException:
                conn.close()
                raise
            if r.error is None:
                return r
            conn.close()
            # a kept-alive connection the server closed as we reused it (RFC 9112 9.3.1): the GET is
            # sent once more on a new connection, once, as aiohttp did; a new connection's failure
            # is the answer
            if not (reused and isinstance(r.error, Disconnected)):
                raise r.error
            reused = False
            conn = None

    # -- connections ----------------------------------------------------------------------------
    async def _connect(self, key: tuple[str, str, int]) -> _Conn:
        try:
            async with asyncio.timeout(self.connect_timeout):
                return await self._open(key)
        except TimeoutError as exc:
            if isinstance(exc, HttpError):
                raise
            raise ConnectTimeout(f"connect to {key[1]} port {key[2]} timed out") from None

    async def _open(self, key: tuple[str, str, int]) -> _Conn:
        scheme, host, port = key
        resolver = self.resolver
        literal = resolver.check_literal(host, port)  # refuses a blocked literal; None for a name
        bare = host[1:-1] if host.startswith("[") else host
        if literal is not None:
            addrs = [(socket.AF_INET6 if literal.version == 6 else socket.AF_INET, bare, port)]
        else:
            addrs = [(a["family"], a["host"], a["port"]) for a in await resolver.resolve(bare, port, family=0)]
        last: BaseException | None = None
        for family, ip, p in addrs:
            resolver.guard.check(ip, p)  # the address this socket connects to, nothing else
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await self.loop.sock_connect(sock, (ip, p))
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            conn = _Conn(self, key, ip)
            try:
                if scheme == "https":
                    await self.loop.create_connection(functools.partial(_same, conn), sock=sock,
                                                      ssl=self.ssl_context(), server_hostname=bare)
                else:
                    await self.loop.create_connection(functools.partial(_same, conn), sock=sock)
            except OSError as exc:
                sock.close()
                raise ConnectError(f"{host} port {p}: {exc}") from exc
            except BaseException:
                sock.close()
                raise
            self.connects += 1
            self.conns.add(conn)
            return conn
        raise ConnectError(f"cannot connect to {host} port {port}: {last}") from last

    def _take(self, key: tuple[str, str, int]) -> _Conn | None:
        idle = self.idle.get(key)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            self.lru.pop(conn, None)
            if not conn.closed and now - conn.idle_since < self.idle_timeout:
                if not idle:
                    del self.idle[key]
                return conn
            conn.close()
        self.idle.pop(key, None)
        return None

    def _put(self, conn: _Conn) -> None:
        if self.max_idle == 0:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle = self.idle.setdefault(conn.key, [])
        idle.append(conn)
        self.lru[conn] = None
        if len(idle) > self.max_idle_per_origin:
            idle[0].close()
        while len(self.lru) > self.max_idle:
            next(iter(self.lru)).close()
        if self.sweeper is None:
            self.sweeper = self.loop.call_later(self.idle_timeout, self._sweep)

    def _forget(self, conn: _Conn) -> None:
        """A closed connection leaves the pool."""
        self.conns.discard(conn)
        if self.lru.pop(conn, 0) is None:
            idle = self.idle.get(conn.key)
            if idle is not None:
                idle.remove(conn)
                if not idle:
                    del self.idle[conn.key]

    def _sweep(self) -> None:
        """Close idle connections older than the idle timeout; again later while some are left."""
        self.sweeper = None
        cutoff = time.monotonic() - self.idle_timeout
        for conn in list(self.lru):
            if conn.idle_since > cutoff:
                break
            conn.close()
        if self.lru:
            self.sweeper = self.loop.call_later(self.idle_timeout / 2, self._sweep)

    def close(self) -> None:
        if self.sweeper is not None:
            self.sweeper.cancel()
            self.sweeper = None
        for conn in list(self.conns):
            conn.close()


__all__ = ["ACCEPT_ENCODING", "ConnectError", "ConnectTimeout", "Disconnected", "H1Client", "HttpError",
           "ProtocolError", "ReadTimeout", "Response", "split_url"]
