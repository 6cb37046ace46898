"""The ``ftp`` protocol handler: one anonymous FTP session per URL, through the SSRF guard.

Why a session per URL: politeness is the fetcher's (one request in flight per server, the delay
between request starts, backoff), and one control connection per fetch makes "one request" mean the
same for FTP as for HTTP: the server sees one session at a time from us, sessions ``delay`` apart.
The cost (login per file) is what a polite crawler should pay anyway. aioftp (PyPI, asyncio) is the
client: it runs in the fetcher's event loop like aiohttp.

What the fetcher gets (:class:`FtpResult`) is shaped like an HTTP answer so its outcome logic is the
same for both protocols: FTP replies map to the HTTP status a crawler would act on the same way

* a file (``RETR``) -> 200, its bytes, ``Content-Type`` guessed from the name (:mod:`mimetypes`);
* a directory (the URL path ends in ``/``) -> 200, the raw ``MLSD`` listing (``LIST`` when the server
  has no MLSD) typed :data:`LISTING_MIME`; :func:`parse_listing` turns it into links, so a tree is
  crawled like a site;
* ``RETR`` refused on a path that is a directory (``CWD`` succeeds) -> 301 to the path with ``/``;
* 550/553 (no such file, not allowed) -> 404; 530/532 (login refused) -> 403;
* 421 and other 4xx (service unavailable, transient) -> 503: the fetcher backs the server off;
* any other 5xx -> 400 (permanent: an ``http_error`` row).

Limits: the connect and read timeouts of the config apply to every socket, the total timeout to the
whole session; a body over the cap is cut: the data connection is closed after ``cap`` bytes (the
server logs the transfer as incomplete) and the capture is marked ``truncated="length"``.

The guard (:mod:`crawl.net`): the host is resolved by the fetcher's :class:`~crawl.net.GuardedResolver`
(a ``--resolve`` rule's target, else DNS without refused addresses) and the control connection's
``IP:PORT`` passes :meth:`~crawl.net.AddressGuard.check`, so loopback is reachable only through a
rule, as for HTTP. Data connections go to the control connection's address only: the address a
``PASV`` reply names is ignored (aioftp's default, and curl's ``--ftp-skip-pasv-ip``), and any other
address is refused, so a server cannot point the data connection elsewhere (the FTP bounce / SSRF).

Robots: FTP has no robots.txt. An ``ftp`` origin is allowed everything unless the crawl's own rules
deny it (``allowed_schemes`` must list ``ftp``; ``allowed_hosts`` scope and the URL filters apply as
for pages); no robots request and no sitemap request are made; ``politeness_delay_s`` is the gap.
"""

from __future__ import annotations

import asyncio
import mimetypes
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote, unquote

import aioftp

from crawl import url as U
from crawl.net import GuardedResolver, NetError, PrivateAddressError

SCHEME = "ftp"
LISTING_MIME = "text/x-ftp-listing"  # parameter format=mlsd|list says which listing it is
ANONYMOUS_USER = "anonymous"
ANONYMOUS_PASSWORD = "recrawl@"  # RFC 1635: an anonymous password identifies the client
_CHUNK = 65_536


