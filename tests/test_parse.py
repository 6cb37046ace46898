"""HTML parsing policy on hand-written documents, and the parse step end-to-end over real WARC files."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from crawl.fingerprint import simhash, text_digest
from crawl.media import parse_image, parse_pdf
from crawl.parse import (
    ParsedDoc,
    detect_charset,
    parse_document,
    parse_html,
    parse_partition,
    parser_for,
    register_parser,
    sniff_mime,
    x_robots_flags,
)
from crawl.records import FETCH_SCHEMA, LINK_SCHEMA, PAGE_SCHEMA
from crawl.warc import WarcFile

PAGE = "http://example.test/dir/page.html"
HTML_CT = {"Content-Type": "text/html; charset=utf-8"}


def _links(doc: ParsedDoc) -> list[tuple[str, str, bool]]:
    return [(link.url, link.kind, link.nofollow) for link in doc.links]


def test_every_link_form_and_what_is_dropped() -> None:
    html = b"""<!doctype html><html><head>
      <link rel="alternate" hreflang="de" href="/de/page.html">
      <link rel="Alternate stylesheet" href="alt.css">
      <link rel="stylesheet" href="/style.css">
      <link rel="icon" href="/favicon.ico">
    </head><body>
      <a href="a.html">rel</a>
      <a href=" /abs ">abs, padded</a>
      <a href="//other.test/x">scheme-relative</a>
      <a href="https://secure.test/s?q=1#frag">full</a>
      <a href="b.html" rel="nofollow">nf</a>
      <a href="mailto:x@example.test">m</a> <a href="javascript:void(0)">j</a>
      <a href="JavaScript:alert(1)">J</a> <a href="data:text/html,hi">d</a> <a href="tel:+123">t</a>
      <a href="#top">frag</a> <a href="">empty</a> <a>no href</a> <a href="ftp://f.test/">ftp</a>
      <map><area href="/area-link" alt="x"><area nohref></map>
      <iframe src="/frame-in.html"></iframe>
      <frameset><frame src="f1.html"></frameset>
      <a href="a.html">duplicate</a>
    </body></html>"""
    doc = parse_html(PAGE, html, HTML_CT)
    assert _links(doc) == [
        ("http://example.test/de/page.html", "link", False),
        ("http://example.test/dir/alt.css", "link", False),
        ("http://example.test/dir/a.html", "a", False),
        ("http://example.test/abs", "a", False),
        ("http://other.test/x", "a", False),
        ("https://secure.test/s?q=1#frag", "a", False),
        ("http://example.test/dir/b.html", "a", True),
        ("http://example.test/area-link", "area", False),
        ("http://example.test/frame-in.html", "iframe", False),
    ]


def test_frameset_page() -> None:
    html = b"<html><frameset cols='50%,50%'><frame src='left.html'><frame src='/right.html'></frameset></html>"
    doc = parse_html(PAGE, html, HTML_CT)
    assert _links(doc) == [("http://example.test/dir/left.html", "frame", False),
                           ("http://example.test/right.html", "frame", False)]


def test_base_href_relative_to_page_and_canonical() -> None:
    html = b"""<html><head><base href="../other/"><link rel="canonical" href="canon.html"></head>
      <body><a href="x.html">x</a><a href="/root">r</a></body></html>"""
    doc = parse_html(PAGE, html, HTML_CT)
    assert [u for u, _, _ in _links(doc)] == ["http://example.test/other/x.html", "http://example.test/root"]
    assert doc.canonical == "http://example.test/other/canon.html"
    # absolute base on another host
    doc = parse_html(PAGE, b"<base href='https://cdn.test/b/'><a href='y'>y</a>", HTML_CT)
    assert _links(doc) == [("https://cdn.test/b/y", "a", False)]
    # canonical from the Link header when the page has none
    doc = parse_html(PAGE, b"<p>x</p>", {**HTML_CT, "Link": '</c?id=1>; rel="canonical"'})
    assert doc.canonical == "http://example.test/c?id=1"


def test_duplicate_links_merge_nofollow() -> None:
    html = b"<a href='/x' rel='nofollow'>1</a><a href='/x'>2</a><a href='/y' rel='nofollow'>3</a><a href='/y' rel='nofollow'>"
    doc = parse_html(PAGE, html, HTML_CT)
    assert _links(doc) == [("http://example.test/x", "a", False), ("http://example.test/y", "a", True)]


def test_meta_refresh_is_a_redirect_link() -> None:
    doc = parse_html(PAGE, b"<meta http-equiv='Refresh' content='0; URL=/moved'>", HTML_CT)
    assert _links(doc) == [("http://example.test/moved", "redirect", False)]
    assert parse_html(PAGE, b"<meta http-equiv='refresh' content='30'>", HTML_CT).links == []


def test_max_outlinks_cap() -> None:
    html = "".join(f"<a href='/p{i}'>{i}</a>" for i in range(50)).encode()
    doc = parse_html(PAGE, html, HTML_CT, max_outlinks=7)
    assert len(doc.links) == 7 and doc.links[-1].url == "http://example.test/p6"
    assert len(parse_document(PAGE, html, HTML_CT, max_outlinks=12).links) == 12


def test_meta_robots() -> None:
    def flags(meta: str) -> tuple[bool, bool]:
        d = parse_html(PAGE, f"<html><head>{meta}</head><body>x</body></html>".encode(), HTML_CT)
        return d.meta_noindex, d.meta_nofollow

    assert flags("") == (False, False)
    assert flags("<meta name='robots' content='noindex'>") == (True, False)
    assert flags("<meta name='ROBOTS' content='NoFollow'>") == (False, True)
    assert flags("<meta name='robots' content='noindex, nofollow'>") == (True, True)
    assert flags("<meta name='robots' content='none'>") == (True, True)
    assert flags("<meta name='robots' content='index,follow'>") == (False, False)
    assert flags("<meta name='RecrawlBot' content='nofollow'>") == (False, True)
    assert flags("<meta name='googlebot' content='noindex,nofollow'>") == (False, False)


def test_x_robots_tag() -> None:
    assert x_robots_flags("noindex") == (True, False)
    assert x_robots_flags("noindex, nofollow") == (True, True)
    assert x_robots_flags("googlebot: noindex, nofollow") == (False, False)
    assert x_robots_flags("RecrawlBot: nofollow") == (False, True)
    assert x_robots_flags("unavailable_after: 25 Jun 2010 15:00:00 PST") == (False, False)
    # repeated headers: an agent prefix scopes only its own header
    doc = parse_html(PAGE, b"<a href='/x'>x</a>",
                     [("Content-Type", "text/html"), ("X-Robots-Tag", "googlebot: nofollow"),
                      ("X-Robots-Tag", "noindex")])  # type: ignore[arg-type]
    assert (doc.meta_noindex, doc.meta_nofollow) == (True, False)
    doc = parse_html(PAGE, b"<a href='/x'>x</a>", {"content-type": "text/html", "x-robots-tag": "none"})
    assert (doc.meta_noindex, doc.meta_nofollow) == (True, True)


def test_text_title_and_language() -> None:
    html = b"""<html lang="en-GB"><head><title>  The   Title </title><style>.x{color:red}</style>
      <script>var hidden = 1;</script></head><body><h1>Head</h1><p>Visible <b>bold</b>
      text.</p><script>document.write('no')</script><noscript>enable js</noscript>
      <template><p>tpl</p></template><style>p{}</style><p>End</p></body></html>"""
    doc = parse_html(PAGE, html, HTML_CT)
    assert doc.title == "The Title"
    assert doc.text == "Head Visible bold text. End"
    assert doc.language == "en"
    assert parse_html(PAGE, b"<p>x</p>", {**HTML_CT, "Content-Language": "de-AT"}).language == "de"


def _words(text: str) -> str:
    return " ".join(text.split())


def test_fingerprint_text_is_the_main_content() -> None:
    article = " ".join(f"w{i}" for i in range(60))
    page = (f"<body><header><nav><a href='/'>Home</a> | <a href='/x'>X</a></nav></header>"
            f"<div class='ad'>{{ad}}</div><article><h1>Title</h1><p>{article} See <a href='/r'>Related "
            f"Thing</a>.</p></article><aside>Related: <a href='/y'>Y</a></aside>"
            f"<footer>Generated {{stamp}}</footer></body>")
    d1 = parse_html(PAGE, page.format(ad="Buy shoes", stamp="2026-11-30T06:00:00.123Z").encode(), HTML_CT)
    d2 = parse_html(PAGE, page.format(ad="Cheap flights now", stamp="2026-11-30T07:11:12.456Z").encode(), HTML_CT)
    assert _words(d1.fingerprint_text) == f"Title {article} See ."  # no chrome, no anchor text
    assert "Home" in d1.text and "Buy shoes" in d1.text and "Related Thing" in d1.text  # text keeps it all
    assert d1.text != d2.text and d1.fingerprint_text == d2.fingerprint_text
    assert len(d1.links) == 4  # links inside the article are still extracted
    # <main> when there is no <article>; nested articles are counted once
    d = parse_html(PAGE, b"<nav>menu</nav><main><p>one two three</p></main><footer>f</footer>", HTML_CT)
    assert _words(d.fingerprint_text) == "one two three"
    d = parse_html(PAGE, b"<article>a b c<article>d e</article></article><article>f g</article>", HTML_CT)
    assert _words(d.fingerprint_text) == "a b c d e f g"
    # no container, or one with fewer than 3 words: the whole text
    assert parse_html(PAGE, b"<p>just a page</p>", HTML_CT).fingerprint_text == "just a page"
    d = parse_html(PAGE, b"<p>intro words here</p><article>tiny</article>", HTML_CT)
    assert d.fingerprint_text == d.text == "intro words here tiny"
    # anchors are stripped from the whole tree in one call only when no content node is or sits in
    # an <a>: else those under each node (the node too when it is an <a>), as its own query finds them
    d = parse_html(PAGE, b"<nav><a href='/n'>nav words</a></nav><a href='/x'><article>one two three "
                         b"<b>four</b></article></a><p>after</p>", HTML_CT)
    assert d.content_text == "one two three  four" and len(d.links) == 2
    d = parse_html(PAGE, b"<a href='/m' role=main>alpha beta gamma</a><div role=main>x <a href='/y'>y</a></div>"
                         b"<p>one two three</p>", HTML_CT)
    assert d.fingerprint_text == d.text == "alpha beta gamma x y one two three"
    d = parse_html(PAGE, b"<div role=main>uno dos <a href='/y'>link</a> tres cuatro</div>", HTML_CT)
    assert _words(d.fingerprint_text) == "uno dos tres cuatro"


def test_charsets() -> None:
    body_1252 = "<p>Caf\u00e9 \u20ac5 \u201cquoted\u201d</p>".encode("cp1252")
    # declared by header as iso-8859-1: decoded as windows-1252 (0x80 is the euro sign), like browsers
    d = parse_html(PAGE, body_1252, {"Content-Type": "text/html; charset=ISO-8859-1"})
    assert d.charset == "windows-1252" and d.text == "Caf\u00e9 \u20ac5 \u201cquoted\u201d"
    # declared by meta charset
    d = parse_html(PAGE, b"<meta charset='windows-1252'>" + body_1252, {"Content-Type": "text/html"})
    assert d.charset == "windows-1252" and "\u20ac5" in d.text
    # declared by meta http-equiv
    d = parse_html(PAGE, b"<meta http-equiv='Content-Type' content='text/html; charset=iso-8859-1'>"
                   + body_1252, {"Content-Type": "text/html"})
    assert d.charset == "windows-1252" and "Caf\u00e9" in d.text
    # undeclared and not valid UTF-8: windows-1252 fallback
    d = parse_html(PAGE, body_1252, {"Content-Type": "text/html"})
    assert d.charset == "windows-1252" and "\u201cquoted\u201d" in d.text
    # undeclared valid UTF-8
    utf8 = "<p>na\u00efve \u65e5\u672c</p>".encode()
    d = parse_html(PAGE, utf8, {"Content-Type": "text/html"})
    assert d.charset == "UTF-8" and d.text == "na\u00efve \u65e5\u672c"
    # the HTTP header wins over a contradicting meta
    d = parse_html(PAGE, b"<meta charset='iso-8859-1'>" + utf8, HTML_CT)
    assert d.charset == "UTF-8" and "\u65e5" in d.text
    # BOM wins over everything
    d = parse_html(PAGE, b"\xef\xbb\xbf" + utf8, {"Content-Type": "text/html; charset=windows-1252"})
    assert d.charset == "UTF-8" and d.text == "na\u00efve \u65e5\u672c"
    u16 = "\ufeff<title>T\u00eatu</title><a href='/u'>u</a>".encode("utf-16-le")
    d = parse_html(PAGE, u16, {"Content-Type": "text/html"})
    assert d.charset == "UTF-16LE" and d.title == "T\u00eatu" and d.links[0].url == "http://example.test/u"
    # unknown labels are ignored, not fatal
    assert detect_charset(utf8, "text/html; charset=x-no-such") == ("utf-8", 0)
    assert detect_charset(b"<meta charset=utf-16>" + utf8, None) == ("utf-8", 0)


def test_malformed_markup_does_not_crash() -> None:
    for payload in [
        b"",
        b"<",
        b"<html><body><a href='/a'>unclosed <b><i>tags <p>para <table><tr><td>cell",
        b"<a href=\"/q\" <<<>>> </a></a></a><div></span>",
        b"\x00\x01\x02<a href='/n'>nul</a>\xff\xfe\xfd",
        b"<a href='http://[::1'>bad ipv6</a><a href='http://exa mple.test/'>space</a><a href='/ok'>ok</a>",
        b"<!-- unterminated comment <a href='/c'>",
        b"<svg><a href='/svg'>s</a></svg><math><mi>x</mi></math>",
        b"<base href='http://['><a href='rel'>r</a>",
    ]:
        doc = parse_html(PAGE, payload, {"Content-Type": "text/html"})
        assert isinstance(doc.text, str)
        assert all(link.url.startswith("http") for link in doc.links)
    doc = parse_html(PAGE, b"<a href='http://[::1'>bad</a><a href='/ok'>ok</a>", HTML_CT)
    assert _links(doc) == [("http://example.test/ok", "a", False)]
    # an unparseable base falls back to the page URL
    assert _links(parse_html(PAGE, b"<base href='http://['><a href='rel'>r</a>", HTML_CT)) == [
        ("http://example.test/dir/rel", "a", False)]


def test_registry_and_sniffing() -> None:
    assert parser_for("text/html") is parse_html
    assert parser_for("Application/XHTML+XML; charset=utf-8") is parse_html
    assert parser_for("image/png") is parse_image and parser_for("application/pdf") is parse_pdf
    assert parser_for("application/octet-stream") is None
    # a broken image: the image parser gives no image, no links, but the detected MIME type
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 50
    doc = parse_document(PAGE, png, {"Content-Type": "image/png"}, 100)
    assert doc.mime_detected == "image/png" and doc.links == [] and doc.text == "" and doc.image is None
    # HTML served as text/plain (or without a type) is sniffed and parsed
    for ct in ({"Content-Type": "text/plain"}, {}, {"Content-Type": "application/octet-stream"}):
        doc = parse_document(PAGE, b"  <!DOCTYPE html><title>t</title><a href='/l'>l</a>", ct, 100)
        assert doc.mime_detected == "text/html" and doc.title == "t" and len(doc.links) == 1
    # real plain text stays text/plain; a PDF labelled text/html is a PDF
    assert sniff_mime(b"just words", "text/plain") == "text/plain"
    assert sniff_mime(b"%PDF-1.7 ...", "text/html") == "application/pdf"
    assert parse_document(PAGE, b"%PDF-1.7 <a href='/x'>", {"Content-Type": "text/html"}, 10).links == []
    assert sniff_mime(b"<?xml version='1.0'?><rss></rss>", None) == "application/xml"
    assert sniff_mime(b'{"a": 1}', "application/json") == "application/json"

    # a registered parser is used for its MIME type
    def fake(url: str, payload: bytes, headers) -> ParsedDoc:  # noqa: ANN001
        return ParsedDoc(text=payload.decode(), title=url)

    register_parser("Text/X-Recrawl-Test", fake)
    doc = parse_document(PAGE, b"hello", {"content-type": "text/x-recrawl-test"}, 10)
    assert doc.text == "hello" and doc.title == PAGE and doc.mime_detected == "text/x-recrawl-test"


# --- parse_partition end-to-end ----------------------------------------------------------------------

T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def _row(**kw: object) -> dict:
    row = {f.name: None for f in FETCH_SCHEMA}
    row.update(kw)
    return row


def test_parse_partition_end_to_end(tmp_path: Path) -> None:
    root = str(tmp_path)
    article = " ".join(f"word{i % 97} token{i % 13}" for i in range(300))
    docs = {
        "http://a.test/": (b"<html lang=en><title>A</title><body><p>" + article.encode()
                           + b"</p><a href='/one'>1</a><a href='http://b.test/' rel=nofollow>b</a>"
                           + b"<link rel=canonical href='http://a.test/'></body></html>",
                           [("Content-Type", "text/html; charset=utf-8")]),
        "http://a.test/nofollow": (b"<meta name=robots content='noindex,nofollow'><a href='/hidden'>h</a>text here",
                                   [("Content-Type", "text/html")]),
        "http://a.test/xrt": (b"<a href='/hidden2'>h</a>more text", [("Content-Type", "text/html"),
                                                                     ("X-Robots-Tag", "nofollow")]),
        "http://a.test/img.png": (b"\x89PNG\r\n\x1a\n" + bytes(100), [("Content-Type", "image/png")]),
        "http://a.test/plain": (b"<!doctype html><title>P</title><a href='q'>q</a>", [("Content-Type", "text/plain")]),
        "http://a.test/story": (b"<nav>Home News Sport Weather</nav><article><p>" + article.encode()
                                + b"</p></article><footer>Generated 06:00:00.123</footer>",
                                [("Content-Type", "text/html")]),
        "http://b.test/latin": ("<p>Caf\u00e9 au lait</p><a href='/l\u00e9'>x</a>".encode("cp1252"),
                                [("Content-Type", "text/html; charset=iso-8859-1")]),
    }
    rows = []
    files = {"http://a.test": "seg/p0-warc.warc.gz", "http://b.test": "seg/p0-other.warc.gz"}
    writers = {f: WarcFile.open(root, f) for f in set(files.values())}
    for n, (url, (body, headers)) in enumerate(docs.items()):
        fname = files[url[: url.index(".test") + 5]]
        w = writers[fname]
        t = T0 + timedelta(seconds=n)
        rq = w.write_request(url, t, "GET", [("Host", "x")])
        ref = w.write_response(url, t, 200, "OK", headers, body, "127.0.0.1", None, concurrent_to=rq.record_id)
        rows.append(_row(url=url, url_hash=n + 1, host=url.split("/")[2], fetch_time=t, status="fetched",
                         http_status=200, content_type=headers[0][1], warc_filename=fname,
                         warc_record_offset=ref.offset, warc_record_length=ref.length, warc_type="response",
                         subset="warc"))
    # a revisit (same payload as the first page): stored as a revisit, not parsed again
    rv = writers["seg/p0-warc.warc.gz"].write_revisit(
        "http://a.test/copy", T0, 200, "OK", [("Content-Type", "text/html")], "sha1:X", "http://a.test/", T0)
    rows.append(_row(url="http://a.test/copy", url_hash=100, status="fetched", http_status=200,
                     warc_filename="seg/p0-warc.warc.gz", warc_record_offset=rv.offset,
                     warc_record_length=rv.length, warc_type="revisit"))
    for w in writers.values():
        w.close()
    rows.append(_row(url="http://a.test/old", url_hash=101, status="redirect", http_status=301,
                     redirect_location="http://a.test/new", subset="crawldiagnostics"))
    rows.append(_row(url="http://a.test/missing", url_hash=102, status="gone", http_status=404))
    rows.append(_row(url="http://a.test/timeout", url_hash=103, status="retry", http_status=0))
    fetch = pa.Table.from_pylist(rows, schema=FETCH_SCHEMA)

    pages, links = parse_partition(root, fetch, max_outlinks=500)
    assert pages.schema.equals(PAGE_SCHEMA) and links.schema.equals(LINK_SCHEMA)
    by_url = {r["url"]: r for r in pages.to_pylist()}
    assert set(by_url) == set(docs)  # fetched responses only; not the revisit, redirect or failures

    a = by_url["http://a.test/"]
    assert a["url_hash"] == 1 and a["title"] == "A" and a["content_charset"] == "UTF-8"
    assert a["content_mime_detected"] == "text/html" and a["content_languages"] == "en"
    assert a["canonical_url"] == "http://a.test/" and a["outlink_count"] == 2
    assert a["text_length"] == len(a["text"]) and a["text"].startswith("word0 token0")
    assert a["simhash"] == simhash(a["text"]) != 0 and a["text_digest"] == text_digest(a["text"])
    story = by_url["http://a.test/story"]
    assert story["text"] == "Home News Sport Weather " + article + " Generated 06:00:00.123"
    assert story["simhash"] == simhash(article) and story["text_digest"] == text_digest(article)
    assert by_url["http://a.test/nofollow"]["meta_noindex"] is True
    assert by_url["http://a.test/nofollow"]["meta_nofollow"] is True
    assert by_url["http://a.test/nofollow"]["outlink_count"] == 0
    assert by_url["http://a.test/xrt"]["meta_nofollow"] is True and by_url["http://a.test/xrt"]["meta_noindex"] is False
    img = by_url["http://a.test/img.png"]
    assert img["content_mime_detected"] == "image/png" and img["text"] == "" and img["outlink_count"] == 0
    assert img["simhash"] == 0 and img["text_digest"] is None and img["content_charset"] is None
    assert by_url["http://a.test/plain"]["content_mime_detected"] == "text/html"
    assert by_url["http://a.test/plain"]["title"] == "P"
    assert by_url["http://b.test/latin"]["content_charset"] == "windows-1252"
    assert by_url["http://b.test/latin"]["text"] == "Caf\u00e9 au lait x"

    got = sorted((r["from_url"], r["to_url"], r["kind"], r["nofollow"]) for r in links.to_pylist())
    assert got == sorted([
        ("http://a.test/", "http://a.test/one", "a", False),
        ("http://a.test/", "http://b.test/", "a", True),
        ("http://a.test/plain", "http://a.test/q", "a", False),
        ("http://b.test/latin", "http://b.test/l%C3%A9", "a", False),
        ("http://a.test/old", "http://a.test/new", "redirect", False),
    ])


def test_parse_partition_caps_links_and_handles_empty(tmp_path: Path) -> None:
    root = str(tmp_path)
    html = "".join(f"<a href='/p{i}'>{i}</a>" for i in range(40)).encode()
    with WarcFile.open(root, "c.warc.gz") as w:
        ref = w.write_response("http://c.test/", T0, 200, "OK", [("Content-Type", "text/html")], html, None, None)
    fetch = pa.Table.from_pylist([_row(url="http://c.test/", url_hash=7, status="fetched", http_status=200,
                                       warc_filename="c.warc.gz", warc_record_offset=ref.offset,
                                       warc_record_length=ref.length, warc_type="response")],
                                 schema=FETCH_SCHEMA)
    pages, links = parse_partition(root, fetch, max_outlinks=25)
    assert pages.column("outlink_count").to_pylist() == [25] and links.num_rows == 25
    pages, links = parse_partition(root, FETCH_SCHEMA.empty_table(), max_outlinks=25)
    assert pages.num_rows == 0 and links.num_rows == 0 and pages.schema.equals(PAGE_SCHEMA)


def test_simulated_web_pages_parse_as_generated() -> None:
    """Every page the simulated web renders: links, robots meta, canonical and charset come back as the
    model generated them, and the per-request noise (ad slot, generated stamp) never reaches the
    fingerprint text."""
    import re

    from crawl.simweb import media
    from crawl.simweb import model as M
    from crawl.simweb.render import Renderer
    from crawl.url import canonicalize

    def canon(u: str | None) -> str | None:
        # path-parameter session ids (";jsessionid=…") are a spelling the model links with
        return canonicalize(re.sub(r";jsessionid=[^?#/]*", "", u, flags=re.I)) if u else None

    m = M.build(M.SimParams(seed=3, hosts=24, pages_per_host=12))
    r = Renderer(m)
    html_pages = other = pdfs = images = 0
    for p in range(m.n_pages):
        if int(m.render_src[p]) != p:
            continue  # mirrors serve another page's bytes
        rend = r.get(p, 0, m.params.epoch0)
        headers = {"Content-Type": rend.content_type}
        d1 = parse_document(m.url(p), rend.body(1, m.params.epoch0 + 10), headers, 10_000)
        if not rend.content_type.startswith("text/html"):
            other += 1
            assert d1.mime_detected == rend.content_type
            ptype = int(m.page_type[p])
            if ptype == M.PDF:  # text, title, page count and link annotations as generated
                assert d1.text == " ".join(r.pdf_words(p, 0)) and d1.title == m.titles[p]
                assert d1.page_count == media.pdf_page_count(m.params.seed, int(m.content[p]))
                assert sorted(link.url for link in d1.links) == sorted(set(r.pdf_links(p)))
                assert {link.kind for link in d1.links} == {"pdf"}
                pdfs += 1
            elif ptype in (M.PNG, M.JPEG):
                spec = media.image_spec(m.params.seed, int(m.content[p]), ptype == M.JPEG)
                img = d1.image
                assert (img.format, img.width, img.height, img.exif_datetime, img.camera_make,
                        img.camera_model) == (spec.format, spec.width, spec.height, spec.exif_datetime,
                                              spec.camera_make, spec.camera_model)
                assert d1.links == [] and d1.text == ""
                images += 1
            else:
                assert d1.links == [] and d1.text == "" and d1.image is None
            continue
        html_pages += 1
        d2 = parse_document(m.url(p), rend.body(2, m.params.epoch0 + 99), headers, 10_000)
        assert d1.fingerprint_text == d2.fingerprint_text
        host = m.hosts[int(m.page_host[p])]
        assert d1.charset == ("UTF-8" if host.charset == "utf-8" else "windows-1252")
        assert "\ufffd" not in d1.text
        assert (d1.meta_noindex, d1.meta_nofollow) == ("noindex" in m.meta_robots[p], "nofollow" in m.meta_robots[p])
        if int(m.canonical[p]) >= 0:
            assert canon(d1.canonical) == canon(m.url(int(m.canonical[p])))
        if int(m.flags[p]) & 4:
            continue  # links only reachable by running JavaScript
        want: dict[str | None, bool] = {}
        for k in range(m.links(p).start, m.links(p).stop):
            u = canon(m.url(int(m.link_dst[k])))
            want[u] = want.get(u, True) and bool(m.link_nofollow[k])
        got: dict[str | None, bool] = {}
        for link in d1.links:
            got[canon(link.url)] = got.get(canon(link.url), True) and link.nofollow
        assert {u: got.get(u) for u in want} == want, m.url(p)
    assert html_pages > 100 and other > 0 and pdfs > 0 and images > 0


# ------------------------------------------------------------ batch link resolution (resolve_many)
def _adversarial_pairs(n: int, seed: int) -> tuple[list[str | None], list[str | None]]:
    """(href, base) pairs: the shapes the column path takes (absolute, /root, name/relative) mixed with
    everything that must fall back: dot segments in every spelling, schemes and scheme-like prefixes,
    ports, IPs, IDNA, userinfo, backslashes, whitespace, non-ASCII, escapes, odd bases."""
    import random

    rng = random.Random(seed)
    bases: list[str | None] = [
        "http://example.com/a/b.html", "https://h.org/", "http://h/dir/?q=/x#f/y", "http://u:p@h.com:8080/a/b",
        "http://127.0.0.1:8800/x/y", "http://EXAMPLE.com/a/", "mailto:x@y", "http://h/a/./b", "http://h/a%2e/b",
        "https://www.example.com/news/2024/index.html", "http://xn--bcher-kva.de/p/", "http://h:80/x", "http://h",
        "http://h/p?x#y", "http://[::1]/v6/", "http://h/\u00e9/x", "ftp://f.test/d/", "http://h.12/a/", None,
    ]
    # bases sharing a directory or an authority, whose last segment is a name, a dot segment in any
    # spelling, or hides a separator in the query or fragment: the prefix keys of resolve_many
    for d in ("http://h/a/", "http://h/a\\", "https://u:p@h:8443/x/y/", "http://h", "http://h:99999/a/", "http://h/"):
        for last in ("", "b.html", ".", "..", "%2e", "%2E%2e", ".%2E", "%2e.", "..?q=/z", "c?x#y/z", "#f/g", "d#x",
                     "?a/b", "e\\f", "..\\", "%2e%2e/", " ..", "\t..", "x/..", "x/./"):
            bases.append(d + last)
    pieces = ["a", "b.html", "..", ".", "/", "//", "?", "#", "%2e", "%2E", "x:y", ":", "\\", " ", "\t", "\n",
              "\u00e9", "%41", "A", "-", "_", "~", ";", "=", "&", "@", "'", "`", "{", "^", "|", "[", ".a", "a.",
              "%", "%zz", "\"", "<", "q=1", "0"]
    prefixes = ["", "", "", "/", "//", "./", "../", "?", "#", "http:", "https://", "HTTP://", "hTTp://h/",
                "javascript:", "http://Ex.COM/", "http://ex.com", "https://xn--a.com/", "https://XN--a.com/",
                "http://h.12/", "http://h.0x1f/", "http://a.b:8080/", "http://a.b:80/", "http://u@h/", "\\", " /",
                "http://h/", "https://sub.h-1.com/", "1a:", "a1:", "http://-x-.com/", "http://a..b/",
                "//Ex.COM:80/", "//h:443/", "//h.test:8080/", "//xn--a.b/", "//u@h/", "//1.2.3.4/", "https://h:443/",
                "http://h:0080/", "http://h:65536/", "./", "././", "./../", ".././", "..//"]
    hrefs: list[str | None] = []
    clean_prefixes = ["", "", "/", "http://h/", "https://sub.h-1.com/", "http://Ex.COM/", "//cdn.h/", "../"]
    clean_pieces = ["a", "b.html", "-", "_", "~", ";", "=", "&", "@", "A", "0", "/", "?q=1", "#f", "%41"]
    for _ in range(n):
        pre, pcs = (clean_prefixes, clean_pieces) if rng.random() < 0.4 else (prefixes, pieces)
        hrefs.append(rng.choice(pre) + "".join(rng.choice(pcs) for _ in range(rng.randint(0, 6))))
    pairs_b = [rng.choice(bases) for _ in hrefs]
    hrefs[7] = None
    # hrefs whose class hides behind what the parser strips, against every base
    for tricky in (" ?q", "\t?q", "\n#f", " #f", "\x01x", "x\ty", " /x", "\t//h2/", "", ".", "..", "./?q", "x:y",
                   "\\\\h2\\p", "\\p"):
        hrefs += [tricky] * len(bases)
        pairs_b += bases
    return hrefs, pairs_b


def test_resolve_many_equals_resolve_on_adversarial_pairs() -> None:
    from crawl.url.links import resolve, resolve_many

    hrefs, bases = _adversarial_pairs(20000, 21)
    want = [None if h is None else resolve(h, b) for h, b in zip(hrefs, bases, strict=True)]
    got = resolve_many(hrefs, bases).to_pylist()
    bad = [(h, b, g, w) for h, b, g, w in zip(hrefs, bases, got, want, strict=True) if g != w]
    assert not bad, bad[:5]
    # resolve reads Ada's offsets only for IDNA hosts: the URL model's answer (parse_url of the
    # result gives its href back) must agree, scheme filter and xn-- label check included
    from crawl.url.parse import _ada

    for h, b, w in zip(hrefs, bases, want, strict=True):
        if h is not None:
            u = _ada(h, b)
            assert w == (u._href if u is not None else None), (h, b)
    arr = pa.array(hrefs, pa.string())
    assert sum(w is not None for w in want) > 3000
    # small inputs take the scalar loop; Arrow and chunked input; a length mismatch is an error
    assert resolve_many(hrefs[:50], bases[:50]).to_pylist() == want[:50]
    chunked = pa.chunked_array([arr.slice(0, 100), arr.slice(100)])
    assert resolve_many(chunked, pa.array(bases, pa.string())).to_pylist() == want
    assert resolve_many(arr.slice(3000, 500), bases[3000:3500]).to_pylist() == want[3000:3500]
    assert resolve_many([], []).to_pylist() == []
    import pytest

    with pytest.raises(ValueError):
        resolve_many(["a"], [])


# hrefs built to look plain to resolve_many's Ada-free paths (absolute with a lower-case host, root- and
# directory-relative with leading ../ and ./), with every character and spelling that must send
# them back to Ada: dot segments, %2e, ports, numeric and xn-- labels, userinfo, quotes, backslashes
_PLAIN_PIECES = ["a", "b.html", "-", "_", "~", "!", "$", "&", "(", "*", "+", ",", ";", "=", ":", "@", "%", "%41",
                 "%2e", "%2E", "/", "//", "?", "#", "?q=1", "#f", ".", "..", "./", "../", ".a", "a.", "'", "\\",
                 " ", "\t", "^", "|", "[", "`", "{", "\"", "<", "\u00e9", "A", "0", "xn--"]
_PLAIN_HOSTS = ["h", "a.b", "sub.h-1.com", "Shop-1.SIM.TEST", "XN--a.com", "a.Xn--b", "A.0X1F", "H:443", "Ex.COM:8080", "-x-.com", "a.12", "h.0x1f", "1.2.3.4", "xn--bcher-kva.de", "xn--a.com",
                "a..b", "Ex.com", "h.", "a" * 64 + ".com", "b1.c2", "h:80", "h:0080", "h:443", "h:8080", "h:65536",
                "h:", "u@h", "h:99999"]
_PLAIN_BASES = ["http://h/a/b.html", "https://h.org/", "http://u:p@h.com:8080/a/b", "http://h/a/./b",
                "http://h/a%2e/b", "http://h", "http://h/dir/?q=/x#f/y", "https://www.example.com/n/2024/i.html",
                "http://h:80/x/y/z", "http://H.com/A/B/", "http://h/a/..", "http://h/a\\b/c", "http://127.0.0.1/x/",
                "http://xn--bcher-kva.de/p/q", "ftp://f.test/d/", "https://h/a//b/c", "http://h//", "https://h:8443/a/b/c/d",
                "http://H:80/a:b/@c/d", "http://h/a/%41/b", "http://h/a/%2e%2E/b", "http://h/.a/b", "http://h/a/b/..c/d"]


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(["", "", "/", "./", "../", "../../", "./../", ".././", "../../../../", "http://", "https://",
                        "//", "HTTP://"]),
       st.sampled_from(_PLAIN_HOSTS), st.lists(st.sampled_from(_PLAIN_PIECES), max_size=8).map("".join),
       st.lists(st.sampled_from(_PLAIN_BASES), min_size=1, max_size=4), st.booleans())
def test_resolve_many_ada_free_paths_equal_resolve(prefix: str, host: str, rest: str, bases: list[str],
                                                   ftp: bool) -> None:
    """resolve_many answers plain hrefs without Ada (an authority's root or a directory resolved once,
    then the href appended; absolute URLs serialised by hand): each answer must be :func:`resolve`'s,
    whichever base of a shared prefix came first."""
    from crawl.url.links import resolve, resolve_many

    href = prefix + host + ("/" if rest[:1] not in ("", "/", "?", "#") else "") + rest \
        if prefix.lower().startswith("http") or prefix == "//" else prefix + rest
    schemes = ("http", "https", "ftp") if ftp else ("http", "https")
    hrefs = [href] * len(bases) + [href.upper(), "/" + href, "x/" + href]
    bs = bases + bases[:1] * 3
    want = [resolve(h, b, schemes) for h, b in zip(hrefs, bs, strict=True)]
    assert resolve_many(hrefs, bs, schemes).to_pylist() == want, (hrefs, bs)


def _scalar_links(url: str, raw, max_outlinks: int) -> tuple[list[tuple[str, str, bool]], str | None]:
    """The per-href algorithm parse used before batching: resolve each href, keep a URL once (first
    kind, nofollow only if every occurrence is), cap; canonical = first resolvable tag, else header."""
    from crawl.url import resolve

    base = (resolve(raw.base_href, url) or url) if raw.base_href else url
    links: list[tuple[str, str, bool]] = []
    seen: dict[str, int] = {}
    for href, kind, nf in zip(raw.hrefs, raw.kinds, raw.nofollow, strict=True):
        target = resolve(href, base)
        if target is None:
            continue
        if target not in seen:
            seen[target] = len(links)
            links.append((target, kind, nf))
        elif links[seen[target]][2] and not nf:
            links[seen[target]] = (target, links[seen[target]][1], False)
    canonical = next((c for c in (resolve(h, base) for h in raw.canonical_hrefs) if c is not None), None)
    if canonical is None and raw.header_canonical is not None:
        canonical = resolve(raw.header_canonical, url)
    return links[:max_outlinks], canonical


def test_partition_links_equal_the_per_href_algorithm_on_simulated_web(tmp_path: Path) -> None:
    """parse_partition resolves a whole partition in one batch and de-duplicates with NumPy groups; the
    page and link tables must be what resolving href by href gives, on every simulated-web page (menus
    with repeated links, upper-case hosts, ../ paths, <base href>, nofollow pages, PDFs, images)."""
    from crawl.htmlparse import _parse_html_deferred
    from crawl.simweb import model as M
    from crawl.simweb.render import Renderer

    m = M.build(M.SimParams(seed=5, hosts=16, pages_per_host=12))
    r = Renderer(m)
    root = str(tmp_path)
    rows, bodies = [], []
    with WarcFile.open(root, "sim.warc.gz") as w:
        for p in range(m.n_pages):
            rend = r.get(p, 0, m.params.epoch0)
            body = rend.body(1, m.params.epoch0 + 10)
            ref = w.write_response(m.url(p), T0, 200, "OK", [("Content-Type", rend.content_type)], body,
                                   "127.0.0.1", None)
            rows.append(_row(url=m.url(p), url_hash=p, host=m.url(p).split("/")[2], fetch_time=T0,
                             status="fetched", http_status=200, content_type=rend.content_type,
                             warc_filename="sim.warc.gz", warc_record_offset=ref.offset,
                             warc_record_length=ref.length, warc_type="response"))
            bodies.append((m.url(p), body, rend.content_type))
    cap = 12  # below the busiest pages' link count, so the cap is exercised
    pages, links = parse_partition(root, pa.Table.from_pylist(rows, schema=FETCH_SCHEMA), max_outlinks=cap)
    want_links: list[tuple[str, str, str, bool]] = []
    want_counts, want_canon = [], []
    capped = nofollow_merged = 0
    for url, body, ct in bodies:
        d = parse_document(url, body, {"Content-Type": ct}, cap)
        if d.mime_detected not in ("text/html", "application/xhtml+xml"):  # PDF links come resolved
            want_counts.append(len(d.links))
            want_canon.append(d.canonical)
            want_links += [(url, lk.url, lk.kind, lk.nofollow) for lk in d.links]
            continue
        _, raw = _parse_html_deferred(url, body, {"Content-Type": ct})
        got, canonical = _scalar_links(url, raw, cap)
        capped += len(set(raw.hrefs)) > cap
        nofollow_merged += any(nf for *_, nf in got)
        want_canon.append(canonical)
        if d.meta_nofollow:
            got = []
        want_counts.append(len(got))
        want_links += [(url, t, k, nf) for t, k, nf in got]
    assert pages.column("url").to_pylist() == [u for u, _, _ in bodies]
    assert pages.column("canonical_url").to_pylist() == want_canon
    assert pages.column("outlink_count").to_pylist() == want_counts
    assert list(zip(*(links.column(c).to_pylist() for c in LINK_SCHEMA.names), strict=True)) == want_links
    assert capped > 10 and nofollow_merged > 10 and len(want_links) > 1000
    assert sum(c is not None for c in want_canon) > 50


# ------------------------------------------------------------ bodies from memory, the text column
_ALL_WS = [c for c in map(chr, range(0x3001)) if c.isspace()]  # all 29 code points str.split() splits on


def test_parse_bodies_from_memory_equals_the_warc_read_back_and_the_scalar_parser(tmp_path: Path) -> None:
    """parse_bodies takes (row, headers, payload) from any source: from memory it must give exactly
    what parse_partition gives reading the same responses back from a WARC file; and the text column,
    collapsed on UTF-8 bytes (str.split() only for whitespace beyond ASCII), must be parse_html's ``" ".join(text.split())``
    with every kind of whitespace -- the fingerprints computed from it too."""
    from crawl.fingerprint import fingerprints
    from crawl.parse import document_rows, parse_bodies, warc_bodies

    assert len(_ALL_WS) == 29
    root = str(tmp_path)
    bodies_in: list[tuple[str, bytes, list[tuple[str, str]]]] = []
    for k, ws in enumerate(_ALL_WS):
        words = f"{ws}{ws}Alpha{ws}beta\u00e9 {ws} gamma{ws}\u2026delta{k} epsilon{ws}"
        body = f"<html><body>{ws}<p>{words}</p><div>{ws}</div><p>zeta{ws}eta</p>{ws}</body></html>"
        if k % 2:
            body = body.replace("<p>zeta", f"<article>{words} theta iota</article><p>zeta")
        bodies_in.append((f"http://ws.test/{k}", body.encode("utf-8"), [("Content-Type", "text/html; charset=utf-8")]))
    bodies_in.append(("http://ws.test/doc.pdf", b"%PDF-1.4 not really", [("Content-Type", "application/pdf")]))
    bodies_in.append(("http://ws.test/empty", b"", [("Content-Type", "text/html")]))
    # the batch parse's charset passes (compiled) against parse_document's (Python): windows-1252 with
    # the bytes 0x80-0x9F (five undefined: U+FFFD), Latin-1 labels, invalid and valid undeclared UTF-8,
    # a BOM, no <body>, markup only
    cp1252 = ("<html><head><title>Caf\u00e9 \u2026</title></head><body><article>\u201cQuoted\u201d words "
              "\u2013 na\u00efve r\u00e9sum\u00e9 \u20ac5 \u2122</article><p>tail \u00ff\u00a0end</p></body>"
              "</html>").encode("cp1252") + bytes([0x81, 0x8D, 0x8F, 0x90, 0x9D, 0x80, 0x9F])
    for url, body, ct in (
            ("http://cs.test/1252", cp1252, "text/html; charset=windows-1252"),
            ("http://cs.test/latin1", cp1252, "text/html; charset=iso-8859-1"),
            ("http://cs.test/undeclared-1252", cp1252, "text/html"),
            ("http://cs.test/bad-utf8", b"<p>ok caf\xc3\xa9 \xed\xa0\x80 \xc3 three more words</p>",
             "text/html; charset=utf-8"),
            ("http://cs.test/overlong", b"<p>one two \xc0\xaf three \xf4\x90\x80\x80 four</p>", "text/html"),
            ("http://cs.test/utf8", "<main>\u00fcber \u2019quoted\u2019 \U0001f600 words here</main>".encode(),
             "text/html"),
            ("http://cs.test/bom", b"\xef\xbb\xbf<p>bom caf\xc3\xa9 page</p>", "text/html; charset=utf-8"),
            ("http://cs.test/nobody", b"<title>only a title</title>", "text/html"),
            ("http://cs.test/markup", b"<html><body></body></html>", "text/html; charset=utf-8")):
        bodies_in.append((url, body, [("Content-Type", ct)]))
    rows = []
    with WarcFile.open(root, "seg/ws.warc.gz") as w:
        for n, (url, body, headers) in enumerate(bodies_in):
            ref = w.write_response(url, T0, 200, "OK", headers, body, "127.0.0.1", None)
            rows.append(_row(url=url, url_hash=n + 1, status="fetched", http_status=200, content_type=headers[0][1],
                             warc_filename="seg/ws.warc.gz", warc_record_offset=ref.offset,
                             warc_record_length=ref.length, warc_type="response"))
    rows.append(_row(url="http://ws.test/old", url_hash=900, status="redirect", http_status=301,
                     redirect_location="http://ws.test/new"))
    fetch = pa.Table.from_pylist(rows, schema=FETCH_SCHEMA)
    assert document_rows(fetch).tolist() == list(range(len(bodies_in)))

    from_warc = parse_partition(root, fetch, max_outlinks=50)
    memory = [(i, headers, body) for i, (_, body, headers) in enumerate(bodies_in)]
    from_memory = parse_bodies(fetch, memory, max_outlinks=50)
    assert from_memory[0].equals(from_warc[0]) and from_memory[1].equals(from_warc[1])
    assert [r for r, _, _ in warc_bodies(root, fetch)] == list(range(len(bodies_in)))

    pages = from_memory[0].to_pylist()
    assert len(pages) == len(bodies_in)
    for page, (url, body, headers) in zip(pages, bodies_in, strict=True):
        want = parse_document(url, body, headers, 50)
        assert page["text"] == (want.text or ""), url
        assert page["text_length"] == len(page["text"])
        if page["content_mime_detected"] == "text/html" and want.fingerprint_text:
            assert (page["simhash"], page["text_digest"]) == fingerprints(want.fingerprint_text), url
    assert pages[0]["text"] == "Alpha beta\u00e9 gamma \u2026delta0 epsilon zeta eta"
    assert from_memory[1].to_pylist()[-1] == {"from_url": "http://ws.test/old", "to_url": "http://ws.test/new",
                                             "kind": "redirect", "nofollow": False}


# ------------------------------------------------------------ UTF-8 bytes straight to Lexbor
_HTML_PIECES = [b"<p>", b"</p>", b"<a href='/x'>", b"</a>", b"caf\xc3\xa9", b"\xe2\x80\x99", b"\xf0\x9f\x98\x80",
                b"\xe9", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00", b"\xef\xbb\xbf", b"&amp;", b" ",
                b"\r\n", b"<script>x</script>", b"<title>t\xc3\xa9</title>", b"<meta charset=utf-8>", b"word",
                b"\x80\x81\x8d\x9f\xa0\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x8f\xbf\xbf", b"0123456789abcdef"]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_HTML_PIECES), max_size=30), st.sampled_from(
    [None, "text/html", "text/html; charset=utf-8", "text/html; charset=windows-1252"]), st.booleans())
def test_lexbor_gets_the_bytes_the_decoded_text_would_give(pieces: list[bytes], content_type: str | None,
                                                          bom: bool) -> None:
    """Valid UTF-8 goes to Lexbor as the payload's own bytes, anything else as decoded text; either way
    the document must be the one parsing ``payload[skip:].decode(codec, "replace")`` gives (the oracle:
    what parse_html did before), for valid, invalid and BOM-led UTF-8, NULs and other charsets."""
    from selectolax.lexbor import LexborHTMLParser

    from crawl.sniff import _detect_charset, _lexbor_input

    payload = (b"\xef\xbb\xbf" if bom else b"") + b"".join(pieces)
    codec, skip, valid = _detect_charset(payload, content_type)
    assert (codec, skip) == detect_charset(payload, content_type)
    got = LexborHTMLParser(_lexbor_input(payload, codec, skip, valid))
    want = LexborHTMLParser(payload[skip:].decode(codec, errors="replace"))
    assert got.html == want.html
    # the batch parse's compiled charset passes (UTF-8 check, windows-1252 to UTF-8) give the same
    compiled = _lexbor_input(payload, codec, skip, valid, compiled=True)
    assert LexborHTMLParser(compiled).html == want.html
    if codec == "cp1252":
        assert compiled == payload.decode("cp1252", errors="replace").encode("utf-8")
    assert got.root.text(separator=" ") == want.root.text(separator=" ")
    headers = {"content-type": content_type} if content_type else {}
    doc = parse_html("http://h.test/", payload, headers)
    want.strip_tags(["script", "style", "noscript", "template"])
    assert doc.text == " ".join(want.body.text(separator=" ").split())


_NEAR_UTF8 = st.lists(st.one_of(
    st.binary(max_size=12),
    st.text(max_size=12).map(lambda t: t.encode("utf-8", "surrogatepass")),  # lone surrogates: ED A0-BF ..
    st.sampled_from([b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80", b"\xe0\x9f\xbf", b"\xe0\xa0\x80", b"\xed\x9f\xbf",
                     b"\xed\xa0\x80", b"\xef\xbf\xbf", b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf",
                     b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\x80", b"\xe2\x82", b"\xf0\x9f\x98",
                     b"plain ascii text", b"12345678"])), max_size=12).map(b"".join)


@settings(max_examples=5000, deadline=None)
@given(_NEAR_UTF8)
def test_compiled_utf8_check_is_the_strict_decode(data: bytes) -> None:
    """The batch parse's UTF-8 check says valid exactly when Python's strict decode succeeds: overlong
    forms, surrogates, code points past U+10FFFF, truncated and stray bytes, at any offset from the
    8-byte words it skips ASCII by."""
    from crawl.sniff import _utf8_valid

    try:
        data.decode("utf-8")
        want = True
    except UnicodeDecodeError:
        want = False
    for pad in range(9):  # the same bytes at every position relative to the 8-byte words
        assert _utf8_valid(b"x" * pad + data) == want, (pad, data)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.binary(max_size=64), st.text(st.characters(max_codepoint=0x7f), max_size=40).map(str.encode)))
def test_compiled_cp1252_is_the_codec(data: bytes) -> None:
    """windows-1252 to UTF-8 in one pass is Python's ``cp1252`` decode (undefined bytes as U+FFFD)
    then the UTF-8 encode selectolax made of the ``str``; every byte value once."""
    from crawl.sniff import _cp1252_utf8

    for pad in range(9):  # at every position relative to the ASCII words it copies at once
        padded = b"x" * pad + data + b"plain ascii words"
        assert _cp1252_utf8(padded) == padded.decode("cp1252", errors="replace").encode("utf-8")
    every = bytes(range(256))
    assert _cp1252_utf8(every) == every.decode("cp1252", errors="replace").encode("utf-8")


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(["a", "b\u00e9", " ", "\t", "\n", "\x1c", "\xa0", "\u2028", "\u3000", "\x85", "\x00",
                                 "\u200b"]), max_size=10).map("".join))
def test_three_words_check_is_str_split(text: str) -> None:
    """The main-content text counts when it has three words as ``str.split()`` sees them."""
    from crawl.htmlparse import _THREE_WORDS

    assert (_THREE_WORDS.match(text) is not None) == (len(text.split(None, 3)) >= 3)


def test_resolve_many_on_wpt_urltestdata() -> None:
    """The WHATWG URL test data (tests/data/conformance, http(s) cases) in one resolve_many call: each
    answer is the test data's href (None for failures and other schemes); and every input against
    every base, in runs of one base, gives resolve's answer per pair."""
    import json
    from pathlib import Path

    from crawl.url.links import resolve, resolve_many

    cases = json.loads((Path(__file__).parent / "data/conformance/url_resolve_cases.json").read_text("utf-8"))
    cases = [c for c in cases if c["source"].startswith("web-platform-tests")]
    want = [None if c["failure"] or not c["href"].startswith(("http://", "https://")) else c["href"] for c in cases]
    got = resolve_many([c["input"] for c in cases], [c["base"] for c in cases]).to_pylist()
    bad = [(c["input"], c["base"], g, w) for c, g, w in zip(cases, got, want, strict=True) if g != w]
    assert len(cases) > 400 and sum(w is not None for w in want) > 150 and not bad, bad[:5]
    inputs = sorted({c["input"] for c in cases} | {"../../../x", "./../y", "//cdn.h/z", "//Cdn.H:80/z", "/r"})
    bases = sorted({c["base"] for c in cases if c["base"]}
                   | {"http://h/a/b/c.html", "https://H.test:8443/x/y/", "http://h:99999/a/b", "http://h//a/"})
    hrefs = inputs * len(bases)
    row_bases = [b for b in bases for _ in inputs]
    got = resolve_many(hrefs, row_bases).to_pylist()
    bad = [(h, b, g) for h, b, g in zip(hrefs, row_bases, got, strict=True) if g != resolve(h, b)]
    assert not bad, bad[:5]


