"""Politeness and robots.txt-scope bait for the simulated web: one server under many spellings.

Served only when the server is started with ``--origin-bait``:

- ``spellings.sim.test/`` links the pages of the first ``HOSTS`` good hosts under every spelling
  of the same server: plain, ``user@host``, ``a:b@HOST:80``, ``host.`` (trailing dot), ``Host:80``,
  another port of the same host (``host:8081``, another origin with its own robots.txt), and the
  IPv6 literal of the server (``[::1]:PORT``, ``user@[::1]:PORT``, ``[0:0:0:0:0:0:0:1]:PORT``).
  A crawler that keys politeness on the spelling runs two queues against one server; the access
  log (host normalised by the server, ``authority`` as sent) shows it.
- ``[::1]`` (the server's IPv6 literal, when it also listens on ::1) serves the first good host.
- ``robots-429.sim.test``: robots.txt answers 429 (Retry-After 1); its pages must not be fetched.
- ``robots-hop-<i>.sim.test`` (i < ``HOPS``): robots.txt answers 301 to the first good host's
  robots.txt, so its robots.txt requests must keep that host's politeness gap.
- ``robots-chain-<n>.sim.test`` (1 <= n <= 9): robots.txt answers 301 to ``/robots-1.txt``, which
  answers 301 to ``/robots-2.txt`` ... ``/robots-<n>.txt`` is the file (``Disallow: /private/``): n
  redirects, RFC 9309 §2.3.1.2 asks a crawler to follow at least five.
- ``robots-cut.sim.test``: a robots.txt of more than 500 KiB whose byte ``ROBOTS_CUT_AT`` (512,000)
  falls right after ``Allow: /private/`` in the line ``Allow: /private/public.html`` after
  ``Disallow: /private/``: a crawler that parses the cut line as a rule opens all of ``/private/``.

- ``robots-503.sim.test``: robots.txt answers 503 with Retry-After 30 (seconds): the host is
  unreachable, and asks for half a minute of quiet.
- ``backoff-503.sim.test``: no robots.txt (404); its first ``BACKOFF_503S`` (3) page requests answer
  503 without Retry-After (the crawler's own backoff decides the wait), the rest 200.
- ``retry-after-huge.sim.test``: no robots.txt; every page answers 429 with Retry-After 4000000000
  (seconds: 127 years).
- ``sitemap-long.sim.test``: robots.txt names a sitemap whose URL is longer than 2,048 characters (the
  crawler's default ``max_url_length``) and ``/sitemap.xml``, an index of another such file and
  ``/sitemap-1.xml`` (which lists ``/ok.html``); every ``/sitemap-*.xml`` answers, so a request for
  a long one shows in the access log.

These robots bait hosts are not linked from ``spellings.sim.test``; their home pages link ``/ok.html``,
``/private/secret.html`` and ``/private/public.html`` (each a small page), so a crawl seeded with
them shows in the access log which of those the rules let through.
"""

from __future__ import annotations

from html import escape

from aiohttp import web

HOSTS = 2  # good hosts linked under every spelling
HOPS = 6  # hosts whose robots.txt redirects to the first good host's
OTHER_PORT = 8081  # "another origin of the same host" (a connect-to rule sends it to the server)
IPV6_LITERAL = "[::1]"
ROBOTS_CUT_AT = 512_000  # 500 KiB: the least RFC 9309 §2.5 lets a crawler parse (crawl.config robots_max_bytes)
ROBOTS_BAIT_PATHS = ("/ok.html", "/private/secret.html", "/private/public.html")
LONG_SITEMAP = "/sitemap-" + "x" * 2100 + ".xml"  # a path longer than the crawler's default URL limit


def cut_robots_txt() -> bytes:
    """``robots-cut.sim.test``'s robots.txt: byte ``ROBOTS_CUT_AT`` cuts ``Allow: /private/public.html``
    right after ``Allow: /private/`` (comment lines fill the space in between)."""
    head, cut, rest = b"User-agent: *\nDisallow: /private/\n", b"Allow: /private/", b"public.html\n"
    pad = ROBOTS_CUT_AT - len(head) - len(cut)
    n, rem = divmod(pad, 80)
    filler = (b"#" + b"x" * 78 + b"\n") * n + (b"#" + b"x" * (rem - 2) + b"\n" if rem >= 2 else b"\n" * rem)
    body = head + filler + cut + rest
    assert body.index(cut + rest) == ROBOTS_CUT_AT - len(cut)
    return body


def spellings(host: str, port: int) -> list[str]:
    """Origins (with userinfo where it matters) that all name the server of ``host``; the last three
    name the IPv6 literal, which the server maps to the first good host."""
    up = host.upper()
    return [f"http://{host}", f"http://user@{host}", f"http://a:b@{up}:80", f"http://{host}.",
            f"http://{host.title()}:80", f"http://{host}:{OTHER_PORT}"]


def ipv6_spellings(port: int) -> list[str]:
    return [f"http://[::1]:{port}", f"http://user@[::1]:{port}", f"http://[0:0:0:0:0:0:0:1]:{port}"]


