"""crawl.url: WHATWG resolution edges, our canonicalisation policy, hashing, SURT and trap filters."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from crawl.config import CrawlConfig
from crawl.url import (
    InvalidURL,
    canonicalize,
    canonicalize_many,
    filter_reason,
    filter_reasons,
    has_repeated_segments,
    host_of,
    politeness_key,
    registered_domain,
    resolve,
    surt,
    surts,
    url_hash,
    url_hashes,
)

CONFORMANCE = Path(__file__).resolve().parent / "data" / "conformance"
BASE = "http://example.org/foo/bar?q#f"


# ------------------------------------------------------------------------------------------ resolve
@pytest.mark.parametrize(("inp", "base", "want"), [
    ("baz", BASE, "http://example.org/foo/baz"),
    ("../x/./y", BASE, "http://example.org/x/y"),
    ("/a/b/../../..", BASE, "http://example.org/"),
    ("?z", BASE, "http://example.org/foo/bar?z"),
    ("#g", BASE, "http://example.org/foo/bar?q#g"),
    ("", BASE, "http://example.org/foo/bar?q"),
    ("//other.com/p", BASE, "http://other.com/p"),
    ("\\\\other.com\\p\\q", BASE, "http://other.com/p/q"),
    ("https:other.com", BASE, "https://other.com/"),
    ("http:rel", BASE, "http://example.org/foo/rel"),
    ("  \x01http://EXAMPLE.com/a\tb\n ", None, "http://example.com/ab"),
    ("HTTP://www.Bücher.de:80/", None, "http://www.xn--bcher-kva.de/"),
    ("https://h:443/", None, "https://h/"),
    ("http://h:8080", None, "http://h:8080/"),
    ("http://0x7f.0.0.1/", None, "http://127.0.0.1/"),
    ("http://2130706433/", None, "http://127.0.0.1/"),
    ("http://0177.1/", None, "http://127.0.0.1/"),
    ("http://[0:0:0:0:0:0:0:1]/", None, "http://[::1]/"),
    ("http://[::ffff:192.168.0.1]/", None, "http://[::ffff:c0a8:1]/"),
    ("http://h/a b\"<>`{}", None, "http://h/a%20b%22%3C%3E%60%7B%7D"),
    ("http://h/?a b'\"", None, "http://h/?a%20b%27%22"),
    ("http://h/#a b`", None, "http://h/#a%20b%60"),
    ("http://h/é?é#é", None, "http://h/%C3%A9?%C3%A9#%C3%A9"),
    ("http://u s:p@w@h/", None, "http://u%20s:p%40w@h/"),
    ("http://h/%2e/a/.%2E/b", None, "http://h/b"),
])
def test_resolve(inp: str, base: str | None, want: str) -> None:
    assert resolve(inp, base) == want


@pytest.mark.parametrize(("inp", "base"), [
    ("mailto:a@b.c", None), ("javascript:void(0)", BASE), ("ftp://h/", None), ("rel", None),
    ("http://", None), ("http://h:99999/", None), ("http://h:8a/", None), ("http://:80/", None),
    ("http://u@/", None), ("http://[::1/", None), ("http://a<b/", None), ("http://1.2.3.4.5/", None),
    ("http://256.0.0.1/", None), ("http://xn--/", None), ("x", "mailto:a@b"),
])
def test_resolve_rejects(inp: str, base: str | None) -> None:
    assert resolve(inp, base) is None


def test_conformance_inputs_never_crash() -> None:
    cases = json.loads((CONFORMANCE / "url_resolve_cases.json").read_text(encoding="utf-8"))
    for c in cases:
        out = resolve(c["input"], c["base"])
        assert out is None or out.startswith(("http://", "https://"))


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


def test_canonicalize_idempotent_over_varied_urls() -> None:
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


def test_url_hashes() -> None:
    urls = pa.array(["http://a.com/", None, "http://b.com/é"])
    h = url_hashes(urls)
    assert h.dtype == np.uint64
    assert int(h[0]) == xxhash.xxh3_64_intdigest(b"http://a.com/") == url_hash("http://a.com/")
    assert int(h[1]) == 0
    assert int(h[2]) == xxhash.xxh3_64_intdigest("http://b.com/é".encode())
    assert len(set(url_hashes(pa.array([f"http://h/{i}" for i in range(10_000)])).tolist())) == 10_000


# ------------------------------------------------------------------------------- SURT, hosts, keys
@pytest.mark.parametrize(("url", "want"), [
    ("http://www.example.com/", "com,example)/"),
    ("https://Example.com/Path/?B=2&a=1#x", "com,example)/path?a=1&b=2"),
    ("http://www2.sub.example.co.uk:8080/a", "uk,co,example,sub:8080)/a"),
    ("http://10.0.0.1/x", "10.0.0.1)/x"),
    ("http://example.com", "com,example)/"),
])
def test_surt(url: str, want: str) -> None:
    assert surt(url) == want


def test_hosts_domains_politeness_keys() -> None:
    assert host_of("http://User@WWW.Example.com:81/x") == "www.example.com"
    assert host_of("https://EXAMPLE.com/") == "example.com"
    with pytest.raises(InvalidURL, match="relative URL"):
        host_of("nope")
    assert registered_domain("a.b.example.co.uk") == "example.co.uk"
    assert registered_domain("www.example.com") == "example.com"
    assert registered_domain("localhost") == "localhost"
    assert registered_domain("10.1.2.3") == "10.1.2.3"
    url = "http://news.example.co.uk/p"
    assert politeness_key(url, "host") == "news.example.co.uk"
    assert politeness_key(url, "domain") == "example.co.uk"
    assert politeness_key(url, "ip", {"news.example.co.uk": "192.0.2.7"}) == "192.0.2.7"
    assert politeness_key(url, "ip") == "news.example.co.uk"
    with pytest.raises(ValueError):
        politeness_key(url, "planet")


# --------------------------------------------------------------------------------------- filters
CFG = CrawlConfig(max_url_length=80, max_depth=3, max_path_repeats=2, max_path_segments=6,
                  max_query_params=3, allowed_hosts=r"(^|\.)example\.com$")


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


# ------------------------------------------------------------------- vectorised vs scalar agreement
def _varied_urls(n: int, seed: int) -> list[str | None]:
    """Random plus adversarial URLs: every shape the vectorised classifier must either get exactly
    right or hand to the scalar path (escapes of every kind, dot segments, ports, IDNA, IPs, userinfo,
    non-ASCII, whitespace, fragments holding anything, tracking names in any case)."""
    rng = random.Random(seed)
    schemes = ["http://", "https://", "https://", "HTTP://", "hTTps://", "ftp://", "", " http://", "http:/",
               "http:\\\\"]
    hosts = ["example.com", "Example.COM", "a-b.c", "www.x.org", "1.2.3.4", "h.0x1", "h.12", "xn--bcher-kva.de",
             "XN--bcher-kva.de", "b\u00fccher.de", "a..b", "h", "-", "u:p@h.com", "@h.com", "[::1]", "h.com.",
             "ex%41mple.com", "h1.c2", "sub.h-1.com"]
    ports = ["", "", "", ":80", ":443", ":8080", ":0", ":080", ":65535", ":65536", ":", ":8a"]
    pieces = ["a", "B", "0", "-", ".", "..", "/", "//", "%2e", "%2E", "%2f", "%2F", "%41", "%7e", "%7E", "%20",
              "%c3%a9", "%C3%A9", "%", "%4", "%zz", "~", "_", "x y", "\u00e9", "'", "`", "{", "|", "[", "^", ";",
              "=", "&", ":", "@", "!", "$", "(", "*", ",", "+", "\t", "\\", '"', "<"]
    qpieces = ["a=1", "b=2", "A=0", "a=2", "", "", "utm_source=x", "UTM_Medium=y", "gclid", "sid=1", "z", "=v",
               "b", "c=%41", "c=%2f", "d=%c3%a9", "e=%7E", "f=a b", "g='", "h=?", "i=/.", "j=%", "k=%2", "l=\u00e9",
               "m=`", "n={}", "p=%20", "q=%5B"]
    frags = ["", "", "", "#", "#x", "#a b", "#%", "#%zz", "#\u00e9", "#a#b", "#\t", "#?q=1", "#/../"]
    clean = {  # what the vectorised path must handle itself; mixed with the above at random
        "schemes": ["http://", "https://"], "hosts": ["example.com", "Example.COM", "a-b.c", "www.x.org", "h",
                                                      "h1.c2"],
        "ports": ["", "", ":80", ":443", ":8080"],
        "pieces": ["a", "B", "0", "-", "/", "//", "%2F", "%20", "%c3%a9", "%C3%A9", "~", "_", ";", "=", "&", ":",
                   "@", "!", "$", "(", "*", ",", "+", "|", "["],
        "qpieces": qpieces[:12] + ["c=%2f", "d=%c3%a9", "h=?", "i=/.", "n={}", "p=%20", "q=%5B", "r=`"],
    }
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.01:
            out.append(None)
            continue
        c = rng.random() < 0.6
        sc, ho, po, pi, qp = (
            (clean["schemes"] if c and rng.random() < 0.9 else schemes),
            (clean["hosts"] if c and rng.random() < 0.9 else hosts),
            (clean["ports"] if c and rng.random() < 0.9 else ports),
            (clean["pieces"] if c and rng.random() < 0.9 else pieces),
            (clean["qpieces"] if c and rng.random() < 0.9 else qpieces),
        )
        path = "".join(rng.choice(pi) for _ in range(rng.randint(0, 6)))
        if rng.random() < 0.5:
            path = "/" + "/".join(rng.choice(["a", "b", "x", "Y", "%41", "%C3%A9", "a%20b", ".", "..", ".a"])
                                  for _ in range(rng.randint(0, 4))) + rng.choice(["", "/", path])
        elif path and rng.random() < 0.8:
            path = "/" + path
        query = ""
        if rng.random() < 0.6:
            query = "?" + "&".join(rng.choice(qp) for _ in range(rng.randint(0, 5)))
        url = f"{rng.choice(sc)}{rng.choice(ho)}{rng.choice(po)}{path}{query}{rng.choice(frags)}"
        if rng.random() < 0.03:
            url += rng.choice([" ", "\n", "\x00"])
        out.append(url)
    return out


def test_canonicalize_many_vectorised_equals_scalar() -> None:
    from crawl.url.columns import _simple_mask

    urls = _varied_urls(4000, 5) + [
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


def test_surts_vectorised_equals_scalar() -> None:
    from crawl.url.columns import _simple_mask

    urls = _varied_urls(3000, 8) + [
        "http://www.example.com/", "https://Example.com/Path/?B=2&a=1#x", "http://www2.sub.example.co.uk:8080/a",
        "http://10.0.0.1/x", "http://example.com", "http://h:80/A/?b&&a", "http://WWW.h", "http://www.h/",
        "http://www12.a.b/x/", "http://wwwx.a.b/", "https://h:443/?", "http://h/?&&", "http://a.b.c.d.e/?Z=1&z=0&A",
    ]
    canon = canonicalize_many(pa.array(urls, pa.string())).to_pylist()
    for batch in (urls, canon):  # raw links and what the index writer passes: canonical URLs
        arr = pa.array(batch, pa.string())
        assert surts(arr).to_pylist() == [None if u is None else surt(u) for u in batch]
    assert _simple_mask(pa.array(canon, pa.string())).mean() > 0.4  # the vectorised path did real work
    assert surts(pa.array(urls[-13:])).to_pylist()[:3] == ["com,example)/", "com,example)/path?a=1&b=2",
                                                           "uk,co,example,sub:8080)/a"]
    assert surts(pa.array([], pa.string())).to_pylist() == []


def test_filter_reasons_vectorised_equals_scalar_on_varied_urls() -> None:
    urls = [u for u in _varied_urls(3000, 12) if u is not None] + [
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


def test_url_hashes_equal_xxhash_on_every_length_class() -> None:
    """The NumPy XXH3 has a branch per length class (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer)."""
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


def test_block_wise_processing_matches_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Big columns are processed in cache-sized blocks; block borders must not change any answer."""
    from crawl.url import columns, filters

    urls = _varied_urls(3000, 21)
    arr = pa.array(urls, pa.string())
    depths = np.array([i % 5 for i in range(len(urls))])
    canon_want = [None if u is None else canonicalize(u) for u in urls]
    filt_want = filter_reasons(arr, depths, CFG).to_pylist()  # one block: checked against scalar above
    surt_want = [None if u is None else surt(u) for u in urls]
    # repeats (as links are): distinct URLs are checked once, depth per row
    rng = random.Random(5)
    order = [rng.randrange(len(urls)) for _ in range(6000)]
    rep = arr.take(pa.array(order))
    rep_depths = np.array([rng.randint(0, 5) for _ in order])
    rep_want = [filter_reason(urls[i], int(dep), CFG) if urls[i] is not None else "bad_scheme"
                for i, dep in zip(order, rep_depths, strict=True)]
    for mod in (columns, filters):
        monkeypatch.setattr(mod, "_BLOCK_ROWS", 700)
        monkeypatch.setattr(mod, "_DEDUP_MIN_ROWS", 100)
    assert canonicalize_many(arr).to_pylist() == canon_want
    assert filter_reasons(arr, depths, CFG).to_pylist() == filt_want
    assert surts(arr).to_pylist() == surt_want
    got = filter_reasons(rep, rep_depths, CFG).to_pylist()
    assert got == rep_want
    assert {"too_deep", "bad_scheme", "repeated_segments", None} <= set(got)


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
