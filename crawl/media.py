"""The built-in media parsers: PDF (pypdf) and images (Pillow), registered by MIME type in crawl.parse.

Library choices: pypdf is pure Python (no system library, nothing to compile), maintained, and has
resource limits of its own for hostile files (stream, decompression and page-tree caps in
``pypdf.Configuration``); Pillow is already in the environment and reads format, size and EXIF from a
file's header without decoding a pixel.

PDF: title from the document information dictionary, page count, text of the first
``pdf_max_pages`` pages (whitespace-collapsed like HTML text), and the ``/URI`` actions of ``/Link``
annotations as links of kind ``pdf`` (resolved against the catalog's ``/URI /Base`` or the document
URL with :func:`crawl.url.resolve_many`; non-http(s) ones dropped, each URL once). Bounded three ways,
from the crawl config (:class:`MediaLimits`): a PDF above ``pdf_max_bytes`` is stored but not parsed;
text and links come from at most ``pdf_max_pages`` pages; extraction stops at the first page boundary
after ``pdf_max_seconds``. The page count is always the document's own.

Images (PNG, JPEG, GIF, WebP, BMP, TIFF): format, width, height, mode, and from EXIF the
``DateTimeOriginal`` (else ``DateTime``) and the camera make and model, into the ``images`` table.
A file Pillow cannot identify gets a page row without image columns. Files whose header claims more
than Pillow's decompression-bomb limit (~179 M pixels) are refused the same way.
"""

from __future__ import annotations

import io
import logging
import struct
import time
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from crawl.config import CrawlConfig
from crawl.htmlparse import _clean_href
from crawl.parse import ImageInfo, Link, ParsedDoc, parser, register_parser
from crawl.url import resolve_many

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MediaLimits:
    """Caps on parsing one PDF (the config keys of the same names)."""

    pdf_max_bytes: int
    pdf_max_pages: int
    pdf_max_seconds: float

    @classmethod
    def from_config(cls, cfg: CrawlConfig) -> MediaLimits:
        return cls(cfg.pdf_max_bytes, cfg.pdf_max_pages, cfg.pdf_max_seconds)


# the limits of the parse running in this context (a Dask worker runs tasks of any crawl in threads)
_DEFAULT_LIMITS = MediaLimits.from_config(CrawlConfig())  # frozen: safe to share
_LIMITS: ContextVar[MediaLimits] = ContextVar("recrawl_media_limits", default=_DEFAULT_LIMITS)


@contextmanager
def media_limits(limits: MediaLimits) -> Iterator[MediaLimits]:
    """Parse under ``limits`` in this thread/task (parse_task wraps parse_partition in it)."""
    token = _LIMITS.set(limits)
    try:
        yield limits
    finally:
        _LIMITS.reset(token)


# ---- PDF ----------------------------------------------------------------------------------------------------

def _text_of(obj: Any) -> str | None:
    """A PDF string (text or byte string) as str; None for anything else."""
    if obj is None:
        return None
    if isinstance(obj, bytes):
        return obj.decode("latin-1")
    return str(obj)


@parser("application/pdf")
def parse_pdf(url: str, payload: bytes, headers: Mapping[str, str]) -> ParsedDoc:
    """Title, page count, text and link annotations of a PDF, within :class:`MediaLimits`."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    lim = _LIMITS.get()
    if len(payload) > lim.pdf_max_bytes:
        log.info("%s: PDF of %d bytes above pdf_max_bytes=%d, not parsed", url, len(payload), lim.pdf_max_bytes)
        return ParsedDoc()
    deadline = time.monotonic() + lim.pdf_max_seconds
    texts: list[str] = []
    hrefs: list[str] = []
    try:
        reader = PdfReader(io.BytesIO(payload), strict=False)
        meta = reader.metadata
        raw_title = _text_of(meta.title) if meta is not None else None
        title = " ".join(raw_title.split()) or None if raw_title else None
        n_pages = len(reader.pages)
        base = url
        uri_dict = reader.trailer["/Root"].get_object().get("/URI")
        if uri_dict is not None:
            base = _text_of(uri_dict.get_object().get("/Base")) or url
        for i, page in enumerate(reader.pages):
            if i >= lim.pdf_max_pages or time.monotonic() > deadline:
                log.info("%s: PDF text and links from %d of %d pages (pdf_max_pages/pdf_max_seconds)", url, i, n_pages)
                break
            texts.append(page.extract_text() or "")
            for annot in page.get("/Annots") or []:
                a = annot.get_object()
                if a.get("/Subtype") != "/Link":
                    continue
                action = a.get("/A")
                action = action.get_object() if action is not None else None
                if action is not None and action.get("/S") == "/URI":
                    href = _clean_href(_text_of(action.get("/URI")))
                    if href:
                        hrefs.append(href)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError,
            zlib.error) as exc:
        log.info("%s: unreadable PDF: %s: %s", url, type(exc).__name__, exc)
        return ParsedDoc(text=" ".join(" ".join(texts).split()))
    resolved = resolve_many(hrefs, [base] * len(hrefs)).to_pylist() if hrefs else []
    links = [Link(u, "pdf", False) for u in dict.fromkeys(u for u in resolved if u)]
    return ParsedDoc(title=title, text=" ".join(" ".join(texts).split()), links=links, page_count=n_pages)


# ---- images -------------------------------------------------------------------------------------------------

_EXIF_IFD = 0x8769
_DATETIME, _DATETIME_ORIGINAL, _MAKE, _MODEL = 0x0132, 0x9003, 0x010F, 0x0110


def _exif_text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    value = value.replace("\x00", " ").strip()
    return value or None


def _exif_time(value: Any) -> datetime | None:
    text = _exif_text(value)
    if not text:
        return None
    try:  # "YYYY:MM:DD HH:MM:SS"; "0000:00:00 00:00:00" and other placeholders are no date
        return datetime.strptime(text[:19], "%Y:%m:%d %H:%M:%S")
    except ValueError:
        return None


@parser("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/tiff")
def parse_image(url: str, payload: bytes, headers: Mapping[str, str]) -> ParsedDoc:
    """Format, size, mode and EXIF date and camera of an image, from its header only."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(payload)) as im:  # lazy: reads the header, decodes no pixels
            fmt, (width, height), mode = im.format, im.size, im.mode
            if fmt == "TIFF":
                exif = im.getexif()  # TIFF tags are the EXIF; reading them decodes nothing
            else:  # PNG's getexif() would decode the pixels to look for a late eXIf chunk
                exif = Image.Exif()
                raw = im.info.get("exif")
                if raw:
                    exif.load(raw)
            sub = exif.get_ifd(_EXIF_IFD) if len(exif) else {}
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError, SyntaxError,
            struct.error, EOFError) as exc:
        log.info("%s: unreadable image: %s: %s", url, type(exc).__name__, exc)
        return ParsedDoc()
    info = ImageInfo(
        format=fmt or "", width=int(width), height=int(height), mode=mode,
        exif_datetime=_exif_time(sub.get(_DATETIME_ORIGINAL)) or _exif_time(exif.get(_DATETIME)),
        camera_make=_exif_text(exif.get(_MAKE)), camera_model=_exif_text(exif.get(_MODEL)),
    )
    return ParsedDoc(image=info)


for _fn in (parse_pdf, parse_image):
    for _mime in _fn.mime_types:  # type: ignore[attr-defined]
        register_parser(_mime, _fn)
