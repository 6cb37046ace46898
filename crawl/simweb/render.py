"""Page bytes for (page, version), rendered once and cached, with per-request noise spliced in.

Rendering a 5-50 KB page costs about a millisecond; serving must cost far less, so a rendered page is
kept as up to three byte strings split at the two noise slots (a rotating ad block after the header and a
"generated at" line before ``</body>``). A request joins the parts with fresh noise: no re-rendering,
and the noise is declared (``class="ad"`` and ``class="generated"``/the ``served`` comment) so tests can
strip it and compare the rest byte for byte.

Content is a pure function of (content id, version); boilerplate (host name, tagline, links, date line)
of the rendered page. Mirrors render their source page, so their bytes are identical to it.
"""

from __future__ import annotations

import html
import posixpath
import struct
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from crawl.simweb import media
from crawl.simweb import model as M

ADS = (
    "Advertisement: Kelmar shoes, 20% off this week only.",
    "Advertisement: Try Ostven coffee, roasted daily.",
    "Advertisement: Norpel insurance: a quote in two minutes.",
    "Advertisement: Learn Zenquin online, first lesson free.",
    "Advertisement: Rasdan bikes, free delivery.",
    "Advertisement: Turvo hotels, book now and save.",
    "Advertisement: Yarel phones, trade in your old one.",
)
AD_OPEN = b'<div class="ad">'
GENERATED_OPEN = b'<p class="generated">'


@dataclass(frozen=True)
class Rendered:
    """A rendered body in parts: ``a + ad + b + stamp + c`` when noisy, else just ``a``."""

    a: bytes
    b: bytes = b""
    c: bytes = b""
    noisy: bool = False
    content_type: str = "text/html"

    @property
    def size(self) -> int:
        return len(self.a) + len(self.b) + len(self.c)

    def body(self, request_no: int, now: float) -> bytes:
        if not self.noisy:
            return self.a
        ad = AD_OPEN + ADS[request_no % len(ADS)].encode() + b"</div>\n"
        stamp = (GENERATED_OPEN + f"Generated {_iso(now, ms=True)} for request {request_no}".encode()
                 + b"</p>\n" + f"<!-- served {time.time():.6f} -->\n".encode())
        return b"".join((self.a, ad, self.b, stamp, self.c))


def strip_noise(body: bytes) -> bytes:
    """Remove the declared per-request noise (ad block, generated line, served comment) from a page."""
    out = []
    i = 0
    for opener, closer in ((AD_OPEN, b"</div>\n"), (GENERATED_OPEN, b"-->\n")):
        j = body.find(opener, i)
        if j < 0:
            continue
        k = body.find(closer, j)
        out.append(body[i:j])
        i = k + len(closer)
    out.append(body[i:])
    return b"".join(out)


def _iso(t: float, ms: bool = False) -> str:
    s = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
    return s + (f".{int((t % 1) * 1000):03d}Z" if ms else "Z")


def _mixed_case(host: str) -> str:
    name, _, rest = host.partition(".")
    return name.capitalize() + "." + rest.upper()


def _relative(target: str, base_dir: str) -> str:
    """A path-relative reference from directory ``base_dir`` to root-relative ``target``."""
    tpath, q, query = target.partition("?")
    rel = posixpath.relpath(tpath, base_dir.rstrip("/") or "/")
    if tpath.endswith("/") and not rel.endswith("/"):
        rel = "./" if rel == "." else rel + "/"
    return rel + (q + query)