def test_resolve_many_answers_plain_keys_as_columns(monkeypatch) -> None:
    """Plain hrefs (absolute in WHATWG's form, scheme-relative, ``/``-rooted, path-relative with and
    without leading ``./`` / ``../``) are answered by column operations (``_plain_keys``): no Python per
    distinct key (``_resolve_key`` is not called), and each answer is :func:`resolve`'s; the keys it
    must leave to Python (ports, upper-case hosts, dot segments, %2e, backslashes, xn--, other schemes,
    an invalid base) still are."""
    import crawl.url.links as links
    from crawl.url.links import resolve, resolve_many

    calls: list[str | None] = []
    real = links._resolve_key

    def counting(href, *args):  # type: ignore[no-untyped-def]
        calls.append(href)
        return real(href, *args)

    monkeypatch.setattr(links, "_resolve_key", counting)
    plain = ["https://cdn.example.com/a/b.js?v=1#x", "http://h.test/", "//cdn.h-1.test/img/x.png", "/", "/a/b?q=1",
             "page.html", "./p", "../up.html", "../../x/y", "./../z", "../", "b@c/d;e=f", "~u/%41"]
    bases = ["http://h.test/a/b/c.html", "https://www.example.com/", "http://h.test", "https://s.h.test/x/y/z/",
             "http://h.test/a/b/c.html"]
    hrefs = [h for _ in bases for h in plain]
    row_bases = [b for b in bases for _ in plain]
    got = resolve_many(hrefs, row_bases).to_pylist()
    assert got == [resolve(h, b) for h, b in zip(hrefs, row_bases, strict=True)]
    assert calls == [], calls[:5]
    slow = ["http://h.test:80/a", "http://H.test/a", "/a/./b", "/a/%2e/b", "..\\x", "https://xn--bcher-kva.de/",
            "ftp://f.test/", "HTTP://h.test/", "/a\\b", "http://1.2.3.4/", "//h.test:8080/x"]
    hrefs = slow + ["a/b", "/x"]
    row_bases = ["http://h.test/d/e"] * len(slow) + ["http://h:99999/a/", "http://h:99999/a/"]
    got = resolve_many(hrefs, row_bases).to_pylist()
    assert got == [resolve(h, b) for h, b in zip(hrefs, row_bases, strict=True)]
    assert sorted(calls) == sorted(slow + ["a/b", "/x"]), calls  # one call per distinct key


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="a./%2?#\\ xZ:-~é\t\x00\x1f!", max_size=9), min_size=1, max_size=60))
def test_plain_column_equals_plain_rest(values: list[str]) -> None:
    """The one-pass RE2 form of the plain check (kept characters, no "/." and no "%2") says what
    ``_plain_rest``'s tests but the first-character one say, string by string."""
    import pyarrow.compute as pc

    from crawl.url.links import _CTRL_OR_SPACE, _KEPT_RE, _PATH_RELATIVE_COLUMN, _plain_column

    want = ["/." not in v and "%2" not in v and _KEPT_RE.fullmatch(v) is not None for v in values]
    assert _plain_column(pa.array(values, pa.string())).tolist() == want
    # and the path-relative shape's test (resolve_run_keys' classification of distinct hrefs)
    want = [v[:1] not in ("", "?", "#") and ":" not in v and _CTRL_OR_SPACE.search(v) is None for v in values]
    assert pc.match_substring_regex(pa.array(values, pa.string()), _PATH_RELATIVE_COLUMN).to_pylist() == want


