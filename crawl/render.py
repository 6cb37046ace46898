"""Selective JavaScript rendering: a headless browser for the pages that need one, after the fetch.

Why selective: a render costs 10-100 times a plain GET (``bench/render_bench.py`` measures it), so
only chosen pages get one: hosts named by ``render_hosts`` (glob patterns), and, with ``render_auto``,
pages the heuristic below calls script-built. A render task runs per fetch-list partition after its
fetch task and before its parse task, on a Dask worker with the resource ``browser=1``; it renders at
most ``render_concurrency`` pages at once in one Chromium (Debian's ``/usr/bin/chromium`` driven by
Playwright; Playwright's own browser download cannot work offline). Its ``render_concurrency`` tabs are
reused page after page (a new page cost 0.2-0.7 s here), with the origin's storage, the cookies and the
page (``about:blank``) cleared between pages; a tab whose render failed is closed.

**The heuristic** (:func:`looks_script_built`), on the fetched HTML: a page is script-built when it
has a script (a ``<script src>`` or an inline script of >= 200 characters) and either

* *little text and an app root*: fewer than ``render_min_words`` visible words (body text without
  script/style/noscript/template) and an element whose id is a framework's mount point (``root``,
  ``app``, ``__next``, ``__nuxt``, ``___gatsby``, ``svelte``, ``app-root``) or an ``<app-root>`` /
  ``[data-reactroot]`` / ``[ng-app]`` element; or
* *a loading placeholder*: an element whose whole text is "Loading", "Loading..." or "Loading…"
  while an inline script writes into the DOM (``innerHTML``, ``appendChild``, ``insertAdjacentHTML``,
  ``createElement``).

Server-rendered pages with an app root (hydrated SSR) have their text already and are not flagged.
Measured on the simulated web's truth (``spa-NNN`` hosts: shells, inline-script pages and SSR
decoys; JS-only link pages on the other hosts): see ``tests/test_render.py`` and the bench.

**Every request the browser makes passes the crawler's rules** (``page.route('**/*')``):

* the page itself is answered from the fetched response (``route.fulfill``), never fetched again;
* only the resource types in ``render_resource_types`` (default document, script, xhr, fetch) are
  allowed: images, CSS, fonts, media, beacons (``ping``), websockets are blocked;
* only the page's own host (with ``render_same_site`` its registered domain) may be asked: third-party
  and tracking requests are blocked;
* robots.txt of the host (this round's answer, else the cached one; unknown = blocked);
* the request is made by *our* aiohttp session, not the browser: the guarded connector and resolver of
  :mod:`crawl.net` (resolve rules, the private-address guard at the socket), redirects not followed
  (a 3xx goes back to the browser, whose next request is routed again), the body capped at
  ``max_body_bytes``, at most ``render_max_requests`` per page;
* per host (per politeness key: also registered domain, or a resolve rule's address) one request in
  flight and ``max(politeness_delay_s, Crawl-delay)`` between the end of one answer and the next start
  (so also between starts); a key's first render request waits one delay after the task starts (its
  fetch task may have just asked it).

The browser itself can reach nothing: it is launched with a proxy that is a socket we bound and never
listen on (``--proxy-bypass-list=<-loopback>`` so loopback goes there too), so whatever escapes the
route (a ``<link rel=preconnect>``, a websocket) meets a refused connection, not the network.

Output: per partition one WARC file ``…-rendered.warc.gz`` holding one ``conversion`` record per
rendered page (the DOM after scripts ran, ``text/html; charset=utf-8``) with ``WARC-Refers-To`` =
the response record's id, and a ``rendered`` table (:data:`RENDER_SCHEMA`); the parse task reads the
conversion record instead of the response for those pages (:func:`apply_rendered`), so rendered text
and links feed the round like any page's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import re
import socket
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pyarrow as pa
import pyarrow.compute as pc
from selectolax.lexbor import LexborHTMLParser

from crawl import records as R
from crawl.config import CrawlConfig, render_enabled, render_globs
from crawl.net import GuardedResolver, NetError, classify_error, guarded_connector
from crawl.robots import RobotsPolicy, policy_from_response
from crawl.url import InvalidURL, parse_url, registered_domain
from crawl.warc import WarcFile, iter_records

log = logging.getLogger(__name__)

RENDER_SUBSET = "rendered"
CONVERSION_CT = "text/html; charset=utf-8"
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-dev-shm-usage")
_GAP_MARGIN_S = 0.002
QUIET_S = 0.15  # a page is done when no request of it has been in progress for this long
# In the page, before its scripts: count fetch/XHR calls in progress (incremented synchronously, so a
# request a script is about to make is never missed, however slowly its route message arrives) and
# stamp the last request or DOM change; the render waits for 0 pending and QUIET_S without a change.
IDLE_INIT_JS = """(() => {
  const rc = window.__recrawl = {pending: 0, last: performance.now()};
  const touch = () => { rc.last = performance.now(); };
  const f = window.fetch;
  if (f) window.fetch = function (...a) {
    rc.pending++; touch();
    return f.apply(this, a).finally(() => { rc.pending--; touch(); });
  };
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...a) {
    rc.pending++; touch();
    this.addEventListener('loadend', () => { rc.pending--; touch(); });
    return send.apply(this, a);
  };
  new MutationObserver(touch).observe(document, {subtree: true, childList: true, attributes: true,
                                                characterData: true});
})();"""
IDLE_JS = "q => window.__recrawl && window.__recrawl.pending === 0 && performance.now() - window.__recrawl.last > q"
_APP_ROOT_IDS = frozenset({"root", "app", "__next", "__nuxt", "___gatsby", "svelte", "app-root"})
_LOADING = re.compile(r"^\s*loading\s*(?:\.\.\.|…)?\s*$", re.IGNORECASE)
_DOM_WRITE = re.compile(r"innerHTML|appendChild|insertAdjacentHTML|createElement")
_HOP_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length", "connection",
                          "keep-alive", "set-cookie"})

# One row per page the render task tried.
RENDER_SCHEMA = pa.schema([
    ("url", pa.string()),
    ("url_hash", pa.uint64()),
    ("host", pa.string()),
    ("reason", pa.string()),             # "config" (render_hosts) | "heuristic"
    ("status", pa.string()),             # "rendered" | "failed"
    ("error", pa.string()),
    ("warc_filename", pa.string()),      # the conversion record (rendered DOM)
    ("warc_record_offset", pa.int64()),
    ("warc_record_length", pa.int64()),
    ("refers_to", pa.string()),          # WARC-Record-ID of the response record it was rendered from
    ("requests", pa.int32()),            # browser requests that went to the network (through our session)
    ("blocked", pa.int32()),             # browser requests refused (type, third party, robots, guard, budget)
    ("render_s", pa.float64()),
])


# ---- which pages --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Signals:
    """What the heuristic saw on a page (kept for tests and the bench)."""

    words: int
    app_root: bool
    scripts: bool
    placeholder: bool

    def script_built(self, min_words: int) -> bool:
        return self.scripts and ((self.words < min_words and self.app_root) or self.placeholder)


def page_signals(body: bytes) -> Signals:
    """The heuristic's inputs from an HTML body (see the module docstring)."""
    if b"<script" not in body and b"<SCRIPT" not in body:
        return Signals(words=-1, app_root=False, scripts=False, placeholder=False)
    tree = LexborHTMLParser(body)
    scripts = False
    writes = False
    for s in tree.css("script"):
        typ = (s.attributes.get("type") or "").lower()
        if "json" in typ or typ == "text/template":
            continue
        if s.attributes.get("src"):
            scripts = True
        else:
            code = s.text(deep=True) or ""
            if len(code) >= 200:
                scripts = True
            if _DOM_WRITE.search(code):
                writes = True
                scripts = scripts or len(code) > 0
    app_root = any(tree.css_first(sel) is not None for sel in ("app-root", "[data-reactroot]", "[ng-app]"))
    if not app_root:
        app_root = any((n.attributes.get("id") or "").lower() in _APP_ROOT_IDS for n in tree.css("[id]"))
    placeholder = writes and any(_LOADING.match(n.text(deep=True) or "") for n in tree.css("div, span, p, main, section")
                                 if len(n.text(deep=True) or "") < 20)
    tree.strip_tags(["script", "style", "noscript", "template"])
    root = tree.body if tree.body is not None else tree.root
    words = len(root.text(separator=" ").split()) if root is not None else 0
    return Signals(words=words, app_root=app_root, scripts=scripts, placeholder=placeholder)


