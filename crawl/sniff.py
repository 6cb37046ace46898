"""What a fetched body is: its MIME type (sniffed when the declared one is missing, generic or wrong)
and its character encoding (WHATWG's order: BOM, HTTP charset, ``<meta charset>``, then UTF-8 if the
bytes are valid UTF-8, else windows-1252), and the bytes Lexbor is given for it.

Split out of :mod:`crawl.parse` so that the parse step reads as the parse; these answers are facts
about the bytes that any parser (HTML here, plugins by MIME type) starts from.
"""

from __future__ import annotations

import codecs
import functools
import re

import numpy as np

from crawl.parsers import _bare_mime

# --- MIME sniffing -----------------------------------------------------------------------------------

_HTML_SNIFF = re.compile(
    rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body|title|script|iframe|h1|div|font|table|a|"
    rb"style|br|p|meta|link)[\s>/]",
    re.IGNORECASE | re.DOTALL,
)
_MAGIC = (
    (b"%PDF-", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x1f\x8b", "application/gzip"),
    (b"PK\x03\x04", "application/zip"),
)
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_SNIFF_DECLARED = {"", "text/plain", "application/octet-stream", "unknown/unknown", "application/unknown"}


def sniff_mime(payload: bytes, declared: str | None = None) -> str:
    """The MIME type the bytes look like, falling back to the declared one.

    A declared type is trusted unless it is missing or generic (``text/plain``,
    ``application/octet-stream``), or it says HTML while the bytes start with a binary signature.
    """
    decl = _bare_mime(declared)
    start = next((len(bom) for bom in _BOMS if payload.startswith(bom)), 0)
    # no copy of the head for the common case, a declared HTML page (this runs for every page)
    magic = next((m for sig, m in _MAGIC if payload.startswith(sig, start)), None)
    if decl in ("text/html", "application/xhtml+xml"):
        return magic or decl
    if decl not in _SNIFF_DECLARED:
        return decl
    head = payload[start:1024]
    if magic:
        return magic
    if _HTML_SNIFF.match(head):
        return "text/html"
    stripped = head.lstrip()
    if stripped.startswith(b"<?xml"):
        return "application/xhtml+xml" if b"<html" in head.lower() else "application/xml"
    if b"\x00" in head:
        return "application/octet-stream"
    return decl or "text/plain"


# --- charset -------------------------------------------------------------------------------------

_META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
_CT_CHARSET = re.compile(r"charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
_WINDOWS_1252_ALIASES = {"latin_1", "iso8859-1", "ascii", "cp1252"}


def _charset_name(label: str | None) -> str | None:
    """WHATWG-ish label → Python codec name we decode with; None for unknown labels."""
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip().strip("\"'")).name
    except LookupError:
        return None
    if name in _WINDOWS_1252_ALIASES:
        return "cp1252"
    return name


def _display_charset(codec: str) -> str:
    return {"utf-8": "UTF-8", "cp1252": "windows-1252", "utf-16-le": "UTF-16LE",
            "utf-16-be": "UTF-16BE"}.get(codec, codec)


def detect_charset(payload: bytes, content_type: str | None) -> tuple[str, int]:
    """(codec name, bytes to skip) by BOM, HTTP charset, meta charset, then UTF-8/windows-1252."""
    return _detect_charset(payload, content_type)[:2]


def _detect_charset(payload: bytes, content_type: str | None) -> tuple[str, int, bool]:
    """:func:`detect_charset` and whether the payload is already known to be valid UTF-8."""
    if payload.startswith(codecs.BOM_UTF8):
        return "utf-8", 3, False
    if payload.startswith(codecs.BOM_UTF16_LE):
        return "utf-16-le", 2, False
    if payload.startswith(codecs.BOM_UTF16_BE):
        return "utf-16-be", 2, False
    if content_type:
        m = _CT_CHARSET.search(content_type)
        name = _charset_name(m.group(1)) if m else None
        if name:
            return name, 0, False
    m = _META_CHARSET.search(payload[:4096])
    if m:
        name = _charset_name(m.group(1).decode("ascii", "replace"))
        if name:
            # a meta tag cannot truthfully declare UTF-16 (it would not be ASCII-readable): WHATWG → UTF-8
            return ("utf-8" if name.startswith("utf-16") else name), 0, False
    try:
        payload.decode("utf-8")
        return "utf-8", 0, True
    except UnicodeDecodeError:
        return "cp1252", 0, False


def _lexbor_input(payload: bytes, codec: str, skip: int, valid_utf8: bool, compiled: bool = False) -> str | bytes:
    """What Lexbor parses: the payload's own bytes when they are UTF-8 and valid, else the text decoded
    (bad bytes as U+FFFD); with ``compiled`` (the batch parse, which loads parse's compiled kernels for
    its fingerprints anyway) a windows-1252 page's UTF-8 bytes.

    Why: selectolax parses bytes as UTF-8 and a ``str`` by encoding it to UTF-8 first, so for valid
    UTF-8 both give Lexbor the same bytes; skipping the decode and the re-encode saves ~0.04 ms of a
    ~0.1 ms parse (~0.03 when the strict decode below has to check validity). With ``compiled`` that
    check is :func:`crawl.fingerprint_kernel.utf8_valid` (no ``str`` built: ~3.5 vs ~6.6 us for ~20 KB),
    and windows-1252 goes to UTF-8 in one table pass (:func:`_cp1252_utf8`: ~11 vs ~22 us for decode
    plus selectolax's encode); the bytes are the same (bench/RESULTS.md, "Parse CPU, session 9")."""
    if codec == "utf-8":
        body = payload[skip:] if skip else payload
        if valid_utf8 or body.isascii():
            return body
        if compiled:
            if _utf8_valid(body):
                return body
        else:
            try:
                body.decode("utf-8")
                return body
            except UnicodeDecodeError:
                pass
    elif compiled and codec == "cp1252":
        return _cp1252_utf8(payload[skip:] if skip else payload)
    return payload[skip:].decode(codec, errors="replace")


def _utf8_valid(body: bytes) -> bool:
    """``body.decode("utf-8")`` would succeed (:func:`crawl.fingerprint_kernel.utf8_valid`)."""
    from crawl.fingerprint_kernel import utf8_valid

    return bool(utf8_valid(np.frombuffer(body, np.uint8), np.frombuffer(body, np.uint64, len(body) >> 3)))


@functools.cache
def _cp1252_table() -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 of each byte's character, offsets): Python's own ``cp1252`` codec, byte by byte, the five
    bytes it leaves undefined as U+FFFD (``errors="replace"``); bytes below 0x80 are themselves."""
    parts = [bytes([c]).decode("cp1252", errors="replace").encode("utf-8") for c in range(256)]
    assert all(parts[c] == bytes([c]) for c in range(0x80))
    off = np.zeros(257, np.int64)
    np.cumsum([len(p) for p in parts], out=off[1:])
    return np.frombuffer(b"".join(parts), np.uint8), off


def _cp1252_utf8(body: bytes) -> bytes:
    """``body.decode("cp1252", errors="replace").encode("utf-8")`` in one compiled pass
    (:func:`crawl.fingerprint_kernel.single_byte_to_utf8`): windows-1252 is one byte per character."""
    from crawl.fingerprint_kernel import single_byte_to_utf8

    table, off = _cp1252_table()
    out = np.empty(3 * len(body), np.uint8)
    n = single_byte_to_utf8(np.frombuffer(body, np.uint8), np.frombuffer(body, np.uint64, len(body) >> 3), table, off,
                            out)
    return out[:n].tobytes()
