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
"""

from __future__ import annotations

from html import escape

from aiohttp import web

HOSTS = 2  # good hosts linked under every spelling
HOPS = 6  # hosts whose robots.txt redirects to the first good host's
OTHER_PORT = 8081  # "another origin of the same host" (a connect-to rule sends it to the server)
IPV6_LITERAL = "[::1]"


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

    @property
    def alias(self) -> str | None:
        """The model host ``[::1]`` stands for."""
        return self.good[0][0] if self.good else None

    @staticmethod
    def owns(hostname: str) -> bool:
        return hostname in ("spellings.sim.test", "robots-429.sim.test") or hostname.startswith("robots-hop-")

    def handle(self, hostname: str, path: str) -> web.StreamResponse:
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


def _html(title: str, body: str) -> web.Response:
    return web.Response(text=f"<html><head><title>{escape(title)}</title></head><body>{body}</body></html>",
                        content_type="text/html")


__all__ = ["HOPS", "HOSTS", "IPV6_LITERAL", "OTHER_PORT", "OriginBait", "ipv6_spellings", "spellings"]