def looks_script_built(body: bytes, min_words: int = 60) -> bool:
    """True when the fetched HTML looks built by script (the documented heuristic)."""
    return page_signals(body).script_built(min_words)


def host_matches(host: str, globs: tuple[str, ...]) -> bool:
    h = host.lower().rstrip(".")
    return any(fnmatch.fnmatchcase(h, g) for g in globs)


def check_browser_workers(client: Any) -> None:
    """Refuse to submit render tasks no worker can run (they would wait for ``browser=1`` forever)."""
    from crawl.config import ConfigError

    workers = client.scheduler_info().get("workers", {})
    if not any((w.get("resources") or {}).get("browser", 0) >= 1 for w in workers.values()):
        raise ConfigError("render_hosts/render_auto: no Dask worker offers the resource browser=1; start "
                          "workers with `--resources browser=1` (they need chromium: make chromium)")


# ---- politeness per host --------------------------------------------------------------------------
class HostGate:
    """One request in flight per host and ``delay`` from the end of an answer to the next start."""

    def __init__(self, delay: float, first_at: float) -> None:
        self.delay = delay
        self.next_at = first_at
        self.lock = asyncio.Lock()

    async def __aenter__(self) -> HostGate:
        await self.lock.acquire()
        wait = self.next_at - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.next_at = time.monotonic() + self.delay + (_GAP_MARGIN_S if self.delay > 0 else 0.0)
        self.lock.release()


