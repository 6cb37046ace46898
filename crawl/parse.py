"""Parse fetched documents into page rows and links (the *parse* step of a round).

Parser choice, by measurement (``bench/parse_bench.py``, 300 generated pages of 5-50 KB with 20-60
links, one core of this 2-core box): selectolax's Lexbor backend did link + visible-text extraction
at ~3,200 pages/s against ~2,500 pages/s for lxml.html (1.27x), finds the same links, and Lexbor
implements the WHATWG HTML tree builder, so malformed markup is repaired the way browsers do it
rather than the way libxml2 guesses. trafilatura was not considered for the hot path: it does
boilerplate removal on top of lxml and is several times slower; we need all visible text (for SimHash
and change detection) and all links, not an article body.

Parsers are registered by MIME type (:func:`register_parser`), so a new type needs no change to the
round. A parser takes ``(url, payload, headers)`` and returns a :class:`ParsedDoc`; ``headers`` is any
mapping, looked up case-insensitively. Built in: HTML (here), PDF and images (:mod:`crawl.media`).
Plugins: a function declared with :func:`parser` and named in the ``parsers`` config key
(``module:function``) or in an entry point of group ``recrawl.parsers`` of an installed package
(:func:`install_parsers`, run by every parse task), so a user package adds a type without editing ours.

HTML policy:

* charset (:mod:`crawl.sniff`, with MIME sniffing): BOM, then the HTTP ``Content-Type`` charset, then
  ``<meta charset>`` / ``http-equiv`` in the first 4 KiB, then UTF-8 if the bytes are valid UTF-8, else
  windows-1252. ``iso-8859-1``, ``latin1`` and ``us-ascii`` labels decode as windows-1252, as browsers
  do (WHATWG Encoding).
* links: ``a[href]``, ``area[href]``, ``link[rel~=alternate][href]``, ``frame[src]``, ``iframe[src]``
  and ``<meta http-equiv=refresh content="N; url=…">`` (kind ``redirect``), resolved against
  ``<base href>`` (itself resolved against the page URL) with :func:`crawl.url.resolve_many`, which
  gives :func:`crawl.url.resolve`'s answers for a whole partition at once (``_resolve_pages``); only
  results of the crawl's schemes (``allowed_schemes``: http(s), ftp opt-in) are kept, so ``mailto:``, ``javascript:``, ``data:``, ``tel:`` are dropped, as are
  empty and fragment-only hrefs (links to the page itself). A URL that appears twice on a page is
  kept once (first kind; ``nofollow`` only if every occurrence was nofollow).
* robots: ``rel=nofollow`` per link; ``<meta name=robots|RecrawlBot content=…>`` and
  ``X-Robots-Tag`` (generic or ``RecrawlBot:``-prefixed) set ``meta_noindex`` / ``meta_nofollow``
  (``none`` = both). A nofollow page contributes no links in :func:`parse_partition`.
* text: visible body text without ``script/style/noscript/template``, whitespace-collapsed; title
  from ``<title>``. ``simhash`` and ``text_digest`` are computed over the *main content* only (top-level
  ``<article>`` elements, else ``<main>``/``[role=main]``, else the whole text), so boilerplate, ads and
  per-request stamps outside it neither hide near-duplicates nor count as changes. Language: the ``<html lang>`` primary subtag (else ``Content-Language``); we ship
  no language detector, so this is what the page declares, not CLD2's ISO-639-3 guess.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from selectolax.lexbor import LexborCSSSelector, LexborHTMLParser

from crawl.config import PRODUCT_TOKEN
from crawl.fingerprint import collapse_many, fingerprints_many
from crawl.gctune import relaxed_gc
from crawl.parsers import (  # noqa: F401 - re-exported: plugins and callers use them from here
    _MIME_RE,
    ENTRY_POINT_GROUP,
    ParserLoadError,
    _bare_mime,
    find_parsers,
    installed_entry_points,
    load_parser,
    parser,
)
from crawl.records import FETCHED, LINK_SCHEMA, PAGE_SCHEMA, REDIRECT
from crawl.sniff import (
    _cp1252_utf8,
    _detect_charset,
    _display_charset,
    _lexbor_input,
    _utf8_valid,
    detect_charset,
    sniff_mime,
)
from crawl.url import WEB_SCHEMES, resolve_many
from crawl.url.links import first_rows, resolve_run_keys
from crawl.warc import iter_records

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Link:
    url: str
    kind: str          # a | area | link | frame | iframe | redirect
    nofollow: bool


@dataclass(frozen=True)
class ImageInfo:
    """What an image parser read from a file's header (no pixels are decoded)."""

    format: str                     # Pillow's format name: PNG, JPEG, GIF, WEBP, ...
    width: int
    height: int
    mode: str | None = None         # RGB, L, P, ...
    exif_datetime: datetime | None = None  # EXIF DateTimeOriginal (else DateTime); naive, EXIF has no zone
    camera_make: str | None = None
    camera_model: str | None = None


