"""crawl.url.parse: the URL model (hosts, origins, errors) and WHATWG resolution edges."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ada_url
import pytest
from hypothesis import HealthCheck, given, settings
from url_cases import url_strategy

from crawl.url import InvalidURL, canonicalize, host_of, origin_of, parse_url, politeness_key, resolve

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


# ------------------------------------------------------------------------------------- the URL model
@pytest.mark.parametrize(("url", "host", "port", "user", "password"), [
    ("http://user@127.0.0.1:8080/x", "127.0.0.1", 8080, "user", ""),
    ("http://a:b@127.0.0.1/x", "127.0.0.1", None, "a", "b"),
    ("http://[::1]:81/", "[::1]", 81, "", ""),
    ("http://[::ffff:7f00:1]/", "[::ffff:7f00:1]", None, "", ""),
    ("http://[::FFFF:127.0.0.1]/", "[::ffff:7f00:1]", None, "", ""),
    ("http://[0:0:0:0:0:0:0:1]/", "[::1]", None, "", ""),
    ("http://0x7f.1/", "127.0.0.1", None, "", ""),
    ("http://2130706433/", "127.0.0.1", None, "", ""),
    ("http://0177.0.0.1/", "127.0.0.1", None, "", ""),
    ("http://127.1/", "127.0.0.1", None, "", ""),
    ("http://HOST./", "host", None, "", ""),
    ("http://Example.COM:80/", "example.com", None, "", ""),
    ("https://example.com:443/", "example.com", None, "", ""),
    ("https://example.com:80/", "example.com", 80, "", ""),
    ("http://b\u00fccher.de/", "xn--bcher-kva.de", None, "", ""),
    ("http://ex%41mple.com/", "example.com", None, "", ""),
])
def test_parse_url_hosts(url: str, host: str, port: int | None, user: str, password: str) -> None:
    u = parse_url(url)
    assert (u.host, u.port, u.username, u.password) == (host, port, user, password)
    assert host_of(url) == host
    assert u.origin == origin_of(url) == f"{u.scheme}://{host}" + (f":{port}" if port else "")
    assert u.effective_port == (port or {"http": 80, "https": 443}[u.scheme])
    assert u.is_ip == (host[0].isdigit() or host.startswith("["))


def test_url_fields_and_href() -> None:
    u = parse_url("HTTP://a:b@Example.COM.:8080/p/../q?x=1#frag")
    assert (u.scheme, u.host, u.port, u.path, u.query, u.fragment) == ("http", "example.com", 8080, "/q", "x=1",
                                                                       "frag")
    assert u.href == "http://a:b@example.com.:8080/q?x=1#frag"  # WHATWG's serialisation, as parsed
    assert u.origin == "http://example.com:8080"
    assert parse_url("../x?y", "http://h.test/a/b/c").href == "http://h.test/a/x?y"


@pytest.mark.parametrize(("url", "why"), [
    ("", "relative URL without a base"),
    ("nope", "relative URL without a base"),
    ("ftp://x/", "unsupported scheme 'ftp'"),
    ("mailto:a@b.c", "unsupported scheme 'mailto'"),
    ("http://", "empty host"),
    ("http://./", "empty host"),
    ("http://[::1/", "invalid IPv6 address"),
    ("http://[1::2::3]/", "invalid IPv6 address"),
    ("http://h:99999/", "invalid port '99999'"),
    ("http://h:8a/", "invalid port '8a'"),
    ("http://a b/", "invalid host 'a b'"),
    ("http://256.0.0.1/", "invalid host"),
    ("http://xn--pokxncvks/", "invalid host"),
    ("http://foo.09../", "invalid host"),
])
def test_invalid_urls_raise(url: str, why: str) -> None:
    with pytest.raises(InvalidURL, match=re.escape(why)):
        parse_url(url)
    assert canonicalize(url) is None  # nothing the model refuses gets a canonical form


def test_non_string_is_invalid() -> None:
    with pytest.raises(InvalidURL, match="must be a string"):
        parse_url(None)  # type: ignore[arg-type]


def test_politeness_key_one_queue_per_server() -> None:
    same = {politeness_key(u) for u in ("http://user@HOST:80/", "http://host/", "http://HOST./a", "http://a:b@host/")}
    assert same == {"host"}
    assert politeness_key("http://[::1]/") != politeness_key("http://[::2]/")
    assert politeness_key("http://[::1]/") == "[::1]"
    assert politeness_key("http://0x7f.1/") == politeness_key("http://127.0.0.1/") == "127.0.0.1"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url_strategy())
def test_model_agrees_with_ada_url_public_api(url: str) -> None:
    """Our slicing of Ada's component offsets == ada-url's own getters (the oracle), host aside from
    our trailing-dot rule and the xn-- validation ada-url 4.0.0 lacks."""
    try:
        want = ada_url.parse_url(url)
    except ValueError:
        want = None
    try:
        got = parse_url(url)
    except InvalidURL:
        got = None
    if want is None or want["protocol"] not in ("http:", "https:"):
        assert got is None
        return
    if got is None:  # refused on top of Ada: an invalid xn-- label or a host that is only dots
        assert "xn--" in want["hostname"] or want["hostname"].endswith(".")
        return
    assert got.href == want["href"]
    assert got.scheme + ":" == want["protocol"]
    assert (got.username, got.password) == (want["username"], want["password"])
    assert got.host == want["hostname"].rstrip(".")
    assert ("" if got.port is None else str(got.port)) == want["port"]
    assert got.path == want["pathname"]
    assert ("?" + got.query if got.query else "") == (want["search"] if want["search"] != "?" else "")
    assert ("#" + got.fragment if got.fragment else "") == (want["hash"] if want["hash"] != "#" else "")


@pytest.mark.parametrize(("url", "has_query"), [
    ("http://h/", False), ("http://h/?", True), ("http://h/?a=1#x?y", True), ("http://h/#?x", False),
    ("http://h/%3F", False), ("http://h?", True),
])
def test_has_query_tells_absent_from_empty(url: str, has_query: bool) -> None:
    u = parse_url(url)
    assert u.has_query is has_query
    assert u.query == ("a=1" if "a=1" in url else "")