def _blackhole() -> socket.socket:
    """A bound loopback socket nobody listens on: Chromium's proxy, so a request that escaped the route
    gets 'connection refused' (the port stays ours while the socket is open)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


@dataclass
class PageResult:
    url: str
    html: str | None = None
    error: str | None = None
    requests: int = 0
    blocked: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (url, resource type, outcome)


@dataclass
class _Job:
    """The page a tab is rendering now (its route handler reads it)."""

    url: str
    page_host: str
    body: bytes
    main_headers: dict[str, str]
    res: PageResult
    main_served: bool = False
    busy: int = 0  # routed requests in progress
    last: float = field(default_factory=time.monotonic)  # end of the last one


@dataclass
class _Tab:
    """A browser context with one page, reused page after page (a new page costs 0.2-0.7 s here)."""

    ctx: Any
    page: Any
    job: _Job | None = None


class BrowserRenderer:
    """One Chromium and one guarded aiohttp session; :meth:`render` renders one fetched page.

    ``robots`` maps an origin (``scheme://host:port``) to its policy; a host with no policy gets no
    request. Use as ``async with BrowserRenderer(cfg, robots) as r: await r.render(...)``.
    """

    def __init__(self, cfg: CrawlConfig, robots: Mapping[str, RobotsPolicy] | None = None) -> None:
        self.cfg = cfg
        self.robots = dict(robots or {})
        self.gates: dict[str, HostGate] = {}
        self.t0 = time.monotonic()
        self.sem = asyncio.Semaphore(cfg.render_concurrency)
        self.allowed_types = frozenset(cfg.render_resource_types)
        self.tabs: list[_Tab] = []  # idle tabs, at most render_concurrency

    async def __aenter__(self) -> BrowserRenderer:
        from playwright.async_api import async_playwright

        cfg = self.cfg
        self.resolver = GuardedResolver(cfg.resolve, allow_private_networks=cfg.allow_private_networks)
        self.session = aiohttp.ClientSession(
            connector=guarded_connector(self.resolver, verify_tls=cfg.verify_tls, limit=64, limit_per_host=1),
            headers={"User-Agent": cfg.user_agent}, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=True,
            timeout=aiohttp.ClientTimeout(total=cfg.total_timeout_s, sock_connect=cfg.connect_timeout_s,
                                          sock_read=cfg.read_timeout_s))
        self.hole = _blackhole()
        self.pw = await async_playwright().start()
        port = self.hole.getsockname()[1]
        self.browser = await self.pw.chromium.launch(
            executable_path=cfg.chromium_path, headless=True,
            args=[*CHROMIUM_ARGS, f"--proxy-server=http://127.0.0.1:{port}", "--proxy-bypass-list=<-loopback>"])
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.browser.close()
            await self.pw.stop()
        finally:
            await self.session.close()
            await self.resolver.close()
            self.hole.close()

    def _gate(self, host: str, delay: float) -> HostGate:
        """The gate of the host's politeness key (``politeness_key``: host, registered domain, or the
        address a resolve rule names; other hosts keep their own key here)."""
        key = host
        if self.cfg.politeness_key == "domain":
            key = registered_domain(host) or host
        elif self.cfg.politeness_key == "ip":
            rule = self.resolver.map.lookup(host)
            key = rule.ip if rule is not None else host
        g = self.gates.get(key)
        if g is None:  # the fetch task may have asked this host just before we started
            g = self.gates[key] = HostGate(delay, self.t0 + delay)
        g.delay = max(g.delay, delay)
        return g

    def _policy(self, origin: str) -> RobotsPolicy | None:
        return self.robots.get(origin)

    def _same_site(self, page_host: str, host: str) -> bool:
        if host == page_host:
            return True
        if not self.cfg.render_same_site:
            return False
        a = registered_domain(page_host)
        return bool(a) and a == registered_domain(host)

    async def render(self, url: str, body: bytes, headers: list[tuple[str, str]]) -> PageResult:
        """Render ``url`` from its fetched ``body`` and response ``headers``; never raises for the page."""
        async with self.sem:
            res = PageResult(url)
            t = time.monotonic()
            tab = self.tabs.pop() if self.tabs else None
            try:
                if tab is None:
                    tab = await self._new_tab()
                await asyncio.wait_for(self._render(tab, url, body, headers, res), self.cfg.render_timeout_s)
                await self._reset(tab)
                self.tabs.append(tab)
                tab = None
            except TimeoutError:
                res.error = "render_timeout"
            except Exception as exc:  # noqa: BLE001 - one page must not fail the partition
                log.warning("render failed for %s: %s", url, exc)
                res.error = f"render: {type(exc).__name__}: {str(exc)[:200]}"
            finally:
                if tab is not None:  # in an unknown state: dropped, a new one is made when needed
                    with contextlib.suppress(Exception):
                        await tab.ctx.close()
            res.seconds = time.monotonic() - t
            return res

    async def _new_tab(self) -> _Tab:
        """A context with one page whose route and idle probe stay for the pages rendered in it."""
        ctx = await self.browser.new_context(service_workers="block", user_agent=self.cfg.user_agent,
                                             accept_downloads=False)
        tab = _Tab(ctx, await ctx.new_page())

        async def handle(route: Any) -> None:
            job = tab.job
            if job is None:  # a late request of a page already taken
                await route.abort("blockedbyclient")
                return
            job.busy += 1
            try:
                await self._route(route, job)
            finally:
                job.busy -= 1
                job.last = time.monotonic()

        await tab.page.route("**/*", handle)
        await tab.page.add_init_script(IDLE_INIT_JS)
        return tab

    async def _reset(self, tab: _Tab) -> None:
        """Leave no state for the next page: storage of the origin, cookies, timers (about:blank)."""
        tab.job = None
        await tab.page.evaluate("() => { try { localStorage.clear(); sessionStorage.clear(); } catch (e) {} }")
        await tab.page.goto("about:blank")
        await tab.ctx.clear_cookies()

    async def _render(self, tab: _Tab, url: str, body: bytes, headers: list[tuple[str, str]],
                      res: PageResult) -> None:
        job = tab.job = _Job(url, parse_url(url).host, body,
                             {k.lower(): v for k, v in headers if k.lower() not in _HOP_HEADERS}, res)
        page = tab.page
        await page.goto(url, wait_until="load")
        # idle: no fetch/XHR pending and no DOM change for QUIET_S in the page, and no routed request
        # (scripts, frames) in progress for QUIET_S here; sooner than Playwright's networkidle (500 ms
        # of network silence) and it also waits for the DOM writes that follow the last answer
        for _ in range(3):
            await page.wait_for_function(IDLE_JS, arg=QUIET_S * 1000, polling=50,
                                         timeout=self.cfg.render_timeout_s * 1000)
            while job.busy > 0 or time.monotonic() - job.last < QUIET_S:
                await asyncio.sleep(0.02)
            if await page.evaluate(IDLE_JS, QUIET_S * 1000):
                break
        res.html = await page.content()

    async def _route(self, route: Any, job: _Job) -> None:
        req = route.request
        res = job.res
        if not job.main_served and req.resource_type == "document" and req.url == job.url:
            job.main_served = True
            res.log.append((req.url, "document", "stored"))
            await route.fulfill(status=200, headers=job.main_headers, body=job.body)
            return
        why = self._refuse(req, job.page_host, res)
        if why is not None:
            res.blocked[why] += 1
            res.log.append((req.url, req.resource_type, why))
            await route.abort("blockedbyclient")
            return
        await self._forward(route, req, job.url, res)

    def _refuse(self, req: Any, page_host: str, res: PageResult) -> str | None:
        """Why the browser's request may not go out (None: it may, through :meth:`_forward`)."""
        if req.resource_type not in self.allowed_types:
            return f"type:{req.resource_type}"
        try:
            u = parse_url(req.url)
        except InvalidURL:
            return "invalid_url"
        if u.scheme not in ("http", "https"):
            return "scheme"
        try:  # an address literal no resolve rule names: the guard's own classifier (crawl.net)
            self.resolver.check_literal(u.host, u.port)
        except NetError as exc:
            return exc.code
        if not self._same_site(page_host, u.host):
            return "third_party"
        if res.requests >= self.cfg.render_max_requests:
            return "budget"
        policy = self._policy(u.origin)
        if policy is None or policy.defer_host:
            return "robots_unknown"
        if not policy.allowed(req.url):
            return "robots"
        return None

    async def _forward(self, route: Any, req: Any, page_url: str, res: PageResult) -> None:
        """Make the browser's request with our session, inside the host's gate, and hand back the answer."""
        u = parse_url(req.url)
        policy = self._policy(u.origin)
        delay = max(self.cfg.politeness_delay_s, (policy.crawl_delay if policy else None) or 0.0)
        res.requests += 1
        send = {"Referer": page_url}
        for k, v in (await req.all_headers()).items():
            if k.lower() in ("accept", "content-type", "accept-language"):
                send[k] = v
        cap = self.cfg.max_body_bytes
        try:
            async with self._gate(u.host, delay):
                async with self.session.request(req.method, req.url, headers=send, data=req.post_data_buffer,
                                                allow_redirects=False) as r:
                    data = await r.content.read(cap + 1)
                    status, rheaders = r.status, [(k, v) for k, v in r.headers.items()
                                                  if k.lower() not in _HOP_HEADERS]
        except Exception as exc:  # noqa: BLE001 - the guard, DNS, timeouts: the request fails in the page
            why = classify_error(exc) if not isinstance(exc, NetError) else exc.code
            res.blocked[why] += 1
            res.log.append((req.url, req.resource_type, why))
            await route.abort("addressunreachable" if why == "private_address" else "failed")
            return
        if len(data) > cap:
            res.blocked["body_cap"] += 1
            res.log.append((req.url, req.resource_type, "body_cap"))
            await route.abort("failed")
            return
        res.log.append((req.url, req.resource_type, str(status)))
        await route.fulfill(status=status, headers=dict(rheaders), body=data)