@dataclass
class ParsedDoc:
    title: str | None = None
    text: str = ""
    links: list[Link] = field(default_factory=list)
    canonical: str | None = None
    meta_noindex: bool = False
    meta_nofollow: bool = False
    charset: str | None = None
    mime_detected: str | None = None
    language: str | None = None
    # main-content text that fingerprints are computed from (see _content_text; whitespace not
    # collapsed); "" = same as text
    content_text: str = ""
    page_count: int | None = None   # documents with pages (PDF)
    image: ImageInfo | None = None  # images: one row in the images table

    @property
    def fingerprint_text(self) -> str:
        return self.content_text or self.text


Parser = Callable[[str, bytes, Mapping[str, str]], ParsedDoc]
_PARSERS: dict[str, Parser] = {}
# modules whose import registers the built-in non-HTML parsers (PDF, images); imported on first use
# so that ``import crawl.parse`` stays light and those modules can import this one
_BUILTIN_MODULES = ("crawl.media", "crawl.ftp")
_builtins_loaded = False
_installed: dict[tuple[str, ...], dict[str, str]] = {}  # (entry points, names) -> what install_parsers did


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for mod in _BUILTIN_MODULES:
            importlib.import_module(mod)


def register_parser(mime: str, fn: Parser) -> None:
    """Register ``fn`` for a MIME type (``type/subtype``, case-insensitive, parameters ignored).

    The built-in parsers are registered first, so a later registration for their type replaces them.
    """
    _load_builtins()
    bare = _bare_mime(mime)
    if not _MIME_RE.match(bare):
        raise ValueError(f"not a MIME type: {mime!r} (expected type/subtype)")
    _PARSERS[bare] = fn


def parser_for(mime: str | None) -> Parser | None:
    _load_builtins()
    return _PARSERS.get(_bare_mime(mime or ""))


def install_parsers(names: Iterable[str] = (), entry_points: bool = True) -> dict[str, str]:
    """Register the parsers of installed ``recrawl.parsers`` entry points, then those named in config.

    An entry point's name may be the MIME type (``"application/x-foo" = "pkg.mod:parse"``) or the
    function may declare its types with :func:`parser`; config names (``module:function``) must
    declare them. Later registrations win: built-ins < entry points < config. Returns
    ``{mime: where from}``; raises :class:`ParserLoadError` for a parser that cannot be loaded, before
    anything is registered. Each (installed entry points, names) combination is loaded once per process
    (Dask workers call this for every parse task).
    """
    names = tuple(names)
    eps = installed_entry_points() if entry_points else []
    key = (*(f"{ep.name}={ep.value}" for ep in eps), "|", *names)
    if key in _installed:
        return _installed[key]
    found = find_parsers(names, eps)
    for _, fn, mimes in found:
        for m in mimes:
            register_parser(m, fn)
    _installed[key] = {m: where for where, _, mimes in found for m in mimes}
    return _installed[key]


def _lower_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Case-insensitive view; repeated headers are joined with ", " (RFC 9110 list semantics), except
    ``X-Robots-Tag``, joined with newlines because an ``agent:`` prefix scopes only its own header."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for k, v in items:
        k = k.lower()
        sep = "\n" if k == "x-robots-tag" else ", "
        out[k] = f"{out[k]}{sep}{v}" if k in out else v
    return out


def warm_up() -> None:
    """Load (or compile) parse's compiled kernels now: the fingerprint and text-column passes
    (:func:`crawl.fingerprint.warm_up`) and the charset passes of :func:`_lexbor_input`, with the
    argument types parse gives them. The embedded workers' preload calls this in the background
    (:func:`crawl.warmup.import_task_modules`) so that the first parse task does not wait on it."""
    from crawl.fingerprint import warm_up as fingerprint_warm_up

    fingerprint_warm_up()
    _utf8_valid("caf\u00e9 \u2026 warm-up".encode())
    _cp1252_utf8("caf\u00e9 \u2026 warm-up".encode("cp1252"))


# --- robots directives -------------------------------------------------------------------------

_DIRECTIVE_SPLIT = re.compile(r"[,\s]+")
_KNOWN_DIRECTIVES = {"all", "none", "noindex", "nofollow", "noarchive", "nosnippet", "index", "follow",
                     "notranslate", "noimageindex", "unavailable_after", "max-snippet",
                     "max-image-preview", "max-video-preview", "indexifembedded", "noodp", "noydir"}


def _apply_directives(content: str, flags: list[bool]) -> None:
    for tok in _DIRECTIVE_SPLIT.split(content.lower()):
        if tok in ("noindex", "none"):
            flags[0] = True
        if tok in ("nofollow", "none"):
            flags[1] = True


def x_robots_flags(value: str | None, agent: str = PRODUCT_TOKEN) -> tuple[bool, bool]:
    """(noindex, nofollow) from an ``X-Robots-Tag`` value: generic directives and ``agent:`` ones.

    ``googlebot: noindex`` does not apply to us; ``RecrawlBot: nofollow`` and plain ``noindex`` do.
    """
    flags = [False, False]
    if not value:
        return False, False
    for line in value.splitlines():  # one line per header occurrence
        current: str | None = None  # agent the following directives belong to
        for part in line.split(","):
            m = re.match(r"\s*([A-Za-z0-9_-]+)\s*:\s*(.*)$", part)
            if m and m.group(1).lower() not in _KNOWN_DIRECTIVES:
                current = m.group(1).lower()
                part = m.group(2)
            if current is None or current == agent.lower():
                _apply_directives(part, flags)
    return flags[0], flags[1]


