"""crawl.url.hashing: xxh3 URL hashes, one URL and a column (NumPy XXH3 == xxhash)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

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


# a small alphabet with non-ASCII letters, so that equal neighbours (runs) and empty strings are common
_URLISH = st.text(alphabet="ab/é中\u0130:", max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), _URLISH, st.sampled_from(["", "http://a/", "http://a/é"])), max_size=60),
       st.integers(1, 5))
def test_url_hashes_equal_the_per_url_hash_with_runs_nulls_and_empty_strings(values, repeat) -> None:
    """Every row equals xxhash's digest of its UTF-8 (0 for a null), whether the column is hashed per
    row or per run of equal neighbours: ``repeat`` stretches each value into a run."""
    col = [v for v in values for _ in range(repeat)]
    want = [0 if v is None else xxhash.xxh3_64_intdigest(v.encode("utf-8")) for v in col]
    assert url_hashes(pa.array(col, pa.string())).tolist() == want
    assert url_hashes(col).tolist() == want
    if len(col) > 2:  # an offset slice of a longer buffer, and chunks split inside a run
        assert url_hashes(pa.array(col, pa.string()).slice(1)).tolist() == want[1:]
        mid = len(col) // 2
        assert url_hashes(pa.chunked_array([pa.array(col[:mid], pa.string()),
                                            pa.array(col[mid:], pa.string())])).tolist() == want


def test_a_link_column_hashes_each_run_of_equal_neighbours_once(monkeypatch) -> None:
    """A link file's source column lists each page's links together: one hash call per page, not per
    link (125 k links of 4.4 k pages a 5 k-page partition: 14 -> 1 ms)."""
    import crawl.url.hashing as hashing

    calls = []

    class Counting:
        @staticmethod
        def xxh3_64_intdigest(b: bytes) -> int:
            calls.append(b)
            return xxhash.xxh3_64_intdigest(b)

    monkeypatch.setattr(hashing, "xxhash", Counting)
    pages = [f"http://h{i % 7}.test/p/{i}" for i in range(300)]
    col = [p for p in pages for _ in range(1 + (len(p) % 40))]
    h = url_hashes(pa.array(col, pa.string()))
    assert h.tolist() == [xxhash.xxh3_64_intdigest(u.encode()) for u in col]
    assert len(calls) == len(pages)
