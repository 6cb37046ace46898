"""HTML to a :class:`~crawl.parsers.ParsedDoc`: one Lexbor parse and one CSS walk give the title, the
visible and main-content text, the robots directives and the raw links; :func:`_resolve_pages` resolves
the links and canonical URLs of a whole partition at once. The policy is in :mod:`crawl.parse`'s
docstring; the parse step (:func:`crawl.parse.parse_bodies`) calls :func:`_parse_html_deferred` and
resolves later, :func:`parse_html` is the one-page form registered for ``text/html``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from selectolax.lexbor import LexborCSSSelector, LexborHTMLParser

from crawl.config import PRODUCT_TOKEN
from crawl.parsers import Link, ParsedDoc, _lower_headers
from crawl.sniff import _detect_charset, _display_charset, _lexbor_input, sniff_mime
from crawl.url import WEB_SCHEMES, resolve_many
from crawl.url.links import first_rows, resolve_run_keys

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
    """Parse an HTML document (the policy is in :mod:`crawl.parse`'s docstring)."""
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
    (:func:`crawl.parse._parse_document`), so neither is done twice."""
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
    # anchor text is navigation (boilerpipe's link density), not the article's words (what is left of a
    # call-out, "See <a>...</a>." -> "See .", is a sentence too short for the SimHash). The body text is
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
