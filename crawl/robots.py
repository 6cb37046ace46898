"""robots.txt decisions (RFC 9309) on top of Protego.

Protego does the rule matching (longest match, ``*``/``$`` wildcards, percent-encoding); we do not fork
or reimplement it. Around it we fix what it gets wrong for an RFC 9309 crawler, by pre-processing the
text before Protego sees it:

* a UTF-8 byte-order mark at the start would otherwise glue itself to the first field name
  (``\\ufeffUser-agent``) and lose the first group;
* a line that is not a known record (``Invalid-Unknown-Line: x``) between two ``User-agent`` lines must
  not close the group (RFC 9309 §2.1), but Protego treats any field as ending the user-agent run; we
  drop such lines;
* groups are chosen by the crawler's *product token*, matched exactly and case-insensitively
  (RFC 9309 §2.2.1: ``RecrawlBot/0.1 (+url)`` is ``recrawlbot``; a group ``User-agent: Recrawl`` is not
  ours). Protego matches any token-boundary substring, so we rewrite each ``User-agent`` value to
  either our token, ``*`` or a name that cannot match, which also makes the decision independent of
  Protego's own heuristics.

``/robots.txt`` itself is always allowed (RFC 9309 §2.2.2).

Fetch semantics live in :func:`policy_from_response`: 2xx parse, 4xx allow everything, 5xx or no answer
(timeout, connection error) disallow everything and defer the host. 3xx is the *fetcher's* job: it
follows up to five redirects (RFC 9309 §2.3.1.2) and hands the final answer here; a redirect chain that
does not end in an answer counts as 4xx (unavailable), as RFC 9309 says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from protego import Protego

from crawl.config import PRODUCT_TOKEN
from crawl.url import InvalidURL, parse_url

# Fields whose lines we hand to Protego; everything else is dropped so it cannot end a group. Protego's
# accepted spellings (``useragent``, ``disallaw`` ...) are kept so its leniency is preserved.
_KNOWN_FIELDS = frozenset({
    "user-agent", "useragent", "user agent",
    "allow",
    "disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw",
    "sitemap", "sitemaps", "site-map",
    "crawl-delay", "crawl delay",
    "request-rate", "request rate",
    "visit-time", "visit time",
    "host",
})
_UA_FIELDS = frozenset({"user-agent", "useragent", "user agent"})
_TOKEN_RE = re.compile(r"[A-Za-z_-]+")
# A group name no product token can equal (tokens are letters, '_' and '-'), nor contain.
_OTHER_AGENT = "0-other-agent-0"


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent string, lowercased: ``RecrawlBot/0.1 (+x)`` -> ``recrawlbot``.

    RFC 9309 §2.2.1 matches groups on this token only; an empty result means "no token" and then only
    the ``*`` group applies.
    """
    m = _TOKEN_RE.match(user_agent.strip())
    return m.group(0).lower() if m else ""


def _split_field(line: str) -> tuple[str, str] | None:
    """Return (lowercased field, value) for a record line, or None when it is no known record."""
    if ":" in line:
        name, value = line.split(":", 1)
        name = name.strip().lower()
        if name in _KNOWN_FIELDS:
            return name, value.strip()
    # Protego also reads "<field> <value>" (no colon), e.g. "Sitemap https://x/s.xml".
    words = line.split()
    for n in (2, 1):
        cand = " ".join(words[:n]).lower()
        if cand in _KNOWN_FIELDS:
            return cand, " ".join(words[n:])
    return None


def prepare(robots_txt: str, token: str) -> str:
    """Rewrite robots.txt so that Protego's reading of it is RFC 9309's for the agent ``token``.

    Drops a leading BOM, comment-only and unknown lines, and maps each user-agent value to ``token``,
    ``*`` or a name that never matches.
    """
    if robots_txt.startswith("\ufeff"):
        robots_txt = robots_txt[1:]
    out: list[str] = []
    for raw in robots_txt.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parsed = _split_field(line)
        if parsed is None:
            continue
        name, value = parsed
        if name in _UA_FIELDS:
            if value == "*" or value.startswith(("* ", "*\t")):
                value = "*"
            elif not value:
                value = ""
            else:
                group_token = product_token(value)
                value = token if token and group_token == token else _OTHER_AGENT
            out.append(f"user-agent: {value}")
        else:
            out.append(f"{name}: {value}")
    return "\n".join(out)


@lru_cache(maxsize=256)
def _parsed(robots_txt: str, token: str) -> Protego:
    """Parse once per (text, agent): the conformance harness and callers ask many URLs of one file."""
    return Protego.parse(prepare(robots_txt, token))


def _agent(token: str) -> str:
    # Protego returns None (allow) for an empty agent; an unmatched sentinel keeps '*' applying.
    return token or "-"


def _is_robots_txt(url: str) -> bool:
    if "/robots.txt" not in url:
        return False
    try:
        return parse_url(url).path == "/robots.txt"
    except InvalidURL:
        return False


def is_allowed(robots_txt: str, user_agent: str, url: str) -> bool:
    """May ``user_agent`` fetch ``url`` under ``robots_txt``? (RFC 9309, Protego matcher)."""
    if _is_robots_txt(url):
        return True
    token = product_token(user_agent)
    return _parsed(robots_txt, token).can_fetch(url, _agent(token))