# ------------------------------------------------------------ the one walk (session 11)
_WALK_PAGES = [
    "<html lang=de-AT><article>one two three <a href=x>link</a> four</article><script>s</script>",
    "<article>a b c<article>inner d e f</article></article><article>second x y z</article>",
    "<body><noscript><article>hidden a b c</article><a href=/ns>ns</a></noscript><article>seen a b c</article>",
    "<template><article>t a b c</article><a href=/t>t</a></template><main>m one two three</main>",
    "<svg><article>s a b c</article><a href=/s1>s</a><a xlink:href=/s2>x</a><html lang=fr></html>"
    "<script>x</script><style>y</style><base xlink:href=/xb/><base href=/sb/></svg><base><base href=/b/>",
    "<math><article>m a b c</article><style>q</style></math><article>r a b c</article>",
    "<a href=1><div><article>deep a b c<a href=2>q</a></article></div></a><article>e f g<a href=3>z</a></article>",
    "<div role=main>role one two three <a>n</a></div>",
    "<a role=main href=z>role a one two three</a>",
    "<head><style>h{}</style><noscript><link rel=canonical href=/c></noscript></head>"
    "<body>t <script>x</script> u<article>a <script>s</script>b c d<noscript>n</noscript></article>",
    "<a>no href</a><a href=/1 rel='NoFollow x'>1</a><area><area href=/2><link rel=canonical>"
    "<link rel=canonical href=/c2><link rel=alternate><link rel='alternate nofollow' HREF=/alt><iframe></iframe>"
    "<iframe SRC=/if><frame><a href=' '>ws</a><a href='#t'>h</a><a href='JavaScript:x'>j</a>",
    "<frameset><frame src=/f1><frame><frame src=/f2><noscript>f</noscript></frameset>",
    "<!-- c --><html><head><base target=_x><base href=' /b2/ '></head><body><html lang=es><p>x",
]


