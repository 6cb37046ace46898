"""crawl.url.canon: our canonicalisation policy, scalar and column forms."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from url_cases import varied_urls

from crawl.url import (
    canonicalize,
    canonicalize_many,
    resolve,
)

CONFORMANCE = Path(__file__).resolve().parent / "data" / "conformance"
BASE = "http://example.org/foo/bar?q#f"


# ------------------------------------------------------------------------------------- canonicalize
@pytest.mark.parametrize(("url", "want"), [
    ("HTTP://WWW.Example.COM", "http://www.example.com/"),
    ("http://example.com:80/a#frag", "http://example.com/a"),
    ("https://example.com:443/a/", "https://example.com/a/"),       # trailing slash kept
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/%7euser/%2fx%2F%aa", "http://example.com/~user/%2Fx%2F%AA"),
    ("http://example.com/?b=2&a=1&b=1", "http://example.com/?a=1&b=2&b=1"),  # stable by name
    ("http://example.com/p?", "http://example.com/p"),
    ("http://example.com/p?&&", "http://example.com/p"),
    ("http://example.com/p?utm_source=x&UTM_Medium=y&gclid=1", "http://example.com/p"),
    ("http://example.com/p?id=3&fbclid=z&sid=9", "http://example.com/p?id=3"),
    ("http://bücher.de/ä", "http://xn--bcher-kva.de/%C3%A4"),
    ("http://user:Pw@Example.com:8080/x", "http://example.com:8080/x"),  # userinfo dropped
    ("http://Example.COM./x", "http://example.com/x"),  # the URL model's host: no trailing dot
    ("http://example.com/p?%61=%62%2B", "http://example.com/p?a=b%2B"),
])
def test_canonicalize(url: str, want: str) -> None:
    assert canonicalize(url) == want
    assert canonicalize(want) == want


def test_canonicalize_rejects_non_http() -> None:
    for url in ("ftp://h/x", "mailto:x@y", "relative/path", "http://h:bad/", ""):
        assert canonicalize(url) is None


def test_tracking_params_configurable() -> None:
    url = "http://h/p?ref=abc&utm_source=x&a=1"
    assert canonicalize(url, tracking_params=("REF",)) == "http://h/p?a=1&utm_source=x"
    assert canonicalize(url, tracking_params=()) == "http://h/p?a=1&ref=abc&utm_source=x"


def test_canonicalize_idempotent_overvaried_urls() -> None:
    cases = json.loads((CONFORMANCE / "url_resolve_cases.json").read_text(encoding="utf-8"))
    urls = [c["href"] for c in cases if c.get("href")] + [c["input"] for c in cases]
    rng = random.Random(3)
    for _ in range(2000):
        urls.append("http://H.example/" + "".join(
            rng.choice(["a", "%7E", "%7e", "%2f", "..", ".", "/", "?", "&", "=", "#", "é", " ", "%"])
            for _ in range(rng.randint(0, 10))))
    checked = 0
    for u in urls:
        once = canonicalize(u)
        if once is None:
            continue
        checked += 1
        assert canonicalize(once) == once, u
        assert resolve(once, None) == once, u  # a canonical URL is also a WHATWG-serialised one
    assert checked > 1500


def test_canonicalize_many_matches_scalar_and_keeps_nulls() -> None:
    urls = ["http://A.com/x?b=1&a=2", None, "mailto:x", "http://A.com/x?b=1&a=2", "https://b.org"]
    out = canonicalize_many(urls)
    assert out.type == pa.string()
    assert out.to_pylist() == [canonicalize(u) if u is not None else None for u in urls]
    chunked = pa.chunked_array([pa.array(urls[:2]), pa.array(urls[2:])])
    assert canonicalize_many(chunked).to_pylist() == out.to_pylist()
    assert canonicalize_many(pa.array(urls), tracking_params=("a",)).to_pylist()[0] == "http://a.com/x?b=1"


def test_canonicalize_many_vectorised_equals_scalar() -> None:
    from crawl.url.columns import _simple_mask

    urls = varied_urls(4000, 5) + [
        "http://h", "http://h?", "http://h?&", "http://h#", "http://h:80", "https://h:443?b&a", "http://h:81",
        "http://H.COM/P?B=1&a=2#F", "http://h/?b=1&a=2&b=0&a=1", "http://h/p?utm_source=1", "http://h/%7e",
        "http://h/a?%61=1", "http://h/?a=%c3%a9", "http://h/?a=%C3%a9", "http://h/#%c3",
    ]
    arr = pa.array(urls, pa.string())
    want = [None if u is None else canonicalize(u) for u in urls]
    assert canonicalize_many(arr).to_pylist() == want
    simple = _simple_mask(arr)
    # the comparison means something only if both paths carry a real share of the rows
    assert 0.15 < simple.mean() < 0.9, simple.mean()
    assert sum(w is not None for w, s in zip(want, simple, strict=True) if not s) > 200
    for tracking in [(), ("A", "b"), ("sid",)]:
        want_t = [None if u is None else canonicalize(u, tracking_params=tracking) for u in urls]
        assert canonicalize_many(arr, tracking_params=tracking).to_pylist() == want_t
    # slices and chunked input read the right bytes
    assert canonicalize_many(arr.slice(1000, 500)).to_pylist() == want[1000:1500]
    chunked = pa.chunked_array([arr.slice(0, 7), arr.slice(7)])
    assert canonicalize_many(chunked).to_pylist() == want
    assert canonicalize_many(pa.array([], pa.string())).to_pylist() == []
    assert canonicalize_many([None, None]).to_pylist() == [None, None]
    # >= 10k rows with repeats: the distinct strings are canonicalised once and spread back
    rng = random.Random(2)
    order = [rng.randrange(len(urls)) for _ in range(12_000)]
    assert canonicalize_many(arr.take(pa.array(order))).to_pylist() == [want[i] for i in order]


def test_canonicalize_many_realistic_links_mostly_vectorised() -> None:
    """Resolved links (what parse hands over) take the vectorised path almost always, and agree."""
    from crawl.url.columns import _simple_mask

    rng = random.Random(9)
    base = "https://www.example.com/news/2024/index.html"
    hrefs = ["../a", "b?x=1&a=2", "/c/d/", "?page=2", "#top", "//cdn.example.net/x.js",
             "https://Other.ORG/p?utm_source=z&id=3#f", "e%20f/g", "caf%C3%A9", "/s?q=a%2Fb&sid=9"]
    urls = [resolve(rng.choice(hrefs) + (str(rng.randint(0, 50)) if rng.random() < 0.5 else ""), base)
            for _ in range(3000)]
    arr = pa.array(urls, pa.string())
    assert _simple_mask(arr).mean() > 0.99
    assert canonicalize_many(arr).to_pylist() == [canonicalize(u) for u in urls]


@pytest.mark.parametrize("url, canon", [
    ("http://a.sim.test/x;jsessionid=AB12?id=2", "http://a.sim.test/x?id=2"),
    ("http://A.sim.test/;JSESSIONID=AB12", "http://a.sim.test/"),
    ("http://a.sim.test/a;v=1/b;sid=3", "http://a.sim.test/a;v=1/b"),  # non-session params stay
    ("http://a.sim.test/f.bin;phpsessid=1F#x", "http://a.sim.test/f.bin"),
])
def test_session_ids_in_path_parameters_are_dropped(url, canon):
    assert canonicalize(url) == canon
    assert canonicalize_many([url, canon]).to_pylist() == [canon, canon]
    assert canonicalize(canon) == canon