class Renderer:
    """Bodies of model pages, cached per (rendered page, version) up to ``cache_bytes``."""

    def __init__(self, model: M.Model, cache_bytes: int = 256 << 20):
        self.m = model
        self.cache: OrderedDict[tuple[int, int], Rendered] = OrderedDict()
        self.cache_bytes = cache_bytes
        self.extra_links: dict[int, list[str]] = {}  # page -> absolute URLs added to its footer (spa hosts)
        self.cached = 0
        self.hits = 0
        self.misses = 0

    def get(self, page: int, version: int, last_change: float) -> Rendered:
        src = int(self.m.render_src[page])
        key = (src, version)
        r = self.cache.get(key)
        if r is not None:
            self.hits += 1
            self.cache.move_to_end(key)
            return r
        self.misses += 1
        r = self.render(src, version, last_change)
        self.cache[key] = r
        self.cached += r.size
        while self.cached > self.cache_bytes and self.cache:
            _, old = self.cache.popitem(last=False)
            self.cached -= old.size
        return r

    # ---- link spelling ------------------------------------------------------------------------------
    def href(self, src: int, k: int, base_dir: str) -> str:
        """How link ``k`` (global CSR index) of page ``src`` is written."""
        m = self.m
        dst = int(m.link_dst[k])
        sp = int(m.link_spelling[k])
        host = m.hosts[int(m.page_host[dst])].name
        path = m.paths[dst]
        salt = (k * 2654435761 + src) & 0xFFFFFFFF
        token = f"{salt:08x}"
        if sp == M.SP_ROOT:
            return path
        if sp == M.SP_REL:
            return _relative(path, base_dir)
        if sp == M.SP_ABS:
            return f"http://{host}{path}"
        if sp == M.SP_ABS_CASE:
            return f"http://{_mixed_case(host)}{path}"
        if sp == M.SP_ABS_PORT:
            return f"http://{host}:80{path}"
        if sp == M.SP_FRAGMENT:
            return f"{path}#section-{salt % 7}"
        if sp == M.SP_TRACKING:
            prefix = f"http://{host}" if m.page_host[dst] != m.page_host[src] else ""  # same host: root-relative
            extra = ("utm_source=newsletter&utm_medium=email&utm_campaign=c" + token[:4], "gclid=" + token,
                     "fbclid=IwAR" + token, "utm_source=feed")[salt % 4]
            return f"{prefix}{path}{'&' if '?' in path else '?'}{extra}"
        if sp == M.SP_SESSION:
            if salt % 2:
                p, q, query = path.partition("?")
                return f"{p};jsessionid={token.upper()}{q}{query}"
            return f"{path}{'&' if '?' in path else '?'}sessionid={token}"
        return f"//{host}{path}"

    # ---- HTML ------------------------------------------------------------------------------------------
    def _text(self, content: int, version: int, n_words: int, charset: str) -> list[str]:
        rng = np.random.default_rng([self.m.params.seed & 0xFFFFFFFF, 21, content, version])
        idx = rng.integers(0, len(M.VOCAB), n_words)
        words = [M.VOCAB[i] for i in idx.tolist()]
        specials = M._ACCENTED + (M._CP1252_ONLY if charset != "iso-8859-1" else ())
        for pos in range(int(rng.integers(0, 20)), n_words, 37):
            words[pos] = specials[(pos // 37) % len(specials)]
        paras = []
        i = 0
        lens = rng.integers(40, 160, n_words // 40 + 1)
        for n in lens.tolist():
            if i >= n_words:
                break
            chunk = words[i:i + n]
            chunk[0] = chunk[0].capitalize()
            paras.append(" ".join(chunk) + ".")
            i += n
        return paras

    def render(self, src: int, version: int, last_change: float) -> Rendered:
        m = self.m
        ptype = int(m.page_type[src])
        content = int(m.content[src])
        if ptype == M.PDF:
            return Rendered(self.pdf(src, version), content_type="application/pdf")
        if ptype in (M.PNG, M.JPEG):
            spec = media.image_spec(m.params.seed, content, ptype == M.JPEG)
            return Rendered(media.image_bytes(spec, m.params.seed, content, version),
                            content_type=M.CONTENT_TYPES[ptype])
        if ptype == M.BIN:
            rng = np.random.default_rng([m.params.seed & 0xFFFFFFFF, 22, content, version])
            return Rendered(rng.bytes(int(rng.integers(4096, 20480))), content_type="application/octet-stream")
        return self._html(src, version, last_change)

    # ---- PDF ---------------------------------------------------------------------------------------------
    def pdf_words(self, src: int, version: int) -> list[str]:
        """The words of a PDF's text at ``version`` (Latin-1 only: the PDF's font is WinAnsi)."""
        content = int(self.m.content[src])
        n = media.PDF_WORDS_PER_PAGE * media.pdf_page_count(self.m.params.seed, content)
        return " ".join(self._text(content, version, n, "iso-8859-1")).split()

    def pdf_links(self, src: int) -> list[str]:
        """Absolute URLs of a PDF's link annotations (http ones; the mailto: one is added by media)."""
        return [self.m.url(int(d)) for d in self.m.link_dst[self.m.links(src)]]

    def pdf(self, src: int, version: int) -> bytes:
        content = int(self.m.content[src])
        pages = media.pdf_page_count(self.m.params.seed, content)
        return media.pdf_bytes(self.m.titles[src], media.pdf_lines(self.pdf_words(src, version), pages),
                               self.pdf_links(src))

    def _html(self, src: int, version: int, last_change: float) -> Rendered:
        m = self.m
        host = m.hosts[int(m.page_host[src])]
        path = m.paths[src]
        flags = int(m.flags[src])
        malformed = bool(flags & 2)
        content = int(m.content[src])
        title = html.escape(m.titles[src])
        q = "" if malformed else '"'
        page_dir = posixpath.dirname(path.partition("?")[0]) + "/"
        base_dir = f"/b/{m.section[src]}/" if flags & 1 else page_dir
        head = ["<!DOCTYPE html>", '<html lang="en"><head>']
        if host.charset_decl in ("meta", "both"):
            if host.charset == "iso-8859-1":
                head.append(f'<meta http-equiv="Content-Type" content="text/html; charset={host.charset}">')
            else:
                head.append(f'<meta charset="{host.charset}">')
        head.append(f"<title>{title}</title>")
        if flags & 1:
            head.append(f'<base href="{base_dir}">')
        can = int(m.canonical[src])
        if can >= 0:
            head.append(f'<link rel="canonical" href="{html.escape(m.url(can))}">')
        if m.meta_robots[src]:
            head.append(f'<meta name="robots" content="{m.meta_robots[src]}">')
        head.append("</head><body>")
        head.append(f'<header><p class="site">{host.name} &mdash; {host.tagline}</p>')

        sl = m.links(src)
        links = []
        for k in range(sl.start, sl.stop):
            href = html.escape(self.href(src, k, base_dir))
            rel = ' rel="nofollow"' if m.link_nofollow[k] else ""
            links.append((href, rel, html.escape(m.titles[int(m.link_dst[k])])))
        js_only = bool(flags & 4)
        if js_only:
            nav_links, inline, aside = [], [], []
        else:
            nav_links, rest = links[:5], links[5:]
            inline, aside = rest[: len(rest) // 3], rest[len(rest) // 3:]

        def a(link: tuple[str, str, str]) -> str:
            return f"<a href={q}{link[0]}{q}{link[1]}>{link[2]}</a>"

        head.append("<nav>" + " | ".join(a(x) for x in nav_links) + "</nav></header>\n")
        part_a = "\n".join(head)

        body = ["<main><article>", f"<h1>{title}</h1>"]
        if int(m.render_src[src]) == src and content != src:
            origin = m.hosts[int(m.page_host[content])].name
            body.append(f'<p class="date">Syndicated from {origin}, updated {_iso(last_change)}</p>')
        else:
            body.append(f'<p class="date">Updated {_iso(last_change)}</p>')
        paras = self._text(content, version, int(m.words[content]), host.charset)
        step = max(1, len(paras) // max(1, len(inline))) if inline else 0
        li = 0
        for i, para in enumerate(paras):
            extra = ""
            if inline and step and i % step == 0 and li < len(inline):
                extra = " See " + a(inline[li]) + "."
                li += 1
            body.append(("<p>" if not malformed or i % 2 else "<p class=x>") + para + extra
                        + ("</p>" if not malformed or i % 3 else ""))
        while li < len(inline):
            aside.append(inline[li])
            li += 1
        if malformed:
            body.append("<div><b><i>unbalanced</b></i> a < b && c > d <p>unclosed")
        body.append("</article>")
        if aside:
            body.append("<aside><h2>Related</h2><ul>" + "".join(f"<li>{a(x)}</li>" for x in aside) + "</ul></aside>")
        if js_only:
            targets = ",".join('"' + html.unescape(x[0])[::-1].replace("\\", "\\\\").replace('"', '\\"') + '"'
                               for x in links)
            body.append('<div id="links">Loading&hellip;</div>\n<script>\n'
                        f"var r=[{targets}];var h='';for(var i=0;i<r.length;i++){{"
                        "var u=r[i].split('').reverse().join('');"
                        "h+='<a hr'+'ef=\"'+u+'\">link '+i+'</a> ';}"
                        "document.getElementById('links').innerHTML=h;\n</script>")
        body.append("</main>")
        foot = ["<footer>", f"<p>&copy; {host.name}. {host.tagline}.</p>"]
        if src % 3 == 0:
            foot.append(f'<a href="mailto:editor@{host.name}">Contact</a>')
        if src % 5 == 0:
            foot.append('<a href="javascript:void(0)" onclick="window.print()">Print</a>')
        if src % 7 == 0:
            foot.append(f'<a href="http://gone-{src % 50:03d}.invalid/page-{src}">Old partner</a>')
        for extra in self.extra_links.get(src, ()):
            foot.append(f'<a href="{html.escape(extra)}">App</a>')
        foot.append("</footer>\n")
        part_b = "\n".join(body + foot)
        part_c = "" if malformed else "</body></html>\n"
        enc = host.charset
        ct = "text/html" + (f"; charset={enc}" if host.charset_decl in ("header", "both") else "")

        def e(s: str) -> bytes:
            return s.encode(enc, errors="xmlcharrefreplace")

        if not host.noisy:
            return Rendered(e(part_a + part_b + part_c), content_type=ct)
        # noise slots: the ad after the header, the generated line before </body>
        return Rendered(e(part_a), e(part_b), e(part_c), noisy=True, content_type=ct)


def _png(seed: int, content: int, version: int) -> bytes:
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 23, content, version])
    w = h = 32
    px = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + px[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
