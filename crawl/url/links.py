"""Link resolution for a whole partition at once (:func:`resolve_many`), equal to
:func:`crawl.url.parse.resolve` per row.

Ada resolves each distinct (href, base) pair once (menus and footers repeat on every page of a
site), and each distinct absolute ``http://`` / ``https://`` href once whatever its base: after a
special scheme and ``//`` the WHATWG parser never reads the base (special authority states), so
the ~40 % of simulated-web hrefs that are absolute cost one dictionary lookup on later pages. An Arrow
column path for the common href shapes (absolute, root-relative, directory-relative, ``../``) used
to sit here; ``bench/urls_bench.py`` measured it at 2.2x the per-pair calls' CPU time on 1 M
simulated-web links once Ada does the parsing, below the 3x a column form must earn (issue 8).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from crawl.url.columns import _MISSING, _as_string_array
from crawl.url.parse import WEB_SCHEMES, resolve

# exact lower-case prefixes only: "HTTP://x" and "http:x" take the per-pair path ("http:x" is relative
# to an http base)
_ABSOLUTE = ("http://", "https://")


def _pylist(values: Sequence[str | None] | pa.Array | pa.ChunkedArray) -> list[str | None]:
    if isinstance(values, list):
        return values
    return _as_string_array(values).to_pylist()


def resolve_many(
    hrefs: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    bases: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    schemes: tuple[str, ...] = WEB_SCHEMES,
) -> pa.Array:
    """:func:`resolve` of ``hrefs[i]`` against ``bases[i]`` for every row -> Arrow string array, null
    where the result is not a URL of ``schemes`` (http(s) by default) or the href is null."""
    schemes = tuple(schemes)
    h = _pylist(hrefs)
    b = _pylist(bases)
    if len(b) != len(h):
        raise ValueError(f"resolve_many: {len(h)} hrefs but {len(b)} bases")
    cache: dict[tuple[str | None, str | None] | str, str | None] = {}
    out: list[str | None] = []
    append = out.append
    get = cache.get
    for href, base in zip(h, b, strict=True):
        if href is None:
            append(None)
            continue
        key = href if href.startswith(_ABSOLUTE) else (href, base)
        r = get(key, _MISSING)
        if r is _MISSING:
            r = cache[key] = resolve(href, None if key is href else base, schemes)
        append(r)  # type: ignore[arg-type]
    return pa.array(out, type=pa.string())