# --- HTML ----------------------------------------------------------------------------------------

_local = threading.local()


def _selector() -> LexborCSSSelector:
    """This thread's CSS selector engine, shared by every document it parses.

    Why: ``tree.css(q)`` is ``LexborCSSSelector().find(q, tree.root)`` with an engine (Lexbor CSS
    parser, selector memory) created on a tree's first query and freed with it, ~3 us of a page's
    ~11 us walk (bench/RESULTS.md, session 7). One per thread: the engine keeps the query's state
    while it runs, and the parse-ahead thread parses beside the task's own thread."""
    sel = getattr(_local, "selector", None)
    if sel is None:
        sel = _local.selector = LexborCSSSelector()
    return sel


# The elements whose text is not the page's, removed after the walk (one walk instead of four by tag
# name, ``tree.strip_tags``).
_STRIPPED = ("script", "style", "noscript", "template")
# The one walk's query. selectolax parses the query at every call (its selector memory is freed after
# each): ~0.5-1 us a selector and more for an attribute condition, a fixed cost per page. So the link
# tags carry no [href]/[src] condition (the walk reads those attributes anyway and skips an element
# without one) and <html> is the walk's root; <base href> keeps its condition (the first one counts).
# <article>s ride along for _content_text (no tag lookup of its own). bench/RESULTS.md, "Parse CPU,
# session 11".
_WALK_CSS = "meta, title, base[href], article, " + ", ".join(_STRIPPED) + ", a, area, link, frame, iframe"
_REFRESH_URL = re.compile(r"^\s*\d*(?:\.\d*)?\s*[;,]\s*(?:url\s*=\s*)?[\"']?([^\"']+)", re.IGNORECASE)
_SKIP_SCHEMES = ("mailto:", "javascript:", "data:", "tel:")
_SKIP_FIRST = "mjdtMJDT"  # their first characters, either case
_LANG_SPLIT = re.compile(r"[-_,\s]")  # the end of a language tag's primary subtag
_HREF_WS = " \t\n\r\f"  # HTML's ASCII whitespace, stripped around an attribute's URL


def _clean_href(raw: str | None) -> str | None:
    if raw is None:
        return None
    href = raw.strip(_HREF_WS)
    if not href or href.startswith("#"):
        return None
    if href[:11].lower().startswith(_SKIP_SCHEMES):
        return None
    return href


@dataclass
class _RawLinks:
    """One HTML page's links before resolution: parse_partition resolves a whole partition in one
    :func:`crawl.url.resolve_many` call instead of one :func:`crawl.url.resolve` call per href."""

    base_href: str | None = None  # <base href>, stripped, resolved against the page URL
    hrefs: list[str] = field(default_factory=list)  # cleaned, document order, meta refresh last
    kinds: list[str] = field(default_factory=list)
    nofollow: list[bool] = field(default_factory=list)
    canonical_hrefs: list[str] = field(default_factory=list)  # <link rel=canonical>, first resolvable wins
    header_canonical: str | None = None  # Link: <...>; rel=canonical, resolved against the page URL
    text: str | None = None  # visible text, whitespace not yet collapsed (parse_bodies collapses a column)


def parse_html(url: str, payload: bytes, headers: Mapping[str, str], agent: str = PRODUCT_TOKEN,
               max_outlinks: int | None = None) -> ParsedDoc:
    """Parse an HTML document (see the module docstring for the policy)."""
    doc, raw = _parse_html_deferred(url, payload, headers, agent)
    res = _resolve_pages([url], [raw], max_outlinks)
    doc.canonical = res.canonical[0]
    doc.links = [Link(u, k, bool(nf)) for u, k, nf in
                 zip(res.to_url.to_pylist(), res.kind.to_pylist(), res.nofollow, strict=True)]
    return doc


