"""Slow-drip hosts for the simulated web: answers that keep every read timeout happy and never end.

Served only when the server is started with ``--drip-hosts``. Each drips ``DRIP_BYTES`` bytes every
``DRIP_EVERY_S`` seconds (well inside any per-read timeout), up to the server's ``--stall-seconds``,
so only a total per-request deadline stops a client:

- ``drip-body.sim.test/drip.html``: 200 with its headers at once (``Content-Length: DRIP_LENGTH``, an
  ``ETag`` and a ``Last-Modified``; a matching ``If-None-Match`` gets 304), then the body a few bytes
  at a time. A client that stores what it had at its deadline as the page, with that ETag, later
  revalidates a page it never had.
- ``drip-head.sim.test/drip.html``: the status line at once, then header lines a few bytes at a time,
  never ending the header block (written to the socket directly, so the access log's status is 499).
- ``drip-robots.sim.test/robots.txt``: 200, ``User-agent: *`` and comments dripped, its one rule
  ``Disallow: /private/`` last: a client that parses the cut file as the whole robots.txt fetches
  ``/private/secret.html``.

Every other path of these hosts answers at once: ``/robots.txt`` 404 (drip-body, drip-head), ``/``
links ``DRIP_PAGES`` (``/drip.html`` and three small pages, ``/ok-<i>.html``) and
``/private/secret.html``, each small page a few hundred bytes. The access log's ``end`` of a dripped
request is when the client went away (the handler is cancelled then) or the stall bound.
"""

from __future__ import annotations

import asyncio
import time
from html import escape

from aiohttp import web

DRIP_HOSTS = ("drip-body.sim.test", "drip-head.sim.test", "drip-robots.sim.test")
DRIP_BYTES = 8  # bytes per drop
DRIP_EVERY_S = 0.2  # seconds between drops
DRIP_LENGTH = 20_000  # drip-body's declared Content-Length (never reached at 40 B/s)
DRIP_ETAG = '"drip-1"'
DRIP_PAGES = ("/drip.html", "/ok-1.html", "/ok-2.html", "/ok-3.html")
SECRET = "/private/secret.html"


def drip_robots_txt() -> bytes:
    """drip-robots' robots.txt: its one rule after ~2 KB of comments (50 s at the drip rate)."""
    return b"User-agent: *\n" + b"# slowly\n" * 230 + b"Disallow: /private/\n"


class DripSite:
    """Request handling for the drip hosts (see the module docstring); ``stall_s`` bounds a drip."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s

    @staticmethod
    def owns(hostname: str) -> bool:
        return hostname in DRIP_HOSTS

    async def handle(self, request: web.Request, hostname: str, path: str) -> web.StreamResponse:
        if hostname == "drip-robots.sim.test" and path == "/robots.txt":
            body = drip_robots_txt()
            return await self._drip_body(request, body, {"Content-Type": "text/plain",
                                                         "Content-Length": str(len(body))})
        if path == "/robots.txt":
            return web.Response(status=404, text="no robots.txt")
        if path == "/drip.html" and hostname == "drip-head.sim.test":
            return await self._drip_head(request)
        if path == "/drip.html" and hostname != "drip-robots.sim.test":
            if request.headers.get("If-None-Match") == DRIP_ETAG:
                return web.Response(status=304, headers={"ETag": DRIP_ETAG})
            body = (b"<html><head><title>drip</title></head><body><p>" + b"drop " * DRIP_LENGTH)[:DRIP_LENGTH]
            return await self._drip_body(request, body, {
                "Content-Type": "text/html", "Content-Length": str(DRIP_LENGTH), "ETag": DRIP_ETAG,
                "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT"})
        if path == "/":
            links = "".join(f'<li><a href="{p}">{p}</a></li>' for p in (*DRIP_PAGES, SECRET))
            return _html(hostname, f"<ul>{links}</ul>")
        if path in DRIP_PAGES or path == SECRET:
            return _html(path, f"<p>{escape(path)} of {escape(hostname)}</p>")
        return web.Response(status=404, text="not here")

    async def _drip_body(self, request: web.Request, body: bytes, headers: dict[str, str]) -> web.StreamResponse:
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        request["sim_status"] = 200
        sent = 0
        end = time.monotonic() + self.stall_s
        try:
            while sent < len(body) and time.monotonic() < end:
                await resp.write(body[sent:sent + DRIP_BYTES])
                sent = min(len(body), sent + DRIP_BYTES)
                request["sim_bytes"] = sent
                await asyncio.sleep(DRIP_EVERY_S)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    async def _drip_head(self, request: web.Request) -> web.StreamResponse:
        """The status line, then ``X-Drip-<n>: ...`` header lines a few bytes at a time, never the
        blank line; at the stall bound the connection is dropped (the handler is then cancelled)."""
        t = request.transport
        if t is None:
            return web.Response(status=500)
        t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n")
        head = b"".join(b"X-Drip-%d: %s\r\n" % (i, b"d" * 20) for i in range(2000))
        end = time.monotonic() + self.stall_s
        sent = 0
        while time.monotonic() < end and sent < len(head):
            t = request.transport
            if t is None or t.is_closing():
                break
            t.write(head[sent:sent + DRIP_BYTES])
            sent += DRIP_BYTES
            await asyncio.sleep(DRIP_EVERY_S)
        if t is not None:
            t.abort()
        await asyncio.sleep(5)  # cancelled when the connection is lost
        return web.Response(status=500)


def _html(title: str, body: str) -> web.Response:
    return web.Response(text=f"<html><head><title>{escape(title)}</title></head><body>{body}</body></html>",
                        content_type="text/html")


__all__ = ["DRIP_BYTES", "DRIP_ETAG", "DRIP_EVERY_S", "DRIP_HOSTS", "DRIP_LENGTH", "DRIP_PAGES", "SECRET",
           "DripSite", "drip_robots_txt"]