def robots_policies(cfg: CrawlConfig, tables: list[pa.Table | None]) -> dict[str, RobotsPolicy]:
    """origin -> policy from robots cache rows (later tables win: pass the older cache first)."""
    out: dict[str, RobotsPolicy] = {}
    for t in tables:
        if t is None or t.num_rows == 0:
            continue
        for origin, status, body in zip(t.column("origin").to_pylist(), t.column("status").to_pylist(),
                                        t.column("body").to_pylist(), strict=True):
            out[origin] = policy_from_response(status, body, cfg.robots_max_bytes, cfg.robots_agent)
    return out


# ---- the render step of one partition -------------------------------------------------------------
@dataclass
class _Candidate:
    url: str
    url_hash: int
    host: str
    reason: str
    body: bytes
    headers: list[tuple[str, str]]
    record_id: str
    fetch_time: datetime


def candidates(cfg: CrawlConfig, root: str, fetched: pa.Table) -> tuple[list[_Candidate], Counter[str]]:
    """The fetched HTML responses of a partition to render: host in ``render_hosts``, or (with
    ``render_auto``) script-built by the heuristic. Returns them with counters (pages seen, flagged)."""
    globs = render_globs(cfg.render_hosts)
    ok = pc.fill_null(pc.and_(pc.equal(fetched.column("status"), R.FETCHED),
                              pc.equal(fetched.column("warc_type"), "response")), False)
    ok = pc.and_(ok, pc.is_valid(fetched.column("warc_filename")))
    ok = pc.and_(ok, pc.fill_null(pc.match_substring(pc.utf8_lower(fetched.column("content_type")), "html"), False))
    rows = fetched.filter(ok)
    stats: Counter[str] = Counter()
    by_file: dict[str, dict[int, int]] = {}
    cols = {c: rows.column(c).to_pylist() for c in ("url", "url_hash", "host", "warc_filename",
                                                     "warc_record_offset", "fetch_time")}
    for i, (f, off) in enumerate(zip(cols["warc_filename"], cols["warc_record_offset"], strict=True)):
        by_file.setdefault(f, {})[off] = i
    out: list[_Candidate] = []
    for fname in sorted(by_file):
        wanted = by_file[fname]
        left = len(wanted)
        for rec in iter_records(root, fname):
            i = wanted.get(rec.offset)
            if i is None:
                continue
            left -= 1
            stats["html_pages"] += 1
            host = cols["host"][i]
            reason = None
            if globs and host_matches(host, globs):
                reason = "config"
            elif cfg.render_auto and looks_script_built(rec.payload, cfg.render_min_words):
                reason = "heuristic"
            if reason:
                stats[f"flagged_{reason}"] += 1
                ft = cols["fetch_time"][i] or datetime.now(UTC)
                out.append(_Candidate(cols["url"][i], cols["url_hash"][i], host, reason, rec.payload,
                                      list(rec.http_headers), rec.warc_headers.get("WARC-Record-ID", ""), ft))
            if left == 0:
                break
    return out, stats


