"""crawl.url.hashing: xxh3 URL hashes, one URL and a column (NumPy XXH3 == xxhash)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

from crawl.url import (
    url_hash,
    url_hashes,
)

CONFORMANCE = Path(__file__).resolve().parent / "data" / "conformance"
BASE = "http://example.org/foo/bar?q#f"


def test_url_hashes() -> None:
    urls = pa.array(["http://a.com/", None, "http://b.com/é"])
    h = url_hashes(urls)
    assert h.dtype == np.uint64
    assert int(h[0]) == xxhash.xxh3_64_intdigest(b"http://a.com/") == url_hash("http://a.com/")
    assert int(h[1]) == 0
    assert int(h[2]) == xxhash.xxh3_64_intdigest("http://b.com/é".encode())
    assert len(set(url_hashes(pa.array([f"http://h/{i}" for i in range(10_000)])).tolist())) == 10_000


def test_url_hashes_equal_xxhash_on_every_length_class() -> None:
    """Every XXH3 length class (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer) equals the xxhash package."""
    rng = random.Random(6)
    strs = ["".join(rng.choice("abcXYZ/%?=&\u00e9\u4e2d0") for _ in range(n)) for n in list(range(0, 300)) * 4]
    strs += ["http://example.com/" + "x" * n for n in range(0, 400, 7)]
    arr = pa.array(strs + [None], pa.string())
    want = [xxhash.xxh3_64_intdigest(s.encode("utf-8")) for s in strs] + [0]
    assert url_hashes(arr).tolist() == want
    assert url_hashes(arr.slice(5, 100)).tolist() == want[5:105]
    assert url_hashes(pa.chunked_array([arr.slice(0, 3), arr.slice(3)])).tolist() == want
    assert url_hashes(strs[:50]).tolist() == want[:50]
    assert url_hashes(pa.array([], pa.string())).dtype == np.uint64
