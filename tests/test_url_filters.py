"""crawl.url.filters: trap and scope rules, scalar and column forms."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from url_cases import CFG, varied_urls

from crawl.url import (
    canonicalize_many,
    filter_reason,
    filter_reasons,
    has_repeated_segments,
)

CONFORMANCE = Path(__file__).resolve().parent / "data" / "conformance"
BASE = "http://example.org/foo/bar?q#f"


# --------------------------------------------------------------------------------------- filters


@pytest.mark.parametrize(("url", "depth", "want"), [
    ("http://example.com/a/b", 1, None),
    ("ftp://example.com/a", 0, "bad_scheme"),
    ("http://example.com/" + "x" * 80, 0, "too_long"),
    ("http://example.com/a", 4, "too_deep"),
    ("http://example.com/1/2/3/4/5/6/7", 0, "too_many_segments"),
    ("http://example.com/a/a/a", 0, "repeated_segments"),
    ("http://example.com/a/b/a/b/a/b", 0, "repeated_segments"),
    ("http://example.com/a/b/a/b/a/b/c", 0, "too_many_segments"),
    ("http://example.com/a/b/a/b/a", 0, "repeated_segments"),
    ("http://example.com/x/y/x/z/x", 0, "repeated_segments"),
    ("http://example.com/a/a", 0, None),
    ("http://example.com/p?a=1&b=2&c=3&d=4", 0, "query_explosion"),
    ("http://example.com/p?a=1&&b=2&c=3&", 0, None),
    ("http://other.org/p", 0, "out_of_scope"),
    ("http://sub.example.com:8080/p", 0, None),
    ("http://u:p@evil.org/?h=example.com", 0, "out_of_scope"),
])
def test_filter_reason(url: str, depth: int, want: str | None) -> None:
    assert filter_reason(url, depth, CFG) == want


def test_repeated_segments_threshold_follows_config() -> None:
    assert not has_repeated_segments("/a/b/a/b/a/b", 3)
    assert has_repeated_segments("/a/b/a/b/a/b", 2)
    assert not has_repeated_segments("/a/a/a/a", 0)  # 0 switches the rule off


def test_filter_reasons_vectorised_matches_scalar() -> None:
    rng = random.Random(11)
    hosts = ["example.com", "sub.example.com", "other.org", "[::1]", "u:p@example.com:81", "EXAMPLE.com"]
    segs = ["a", "b", "c", "", "x" * 20]
    urls, depths = [], []
    for _ in range(3000):
        path = "/".join(rng.choice(segs) for _ in range(rng.randint(0, 9)))
        query = "&".join(rng.choice(["a=1", "", "b", "c=2"]) for _ in range(rng.randint(0, 6)))
        scheme = rng.choice(["http", "https", "https", "ftp"])
        urls.append(f"{scheme}://{rng.choice(hosts)}/{path}" + (f"?{query}" if rng.random() < 0.5 else ""))
        depths.append(rng.randint(0, 5))
    got = filter_reasons(pa.array(urls), np.array(depths), CFG).to_pylist()
    want = [filter_reason(u, d, CFG) for u, d in zip(urls, depths, strict=True)]
    assert got == want
    assert len(set(want)) == 8  # every reason and None occur, so the comparison means something
    no_scope = CFG.replace(allowed_hosts="")
    got = filter_reasons(pa.array(urls), np.array(depths), no_scope).to_pylist()
    assert got == [filter_reason(u, d, no_scope) for u, d in zip(urls, depths, strict=True)]
    assert "out_of_scope" not in got
    assert filter_reasons(pa.array([None], pa.string()), np.array([0]), CFG).to_pylist() == ["bad_scheme"]


def test_filter_reasons_vectorised_equals_scalar_onvaried_urls() -> None:
    urls = [u for u in varied_urls(3000, 12) if u is not None] + [
        "http://u@h@example.com/a", "http://[::1/a", "http://[::1]:8/a/a/a", "HTTPS://EXAMPLE.COM//a//a//a",
        "http://example.com/a/a/a/", "http://b\u00fccher.example.com/", "http://\u0130.example.com/",
        "http://example.com?x=1&&y=2&z=3&w", "http://example.com#/a/a/a?a&b&c&d", "http:", "https://",
        "http://example.com/" + "\u00e9" * 70, "http://example.com/" + "e" * 70,
        "http://example.com/a/a/a/", "", "http://example.com/b/b/b/", "h", "http://example.com/c/c/", "",
        "ftp://\u00e9\u00e9.example.com/a", "xx:/\u00e9\u00e9\u00e9@b/:c", "\u00e9\u00e9\u00e9\u00e9\u00e9/a/a/a",
    ]
    urls += [u for u in canonicalize_many(pa.array(urls, pa.string())).to_pylist() if u is not None]
    rng = random.Random(4)
    depths = np.array([rng.randint(0, 5) for _ in urls])
    arr = pa.array(urls, pa.string())
    for cfg in (CFG, CFG.replace(max_path_repeats=1, max_query_params=1),
                # "not other." spelled out (RE2 has no look-ahead), with classes over non-ASCII hosts
                CFG.replace(allowed_hosts=r"^([^o]|o[^t]|ot[^h]|oth[^e]|othe[^r]|other[^.])|\p{L}{2}"),
                CFG.replace(allowed_hosts="", max_path_repeats=0, max_url_length=2048)):
        want = [filter_reason(u, int(dep), cfg) for u, dep in zip(urls, depths, strict=True)]
        assert filter_reasons(arr, depths, cfg).to_pylist() == want, cfg
        assert len(set(want)) >= 4
    assert filter_reasons(pa.array([], pa.string()), np.array([], np.int64), CFG).to_pylist() == []