class OriginBait:
    """Request handling for the bait hosts (see the module docstring)."""

    def __init__(self, port: int, good_hosts: list[tuple[str, list[str]]]):
        """``good_hosts``: (host name, page paths) of the model hosts to spell out."""
        self.port = port
        self.good = good_hosts[:HOSTS]
        self.pages_503 = 0  # page requests backoff-503.sim.test has had

    @property
    def alias(self) -> str | None:
        """The model host ``[::1]`` stands for."""
        return self.good[0][0] if self.good else None

    @staticmethod
    def owns(hostname: str) -> bool:
        return (hostname in ("spellings.sim.test", "robots-429.sim.test") or hostname in ROBOTS_BAIT_HOSTS
                or hostname.startswith(("robots-hop-", "robots-chain-")))

    def handle(self, hostname: str, path: str) -> web.StreamResponse:
        if hostname == "backoff-503.sim.test" and path != "/robots.txt":
            self.pages_503 += 1
            if self.pages_503 <= BACKOFF_503S:
                return web.Response(status=503, text="busy, no idea for how long")
        if hostname in ROBOTS_BAIT_HOSTS or hostname.startswith("robots-chain-"):
            return _robots_bait(hostname, path)
        if hostname == "robots-429.sim.test":
            if path == "/robots.txt":
                return web.Response(status=429, text="slow down", headers={"Retry-After": "1"})
            return _html("429 host", "<p>never to be fetched while robots.txt answers 429</p>")
        if hostname.startswith("robots-hop-"):
            if path == "/robots.txt" and self.alias:
                return web.Response(status=301, headers={"Location": f"http://{self.alias}/robots.txt"})
            return _html(hostname, "<p>hop host</p>")
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if path != "/":
            return web.Response(status=404, text="not here")
        items = []
        for h, paths in self.good:
            forms = spellings(h, self.port) + (ipv6_spellings(self.port) if h == self.alias else [])
            for k, origin in enumerate(forms):
                p = paths[k % len(paths)] if paths else "/"
                items.append(f'<li><a href="{escape(origin + p)}">{escape(origin + p)}</a></li>')
                items.append(f'<li><a href="{escape(origin)}/">{escape(origin)}/</a></li>')
        items += [f'<li><a href="http://robots-hop-{i}.sim.test/">hop {i}</a></li>' for i in range(HOPS)]
        items.append('<li><a href="http://robots-429.sim.test/">429</a></li>')
        items.append('<li><a href="http://robots-429.sim.test/a">429 a</a></li>')
        return _html("spellings", f"<ul>{''.join(items)}</ul>")


ROBOTS_BAIT_HOSTS = ("robots-cut.sim.test", "robots-503.sim.test", "backoff-503.sim.test", "retry-after-huge.sim.test",
                     "sitemap-long.sim.test")
BACKOFF_503S = 3  # backoff-503.sim.test's first page requests that answer 503


def _urlset(*locs: str) -> web.Response:
    urls = "".join(f"<url><loc>{escape(u)}</loc></url>" for u in locs)
    return web.Response(text=f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns='
                        f'"http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>', content_type="application/xml")


def _robots_bait(hostname: str, path: str) -> web.StreamResponse:
    """The robots bait hosts: their robots.txt (a redirect chain, a file cut by the size limit, one
    naming over-long sitemap URLs), their sitemaps and their small pages."""
    if hostname == "robots-cut.sim.test":
        if path == "/robots.txt":
            return web.Response(body=cut_robots_txt(), content_type="text/plain")
    elif hostname == "robots-503.sim.test":
        if path == "/robots.txt":
            return web.Response(status=503, text="down for maintenance", headers={"Retry-After": "30"})
    elif hostname in ("backoff-503.sim.test", "retry-after-huge.sim.test"):
        if path == "/robots.txt":
            return web.Response(status=404, text="no robots.txt")
        if hostname == "retry-after-huge.sim.test":
            return web.Response(status=429, text="come back next century", headers={"Retry-After": "4000000000"})
    elif hostname == "sitemap-long.sim.test":
        base = f"http://{hostname}"
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow: /private/\nSitemap: {base}{LONG_SITEMAP}\n"
                                     f"Sitemap: {base}/sitemap.xml\n")
        if path == "/sitemap.xml":
            children = "".join(f"<sitemap><loc>{escape(base + p)}</loc></sitemap>"
                               for p in (LONG_SITEMAP.replace(".xml", "-2.xml"), "/sitemap-1.xml"))
            return web.Response(text=f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns='
                                     f'"http://www.sitemaps.org/schemas/sitemap/0.9">{children}</sitemapindex>',
                                content_type="application/xml")
        if path.startswith("/sitemap-") and path.endswith(".xml"):
            return _urlset(base + "/ok.html")
    else:
        n = hostname.split(".", 1)[0].removeprefix("robots-chain-")
        if not (n.isdigit() and 1 <= int(n) <= 9):
            return web.Response(status=404, text="no such chain")
        hops = [f"/robots-{k}.txt" for k in range(1, int(n) + 1)]
        if path in ("/robots.txt", *hops[:-1]):
            nxt = hops[0] if path == "/robots.txt" else hops[hops.index(path) + 1]
            return web.Response(status=301, headers={"Location": nxt})
        if path == hops[-1]:
            return web.Response(text="User-agent: *\nDisallow: /private/\n")
    if path == "/":
        links = "".join(f'<li><a href="{p}">{p}</a></li>' for p in ROBOTS_BAIT_PATHS)
        return _html(hostname, f"<ul>{links}</ul>")
    if path in ROBOTS_BAIT_PATHS:
        return _html(path, f"<p>{escape(path)} of {escape(hostname)}</p>")
    return web.Response(status=404, text="not here")


def _html(title: str, body: str) -> web.Response:
    return web.Response(text=f"<html><head><title>{escape(title)}</title></head><body>{body}</body></html>",
                        content_type="text/html")


__all__ = ["BACKOFF_503S", "HOPS", "HOSTS", "IPV6_LITERAL", "LONG_SITEMAP", "OTHER_PORT", "ROBOTS_BAIT_HOSTS", "ROBOTS_BAIT_PATHS", "ROBOTS_CUT_AT", "OriginBait",
           "cut_robots_txt", "ipv6_spellings", "spellings"]