def _parse_html_deferred(url: str, payload: bytes, headers: Mapping[str, str],
                         agent: str = PRODUCT_TOKEN, raw_text: bool = False,
                         mime: str | None = None) -> tuple[ParsedDoc, _RawLinks]:
    """Everything :func:`parse_html` does but resolving links and the canonical URL; with ``raw_text``
    also the whitespace collapse of the text (``doc.text`` stays empty, ``raw.text`` holds it).
    ``mime``: the caller has lower-cased ``headers`` (a dict) and sniffed the payload already
    (:func:`_parse_document`), so neither is done twice."""
    h = headers if mime is not None else _lower_headers(headers)
    codec, skip, valid_utf8 = _detect_charset(payload, h.get("content-type"))
    tree = LexborHTMLParser(_lexbor_input(payload, codec, skip, valid_utf8, compiled=raw_text))
    doc = ParsedDoc(charset=_display_charset(codec),
                    mime_detected=mime if mime is not None else sniff_mime(payload, h.get("content-type")))
    raw = _RawLinks()

    flags = [False, False]
    noindex, nofollow = x_robots_flags(h.get("x-robots-tag"), agent)
    flags[0] |= noindex
    flags[1] |= nofollow
    agent_l = agent.lower()
    refresh_target: str | None = None
    title = html_el = base_el = None
    hrefs, kinds, nfs = raw.hrefs, raw.kinds, raw.nofollow
    articles = []
    stripped = []

    def add(value: str | None, kind: str, nf: bool) -> None:
        href = _clean_href(value)
        if href is not None:
            hrefs.append(href)
            kinds.append(kind)
            nfs.append(nf)

    # one walk of the tree for everything read before the text (document order, as separate queries
    # would give it: the first <title>, <html> and <base href> count)
    root = tree.root
    if root is not None and root.tag == "html":  # the query matches its root first (Lexbor's MATCH_ROOT)
        html_el = root
    elif root is not None:  # not seen: a document's root is <html>
        html_el = next(iter(_selector().find_first("html", root)), None)
    for node in _selector().find(_WALK_CSS, root) if root is not None else ():
        tag = node.tag
        if tag == "a" or tag == "area":  # most nodes: _clean_href inlined
            attrs = node.attributes
            href = attrs.get("href")
            if href is not None:
                href = href.strip(_HREF_WS)
                # a skipped scheme's first character (no other character lower-cases to one of them)
                if href and href[0] != "#" and (href[0] not in _SKIP_FIRST
                                                or not href[:11].lower().startswith(_SKIP_SCHEMES)):
                    hrefs.append(href)
                    kinds.append(tag)
                    rel = attrs.get("rel")
                    nfs.append(rel is not None and "nofollow" in rel.lower().split())
        elif tag == "article":
            articles.append(node)
        elif tag in _STRIPPED:
            stripped.append(node)
        elif tag == "title":
            if title is None:
                title = node
        elif tag == "base":
            if base_el is None:
                base_el = node
        else:  # the rare tags read their attributes
            attrs = node.attributes
            if tag == "meta":
                name = (attrs.get("name") or "").strip().lower()
                if name in ("robots", agent_l):
                    _apply_directives(attrs.get("content") or "", flags)
                elif (attrs.get("http-equiv") or "").strip().lower() == "refresh" and refresh_target is None:
                    m = _REFRESH_URL.match(attrs.get("content") or "")
                    if m:
                        refresh_target = m.group(1).strip()
            elif tag == "link":
                rel = (attrs.get("rel") or "").lower().split()
                if "canonical" in rel:
                    href = _clean_href(attrs.get("href"))
                    if href:
                        raw.canonical_hrefs.append(href)
                if "alternate" in rel:
                    add(attrs.get("href"), "link", "nofollow" in rel)
            elif tag in ("frame", "iframe"):
                add(attrs.get("src"), tag, False)
    doc.meta_noindex, doc.meta_nofollow = flags

    if title is not None:
        doc.title = " ".join(title.text(deep=True).split()) or None
    lang = html_el.attributes.get("lang") if html_el is not None else None
    lang = lang or h.get("content-language")
    if lang:
        primary = _LANG_SPLIT.split(lang.strip().lower(), maxsplit=1)[0]
        doc.language = primary or None
    if base_el is not None:
        raw.base_href = (base_el.attributes.get("href") or "").strip() or None

    if refresh_target:
        add(refresh_target, "redirect", False)
    if "link" in h:
        m = re.search(r"<([^>]+)>\s*;[^,]*rel\s*=\s*\"?canonical\b", h["link"], re.IGNORECASE)
        if m:
            raw.header_canonical = m.group(1).strip()

    for node in stripped:  # = tree.strip_tags(list(_STRIPPED)): each one unlinked, its subtree with it
        node.decompose(recursive=False)
    root = tree.body if tree.body is not None else tree.root
    text = root.text(separator=" ") if root is not None else ""
    if raw_text:
        raw.text = text
    else:
        doc.text = " ".join(text.split())
    doc.content_text = _content_text(tree, articles)
    return doc, raw


@dataclass
class _Resolved:
    """Links of many pages after resolution, de-duplication and the cap, in page then document order."""

    canonical: list[str | None]
    page: np.ndarray      # int64 index into the pages given
    to_url: pa.Array      # string
    kind: pa.Array        # string
    nofollow: np.ndarray  # bool


