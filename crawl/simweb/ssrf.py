"""SSRF bait for the simulated web: hosts whose links, redirects, robots.txt and sitemaps point at
private addresses in every spelling a URL allows.

Served only when the server is started with ``--canary-port P`` (every bait URL carries port ``P``,
where a test runs a canary listener on 127.0.0.1 and ::1 that logs every connection). Hosts:

- ``ssrf.sim.test/`` the hostile-links page: each form as a plain link, each behind a redirect
  (``/r/<i>`` answers 302 to the form), links to the robots and sitemap bait hosts, and legitimate
  links (``/ok/<n>`` pages here and the home pages of ``good_links`` model hosts).
- ``ssrf-robots-<i>.sim.test``: its ``/robots.txt`` answers 301 to form ``i``'s ``/robots.txt``.
- ``ssrf-sitemap-<i>.sim.test``: its robots.txt allows all and names ``/sitemap.xml``, which answers
  301 to form ``i``'s ``/sitemap.xml``; it also names form ``i``'s sitemap directly.

Why the server knows nothing about the canary: the canary is the oracle, so it lives with the test.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from aiohttp import web

OK_PAGES = 3  # legitimate pages on ssrf.sim.test, linked from the hostile-links page


def ssrf_forms(port: int) -> list[tuple[str, str]]:
    """(label, base URL without trailing slash) of every bait form; all mean a local or private
    address, ``port`` is the canary's. At least 20, as issue 8 asks."""
    p = port
    return [
        ("userinfo", f"http://user@127.0.0.1:{p}"),
        ("user-password", f"http://a:b@127.0.0.1:{p}"),
        ("host-in-userinfo", f"http://example.com@127.0.0.1:{p}"),
        ("ipv6-loopback", f"http://[::1]:{p}"),
        ("ipv6-loopback-userinfo", f"http://user@[::1]:{p}"),
        ("ipv4-mapped-hex", f"http://[::ffff:7f00:1]:{p}"),
        ("ipv4-mapped-dotted", f"http://[::ffff:127.0.0.1]:{p}"),
        ("ipv4-mapped-long", f"http://[0:0:0:0:0:ffff:127.0.0.1]:{p}"),
        ("ipv4-mapped-metadata", f"http://[::ffff:a9fe:a9fe]:{p}"),
        ("ipv4-compatible", f"http://[::127.0.0.1]:{p}"),
        ("decimal", f"http://2130706433:{p}"),
        ("octal", f"http://0177.0.0.1:{p}"),
        ("octal-padded", f"http://0177.0000.0000.0001:{p}"),
        ("hex-dotted", f"http://0x7f.0x0.0x0.0x1:{p}"),
        ("hex-whole", f"http://0x7f000001:{p}"),
        ("short-2", f"http://127.1:{p}"),
        ("short-3", f"http://127.0.1:{p}"),
        ("hex-short", f"http://0x7f.1:{p}"),
        ("trailing-dot", f"http://127.0.0.1.:{p}"),
        ("percent-encoded", f"http://%31%32%37.0.0.1:{p}"),
        ("fullwidth-digits", f"http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{p}"),
        ("unspecified", f"http://0.0.0.0:{p}"),
        ("unspecified-short", f"http://0:{p}"),
        ("ipv6-unspecified", f"http://[::]:{p}"),
        ("localhost", f"http://localhost:{p}"),
        ("localhost-upper-dot", f"http://LOCALHOST.:{p}"),
        ("nat64", f"http://[64:ff9b::7f00:1]:{p}"),
        ("6to4", f"http://[2002:7f00:1::]:{p}"),
        ("teredo", f"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{p}"),
        ("metadata", f"http://169.254.169.254:{p}"),
        ("metadata-ipv6", f"http://[fd00:ec2::254]:{p}"),
        ("cgnat", f"http://100.64.0.1:{p}"),
        ("private-10", f"http://10.0.0.1:{p}"),
        ("private-192", f"http://user@192.168.0.1:{p}"),
        ("link-local-ipv6", f"http://[fe80::1]:{p}"),
        ("https-loopback", f"https://127.0.0.1:{p}"),
    ]


