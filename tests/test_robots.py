"""crawl.robots: the RFC 9309 edges we fix around Protego, and the fetch-status semantics."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawl.config import DEFAULT_USER_AGENT, PRODUCT_TOKEN
from crawl.robots import (
    RobotsPolicy,
    crawl_delay,
    decode_robots,
    is_allowed,
    policy_from_response,
    prepare,
    product_token,
    request_rate,
    sitemaps,
)

UA = DEFAULT_USER_AGENT


def test_bom_at_start_is_skipped() -> None:
    txt = "\ufeffUser-agent: RecrawlBot\nDisallow: /private\n"
    assert not is_allowed(txt, UA, "http://h/private/x")
    assert is_allowed(txt, UA, "http://h/public")
    # the byte form as a server sends it
    p = policy_from_response(200, b"\xef\xbb\xbf" + txt[1:].encode(), 10_000)
    assert not p.allowed("http://h/private/x")


def test_unknown_line_between_user_agents_does_not_end_group() -> None:
    txt = "User-agent: RecrawlBot\nInvalid-Unknown-Line: x\nUser-agent: *\nDisallow: /\n"
    assert not is_allowed(txt, UA, "http://h/page")
    assert "invalid-unknown-line" not in prepare(txt, "recrawlbot").lower()


def test_known_record_between_user_agents_keeps_group_too() -> None:
    # Sitemap is a non-group record (RFC 9309 §2.2.4): it must not split the group either.
    txt = "User-agent: other\nSitemap: http://h/s.xml\nUser-agent: RecrawlBot\nDisallow: /x\n"
    assert not is_allowed(txt, UA, "http://h/x")


def test_product_token_matching() -> None:
    assert product_token(UA) == "recrawlbot"
    assert product_token("  FooBot/2.1 extra") == "foobot"
    txt = "User-agent: Recrawl\nDisallow: /\n\nUser-agent: RECRAWLBOT/9\nDisallow: /only\n"
    # 'Recrawl' is a different product (no prefix matching); the version suffix is ignored.
    assert is_allowed(txt, UA, "http://h/page")
    assert not is_allowed(txt, UA, "http://h/only/x")
    # a specific group replaces '*' entirely
    txt2 = "User-agent: *\nDisallow: /\n\nUser-agent: recrawlbot\nDisallow: /no\n"
    assert is_allowed(txt2, UA, "http://h/page")
    assert not is_allowed(txt2, "OtherBot/1", "http://h/page")


def test_longest_match_and_wildcards_come_from_protego() -> None:
    txt = "User-agent: *\nDisallow: /a\nAllow: /a/b\nDisallow: /*.pdf$\n"
    assert not is_allowed(txt, UA, "http://h/a/x")
    assert is_allowed(txt, UA, "http://h/a/b/c")
    assert not is_allowed(txt, UA, "http://h/doc.pdf")
    assert is_allowed(txt, UA, "http://h/doc.pdf?x=1")


def test_robots_txt_itself_always_allowed() -> None:
    txt = "User-agent: *\nDisallow: /\n"
    assert is_allowed(txt, UA, "http://h/robots.txt")
    assert not is_allowed(txt, UA, "http://h/robots.txt.bak")
    p = policy_from_response(503, None, 1000)
    assert p.allowed("http://h/robots.txt") and not p.allowed("http://h/")


def test_crawl_delay_request_rate_sitemaps() -> None:
    txt = (
        "Sitemap: http://h/s1.xml\nUser-agent: RecrawlBot\nCrawl-delay: 2.5\nRequest-rate: 3/10\n"
        "User-agent: *\nCrawl-delay: 9\nSitemap: http://h/s2.xml\n"
    )
    assert crawl_delay(txt, UA) == 2.5
    assert crawl_delay(txt, "Other") == 9
    assert request_rate(txt, UA) == (3, 10)
    assert request_rate(txt, "Other") is None
    assert sitemaps(txt) == ["http://h/s1.xml", "http://h/s2.xml"]
    p = policy_from_response(200, txt.encode(), 10_000, agent=UA)
    assert p.crawl_delay == 2.5
    assert p.sitemaps == ["http://h/s1.xml", "http://h/s2.xml"]


def test_2xx_parses_and_caps_bytes() -> None:
    body = b"User-agent: *\nDisallow: /a\n" + b"#" * 100 + b"\nDisallow: /late\n"
    p = policy_from_response(200, body, max_bytes=40)
    assert not p.allowed("http://h/a") and p.allowed("http://h/late")
    full = policy_from_response(200, body, max_bytes=10_000)
    assert not full.allowed("http://h/late")
    assert not p.defer_host


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    body = b"User-agent: *\nDisallow: /caf\xe9\nDisallow: /x\n"
    assert "\ufffd" in decode_robots(body, 1000)
    p = policy_from_response(200, body, 1000)
    assert not p.allowed("http://h/x")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451, 399])
def test_4xx_allows_all(status: int) -> None:
    p = policy_from_response(status, b"User-agent: *\nDisallow: /\n", 1000)
    assert p.allow_all and not p.defer_host
    assert p.allowed("http://h/anything")
    assert p.crawl_delay is None and p.sitemaps == []


@pytest.mark.parametrize("status", [500, 502, 503, 504, None])
def test_5xx_or_unreachable_disallows_and_defers(status: int | None) -> None:
    p = policy_from_response(status, None, 1000)
    assert p.disallow_all and p.defer_host
    assert not p.allowed("http://h/")
    assert not p.allowed("http://h/page?x=1")


def test_policy_pickles_and_rebuilds_from_status_and_body() -> None:
    body = b"User-agent: RecrawlBot\nCrawl-delay: 4\nDisallow: /x\n"
    p = policy_from_response(200, body, 1000, agent=UA)
    q = pickle.loads(pickle.dumps(p))
    assert isinstance(q, RobotsPolicy)
    assert (q.status, q.body, q.agent) == (200, body, UA)
    assert not q.allowed("http://h/x/1") and q.allowed("http://h/y") and q.crawl_delay == 4
    d = pickle.loads(pickle.dumps(policy_from_response(None, None, 1000)))
    assert d.defer_host and not d.allowed("http://h/")


def test_default_agent_is_the_product_token() -> None:
    p = policy_from_response(200, b"User-agent: recrawlbot\nDisallow: /\n", 1000)
    assert p.agent == PRODUCT_TOKEN
    assert not p.allowed("http://h/")


def test_empty_file_and_comments_allow_everything() -> None:
    assert is_allowed("", UA, "http://h/x")
    assert is_allowed("# nothing\n\n", UA, "http://h/x")
    assert is_allowed("Disallow: /\n", UA, "http://h/x")  # rule without a group is ignored


_DELAY_LINES = st.sampled_from([
    "User-agent: *", "User-agent: RecrawlBot", "User-agent: OtherBot", "useragent recrawlbot", "Disallow: /x",
    "Allow: /", "Crawl-delay: 3", "crawl-delay: 0.5", "CRAWL-DELAY: 7", "Crawl delay: 2", "crawl   delay 4",
    "crawl\tdelay 6", "Crawl-Delay 9", "crawldelay: 5", "Crawl-delay: x", "# Crawl-delay: 1", "Sitemap: /s.xml",
    "Request-rate: 1/5", "Delay: 3", "crawl-DELAY:", "Crawl-delay: -1", "\ufeffCrawl-delay: 8", "",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_DELAY_LINES, max_size=12), st.sampled_from([UA, "OtherBot/2", ""]))
def test_crawl_delay_without_parse_matches_protego(lines: list[str], agent: str) -> None:
    """crawl_delay skips the parse when no line can be a Crawl-delay record: the answer is Protego's
    own on the prepared text (the oracle), whatever the spelling, case and group of the record."""
    from crawl.robots import _agent, _parsed

    txt = "\n".join(lines)
    token = product_token(agent)
    assert crawl_delay(txt, agent) == _parsed(txt, token).crawl_delay(_agent(token))