class FtpError(NetError):
    """A session failed below the FTP replies (connect, reset, protocol); ``code`` is the row's error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class FtpLimits:
    """The fetch limits a session obeys (the config's, see :meth:`from_config`)."""

    connect_timeout_s: float
    read_timeout_s: float
    total_timeout_s: float
    max_body_bytes: int

    @classmethod
    def from_config(cls, cfg: Any, cap: int | None = None) -> FtpLimits:
        return cls(cfg.connect_timeout_s, cfg.read_timeout_s, cfg.total_timeout_s,
                   cfg.max_body_bytes if cap is None else cap)


@dataclass
class FtpResult:
    """One FTP fetch as the fetcher's outcome logic reads it (HTTP-equivalent ``status``)."""

    status: int
    reason: str  # the FTP reply that decided it, e.g. "226 Transfer complete."
    content_type: str | None
    body: bytes
    truncated: str | None
    ip: str | None
    location: str | None = None  # 301 only: the directory URL with its trailing slash
    is_listing: bool = False


class _GuardedClient(aioftp.Client):
    """aioftp's client with the guard at every connection it opens.

    The control connection's ``IP:PORT`` must pass the guard; a data connection must go to the
    control connection's address (aioftp gives it that address unless told to trust PASV's)."""

    def __init__(self, resolver: GuardedResolver, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._guard = resolver.guard

    async def _open_connection(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._stream is None:
            self._guard.check(host, port)
        elif host != self.server_host:
            raise PrivateAddressError(f"refusing data connection to {host} port {port}: "
                                      f"not the control connection's address {self.server_host}")
        return await super()._open_connection(host, port)


def _http_status(code: str) -> int:
    """The HTTP status the fetcher should treat an FTP failure reply like (module docstring)."""
    if code in ("550", "551", "553"):
        return 404
    if code in ("530", "532"):
        return 403
    if code.startswith("4"):
        return 503
    return 400


def _reply(exc: aioftp.StatusCodeError) -> tuple[str, str]:
    code = str(exc.received_codes[-1]) if exc.received_codes else "000"
    info = " ".join(str(i) for i in (exc.info or []))
    return code, f"{code} {info}".strip()


async def _target(url: U.URL, resolver: GuardedResolver) -> tuple[str, int]:
    """Where the control connection goes: a resolve rule's target or a guarded DNS answer."""
    port = url.port or 21
    host = url.host.strip("[]")
    resolver.check_literal(url.host, port)
    results = await resolver.resolve(host, port)
    if not results:
        raise FtpError("dns", f"{host}: no addresses")
    r = results[0]
    return str(r["host"]), int(r["port"]) or port


async def _read_capped(stream: Any, cap: int) -> tuple[bytes, bool]:
    """Up to ``cap`` bytes of a data stream; True when there was more (the caller cuts the transfer)."""
    body = bytearray()
    while True:
        chunk = await stream.read(min(_CHUNK, cap + 1 - len(body)))
        if not chunk:
            return bytes(body), False
        body += chunk
        if len(body) > cap:
            del body[cap:]
            return bytes(body), True


async def _session(url: U.URL, limits: FtpLimits, resolver: GuardedResolver) -> FtpResult:
    ip, port = await _target(url, resolver)
    client = _GuardedClient(resolver, socket_timeout=limits.read_timeout_s,
                            connection_timeout=limits.connect_timeout_s)
    path = unquote(url.path) or "/"
    try:
        try:
            await client.connect(ip, port)
        except PrivateAddressError:
            raise
        except (OSError, TimeoutError) as exc:
            code = "connect_timeout" if isinstance(exc, TimeoutError) else "connect"
            raise FtpError(code, f"{ip}:{port}: {exc}") from exc
        try:
            await client.login(ANONYMOUS_USER, ANONYMOUS_PASSWORD)
            if path.endswith("/"):
                return await _listing(client, path, ip, limits.max_body_bytes)
            return await _retrieve(client, url, path, ip, limits.max_body_bytes)
        except aioftp.StatusCodeError as exc:
            code, reason = _reply(exc)
            return FtpResult(_http_status(code), reason, None, b"", None, ip)
    finally:
        await _close(client)


async def _retrieve(client: _GuardedClient, url: U.URL, path: str, ip: str, cap: int) -> FtpResult:
    try:
        stream = await client.download_stream(path)
    except aioftp.StatusCodeError as exc:
        code, reason = _reply(exc)
        if code == "550":  # a directory cannot be retrieved: send the crawler to its listing
            try:
                await client.change_directory(path)
            except aioftp.StatusCodeError:
                return FtpResult(404, reason, None, b"", None, ip)
            return FtpResult(301, reason, None, b"", None, ip,
                             location=url.href.split("#", 1)[0].split("?", 1)[0] + "/")
        raise
    body, over = await _read_capped(stream, cap)
    ctype = mimetypes.guess_type(PurePosixPath(path).name)[0] or "application/octet-stream"
    if over:
        await _cut(stream, client)
        return FtpResult(200, "transfer cut at the body cap", ctype, body, "length", ip)
    await stream.finish()
    return FtpResult(200, "226 Transfer complete", ctype, body, None, ip)


async def _listing(client: _GuardedClient, path: str, ip: str, cap: int) -> FtpResult:
    fmt = "mlsd"
    try:
        stream = await client.get_stream(f"MLSD {path}", "1xx")
    except aioftp.StatusCodeError as exc:
        if not exc.received_codes or not exc.received_codes[-1].matches("50x"):
            raise
        fmt = "list"
        stream = await client.get_stream(f"LIST {path}", "1xx")
    body, over = await _read_capped(stream, cap)
    ctype = f"{LISTING_MIME}; format={fmt}"
    if over:
        await _cut(stream, client)
        return FtpResult(200, "listing cut at the body cap", ctype, body, "length", ip, is_listing=True)
    await stream.finish()
    return FtpResult(200, "226 Listing complete", ctype, body, None, ip, is_listing=True)


async def _cut(stream: Any, client: _GuardedClient) -> None:
    """Stop a transfer at the cap: close the data connection, then read the server's 426/226."""
    stream.close()
    try:
        async with asyncio.timeout(2.0):
            await client.command(None, ("2xx", "4xx"), "1xx")
    except Exception:  # noqa: BLE001 - the session ends next anyway
        pass


async def _close(client: _GuardedClient) -> None:
    """QUIT politely when the control connection is up, else just drop it."""
    if client._stream is None:
        return
    try:
        async with asyncio.timeout(2.0):
            await client.quit()
    except Exception:  # noqa: BLE001 - closing never fails a fetch
        pass
    finally:
        client.close()


async def fetch_ftp(url: str, limits: FtpLimits, resolver: GuardedResolver) -> FtpResult:
    """Fetch one ``ftp://`` URL in its own anonymous session (see the module docstring).

    Raises :class:`~crawl.net.NetError` subclasses for failures below FTP replies (``dns``,
    ``private_address``, ``connect``, ``connect_timeout``, ``reset``) and :class:`TimeoutError`
    when the session outlasts ``limits.total_timeout_s``; the fetcher classifies them like HTTP's.
    """
    u = U.parse_url(url, schemes=(SCHEME,))
    try:
        async with asyncio.timeout(limits.total_timeout_s):
            return await _session(u, limits, resolver)
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        raise FtpError("reset", f"{url}: {exc}") from exc


# --- directory listings -> links -------------------------------------------------------------------

def listing_links(url: str, payload: bytes, fmt: str = "mlsd") -> list[str]:
    """Absolute URLs of the entries of a directory listing (directories with a trailing ``/``).

    Lines are parsed by aioftp's own parsers (MLSD facts, or ``ls``-style/Windows ``LIST`` lines);
    ``.``/``..`` and lines it cannot parse are skipped. Names are percent-encoded path segments.
    """
    base = url.split("#", 1)[0].split("?", 1)[0]
    if not base.endswith("/"):
        base += "/"
    parser = aioftp.Client()
    out: list[str] = []
    for line in payload.splitlines():
        if not line.strip():
            continue
        try:
            name, info = (parser.parse_mlsx_line(line) if fmt == "mlsd"
                          else parser.parse_list_line(line + b"\r\n"))
        except Exception:  # noqa: BLE001 - a line we cannot read is skipped, not the listing
            continue
        n = str(name)
        kind = info.get("type")
        if n in (".", "..") or kind in ("cdir", "pdir") or "/" in n:
            continue
        out.append(base + quote(n, safe="") + ("/" if kind == "dir" else ""))
    return out


def parse_listing(url: str, payload: bytes, headers: Any) -> Any:
    """Parser of :data:`LISTING_MIME` (registered with :func:`crawl.parse.register_parser`): the
    entries become ``a`` links; the text is the entry names (so a listing has a fingerprint)."""
    from crawl.parse import Link, ParsedDoc

    ct = headers.get("content-type", "") if hasattr(headers, "get") else ""
    fmt = "list" if "format=list" in ct.replace(" ", "").lower() else "mlsd"
    links = listing_links(url, payload, fmt)
    names = [unquote(u.rstrip("/").rsplit("/", 1)[-1]) for u in links]
    return ParsedDoc(title=U.parse_url(url, schemes=(SCHEME,)).path, text="\n".join(names),
                     links=[Link(u, "a", False) for u in links], mime_detected=LISTING_MIME)


def _register() -> None:
    from crawl.parse import register_parser

    register_parser(LISTING_MIME, parse_listing)


_register()  # imported by crawl.parse as a built-in parser module (its _BUILTIN_MODULES)


__all__ = ["LISTING_MIME", "SCHEME", "FtpError", "FtpLimits", "FtpResult", "fetch_ftp", "listing_links",
           "parse_listing"]