def _resolve_pages(urls: list[str], raws: list[_RawLinks | None], max_outlinks: int | None,
                   schemes: tuple[str, ...] = WEB_SCHEMES) -> _Resolved:
    """Resolve the links and canonical URLs of many pages in two calls (``<base>`` first with
    :func:`resolve_many`, then everything against it with :func:`crawl.url.links.resolve_run_keys`, one
    run of rows per page), then per page: drop results not of ``schemes``, keep each URL once (first
    kind; ``nofollow`` only if every occurrence was) and the first ``max_outlinks``.

    Why: one column call per partition instead of one scalar call per href; the per-page
    de-duplication runs as Arrow hash / NumPy group operations over the whole partition, on the
    distinct answers' ids (no string column of every row is built or hashed but the kept links').
    """
    bases = list(urls)
    with_base = [i for i, r in enumerate(raws) if r is not None and r.base_href]
    if with_base:
        got = resolve_many([raws[i].base_href for i in with_base], [urls[i] for i in with_base],
                           schemes).to_pylist()
        for i, b in zip(with_base, got, strict=True):
            bases[i] = b or urls[i]
    # one run of rows per page (its links against its base), then one per canonical candidate
    hrefs: list[str] = []
    run_bases: list[str] = []
    sizes: list[int] = []
    run_page: list[int] = []
    kinds: list[str] = []
    nfs: list[bool] = []
    for i, r in enumerate(raws):
        if r is None:
            continue
        hrefs += r.hrefs
        kinds += r.kinds
        nfs += r.nofollow
        run_bases.append(bases[i])
        sizes.append(len(r.hrefs))
        run_page.append(i)
    n_links = len(hrefs)
    extra_page: list[int] = []  # canonical candidates, then Link-header canonicals
    for i, r in enumerate(raws):
        if r is not None:
            for c in r.canonical_hrefs:
                hrefs.append(c)
                run_bases.append(bases[i])
                sizes.append(1)
                extra_page.append(i)
    n_cand = len(extra_page)
    for i, r in enumerate(raws):
        if r is not None and r.header_canonical is not None:
            hrefs.append(r.header_canonical)
            run_bases.append(urls[i])
            sizes.append(1)
            extra_page.append(i)
    answers, key_id = resolve_run_keys(hrefs, run_bases, sizes, schemes)
    page = np.repeat(np.asarray(run_page, np.int64), np.asarray(sizes[:len(run_page)], np.int64))

    canonical: list[str | None] = [None] * len(urls)
    header_done = set()
    for j, target in enumerate(answers.take(pa.array(key_id[n_links:])).to_pylist()):
        i = extra_page[j]
        if j < n_cand:
            if canonical[i] is None and target is not None:
                canonical[i] = target
        elif canonical[i] is None and i not in header_done:  # the header counts only without a tag
            canonical[i] = target
            header_done.add(i)

    # links in the distinct answers' terms: the URL of a row = the URL id of its key
    link_key = key_id[:n_links]
    idx = np.flatnonzero(answers.is_valid().to_numpy(zero_copy_only=False)[link_key])
    if len(idx) == 0:
        return _Resolved(canonical, np.zeros(0, np.int64), pa.array([], pa.string()), pa.array([], pa.string()),
                         np.zeros(0, bool))
    enc = pc.dictionary_encode(answers)
    url_of_key = pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    pair = page[idx] * len(enc.dictionary) + url_of_key[link_key[idx]]  # one group per (page, URL)
    group = pc.dictionary_encode(pa.array(pair)).indices.to_numpy(zero_copy_only=False)
    keep = first_rows(group)  # first occurrences, in page and document order
    followed = np.bincount(group, weights=~np.asarray(nfs, dtype=bool)[idx], minlength=len(keep)) > 0
    if max_outlinks is not None:
        pk = page[idx[keep]]
        rank = np.arange(len(keep)) - np.searchsorted(pk, pk, side="left")
        keep = keep[rank < max_outlinks]
    rows = idx[keep]
    return _Resolved(canonical, page[rows], answers.take(pa.array(link_key[rows])),
                     pa.array(kinds, pa.string()).take(pa.array(rows)), ~followed[group[keep]])


def _has_ancestor(node: object, tag: str) -> bool:
    p = node.parent  # type: ignore[attr-defined]
    while p is not None:
        if p.tag == tag:
            return True
        p = p.parent
    return False


def _top_articles(articles: list) -> tuple[list, bool]:
    """(The top-level ``<article>``s still in the document, whether one sits inside an ``<a>``) of the
    ``<article>``s the walk found, in document order: what ``tree.tags("article")`` less those with an
    ``<article>`` ancestor gives after the strip of scripts, styles, ``<noscript>`` and ``<template>``.

    Why: one chase up each article's ancestors answers all three questions (nested, under an ``<a>``,
    detached by the strip: the chase ends below the document node), instead of a walk of the whole
    tree by tag name plus two ancestor chases (~12 us a page; bench/RESULTS.md, "Parse CPU, session 11")."""
    top = []
    under_a = False
    for n in articles:
        a = False
        last = n
        p = n.parent
        while p is not None:
            tag = p.tag
            if tag == "article":
                break
            if tag == "a":
                a = True
            last = p
            p = p.parent
        else:
            if last.tag == "-document":
                top.append(n)
                under_a |= a
    return top, under_a


def _content_text(tree: LexborHTMLParser, articles: list | None = None) -> str:
    """Text of the page's main content: top-level ``<article>``s, else ``<main>`` / ``[role=main]``.

    Why: SimHash and the text digest should follow the content, not the chrome around it. Navigation,
    "related" boxes, footers and rotating ad slots sit outside these HTML5 containers on most sites, and
    they differ between a page and its syndicated copy or change on every request; fingerprinting the
    whole body made such pairs look unrelated. "" (the full text, :attr:`ParsedDoc.fingerprint_text`)
    when there is no container or it holds fewer than 3 words. ``articles``: the ``<article>`` elements
    of the tree in document order, found before the strip of scripts (:func:`_top_articles`); without
    it the tree is searched.
    """
    if articles is None:
        nodes = [n for n in tree.tags("article") if not _has_ancestor(n, "article")]
        under_a = any(_has_ancestor(n, "a") for n in nodes)
    else:
        nodes, under_a = _top_articles(articles)
    if not nodes:
        root = tree.root
        sel = _selector()
        main = (sel.find_first("main", root) or sel.find_first("[role=main]", root)) if root is not None else None
        nodes = main[:1] if main else []
        under_a = bool(nodes) and (nodes[0].tag == "a" or _has_ancestor(nodes[0], "a"))
    if not nodes:
        return ""
    # anchor text is navigation (boilerpipe's link density), not the article's words. The body text is
    # taken already, so every <a> of the tree goes in one C call (Lexbor's tag index), unless a content
    # node is or sits inside an <a>: then only those under each node, as the node's own query finds them
    if not under_a:
        tree.strip_tags(["a"], recursive=True)
    else:
        for n in nodes:
            n.strip_tags(["a"], recursive=True)  # = decompose() of each <a> under n (n too if it is one)
    # whitespace is left as is: SimHash tokenises and text_digest normalises, and collapsing ~30 KB of
    # text costs more than extracting it
    text = " ".join(n.text(separator=" ") for n in nodes)
    return text if _THREE_WORDS.match(text) else ""


