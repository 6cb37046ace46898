"""The fetcher's request call: one GET (no redirects followed) or FTP session, body read up to a cap.

Why apart: what goes over the wire (timeouts, caps, truncation kinds, the peer address) is one
concern; what the answer means is :mod:`crawl.fetch.outcome`'s.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass
from typing import Any

import aiohttp

from crawl.errors import FetchStopped
from crawl.fetch.scheduler import _Host, _Slot
from crawl.ftp import FtpLimits, fetch_ftp

FTP_PREFIX = "ftp://"  # URLs the ftp handler (crawl.ftp) fetches
_CHUNK = 65_536


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
