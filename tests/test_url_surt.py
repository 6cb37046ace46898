"""crawl.url.surt: SURT keys, registered domains, politeness keys."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from url_cases import varied_urls

from crawl.url import (
    InvalidURL,
    canonicalize_many,
    host_of,
    politeness_key,
    registered_domain,
    surt,
    surts,
)

CONFORMANCE = Path(__file__).resolve().parent / "data" / "conformance"
BASE = "http://example.org/foo/bar?q#f"


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


def test_surts_vectorised_equals_scalar() -> None:
    from crawl.url.columns import _simple_mask

    urls = varied_urls(3000, 8) + [
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