def test_the_walk_gives_what_tag_lookups_and_per_tag_queries_gave() -> None:
    """The HTML pass reads <article>s and the elements to strip from its one CSS query (no tag walks),
    and that query has no attribute conditions on the link tags nor <html> (selectolax parses a query
    at every call): text, main-content text, links in order, title, language and base must be what the
    former per-tag lookups give (nested, detached-by-the-strip and <a>-wrapped articles, SVG/MathML
    elements, template contents, elements without href/src)."""
    from selectolax.lexbor import LexborHTMLParser

    from crawl.htmlparse import (
        _STRIPPED,
        _WALK_CSS,
        _content_text,
        _parse_html_deferred,
        _selector,
        _top_articles,
    )

    assert "[href]" not in _WALK_CSS.replace("base[href]", "") and "html" not in _WALK_CSS.split(", ")
    for page in _WALK_PAGES:
        doc, raw = _parse_html_deferred("http://h.test/p/", page.encode(), {"content-type": "text/html"},
                                        raw_text=True)
        tree = LexborHTMLParser(page.encode())
        old = _selector().find("html, base[href], a[href], area[href], link[href], frame[src], iframe[src]",
                               tree.root)
        articles = [n for n in _selector().find(_WALK_CSS, tree.root) if n.tag == "article"]
        tree.strip_tags(list(_STRIPPED))  # the former strip: four walks by tag name
        assert raw.text == (tree.body or tree.root).text(separator=" "), page
        html_el = next(n for n in old if n.tag == "html")
        assert doc.language == ((html_el.attributes.get("lang") or "").split("-")[0].lower() or None), page
        bases = [n for n in old if n.tag == "base"]
        assert raw.base_href == (((bases[0].attributes.get("href") or "").strip() or None) if bases else None), page
        hrefs = [(n.attributes.get("src" if n.tag in ("frame", "iframe") else "href") or "").strip()
                 for n in old if n.tag in ("a", "area", "frame", "iframe")]
        assert [h for h, k in zip(raw.hrefs, raw.kinds, strict=True) if k != "link"] == \
            [h for h in hrefs if h and h[0] != "#" and not h.lower().startswith("javascript:")], page
        top, _ = _top_articles(articles)
        want = [n for n in tree.tags("article") if n.parent is not None and all(
            a.tag != "article" for a in _ancestors(n))]
        assert [n.mem_id for n in top] == [n.mem_id for n in want], page
        assert doc.content_text == _content_text(tree), page  # the tag lookup (no articles given)


def _ancestors(node):  # noqa: ANN001, ANN202
    p = node.parent
    while p is not None:
        yield p
        p = p.parent
