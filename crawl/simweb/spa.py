"""Script-built hosts ``spa-NNN.sim.test`` (``serve --spa-hosts N``): pages whose content and links
exist only after their script runs, with truth saying which.

Why a side site and not model kinds: the other kinds' hosts, pages, links and truth must not move when
SPA hosts are added (tests pin them), so SPA hosts live outside :class:`~crawl.simweb.model.Model`,
deterministic from (seed, N); the only change to model pages is one link to each SPA home page from
the footer of one good host's home page (only with N > 0; model truth's ``in_degree`` does not count it).

Each SPA host has a home page and 5-9 article pages in three variants, by page index:

* ``shell`` (index % 3 == 0, the home page included): ``<div id="root"></div>`` and
  ``<script src="/static/app.js">``; the script reads ``/api/page.json?p=<path>`` and builds the page
  (title, paragraphs, links). Script-built.
* ``inline`` (% 3 == 1): ``<div id="app">Loading…</div>`` and an inline script that fetches the same
  JSON and writes the DOM. Script-built.
* ``ssr`` (% 3 == 2): server-rendered content in the HTML inside ``<div id="root">`` plus the bundle
  (hydration does nothing). Not script-built: a decoy for the heuristic's precision.

Every page also carries third-party and tracking bait: ``<script src="http://tracker.sim.test/t.js">``,
an ``<img>`` pixel there, and app.js posts a beacon to it and fetches ``/api/track`` with
``navigator.sendBeacon``; ``tracker.sim.test`` answers anything (so the access log shows any request
that got through). robots.txt of SPA hosts disallows ``/private-api/``, which app.js also asks.

With ``--canary-port P`` the host ``spa-ssrf.sim.test`` serves a shell whose script aims at
127.0.0.1:P, [::1]:P and localhost:P (fetch, img, preconnect, websocket) before building its DOM.

Truth (:func:`truth_table`): per page ``url``, ``host``, ``path``, ``variant``, ``script_built``,
``rendered_text`` (a sentence that appears only after rendering; null for ssr), ``rendered_links``
(absolute URLs that appear only after rendering), ``static_links``.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pyarrow as pa
from aiohttp import web

from crawl.simweb import model as M

TRACKER = "tracker.sim.test"
SSRF_HOST = "spa-ssrf.sim.test"
VARIANTS = ("shell", "inline", "ssr")

APP_JS = """(function(){
  var root=document.getElementById('root')||document.getElementById('app');
  if(!root||root.getAttribute('data-ssr')==='1'){return;}
  try{navigator.sendBeacon('http://tracker.sim.test/beacon','x');}catch(e){}
  fetch('http://tracker.sim.test/collect?p='+encodeURIComponent(location.pathname)).catch(function(){});
  fetch('/private-api/secret.json').catch(function(){});
  fetch('/api/page.json?p='+encodeURIComponent(location.pathname)).then(function(r){return r.json();})
  .then(function(d){
    var h='<h1>'+d.title+'</h1>';
    for(var i=0;i<d.paras.length;i++){h+='<p>'+d.paras[i]+'</p>';}
    h+='<ul class="nav">';
    for(var j=0;j<d.links.length;j++){h+='<li><a href="'+d.links[j][0]+'">'+d.links[j][1]+'</a></li>';}
    root.innerHTML=h+'</ul>';
  });
})();
"""


class SpaSite:
    """The SPA hosts of one web: pages, their JSON, and the server side (:meth:`handle`)."""

    def __init__(self, model: M.Model, n_hosts: int, canary_port: int | None = None) -> None:
        self.m = model
        self.n = n_hosts
        self.canary_port = canary_port
        self.hosts = [f"spa-{i + 1:03d}.{M.DOMAIN}" for i in range(n_hosts)]
        self.pages: dict[tuple[str, str], dict] = {}
        targets = [h for h in model.good_hosts()] or [h for h in model.hosts if h.kind in M.NORMAL_KINDS]
        for hi, host in enumerate(self.hosts):
            rng = np.random.default_rng([model.params.seed & 0xFFFFFFFF, 70, hi])
            k = int(rng.integers(5, 10))
            paths = ["/"] + [f"/app/{'-'.join(M.VOCAB[w] for w in rng.integers(0, len(M.VOCAB), 2))}-{j}"
                             for j in range(1, k + 1)]
            for j, path in enumerate(paths):
                title = " ".join(M.VOCAB[w].capitalize() for w in rng.integers(0, len(M.VOCAB), 4))
                marker = f"Rendered sentence {hi + 1}-{j} {' '.join(M.VOCAB[w] for w in rng.integers(0, len(M.VOCAB), 6))}."
                paras = [marker] + [" ".join(M.VOCAB[w] for w in rng.integers(0, len(M.VOCAB), 40)) + "."
                                    for _ in range(int(rng.integers(2, 5)))]
                links = [(f"http://{host}{p}", f"Page {p}") for p in paths if p != path][:6]
                if targets:
                    t = targets[int(rng.integers(0, len(targets)))]
                    links.append((f"{t.base}/", f"Friend {t.name}"))
                self.pages[(host, path)] = {"title": title, "paras": paras, "links": links,
                                            "variant": VARIANTS[j % 3], "host_i": hi}
        # one footer link to each SPA home page from a good host's home page
        self.inbound: dict[int, list[str]] = {}
        for hi, host in enumerate(self.hosts):
            if targets:
                src = targets[hi % len(targets)]
                self.inbound.setdefault(src.first, []).append(f"http://{host}/")

    def owns(self, hostname: str) -> bool:
        return hostname in (TRACKER,) or hostname in self.pages_hosts or (
            hostname == SSRF_HOST and self.canary_port is not None)

    @property
    def pages_hosts(self) -> frozenset[str]:
        return frozenset(self.hosts)

    # ---- bodies ------------------------------------------------------------------------------
    def page_html(self, host: str, path: str) -> bytes:
        p = self.pages[(host, path)]
        bait = (f'<script src="http://{TRACKER}/t.js"></script>'
                f'<img src="http://{TRACKER}/pixel.gif" alt="">')
        head = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(p['title'])}"
                f"</title>{bait}</head><body><header><p class=\"site\">{host}</p></header>\n")
        if p["variant"] == "shell":
            body = '<div id="root"></div><script src="/static/app.js"></script>'
        elif p["variant"] == "inline":
            body = ('<div id="app">Loading…</div><script>\n' + APP_JS + "</script>")
        else:
            inner = f"<h1>{html.escape(p['title'])}</h1>" + "".join(f"<p>{x}</p>" for x in p["paras"])
            inner += '<ul class="nav">' + "".join(f'<li><a href="{u}">{html.escape(t)}</a></li>'
                                                  for u, t in p["links"]) + "</ul>"
            body = f'<div id="root" data-ssr="1">{inner}</div><script src="/static/app.js"></script>'
        return (head + body + "\n</body></html>\n").encode("utf-8")

    def ssrf_html(self) -> bytes:
        port = self.canary_port
        targets = [f"http://127.0.0.1:{port}/fetch", f"http://[::1]:{port}/fetch6", f"http://localhost:{port}/name"]
        js = ";".join(f"fetch({json.dumps(t)}).catch(function(){{}})" for t in targets)
        js += f";try{{new WebSocket('ws://127.0.0.1:{port}/ws');}}catch(e){{}}"
        js += ";document.getElementById('root').innerHTML='<p>ssrf page rendered</p>';"
        return (f'<!DOCTYPE html><html><head><link rel="preconnect" href="http://127.0.0.1:{port}">'
                f'<title>ssrf spa</title></head><body><div id="root"></div>'
                f'<img src="http://127.0.0.1:{port}/img.png"><script>{js}</script></body></html>').encode()

    def handle(self, hostname: str, path: str, query: str) -> web.StreamResponse:
        if hostname == TRACKER:
            return web.Response(text="/* tracked */", content_type="application/javascript")
        if hostname == SSRF_HOST:
            if path == "/robots.txt":
                return web.Response(text="User-agent: *\nDisallow:\n", content_type="text/plain")
            if path == "/":
                return web.Response(body=self.ssrf_html(), content_type="text/html", charset="utf-8")
            return web.Response(status=404, text="not found")
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private-api/\n", content_type="text/plain")
        if path == "/static/app.js":
            return web.Response(text=APP_JS, content_type="application/javascript")
        if path == "/api/page.json":
            from urllib.parse import parse_qs
            p = self.pages.get((hostname, parse_qs(query).get("p", ["/"])[0]))
            if p is None:
                return web.json_response({"error": "no such page"}, status=404)
            return web.json_response({"title": p["title"], "paras": p["paras"], "links": p["links"]})
        if path.startswith("/private-api/") or path == "/api/track":
            return web.json_response({"secret": True})
        if (hostname, path) in self.pages:
            return web.Response(body=self.page_html(hostname, path), content_type="text/html", charset="utf-8")
        return web.Response(status=404, text="not found", content_type="text/html")

    # ---- truth -------------------------------------------------------------------------------
    def truth_table(self) -> pa.Table:
        rows: dict[str, list] = {k: [] for k in ("url", "host", "path", "variant", "script_built",
                                                 "rendered_text", "rendered_links", "static_links")}
        for (host, path), p in self.pages.items():
            built = p["variant"] != "ssr"
            links = [u for u, _ in p["links"]]
            rows["url"].append(f"http://{host}{path}")
            rows["host"].append(host)
            rows["path"].append(path)
            rows["variant"].append(p["variant"])
            rows["script_built"].append(built)
            rows["rendered_text"].append(p["paras"][0] if built else None)
            rows["rendered_links"].append(links if built else [])
            rows["static_links"].append([] if built else links)
        return pa.table({k: pa.array(v, pa.list_(pa.string()) if k.endswith("links") else None)
                         for k, v in rows.items()})


__all__ = ["APP_JS", "SSRF_HOST", "TRACKER", "SpaSite"]
