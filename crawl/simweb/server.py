"""The simulated web over HTTP: one aiohttp app on 127.0.0.1 serving every virtual host.

The ``Host`` header picks the virtual host (case-insensitive, port ignored); an unknown host gets an
index of hosts. ``/_sim/`` on any host is the control surface (clock, stats, access-log flush), never linked from pages.
Everything slow or endless (robots timeout, slowloris stall, endless body, huge body) is bounded in time,
stops when the client goes away, and is cancelled by a clean shutdown, so a test can never hang on it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import zlib
from email.utils import formatdate, parsedate_to_datetime
from xml.sax.saxutils import escape as xml_escape

import numpy as np
from aiohttp import web

from crawl.simweb import model as M
from crawl.simweb.accesslog import AccessLog
from crawl.simweb.clock import VirtualClock
from crawl.simweb.drip import DripSite
from crawl.simweb.origins import IPV6_LITERAL, OriginBait
from crawl.simweb.render import Renderer, _iso, _png
from crawl.simweb.ssrf import SsrfSite

TRAP_PREFIXES = ("/calendar", "/rep/", "/more/", "/session/", "/facets")
SITEMAP_CHUNK = 20


def lookup_key(path: str, query: str) -> str:
    """The model path a request means: session path parameters and tracking query parameters dropped."""
    if ";" in path:
        path = path.split(";", 1)[0]
    if query:
        kept = [kv for kv in query.split("&") if kv and kv.split("=", 1)[0].lower() not in M.TRACKING]
        if kept:
            return path + "?" + "&".join(kept)
    return path


def page_of_request(model: M.Model, host: str, raw_path: str) -> int | None:
    """The page the server answers a request for (its Host and raw path, as the access log records
    them) with: its own lookup, so every spelling of a page (tracking and session parameters) is one
    page; None for an unknown host or path. The oracle tests and audits map the log with."""
    h = model.host_of(host)
    if h is None:
        return None
    path, _, query = raw_path.partition("?")
    return model.page_at(h, lookup_key(path, query))


def host_of_authority(authority: str) -> str:
    """The host of a ``Host`` header (lower-case): port and trailing dot dropped, an IPv6 literal
    kept whole in its brackets (``[::1]:8080`` -> ``[::1]``, not ``[``)."""
    if authority.startswith("["):
        end = authority.find("]")
        return authority[:end + 1] if end > 0 else authority
    return authority.split(":", 1)[0].rstrip(".")


def _redirect(status: int, location: str) -> web.Response:
    return web.Response(status=status, headers={"Location": location}, text=f"moved to {location}")


def _http_date(t: float) -> str:
    return formatdate(t, usegmt=True)


class SimServer:
    """Request handling over a :class:`~crawl.simweb.model.Model`; ``app`` is the aiohttp application."""

    def __init__(self, model: M.Model, clock: VirtualClock | None = None, access_log: AccessLog | None = None,
                 stall_s: float = 120.0, robots_timeout_s: float = 60.0, slow_s: float = 3.0,
                 canary_port: int | None = None, origin_bait: bool = False, spa_hosts: int = 0,
                 render_cache_mb: int = 256, drip_hosts: bool = False, log_conditional: bool = False):
        self.m = model
        # log the request's If-None-Match / If-Modified-Since (``inm``/``ims``): the oracle of conditional GET
        self.log_conditional = log_conditional
        # slow-drip hosts (crawl.simweb.drip), only when asked for
        self.drip = DripSite(stall_s) if drip_hosts else None
        self.origin_bait = origin_bait
        self.bait: OriginBait | None = None  # built by set_port() once the listening port is known
        # SSRF bait hosts (crawl.simweb.ssrf), only when a test runs a canary on that port
        self.ssrf = SsrfSite(canary_port, model.seed_urls(3)) if canary_port else None
        self.clock = clock or VirtualClock()
        self.log = access_log or AccessLog(None)
        self.renderer = Renderer(model, cache_bytes=render_cache_mb << 20)
        # script-built hosts (crawl.simweb.spa), only when asked for: the model's pages stay as they are
        self.spa = None
        if spa_hosts > 0:
            from crawl.simweb.spa import SpaSite

            self.spa = SpaSite(model, spa_hosts, canary_port)
            self.renderer.extra_links = self.spa.inbound
        self.stall_s = stall_s
        self.robots_timeout_s = robots_timeout_s
        self.slow_s = slow_s
        self.in_flight: dict[str, int] = {}
        self.host_requests: dict[int, int] = {}
        self.request_no = 0
        self.by_status: dict[int, int] = {}
        self.started = time.time()
        self._robots: dict[int, bytes | None] = {}
        self._bomb: bytes | None = None
        self.refresh_versions(self.clock.now())
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    def set_port(self, port: int) -> None:
        """The port the server listens on (known after binding): the origin bait links to it."""
        if self.origin_bait:
            good = [(h.name, [self.m.url(p)[len(h.base):] or "/" for p in self.sitemap_pages(h)[:8].tolist()])
                    for h in self.m.good_hosts()]
            self.bait = OriginBait(port, good)

    # ---- the one entry point: bookkeeping around dispatch ----------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        start = time.time()
        authority = (request.headers.get("Host") or "").strip().lower()
        host = host_of_authority(authority)
        self.in_flight[host] = n = self.in_flight.get(host, 0) + 1
        self.request_no += 1
        request["sim_no"] = self.request_no
        resp: web.StreamResponse | None = None
        status = 0
        try:
            resp = await self.dispatch(request, host)
            status = resp.status
            if not resp.prepared:
                await resp.prepare(request)
                await resp.write_eof()
            return resp
        except asyncio.CancelledError:
            # client went away or shutdown: the status already sent, else nginx's 499
            status = request.get("sim_status", 499)
            raise
        finally:
            self.in_flight[host] -= 1
            nbytes = request.get("sim_bytes")
            if nbytes is None:  # body bytes only (aiohttp's body_length counts the headers too)
                body = getattr(resp, "body", None) if resp is not None and request.method != "HEAD" else None
                nbytes = len(body) if isinstance(body, (bytes, bytearray)) else 0
            self.by_status[status] = self.by_status.get(status, 0) + 1
            sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
            record = {"host": host, "authority": authority, "path": request.raw_path,
                      "addr": sock[0] if sock else None, "start": start, "end": time.time(),
                      "status": status, "bytes": nbytes, "in_flight": n, "method": request.method,
                      "user_agent": request.headers.get("User-Agent", "")}
            if self.log_conditional:
                record["inm"] = request.headers.get("If-None-Match")
                record["ims"] = request.headers.get("If-Modified-Since")
            self.log.write(record)

    async def dispatch(self, request: web.Request, hostname: str) -> web.StreamResponse:
        raw = request.raw_path
        path, _, query = raw.partition("?")
        if path.startswith("/_sim/"):
            return await self.control(request, path)
        if self.spa is not None and self.spa.owns(hostname):
            return self.spa.handle(hostname, path, query)
        if self.drip is not None and self.drip.owns(hostname):
            return await self.drip.handle(request, hostname, path)
        if self.ssrf is not None and self.ssrf.owns(hostname):
            return self.ssrf.handle(hostname, path)
        if self.bait is not None:
            if self.bait.owns(hostname):
                return self.bait.handle(hostname, path)
            if hostname == IPV6_LITERAL and self.bait.alias:
                hostname = self.bait.alias
        host = self.m.host_of(hostname)
        if host is None:
            return self.index()
        if path in ("/robots.txt", "/robots-moved.txt"):
            return await self.robots(request, host, path)
        if path == "/sitemap.xml" or (path.startswith("/sitemap-") and path.endswith(".xml")):
            return self.sitemap(host, path)
        if host.kind == "hostile":
            if path.startswith("/fault/"):
                return await self.fault(request, host, path)
            early = await self.hostile_mode(host)
            if early is not None:
                return early
        if host.kind == "trap" and path.startswith(TRAP_PREFIXES):
            from crawl.simweb.traps import trap_page
            return web.Response(body=trap_page(self.m, host, path, query), content_type="text/html",
                                charset="utf-8")
        pid = self.m.page_at(host, lookup_key(path, query))
        if pid is None:
            return web.Response(status=404, text=f"<html><body><h1>Not found</h1><p>{xml_escape(path)}</p>"
                                "</body></html>", content_type="text/html")
        return self.page(request, host, pid)

    # ---- pages -----------------------------------------------------------------------------------------
    def refresh_versions(self, now: float) -> None:
        """Version, last and next change of every page at ``now``, in one vectorised pass.

        A per-page query walks ~25 tree levels in NumPy (~2 ms); the batch costs ~10 µs per page and the
        answer stays valid until the page's next change, so it is redone only when the clock jumps.
        """
        v, last, nxt = self.m.version_info(np.arange(self.m.n_pages), now)
        self._v, self._last, self._next = v.tolist(), last.tolist(), nxt.tolist()
        self._next_np = nxt

    def version(self, pid: int, now: float) -> tuple[int, float, float]:
        v, last, nxt = self._v[pid], self._last[pid], self._next[pid]
        if (now >= last or v == 0) and now < nxt:
            return v, last, nxt
        # this page changed since the last pass, so others may have too (fast clock): refresh all stale
        # pages in one vectorised call instead of one ~2 ms call per page
        stale = np.flatnonzero(self._next_np <= now)
        if not (stale == pid).any():  # the clock went backwards for this page
            stale = np.append(stale, pid)
        va, la, na = self.m.version_info(stale, now)
        self._next_np[stale] = na
        for p, a, b, c in zip(stale.tolist(), va.tolist(), la.tolist(), na.tolist(), strict=True):
            self._v[p], self._last[p], self._next[p] = a, b, c
        return self._v[pid], self._last[pid], self._next[pid]

    def page(self, request: web.Request, host: M.Host, pid: int) -> web.StreamResponse:
        now = self.clock.now()
        v, last, _ = self.version(pid, now)
        r = self.renderer.get(pid, v, last)
        headers = {"Content-Type": r.content_type}
        if host.conditional:
            etag = ('W/' if r.noisy else "") + f'"{int(self.m.content[pid]):x}-{v}"'
            headers["ETag"] = etag
            headers["Last-Modified"] = _http_date(last)
            inm = request.headers.get("If-None-Match")
            ims = request.headers.get("If-Modified-Since")
            fresh = False
            if inm is not None:
                fresh = etag in [x.strip() for x in inm.split(",")] or inm.strip() == "*"
            elif ims:
                try:
                    fresh = int(last) <= parsedate_to_datetime(ims).timestamp()
                except (TypeError, ValueError):
                    fresh = False
            if fresh:
                return web.Response(status=304, headers=headers)
        return web.Response(body=r.body(request["sim_no"], now), headers=headers)

    async def hostile_mode(self, host: M.Host) -> web.StreamResponse | None:
        """Host-wide misbehaviour of a hostile host's ordinary pages (its /fault/ pages are separate)."""
        n = self.host_requests.get(host.idx, 0)
        self.host_requests[host.idx] = n + 1
        if host.mode == "throttle" and n % 2 == 1:
            retry = "2" if n % 4 == 1 else _http_date(time.time() + 2)
            return web.Response(status=429, text="slow down", headers={"Retry-After": retry})
        if host.mode == "burst503" and n % 10 < 3:
            return web.Response(status=503, text="busy", headers={"Retry-After": "1"})
        if host.mode == "slow":
            await asyncio.sleep(1.0)
        return None

    # ---- robots.txt and sitemaps ----------------------------------------------------------------------
    async def robots(self, request: web.Request, host: M.Host, path: str) -> web.StreamResponse:
        v = host.robots
        if path == "/robots-moved.txt" and v != "redirect":
            return web.Response(status=404, text="no such file")
        if path == "/robots.txt":
            if v == "404":
                return web.Response(status=404, text="no robots here")
            if v == "5xx":
                return web.Response(status=503, text="robots unavailable")
            if v in ("redirect", "redirect-cross"):
                return _redirect(301, host.robots_redirect_to)
            if v == "timeout":
                await self._wait(request, self.robots_timeout_s)
                return web.Response(text="User-agent: *\nDisallow:\n")
        if host.idx not in self._robots:
            text = M.robots_text(self.m, host)
            self._robots[host.idx] = None if text is None else text.encode("utf-8")
        body = self._robots[host.idx] or b""
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    def sitemap_pages(self, host: M.Host) -> np.ndarray:
        ids = np.arange(host.first, host.first + host.count)
        return ids[~np.isin(self.m.page_type[ids], [M.TRAP, M.FAULT])]

    def sitemap(self, host: M.Host, path: str) -> web.StreamResponse:
        if host.sitemap == "none":
            return web.Response(status=404, text="no sitemap")
        now = self.clock.now()
        pages = self.sitemap_pages(host)
        chunks = [pages[i:i + SITEMAP_CHUNK] for i in range(0, pages.size, SITEMAP_CHUNK)]
        # the per-page version cache the page handler uses: recomputing every page's change history on
        # each sitemap request was half of the server's CPU in a crawl that reads sitemaps
        lastmod = {p: self.version(p, now)[1] for p in pages.tolist()}

        def lm(t: float) -> str:
            if host.lastmod == "absent":
                return ""
            return f"<lastmod>{_iso(now if host.lastmod == 'now' else t)}</lastmod>"

        head = '<?xml version="1.0" encoding="UTF-8"?>\n'
        ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        if host.sitemap == "index" and path == "/sitemap.xml":
            items = "".join(
                f"<sitemap><loc>{host.base}/sitemap-{i + 1}.xml</loc>{lm(max(lastmod[p] for p in c.tolist()))}"
                "</sitemap>\n" for i, c in enumerate(chunks))
            return web.Response(text=f"{head}<sitemapindex {ns}>\n{items}</sitemapindex>\n",
                                content_type="application/xml")
        if host.sitemap == "index":
            try:
                chunk = chunks[int(path[len("/sitemap-"):-len(".xml")]) - 1]
            except (ValueError, IndexError):
                return web.Response(status=404, text="no such sitemap")
        elif path == "/sitemap.xml":
            chunk = pages
        else:
            return web.Response(status=404, text="no such sitemap")
        items = "".join(f"<url><loc>{xml_escape(self.m.url(p))}</loc>{lm(lastmod[p])}</url>\n"
                        for p in chunk.tolist())
        return web.Response(text=f"{head}<urlset {ns}>\n{items}</urlset>\n", content_type="application/xml")

    # ---- faults ------------------------------------------------------------------------------------------
    async def _wait(self, request: web.Request, seconds: float) -> None:
        """Sleep up to ``seconds``, returning early when the client has gone away."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = request.transport
            if t is None or t.is_closing():
                return
            await asyncio.sleep(min(0.25, max(0.0, end - time.monotonic())))

    async def bomb(self) -> bytes:
        """A ~130 KB gzip body that inflates to 128 MiB: built once, lazily, in a thread (zlib drops the
        GIL) from 1 MiB pieces, so neither the event loop nor memory notices."""
        if self._bomb is None:
            def build() -> bytes:
                c = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip container
                piece = b" " * (1 << 20)
                return b"".join([c.compress(b"<html><body>"), *(c.compress(piece) for _ in range(128)),
                                 c.flush()])
            self._bomb = await asyncio.to_thread(build)
        return self._bomb

    async def fault(self, request: web.Request, host: M.Host, path: str) -> web.StreamResponse:
        name = path[len("/fault/"):]
        small = "<html><head><title>{0}</title></head><body><p>{0}</p></body></html>"
        if name == "429-seconds":
            return web.Response(status=429, text="too many", headers={"Retry-After": "7"})
        if name == "429-date":
            return web.Response(status=429, text="too many",
                                headers={"Retry-After": _http_date(time.time() + 30)})
        if name == "503":
            return web.Response(status=503, text="unavailable", headers={"Retry-After": "5"})
        if name in ("404", "410", "500"):
            return web.Response(status=int(name), text=small.format(name), content_type="text/html")
        if name.startswith("redirect-chain-"):
            head, _, rest = name.partition("/")
            k = int(rest) if rest.isdigit() else int(head.rsplit("-", 1)[1])
            if k <= 0:
                return web.Response(text=small.format("end of chain"), content_type="text/html")
            return _redirect(301, f"/fault/{head}/{k - 1}")
        if name == "redirect-loop-a":
            return _redirect(302, "/fault/redirect-loop-b")
        if name == "redirect-loop-b":
            return _redirect(302, "/fault/redirect-loop-a")
        if name == "redirect-cross":
            good = self.m.good_hosts()
            return _redirect(301, (good[0].base if good else host.base) + "/")
        if name == "slow":
            await asyncio.sleep(self.slow_s)
            return web.Response(text=small.format("slow"), content_type="text/html")
        if name == "stall-accept":
            await self._wait(request, self.stall_s)
            return web.Response(text=small.format("late"), content_type="text/html")
        if name == "stall":
            resp = web.StreamResponse(headers={"Content-Type": "text/html", "Content-Length": "100000"})
            await resp.prepare(request)
            request["sim_status"] = 200
            await resp.write(b"<html><body><p>")
            request["sim_bytes"] = 15
            await self._wait(request, self.stall_s)
            return resp
        if name in ("endless", "huge"):
            return await self._stream(request, name)
        if name == "switching-protocols":  # a final 101 to a plain GET (not linked from pages: not in FAULTS)
            return web.Response(status=101, headers={"Upgrade": "websocket", "Connection": "Upgrade"})
        if name == "gzip-bomb":
            return web.Response(body=await self.bomb(), headers={"Content-Type": "text/html",
                                                           "Content-Encoding": "gzip"})
        if name == "wrong-type-html":
            return web.Response(body=_png(self.m.params.seed, 0, 0), headers={"Content-Type": "text/html"})
        if name == "wrong-type-image":
            return web.Response(body=small.format("really html").encode(), headers={"Content-Type": "image/jpeg"})
        if name == "reset":
            resp = web.StreamResponse(headers={"Content-Type": "text/html", "Content-Length": "200000"})
            await resp.prepare(request)
            request["sim_status"] = 200
            await resp.write(b"<html><body>" + b"x" * 20000)
            request["sim_bytes"] = 20012
            t = request.transport
            if t is not None:
                sock = t.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                t.abort()
            return resp
        return web.Response(status=404, text="unknown fault")

    async def _stream(self, request: web.Request, name: str) -> web.StreamResponse:
        """Endless chunked body, or a 256 MiB declared body, generated chunk by chunk; bounded in time."""
        chunk = (b"<p>" + b"endless " * 2046 + b"</p>\n") if name == "endless" else b"A" * 65536
        headers = {"Content-Type": "text/html"}
        total = 256 << 20
        if name == "huge":
            headers["Content-Length"] = str(total)
        resp = web.StreamResponse(headers=headers)
        if name == "endless":
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        request["sim_status"] = 200
        sent = 0
        end = time.monotonic() + self.stall_s
        try:
            while time.monotonic() < end and (name == "endless" or sent < total):
                t = request.transport
                if t is None or t.is_closing():
                    break
                piece = chunk if name == "endless" else chunk[: min(len(chunk), total - sent)]
                await resp.write(piece)
                sent += len(piece)
                request["sim_bytes"] = sent
                if name == "endless":
                    await asyncio.sleep(0.005)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    # ---- control and index ------------------------------------------------------------------------------
    async def control(self, request: web.Request, path: str) -> web.StreamResponse:
        if path == "/_sim/clock":
            if request.method == "POST":
                try:
                    data = await request.json()
                    self.clock.set(t=data.get("time"), speed=data.get("speed"))
                    if data.get("time") is not None:
                        self.refresh_versions(self.clock.now())
                except (ValueError, TypeError, AttributeError) as exc:
                    return web.json_response({"error": str(exc)}, status=400)
            return web.json_response(self.clock.state())
        if path == "/_sim/stats":
            return web.json_response({
                "requests": self.request_no, "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
                "in_flight": sum(self.in_flight.values()), "hosts": len(self.m.hosts), "pages": self.m.n_pages,
                "cache_hits": self.renderer.hits, "cache_misses": self.renderer.misses,
                "cache_bytes": self.renderer.cached, "cache_limit_bytes": self.renderer.cache_bytes,
                "uptime_s": time.time() - self.started,
                "clock": self.clock.state(),
                "params": {"seed": self.m.params.seed, "hosts": self.m.params.hosts,
                           "pages_per_host": self.m.params.pages_per_host, "epoch0": self.m.params.epoch0},
            })
        if path == "/_sim/flush" and request.method == "POST":
            # every request answered before this one is in the file when the answer arrives
            self.log.flush()
            return web.json_response({"lines": self.log.lines})
        if path == "/_sim/seeds":
            n = int(request.query.get("n", "5"))
            return web.json_response(self.m.seed_urls(n))
        return web.json_response({"error": "unknown control path"}, status=404)

    def index(self) -> web.StreamResponse:
        items = "".join(f'<li><a href="{h.base}/">{h.name}</a> ({h.kind})</li>\n' for h in self.m.hosts)
        return web.Response(text=f"<html><head><title>simweb hosts</title></head><body><h1>Hosts</h1><ul>\n"
                            f"{items}</ul></body></html>", content_type="text/html")


async def run(model: M.Model, port: int = 0, access_log: str | None = None, bind: str = "127.0.0.1",
              clock: VirtualClock | None = None, stop: asyncio.Event | None = None,
              ready: asyncio.Future | None = None, stall_s: float = 120.0, robots_timeout_s: float = 60.0,
              canary_port: int | None = None, origin_bait: bool = False, spa_hosts: int = 0,
              render_cache_mb: int = 256, drip_hosts: bool = False, log_conditional: bool = False) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when run from the CLI); flush the log at least 1/s.

    ``bind`` may list several addresses (``127.0.0.1,::1``): all listen on one port, the first's.
    """
    log = AccessLog(access_log)
    srv = SimServer(model, clock=clock, access_log=log, stall_s=stall_s, robots_timeout_s=robots_timeout_s,
                    canary_port=canary_port, origin_bait=origin_bait, spa_hosts=spa_hosts,
                    render_cache_mb=render_cache_mb, drip_hosts=drip_hosts, log_conditional=log_conditional)
    runner = web.AppRunner(srv.app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    addresses = [a.strip() for a in bind.split(",") if a.strip()]
    site = web.TCPSite(runner, addresses[0], port)
    await site.start()
    actual = runner.addresses[0][1]
    for extra in addresses[1:]:
        await web.TCPSite(runner, extra, actual).start()
    srv.set_port(actual)
    stop = stop or asyncio.Event()
    if ready is not None:
        ready.set_result((actual, srv))

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.5)
            log.flush()

    task = asyncio.create_task(flusher())
    try:
        await stop.wait()
    finally:
        task.cancel()
        await runner.cleanup()
        log.close()
