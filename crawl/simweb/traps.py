"""Crawler traps: URL spaces without end, generated on demand from the request URL alone.

Each trap is entered from its host's home page (those entry URLs are the ``trap`` rows of the truth
file) and from there offers links to new, distinct URLs forever: an infinite calendar, repeating path
segments, ever-deeper ``more/`` directories, a fresh session token on every link, and faceted navigation
with an unbounded page counter. Pages are deterministic functions of their URL, so two crawls see the
same trap.
"""

from __future__ import annotations

import html
import zlib
from urllib.parse import parse_qsl, urlencode

from crawl.simweb import model as M

FACETS = {"color": ("red", "green", "blue", "black", "white"), "size": ("s", "m", "l", "xl"),
          "brand": ("acme", "kelmar", "ostven", "norpel"), "sort": ("price", "new", "rating")}


def _filler(key: str, n: int = 120) -> str:
    h = zlib.crc32(key.encode())
    return " ".join(M.VOCAB[(h * (i + 7) + i * i) % len(M.VOCAB)] for i in range(n))


def _page(title: str, links: list[str], key: str) -> bytes:
    items = "".join(f'<li><a href="{html.escape(u)}">{html.escape(u)}</a></li>\n' for u in links)
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>{_filler(key)}</p><ul>\n{items}</ul>"
            '<p><a href="/">Home</a></p></body></html>\n').encode()


def trap_page(model: M.Model, host: M.Host, path: str, query: str) -> bytes:
    """The body of any URL inside one of the traps of ``host``."""
    key = f"{host.name}{path}?{query}"
    q = dict(parse_qsl(query, keep_blank_values=True))
    if path.startswith("/calendar"):
        try:
            month, year = int(q.get("month", 1)), int(q.get("year", 2026))
        except ValueError:
            month, year = 1, 2026
        month = min(max(month, 1), 12)
        nxt = (month % 12 + 1, year + (month == 12))
        prv = ((month - 2) % 12 + 1, year - (month == 1))
        links = [f"/calendar?month={nxt[0]}&year={nxt[1]}", f"/calendar?month={prv[0]}&year={prv[1]}"]
        links += [f"/calendar?month={month}&year={year}&day={d}" for d in (1, 15, 28)]
        return _page(f"Events {year}-{month:02d}", links, key)
    if path.startswith("/rep/"):
        return _page("Repeating " + path, ["a/", "b/", "../a/b/"], key)
    if path.startswith("/more/"):
        return _page("More " + str(path.count("more/")), ["more/", "more/index.html"], key)
    if path.startswith("/session/"):
        s = q.get("s", "0")
        h = zlib.crc32(f"{path}{s}".encode())
        links = [f"/session/item-{i}?s={(h * (i + 3)) & 0xFFFFFFFF:08x}" for i in range(4)]
        links.append(f"/session/?s={h:08x}")
        return _page("Session " + s, links, key)
    # faceted navigation: every value of every facet, plus the next page, forever
    page = int(q.get("page", "1")) if q.get("page", "1").isdigit() else 1
    links = []
    for name, values in FACETS.items():
        for v in values:
            if q.get(name) != v:
                links.append("/facets?" + urlencode({**q, name: v}))
    links.append("/facets?" + urlencode({**q, "page": str(page + 1)}))
    return _page(f"Products page {page}", links, key)