# at least three words (str.split()'s whitespace: re's \s for str patterns is str.isspace()); anchored
# and possessive, so linear whatever the text, and no copy of it as split(None, 3) made
_THREE_WORDS = re.compile(r"\s*+\S++\s++\S++\s++\S")


# directly, not through register_parser: that would load the built-in media parsers mid-import
_PARSERS["text/html"] = parse_html
_PARSERS["application/xhtml+xml"] = parse_html


# --- the parse step --------------------------------------------------------------------------------

def parse_document(url: str, payload: bytes, headers: Mapping[str, str] | Iterable[tuple[str, str]],
                   max_outlinks: int) -> ParsedDoc:
    """Pick a parser by (sniffed) MIME type and run it; no parser → a doc with only ``mime_detected``."""
    doc, raw = _parse_document(url, payload, headers, max_outlinks, defer=False)
    return doc


def _parse_document(url: str, payload: bytes, headers: Mapping[str, str] | Iterable[tuple[str, str]],
                    max_outlinks: int, defer: bool) -> tuple[ParsedDoc, _RawLinks | None]:
    """:func:`parse_document`; with ``defer`` an HTML page comes back with its links unresolved and its
    text not yet whitespace-collapsed (:func:`_page_table` does that for all pages at once)."""
    h = _lower_headers(headers)
    ct = h.get("content-type")
    mime = sniff_mime(payload, ct)
    fn = parser_for(mime)
    if fn is None:
        return ParsedDoc(mime_detected=mime), None
    if _bare_mime(ct) != mime:  # e.g. HTML served as text/plain: tell the parser what it really is
        h["content-type"] = mime + ("; " + ct.split(";", 1)[1] if ct and ";" in ct else "")
    raw = None
    if defer and fn is parse_html:
        doc, raw = _parse_html_deferred(url, payload, h, raw_text=True, mime=mime)
    else:
        doc = fn(url, payload, h)
        doc.links = doc.links[:max_outlinks]
    doc.mime_detected = mime
    return doc, raw


Body = tuple[int, Sequence[tuple[str, str]], bytes]
"""One stored document to parse: (row of the fetch table, HTTP response headers, payload)."""


def document_rows(fetch_table: pa.Table) -> np.ndarray:
    """Rows of a fetch table that hold a stored document (int64 indices): fetched ``response`` records
    (http) and ``resource`` records (ftp: a file or a directory listing) written to a WARC file. The
    bodies given to :func:`parse_bodies` are those of these rows, from whatever source."""
    is_doc = pc.and_(pc.equal(fetch_table.column("status"), FETCHED),
                     pc.is_in(fetch_table.column("warc_type"), pa.array(["response", "resource"])))
    is_doc = pc.fill_null(pc.and_(is_doc, pc.is_valid(fetch_table.column("warc_filename"))), False)
    return np.flatnonzero(is_doc.to_numpy(zero_copy_only=False)) if fetch_table.num_rows else np.zeros(0, np.int64)


def warc_bodies(root: str, fetch_table: pa.Table) -> Iterator[Body]:
    """The bodies of :func:`document_rows`, read back from the partition's WARC files: each file once,
    sequentially, taking the records whose offsets the rows point at (a partition's responses are most
    of its file, so one pass beats one range request per row). Files in name order, records in file
    order."""
    return held_bodies(root, fetch_table, {})


def held_bodies(root: str, fetch_table: pa.Table,
                held: Mapping[int, tuple[Sequence[tuple[str, str]], bytes]]) -> Iterator[Body]:
    """The bodies of :func:`document_rows` in :func:`warc_bodies`' order, taken from ``held`` (row ->
    (headers, payload) as the WARC read-back gives them: the fetch task's bodies in memory) where
    it has the row, else read back from the row's WARC file.

    A run of rows not held (past the fetch task's memory budget, or from segments an earlier attempt
    fetched) is read in one sequential pass from its first record's offset (every record is its own
    gzip member), so the parse is the same whichever source a body came from.
    """
    rows = document_rows(fetch_table)
    files = fetch_table.column("warc_filename").take(rows).to_pylist()
    offsets = fetch_table.column("warc_record_offset").take(rows).to_pylist()
    by_file: dict[str, dict[int, int]] = {}
    for row, fname, off in zip(rows.tolist(), files, offsets, strict=True):
        by_file.setdefault(fname, {})[off] = row
    for fname in sorted(by_file):
        wanted = by_file[fname]
        order = sorted(wanted)
        i = 0
        while i < len(order):
            row = wanted[order[i]]
            if row in held:
                headers, payload = held[row]
                yield row, headers, payload
                i += 1
                continue
            j = i + 1
            while j < len(order) and wanted[order[j]] not in held:
                j += 1
            need = {off: wanted[off] for off in order[i:j]}
            last = order[j - 1]
            for rec in iter_records(root, fname, start=order[i]):
                r = need.pop(rec.offset, None)
                if r is not None:
                    yield r, rec.http_headers, rec.payload
                if not need or rec.offset >= last:
                    break
            if need:
                log.warning("%s: %d fetch rows point at offsets with no record", fname, len(need))
            i = j