allowed = is_allowed  # the name conformance/SOURCES.md's examples use


def sitemaps(robots_txt: str) -> list[str]:
    """Sitemap URLs named in robots.txt, in file order (they apply to every agent)."""
    return list(_parsed(robots_txt, "").sitemaps)


def crawl_delay(robots_txt: str, user_agent: str) -> float | None:
    """Crawl-delay in seconds of the group that applies to ``user_agent``, or None.

    A file without the word "delay" in any case has no Crawl-delay record (both spellings Protego
    reads, ``crawl-delay`` and ``crawl delay``, contain it, and :func:`prepare` lower-cases the field
    name it keeps), so it is answered without a parse: most robots.txt files set none, and a
    report's or generate's pass over a crawl's robots cache parsed every one of them (per host, over
    the parse cache's 256 entries at a thousand hosts)."""
    if "delay" not in robots_txt.lower():
        return None
    token = product_token(user_agent)
    return _parsed(robots_txt, token).crawl_delay(_agent(token))


def request_rate(robots_txt: str, user_agent: str) -> tuple[int, int] | None:
    """Request-rate as (requests, seconds) for ``user_agent``, or None."""
    token = product_token(user_agent)
    rr = _parsed(robots_txt, token).request_rate(_agent(token))
    return None if rr is None else (rr.requests, rr.seconds)


def decode_robots(body: bytes, max_bytes: int) -> str:
    """Decode the first ``max_bytes`` of a robots.txt body as UTF-8 (RFC 9309 §2.3 / §2.5).

    A BOM is dropped; invalid bytes become U+FFFD rather than failing the whole file. A body that
    reaches the cap (the fetcher reads no more than ``max_bytes``) is taken up to its last line break:
    the line the cap cuts is not the rule the file has (``Allow: /private/public.html`` cut to
    ``Allow: /private/`` would open all of ``/private/``). A file of exactly ``max_bytes`` without a
    final line break loses its last line by the same rule: the fetcher cannot tell it from a longer one.
    """
    data = body[:max_bytes]
    if len(body) >= max_bytes:
        end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if end >= 0:
            data = data[:end + 1]
    return data.decode("utf-8-sig", errors="replace")


@dataclass
class RobotsPolicy:
    """The robots.txt decision for one host, parsed once and cheap to query per URL.

    Rebuildable from ``(status, body)``: that is what the ``robots_cache`` Parquet rows store (host,
    fetched_at, status, body), and pickling goes through the same constructor so no Protego internals
    are serialised.
    """

    status: int | None
    body: bytes | None = field(repr=False)
    max_bytes: int
    agent: str = PRODUCT_TOKEN
    allow_all: bool = False
    disallow_all: bool = False
    defer_host: bool = False
    _parser: Protego | None = field(default=None, repr=False, compare=False)
    _token: str = field(default="", repr=False, compare=False)

    def __reduce__(self):  # rebuild from the stored answer instead of pickling the parser
        return (policy_from_response, (self.status, self.body, self.max_bytes, self.agent))

    def allowed(self, url: str) -> bool:
        """May the configured agent fetch ``url``? ``/robots.txt`` always may."""
        if self.disallow_all:
            return _is_robots_txt(url)
        if self.allow_all or self._parser is None:
            return True
        if _is_robots_txt(url):
            return True
        return self._parser.can_fetch(url, _agent(self._token))

    @property
    def crawl_delay(self) -> float | None:
        """Crawl-delay (seconds) of the group for the configured agent; None when absent."""
        if self._parser is None:
            return None
        return self._parser.crawl_delay(_agent(self._token))

    @property
    def sitemaps(self) -> list[str]:
        """Sitemap URLs listed in the file (empty for 4xx/5xx)."""
        return [] if self._parser is None else list(self._parser.sitemaps)


def policy_from_response(
    status: int | None, body: bytes | None, max_bytes: int, agent: str = PRODUCT_TOKEN
) -> RobotsPolicy:
    """Build the host's policy from the final robots.txt answer (after the fetcher followed 3xx).

    RFC 9309 §2.3.1: 2xx -> parse the first ``max_bytes``; 4xx (and a 3xx the fetcher could not
    resolve) -> allow all; 5xx, 429 or None (timeout, unreachable) -> disallow all and defer the
    host, so its URLs are retried in a later round rather than marked denied. 429 is the server
    asking us to slow down, not "there is no robots.txt": treated like 5xx, never as allow-all.
    """
    token = product_token(agent)
    p = RobotsPolicy(status=status, body=body, max_bytes=max_bytes, agent=agent, _token=token)
    if status is None or status >= 500 or status == 429:
        p.disallow_all = True
        p.defer_host = True
    elif 200 <= status < 300:
        text = decode_robots(body or b"", max_bytes)
        p._parser = Protego.parse(prepare(text, token))
    else:  # 3xx left unresolved, 4xx, 1xx oddities: "unavailable" -> allow all
        p.allow_all = True
    return p


__all__ = [
    "RobotsPolicy", "allowed", "crawl_delay", "decode_robots", "is_allowed", "policy_from_response", "prepare",
    "product_token", "request_rate", "sitemaps",
]
