"""URL hashes: xxh3_64 of the canonical URL (the CrawlDb key), one URL or a column at once.

The column form is the xxhash package over the column's bytes, one C call per URL, or one per run of
equal adjacent URLs: a link column lists each page's links together, so its sources repeat in runs (a
5 k-page partition's 125 k links come from 4.4 k pages), found by one Arrow comparison of the column with
itself shifted by a row (~3 ns a row); each run's first value is hashed and the hash repeated. A NumPy
re-implementation of XXH3 over the Arrow data buffer used to sit here; ``bench/urls_bench.py`` measured
it at 1.0x the per-URL calls' CPU time on 1 M URLs (and this binary-column form faster still), below
the 3x a vectorised path must earn to stay (issue 8), so it went. Hashing the distinct values of a
column (a dictionary encoding first) was measured too: link targets repeat ~2x in a partition, and the
encoding cost what the calls saved.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from crawl.url.columns import _as_string_array


def url_hash(url: str) -> int:
    """xxh3_64 of the URL's UTF-8 as given; pass the canonical URL (the CrawlDb key)."""
    return xxhash.xxh3_64_intdigest(url.encode("utf-8"))


def _hash_rows(arr: pa.Array) -> np.ndarray:
    """xxh3_64 of every row's bytes (a null row's too: it reads as b"")."""
    raw = arr.fill_null("").cast(pa.binary()).to_pylist()
    return np.fromiter(map(xxhash.xxh3_64_intdigest, raw), np.uint64, len(raw))


def url_hashes(urls: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> np.ndarray:
    """:func:`url_hash` over canonical URLs -> uint64 array (null -> 0)."""
    arr = _as_string_array(urls)
    if len(arr) == 0:
        return np.zeros(0, np.uint64)
    n = len(arr)
    # a row equal to the one before it (two nulls are not equal: null rows hash to 0 below anyway)
    start = np.ones(n, bool)
    start[1:] = ~pc.equal(arr.slice(1), arr.slice(0, n - 1)).fill_null(False).to_numpy(zero_copy_only=False)
    firsts = np.flatnonzero(start)
    if 2 * firsts.size <= n:  # runs: hash each run's first row, repeat it over the run
        out = _hash_rows(arr.take(pa.array(firsts)))[np.cumsum(start) - 1]
    else:
        out = _hash_rows(arr)
    if arr.null_count:
        out[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out
