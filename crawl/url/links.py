"""Link resolution for a whole partition at once (:func:`resolve_many`), equal to
:func:`crawl.url.parse.resolve` per row.

Each distinct (href, base) pair is resolved by Ada once (menus and footers repeat on every page of a
site). An Arrow column path for the common href shapes (absolute, root-relative, directory-relative,
``../``) used to sit here; ``bench/urls_bench.py`` measured it at 2.2x the per-pair calls' CPU time on
1 M simulated-web links once Ada does the parsing, below the 3x a column form must earn (issue 8).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from crawl.url.columns import _MISSING, _as_string_array
from crawl.url.parse import WEB_SCHEMES, resolve


def resolve_many(
    hrefs: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    bases: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    schemes: tuple[str, ...] = WEB_SCHEMES,
) -> pa.Array:
    """:func:`resolve` of ``hrefs[i]`` against ``bases[i]`` for every row -> Arrow string array, null
    where the result is not a URL of ``schemes`` (http(s) by default) or the href is null."""
    schemes = tuple(schemes)
    h = _as_string_array(hrefs)
    b = _as_string_array(bases)
    if len(b) != len(h):
        raise ValueError(f"resolve_many: {len(h)} hrefs but {len(b)} bases")
    cache: dict[tuple[str | None, str | None], str | None] = {}
    out: list[str | None] = []
    append = out.append
    for key in zip(h.to_pylist(), b.to_pylist(), strict=True):
        r = cache.get(key, _MISSING)
        if r is _MISSING:
            r = cache[key] = None if key[0] is None else resolve(key[0], key[1], schemes)
        append(r)  # type: ignore[arg-type]
    return pa.array(out, type=pa.string())