def render_partition(cfg: CrawlConfig, fetched: pa.Table, root: str, warc_rel: str,
                     robots: Mapping[str, RobotsPolicy]) -> tuple[pa.Table, dict[str, Any]]:
    """Render a partition's chosen pages; writes the conversion WARC (only when something was rendered)
    and returns (RENDER_SCHEMA rows, stats)."""
    cands, stats = candidates(cfg, root, fetched)
    if not cands:
        return RENDER_SCHEMA.empty_table(), dict(stats)
    t0 = time.monotonic()
    results = asyncio.run(_render_all(cfg, cands, robots))
    rows: dict[str, list] = {f.name: [] for f in RENDER_SCHEMA}
    blocked: Counter[str] = Counter()
    with WarcFile.open(root, warc_rel, user_agent=cfg.user_agent) as w:
        for c, r in zip(cands, results, strict=True):
            blocked.update(r.blocked)
            ref = None
            if r.html is not None:
                ref = w.write_conversion(c.url, c.fetch_time, r.html.encode("utf-8"), c.record_id, CONVERSION_CT)
            rows["url"].append(c.url)
            rows["url_hash"].append(c.url_hash)
            rows["host"].append(c.host)
            rows["reason"].append(c.reason)
            rows["status"].append("rendered" if ref else "failed")
            rows["error"].append(r.error)
            rows["warc_filename"].append(warc_rel if ref else None)
            rows["warc_record_offset"].append(ref.offset if ref else None)
            rows["warc_record_length"].append(ref.length if ref else None)
            rows["refers_to"].append(c.record_id)
            rows["requests"].append(r.requests)
            rows["blocked"].append(sum(r.blocked.values()))
            rows["render_s"].append(round(r.seconds, 4))
    table = pa.Table.from_pydict(rows, schema=RENDER_SCHEMA)
    stats.update({"rendered": rows["status"].count("rendered"), "render_failed": rows["status"].count("failed"),
                  "browser_requests": sum(rows["requests"]), "browser_blocked": sum(blocked.values())})
    out = dict(stats)
    out["blocked_by"] = dict(blocked)
    out["render_seconds"] = round(time.monotonic() - t0, 3)
    return table, out


