"""The parser contract and parser plugins. A parser takes ``(url, payload, headers)`` and returns a
:class:`ParsedDoc` (its :class:`Link` list, an :class:`ImageInfo` for images); the built-in HTML parser
(:mod:`crawl.htmlparse`), the media parsers and plugins all return these, and :mod:`crawl.parse` re-exports
them for plugins written against it.

Loading parser plugins: the ``module:function`` names of the ``parsers`` config key and the installed
``recrawl.parsers`` entry points (:func:`find_parsers`), and the :func:`parser` decorator that declares a
plugin's MIME types. :mod:`crawl.parse` registers what these load (``install_parsers``) and re-exports them.

Why a module of its own: a round's driver loads the plugins only to refuse a bad name before anything is
fetched (``crawl.round._check_parsers``), just before round 1's submits; importing :mod:`crawl.parse` for
that (selectolax, FastWARC, the URL and link kernels: ~0.1 s of CPU) was the only reason the CLI process
imported the parse stack at all (bench/RESULTS.md, "(session 9, helper start9)"). This module needs only the
standard library and :mod:`crawl.config`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from crawl.config import PARSER_SPEC_RE

# --- what a parser returns ---------------------------------------------------------------------

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
    # main-content text that fingerprints are computed from (see crawl.htmlparse._content_text; whitespace not
    # collapsed); "" = same as text
    content_text: str = ""
    page_count: int | None = None   # documents with pages (PDF)
    image: ImageInfo | None = None  # images: one row in the images table

    @property
    def fingerprint_text(self) -> str:
        return self.content_text or self.text


Parser = Callable[[str, bytes, Mapping[str, str]], ParsedDoc]


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


# --- plugins ---------------------------------------------------------------------------------------

ENTRY_POINT_GROUP = "recrawl.parsers"
_MIME_RE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$")
_SPEC_RE = PARSER_SPEC_RE  # one definition: crawl.config validates the same shape


class ParserLoadError(ValueError):
    """A parser named by config or entry point cannot be loaded; the message names it."""


def parser(*mime_types: str) -> Callable[[Parser], Parser]:
    """Declare the MIME types a parser function handles, for :func:`install_parsers`::

        @parser("application/x-foo")
        def parse_foo(url: str, payload: bytes, headers: Mapping[str, str]) -> ParsedDoc: ...

    Decorating does not register (importing a plugin module has no effect by itself); naming the
    function in the ``parsers`` config key or in a ``recrawl.parsers`` entry point does.
    """
    for m in mime_types:
        if not _MIME_RE.match(_bare_mime(m)):
            raise ValueError(f"not a MIME type: {m!r} (expected type/subtype)")

    def mark(fn: Parser) -> Parser:
        fn.mime_types = tuple(_bare_mime(m) for m in mime_types)  # type: ignore[attr-defined]
        return fn

    return mark


def load_parser(spec: str, fallback_mime: str | None = None) -> tuple[Parser, tuple[str, ...]]:
    """Import ``module:function`` and return it with its MIME types (from :func:`parser`, else
    ``fallback_mime``, an entry point's name); :class:`ParserLoadError` naming ``spec`` otherwise."""
    if not isinstance(spec, str) or not _SPEC_RE.match(spec):
        raise ParserLoadError(f"parser {spec!r}: expected 'module:function'")
    mod_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # ImportError, AttributeError, or the plugin's own import-time error
        raise ParserLoadError(f"parser {spec!r}: cannot load it: {type(exc).__name__}: {exc}") from None
    return _checked(spec, obj, fallback_mime)


def _checked(name: str, fn: Any, fallback_mime: str | None) -> tuple[Parser, tuple[str, ...]]:
    if not callable(fn):
        raise ParserLoadError(f"parser {name!r}: {fn!r} is not callable")
    mimes = tuple(getattr(fn, "mime_types", ()) or ())
    if not mimes and fallback_mime and _MIME_RE.match(_bare_mime(fallback_mime)):
        mimes = (_bare_mime(fallback_mime),)
    if not mimes:
        raise ParserLoadError(f"parser {name!r}: no MIME types; decorate it with @crawl.parse.parser('type/sub')")
    return fn, mimes


_eps_key: tuple[tuple[str, object], ...] | None = None  # (sys.path entry, _distributions_in) when _eps was read
_eps: list[importlib.metadata.EntryPoint] = []
_dists_at: dict[str, tuple[int, object]] = {}  # sys.path entry -> (its mtime, _distributions_in of it then)
_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg")


def _distributions_in(entry: str) -> object:
    """What of ``sys.path`` entry ``entry`` importlib.metadata finds distributions by: its ``.dist-info``,
    ``.egg-info`` and ``.egg`` entries as (name, inode, mtime) -- a package installed, removed or
    reinstalled there changes it -- listed again only when the entry's own mtime changed. A file (a zip)
    is its (inode, mtime); a missing entry None."""
    path = entry or "."
    try:
        st = os.stat(path)
    except OSError:
        return None
    hit = _dists_at.get(entry)
    if hit is not None and hit[0] == st.st_mtime_ns:
        return hit[1]
    found: object
    if stat.S_ISDIR(st.st_mode):
        dists = []
        with contextlib.suppress(OSError), os.scandir(path) as it:
            for e in it:
                if e.name.endswith(_DIST_SUFFIXES):
                    with contextlib.suppress(OSError):
                        es = e.stat()
                        dists.append((e.name, es.st_ino, es.st_mtime_ns))
        found = frozenset(dists)
    else:
        found = (st.st_ino, st.st_mtime_ns)
    _dists_at[entry] = (st.st_mtime_ns, found)
    return found


def installed_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed ``recrawl.parsers`` entry points, read again only when ``sys.path`` or the
    distributions in one of its entries changed (:func:`_distributions_in`).

    Why: ``importlib.metadata.entry_points`` opens and parses every installed distribution's
    ``entry_points.txt`` on each call, ~11 ms of CPU with this environment's ~230 distributions (more on
    a loaded box), and every parse task (:func:`install_parsers`) and every round's driver
    (:func:`find_parsers`) asked again. Installing, removing or reinstalling a package creates or removes
    its ``.dist-info`` directory in a ``sys.path`` directory; a directory's mtime alone is not the key, as
    a Dask worker's ``sys.path`` holds its scratch directories, which other workers' starts change. A
    distribution edited in place (not reinstalled) is seen by the next process."""
    global _eps_key, _eps
    key = tuple((p, _distributions_in(p)) for p in sys.path)
    if key != _eps_key:
        eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        _eps, _eps_key = eps, key
    return list(_eps)


def find_parsers(names: Iterable[str] = (), eps: Iterable[importlib.metadata.EntryPoint] | None = None
                 ) -> list[tuple[str, Parser, tuple[str, ...]]]:
    """Load (without registering) the parsers of ``eps`` (default: the installed ``recrawl.parsers``
    entry points) and of the ``module:function`` ``names``: ``[(where from, function, MIME types)]``.
    The round's driver calls it to refuse a bad name before anything is fetched."""
    if eps is None:
        eps = installed_entry_points()
    found: list[tuple[str, Parser, tuple[str, ...]]] = []
    for ep in eps:
        try:
            fn = ep.load()
        except Exception as exc:
            raise ParserLoadError(f"parser entry point {ep.name!r} ({ep.value}): cannot load it: "
                                  f"{type(exc).__name__}: {exc}") from None
        found.append((f"entry point {ep.name}", *_checked(ep.value, fn, ep.name)))
    for spec in names:
        found.append((spec, *load_parser(spec)))
    return found

def _bare_mime(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()