class SsrfSite:
    """Request handling for the bait hosts (see the module docstring)."""

    def __init__(self, canary_port: int, good_links: list[str]):
        self.forms = ssrf_forms(canary_port)
        self.good_links = good_links

    @staticmethod
    def owns(hostname: str) -> bool:
        return hostname == "ssrf.sim.test" or hostname.startswith(("ssrf-robots-", "ssrf-sitemap-"))

    def _form(self, hostname: str, prefix: str) -> str | None:
        num = hostname[len(prefix):].split(".", 1)[0]
        if num.isdigit() and int(num) < len(self.forms):
            return self.forms[int(num)][1]
        return None

    def handle(self, hostname: str, path: str) -> web.StreamResponse:
        if hostname == "ssrf.sim.test":
            return self._main(path)
        prefix = "ssrf-robots-" if hostname.startswith("ssrf-robots-") else "ssrf-sitemap-"
        form = self._form(hostname, prefix)
        if form is None:
            return web.Response(status=404, text="no such bait host")
        if prefix == "ssrf-robots-" and path == "/robots.txt":
            return _redirect(301, form + "/robots.txt")
        if prefix == "ssrf-sitemap-" and path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nAllow: /\nSitemap: http://{hostname}/sitemap.xml\n"
                                f"Sitemap: {form}/sitemap-direct.xml\n")
        if prefix == "ssrf-sitemap-" and path == "/sitemap.xml":
            return _redirect(301, form + "/sitemap.xml")
        if path == "/":
            return _html(f"bait {hostname}", f'<p><a href="/ok">ok</a></p><p><a href="{escape(form)}/">x</a></p>')
        return _html("ok", "<p>ok</p>")

    def _main(self, path: str) -> web.StreamResponse:
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if path.startswith("/r/"):
            i = path[3:]
            if i.isdigit() and int(i) < len(self.forms):
                return _redirect(302, self.forms[int(i)][1] + f"/via-redirect-{i}")
            return web.Response(status=404, text="no such redirect")
        if path.startswith("/ok/"):
            return _html(path, f"<p>a legitimate page {escape(path)}</p>")
        if path != "/":
            return web.Response(status=404, text="not here")
        n = len(self.forms)
        items = []
        for i, (label, url) in enumerate(self.forms):
            items.append(f'<li>{escape(label)}: <a href="{escape(url)}/">direct</a> '
                         f'<a href="{escape(url)}/page-{i}?q=1">path</a> <a href="/r/{i}">redirect</a> '
                         f'<a href="http://ssrf-robots-{i}.sim.test/">robots</a> '
                         f'<a href="http://ssrf-sitemap-{i}.sim.test/">sitemap</a></li>')
        ok = "".join(f'<li><a href="/ok/{k}">ok {k}</a></li>' for k in range(OK_PAGES))
        good = "".join(f'<li><a href="{escape(u)}">{escape(u)}</a></li>' for u in self.good_links)
        return _html("hostile links", f"<p>{n} forms</p><ul>{''.join(items)}</ul><ul>{ok}{good}</ul>")


def _redirect(status: int, location: str) -> web.Response:
    # a header is ASCII: non-ASCII hosts go percent-encoded (a WHATWG parser decodes, then maps them)
    location = quote(location, safe=":/?#[]@!$&'()*+,;=%")
    return web.Response(status=status, headers={"Location": location}, text=f"moved to {location}")


def _html(title: str, body: str) -> web.Response:
    return web.Response(text=f"<html><head><title>{escape(title)}</title></head><body>{body}</body></html>",
                        content_type="text/html")


__all__ = ["OK_PAGES", "SsrfSite", "ssrf_forms"]
