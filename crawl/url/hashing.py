"""URL hashes: xxh3_64 of the canonical URL (the CrawlDb key), one URL or a column at once.

The column form is the xxhash package over the column's bytes, one C call per URL. A NumPy
re-implementation of XXH3 over the Arrow data buffer used to sit here; ``bench/urls_bench.py`` measured
it at 1.0x the per-URL calls' CPU time on 1 M URLs (and this binary-column form faster still), below
the 3x a vectorised path must earn to stay (issue 8), so it went.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import xxhash

from crawl.url.columns import _as_string_array


def url_hash(url: str) -> int:
    """xxh3_64 of the URL's UTF-8 as given; pass the canonical URL (the CrawlDb key)."""
    return xxhash.xxh3_64_intdigest(url.encode("utf-8"))


def url_hashes(urls: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> np.ndarray:
    """:func:`url_hash` over canonical URLs -> uint64 array (null -> 0)."""
    arr = _as_string_array(urls)
    if len(arr) == 0:
        return np.zeros(0, np.uint64)
    raw = arr.fill_null("").cast(pa.binary()).to_pylist()
    out = np.fromiter(map(xxhash.xxh3_64_intdigest, raw), np.uint64, len(raw))
    if arr.null_count:
        out[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out