def parse_partition(root: str, fetch_table: pa.Table, max_outlinks: int,
                    schemes: tuple[str, ...] = WEB_SCHEMES) -> tuple[pa.Table, pa.Table]:
    """Parse every stored response of a fetch partition, bodies read back from its WARC files
    (:func:`warc_bodies`); returns (PAGE_SCHEMA, LINK_SCHEMA) tables (see :func:`parse_bodies`)."""
    return parse_bodies(fetch_table, warc_bodies(root, fetch_table), max_outlinks, schemes)


def parse_bodies(fetch_table: pa.Table, bodies: Iterable[Body], max_outlinks: int,
                 schemes: tuple[str, ...] = WEB_SCHEMES) -> tuple[pa.Table, pa.Table]:
    """Parse ``bodies`` (documents of ``fetch_table``'s rows, from the WARC files or from memory);
    returns (PAGE_SCHEMA, LINK_SCHEMA) tables, pages in the order of ``bodies``.

    Why separate from where bodies come from: the fetch task holds the bodies it just downloaded, so
    parsing them there needs no WARC read-back (bench/warcread_bench.py measures that read). HTML links
    of all pages are resolved in one :func:`crawl.url.resolve_many` call after the pass
    (``_resolve_pages``), keeping URLs of ``schemes`` (the crawl's ``allowed_schemes``); text
    fingerprints are computed for all pages at once (:func:`crawl.fingerprint.fingerprints_many`);
    redirect rows of ``fetch_table`` add a ``redirect`` link from URL to target. Runs with the GC's
    young-generation threshold raised (:func:`crawl.gctune.relaxed_gc`: ~4 % of parse CPU in a worker
    holding 300 k objects, bench/RESULTS.md "Parse CPU, session 4").
    """
    with relaxed_gc():
        return _parse_bodies(fetch_table, bodies, max_outlinks, schemes)


def _parse_bodies(fetch_table: pa.Table, bodies: Iterable[Body], max_outlinks: int,
                  schemes: tuple[str, ...]) -> tuple[pa.Table, pa.Table]:
    all_urls = fetch_table.column("url").to_pylist()
    cts = fetch_table.column("content_type").to_pylist()
    rows: list[int] = []
    docs: list[ParsedDoc] = []
    raws: list[_RawLinks | None] = []        # per page: HTML links still to resolve
    direct: list[tuple[int, Link]] = []      # (page, link) from other parsers, already resolved
    for row, http_headers, payload in bodies:
        url, ct = all_urls[row], cts[row]
        headers = list(http_headers)
        if ct and not any(k.lower() == "content-type" for k, _ in headers):
            headers.append(("Content-Type", ct))
        try:
            doc, raw = _parse_document(url, payload, headers, max_outlinks, defer=True)
        except Exception:  # one hostile document must not fail the partition
            log.exception("parse failed for %s", url)
            doc, raw = ParsedDoc(mime_detected=sniff_mime(payload, ct)), None
        if doc.meta_nofollow:  # a nofollow page contributes no links (its canonical URL still counts)
            if raw is not None:
                raw.hrefs, raw.kinds, raw.nofollow = [], [], []
        elif raw is None:
            direct.extend((len(docs), link) for link in doc.links)
        rows.append(row)
        docs.append(doc)
        raws.append(raw)

    page_urls = [all_urls[r] for r in rows]
    res = _resolve_pages(page_urls, raws, max_outlinks, tuple(schemes))
    link_page, to_url, kind, nofollow = res.page, res.to_url, res.kind, res.nofollow
    if direct:  # merge in page order (stable: each page's links keep their order)
        link_page = np.concatenate([link_page, np.array([p for p, _ in direct], np.int64)])
        to_url = pa.concat_arrays([to_url, pa.array([lk.url for _, lk in direct], pa.string())])
        kind = pa.concat_arrays([kind, pa.array([lk.kind for _, lk in direct], pa.string())])
        nofollow = np.concatenate([nofollow, np.array([lk.nofollow for _, lk in direct], bool)])
        order = pa.array(np.argsort(link_page, kind="stable"))
        link_page, to_url, kind = link_page[order.to_numpy()], to_url.take(order), kind.take(order)
        nofollow = nofollow[order.to_numpy()]

    page_rows = fetch_table.select(["url", "url_hash"]).take(pa.array(np.asarray(rows, np.int64)))
    pages = _page_table(page_rows, docs, raws, res.canonical,
                        np.bincount(link_page, minlength=len(docs)).astype(np.int32))
    status = fetch_table.column("status")
    redirects = fetch_table.filter(pc.fill_null(pc.and_(
        pc.equal(status, REDIRECT), pc.is_valid(fetch_table.column("redirect_location"))), False))
    links_t = pa.Table.from_pydict(
        {"from_url": pa.concat_arrays([pa.array(page_urls, pa.string()).take(pa.array(link_page)),
                                       redirects.column("url").combine_chunks().cast(pa.string())]),
         "to_url": pa.concat_arrays([to_url, redirects.column("redirect_location").combine_chunks()
                                     .cast(pa.string())]),
         "kind": pa.concat_arrays([kind, pa.array(["redirect"] * redirects.num_rows, pa.string())]),
         "nofollow": np.concatenate([nofollow, np.zeros(redirects.num_rows, bool)])},
        schema=LINK_SCHEMA,
    )
    return pages, links_t


