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
  gives :func:`crawl.url.resolve`'s answers for a whole partition at once (``crawl.htmlparse._resolve_pages``); only
  results of the crawl's schemes (``allowed_schemes``: http(s), ftp opt-in) are kept, so ``mailto:``, ``javascript:``, ``data:``, ``tel:`` are dropped, as are
  empty and fragment-only hrefs (links to the page itself). A URL that appears twice on a page is
  kept once (first kind; ``nofollow`` only if every occurrence was nofollow).
* robots: ``rel=nofollow`` per link; ``<meta name=robots|RecrawlBot content=…>`` and
  ``X-Robots-Tag`` (generic or ``RecrawlBot:``-prefixed) set ``meta_noindex`` / ``meta_nofollow``
  (``none`` = both). A nofollow page contributes no links in :func:`parse_partition`.
* text: visible body text without ``script/style/noscript/template``, whitespace-collapsed; title
  from ``<title>``. ``simhash`` and ``text_digest`` are computed over the *main content* only (top-level
  ``<article>`` elements, else ``<main>``/``[role=main]``, else the whole text), so boilerplate, ads and
  per-request stamps outside it neither hide near-duplicates nor count as changes. Inside it, the
  SimHash leaves out sentences of fewer than 3 words (:mod:`crawl.fingerprint`): a call-out such as
  "See <a>...</a>." (anchor text is stripped, "See ." stays), which a syndicating site adds to its copy. Language: the ``<html lang>`` primary subtag (else ``Content-Language``); we ship
  no language detector, so this is what the page declares, not CLD2's ISO-639-3 guess.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.fingerprint import collapse_many, fingerprints_many
from crawl.gctune import relaxed_gc
from crawl.htmlparse import (  # noqa: F401 - parse_html, x_robots_flags re-exported as before
    _parse_html_deferred,
    _RawLinks,
    _resolve_pages,
    parse_html,
    x_robots_flags,
)
from crawl.parsers import (  # noqa: F401 - re-exported: plugins and callers use them from here
    _MIME_RE,
    ENTRY_POINT_GROUP,
    ImageInfo,
    Link,
    ParsedDoc,
    Parser,
    ParserLoadError,
    _bare_mime,
    _lower_headers,
    find_parsers,
    installed_entry_points,
    load_parser,
    parser,
)
from crawl.records import FETCHED, LINK_SCHEMA, PAGE_SCHEMA, REDIRECT
from crawl.sniff import (
    _cp1252_utf8,
    _utf8_valid,
    detect_charset,
    sniff_mime,
)
from crawl.url import WEB_SCHEMES
from crawl.warc import iter_records

log = logging.getLogger(__name__)

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


def warm_up() -> None:
    """Load (or compile) parse's compiled kernels now: the fingerprint and text-column passes
    (:func:`crawl.fingerprint.warm_up`) and the charset passes of :func:`_lexbor_input`, with the
    argument types parse gives them. The embedded workers' preload calls this in the background
    (:func:`crawl.warmup.import_task_modules`) so that the first parse task does not wait on it."""
    from crawl.fingerprint import warm_up as fingerprint_warm_up

    fingerprint_warm_up()
    _utf8_valid("caf\u00e9 \u2026 warm-up".encode())
    _cp1252_utf8("caf\u00e9 \u2026 warm-up".encode("cp1252"))


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