async def _render_all(cfg: CrawlConfig, cands: list[_Candidate], robots: Mapping[str, RobotsPolicy]
                      ) -> list[PageResult]:
    async with BrowserRenderer(cfg, robots) as r:
        return list(await asyncio.gather(*(r.render(c.url, c.body, c.headers) for c in cands)))


def apply_rendered(documents: pa.Table, rendered: pa.Table | None) -> pa.Table:
    """Point the fetch rows of rendered pages at their conversion record (parse then reads the DOM)."""
    if rendered is None or rendered.num_rows == 0:
        return documents
    done = rendered.filter(pc.equal(rendered.column("status"), "rendered"))
    if done.num_rows == 0:
        return documents
    where = {u: (f, o, n) for u, f, o, n in zip(
        done.column("url").to_pylist(), done.column("warc_filename").to_pylist(),
        done.column("warc_record_offset").to_pylist(), done.column("warc_record_length").to_pylist(), strict=True)}
    urls = documents.column("url").to_pylist()
    wt = documents.column("warc_type").to_pylist()
    cols = {c: documents.column(c).to_pylist() for c in ("warc_filename", "warc_record_offset",
                                                           "warc_record_length", "content_type")}
    for i, u in enumerate(urls):
        hit = where.get(u)
        if hit is not None and wt[i] == "response":
            cols["warc_filename"][i], cols["warc_record_offset"][i], cols["warc_record_length"][i] = hit
            cols["content_type"][i] = CONVERSION_CT
    for c, vals in cols.items():
        documents = documents.set_column(documents.schema.get_field_index(c), c,
                                         pa.array(vals, documents.schema.field(c).type))
    return documents


__all__ = [
    "CHROMIUM_ARGS", "RENDER_SCHEMA", "BrowserRenderer", "HostGate", "PageResult", "Signals", "apply_rendered",
    "candidates", "check_browser_workers", "host_matches", "looks_script_built", "page_signals", "render_enabled", "render_partition",
    "robots_policies",
]