def _page_table(rows: pa.Table, docs: list[ParsedDoc], raws: list[_RawLinks | None],
                canonical: list[str | None], outlink_count: np.ndarray) -> pa.Table:
    """PAGE_SCHEMA rows of parsed documents, a column at a time (URL and hash straight from the fetch
    rows, HTML text collapsed as one Arrow column, fingerprints from one
    :func:`crawl.fingerprint.fingerprints_many` call)."""
    text, text_length = _text_column(docs, raws)
    fp_texts = [d.fingerprint_text for d in docs]
    whole = [i for i, (d, r) in enumerate(zip(docs, raws, strict=True)) if r is not None and not d.content_text]
    for i, t in zip(whole, text.take(pa.array(whole, pa.int64())).to_pylist(), strict=True):
        fp_texts[i] = t  # an HTML page without a main-content container: its whole (collapsed) text
    sims, digests = fingerprints_many(fp_texts)
    imgs = [d.image for d in docs]
    cols: dict[str, Any] = {
        "url": rows.column("url"),
        "url_hash": rows.column("url_hash"),
        "title": [d.title for d in docs],
        "text": text,
        "text_length": text_length.astype(np.int32),
        "content_charset": [d.charset for d in docs],
        "content_mime_detected": [d.mime_detected for d in docs],
        "content_languages": [d.language for d in docs],
        # HTML pages: the canonical URL resolved with the links; other documents: their parser's
        "canonical_url": [c if r is not None else d.canonical for d, r, c in zip(docs, raws, canonical, strict=True)],
        "meta_noindex": [d.meta_noindex for d in docs],
        "meta_nofollow": [d.meta_nofollow for d in docs],
        "outlink_count": outlink_count,
        "simhash": sims,
        "text_digest": digests,
        "page_count": [d.page_count for d in docs],
    }
    image_cols = ("image_format", "image_width", "image_height", "image_mode", "exif_datetime", "camera_make",
                  "camera_model")
    if any(imgs):
        for name in image_cols:
            attr = name.removeprefix("image_")
            cols[name] = [getattr(i, attr) if i else None for i in imgs]
    else:
        for name in image_cols:
            cols[name] = pa.nulls(len(docs), PAGE_SCHEMA.field(name).type)
    return pa.Table.from_pydict(cols, schema=PAGE_SCHEMA)


def _text_column(docs: list[ParsedDoc], raws: list[_RawLinks | None]) -> tuple[pa.Array, np.ndarray]:
    """The ``text`` column and its lengths in characters: HTML pages' text whitespace-collapsed
    (``" ".join(text.split())``), other documents' text as their parser gave it.

    Why: ``str.split`` + ``join`` made ~2,000 Python strings per page (0.12 ms of a ~0.9 ms parse),
    Arrow's split + join kernels still ~0.11 ms. The texts are collapsed and encoded in one compiled
    pass into one buffer (:func:`crawl.fingerprint.collapse_many`), which also counts their characters
    (``text_length``; Arrow's ``utf8_length`` was a second pass over the bytes), and the column is built
    from that buffer and its offsets without a copy or a second UTF-8 check.
    """
    texts: list[str] = []
    verbatim: list[bool] = []
    for d, r in zip(docs, raws, strict=True):
        whole = r is None or r.text is None
        texts.append((d.text or "") if whole else r.text)  # type: ignore[union-attr]
        verbatim.append(whole)
    out, offsets, lengths = collapse_many(texts, verbatim)
    if offsets[-1] >= 1 << 31:  # past 32-bit offsets: Arrow's conversion (it chunks)
        column = pa.array([out[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:], strict=True)], pa.string())
    else:
        column = pa.StringArray.from_buffers(len(texts), pa.py_buffer(offsets.astype(np.int32)),
                                             pa.py_buffer(out[:offsets[-1]]))
    return column, lengths


__all__ = [
    "ENTRY_POINT_GROUP", "Body", "ImageInfo", "Link", "ParsedDoc", "Parser", "ParserLoadError", "detect_charset",
    "document_rows", "find_parsers", "held_bodies", "install_parsers", "load_parser", "parse_bodies", "parse_document", "parse_html",
    "parse_partition", "parser", "parser_for", "warc_bodies",
    "register_parser", "sniff_mime", "x_robots_flags",
]
