"""Our canonical form of a URL: a documented policy applied on top of the parsed URL.

Canonicalisation (:func:`canonicalize`) is *our* policy, applied on top of the WHATWG parse (so it
inherits host lowercasing, IDNA -> punycode, IPv4 normalisation, default-port removal and
dot-segment resolution):

* the fragment is dropped, an empty path becomes ``/``, a trailing slash is kept as given;
* percent-encoding is normalised: escapes of unreserved characters (``A-Z a-z 0-9 - . _ ~``) are
  decoded, every other escape gets upper-case hex; no other character is decoded or re-encoded, so
  reserved characters keep their encoded/decoded distinction (RFC 3986 §6.2.2.2);
* query parameters are sorted by name with a *stable* sort (repeated names keep their relative
  order, which some servers depend on), empty parameters (``&&``) are removed, tracking parameters
  (names compared case-insensitively) are dropped, and an empty query loses its ``?``;
* userinfo is dropped (``user:pw@host`` is the same server and, for a crawler, the same page; keeping
  it would split one page into many keys and carry credentials into stored data);
* the host is the URL model's (:class:`crawl.url.parse.URL`): a trailing dot is removed.

Differences from w3lib's ``canonicalize_url`` (``check_urls.py --canon crawl.url:canonicalize``
counts them; all deliberate):

* non-http(s) or relative inputs (``sftp://``, ``a#frag``, ``?b=1``, RFC 3986's ``example://``) are
  None here, w3lib canonicalises any scheme;
* space in the query stays ``%20`` (WHATWG) where w3lib writes ``+``; ``+`` is left alone. Treating
  ``+`` as space is a form-encoding convention, not a URL equivalence;
* we do not re-encode characters the WHATWG parser leaves alone (``(``, ``)``, ``,`` in a query) and
  do not decode reserved escapes (``%2C`` stays) — w3lib does both, in different directions;
* a bare query key stays bare (``?1750,4``), w3lib appends ``=``;
* parameters with the same name keep their order (w3lib sorts by value too);
* hosts w3lib cannot encode with IDNA 2008 (a leading empty label, a label over 63 octets) are
  encoded per UTS #46 without DNS length checks, as browsers do, where w3lib leaves them in Unicode;
* the default port ``:80`` is removed (RFC 3986 §6.2.3); w3lib keeps it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from crawl.config import DEFAULT_TRACKING_PARAMS
from crawl.url.parse import URL, InvalidURL, parse_url

_PCT_RE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _norm_pct_match(m: re.Match[str]) -> str:
    c = chr(int(m.group(1), 16))
    return c if c in _UNRESERVED else "%" + m.group(1).upper()


def _norm_pct(s: str) -> str:
    return _PCT_RE.sub(_norm_pct_match, s) if "%" in s else s


@lru_cache(maxsize=64)
def _tracking_set(params: tuple[str, ...]) -> frozenset[str]:
    return frozenset(p.lower() for p in params)


_DEFAULT_TRACKING = _tracking_set(tuple(DEFAULT_TRACKING_PARAMS))


def _canon_query(query: str, tracking: frozenset[str]) -> str:
    params = []
    for part in query.split("&"):
        if not part:
            continue
        part = _norm_pct(part)
        name = part.split("=", 1)[0]
        if tracking and name.lower() in tracking:
            continue
        params.append((name, part))
    if len(params) > 1:
        params.sort(key=lambda p: p[0])
    return "&".join(p[1] for p in params)


_PATH_PARAM_RE = re.compile(r";([^/;=?#]*)=[^/;?#]*")


def _strip_path_params(path: str, tracking: frozenset[str]) -> str:
    """Drop ``;name=value`` path parameters whose name is a tracking/session parameter
    (``/a;jsessionid=AB12/b`` -> ``/a/b``): a session id in the path spells one page many ways."""
    return _PATH_PARAM_RE.sub(lambda m: "" if m.group(1).lower() in tracking else m.group(0), path)


def _canon_parts(p: URL, tracking: frozenset[str]) -> str:
    path = _norm_pct(p.path)
    if ";" in path:
        path = _strip_path_params(path, tracking)
    query = _canon_query(p.query, tracking) if p.query else ""
    port = f":{p.port}" if p.port is not None else ""
    return f"{p.scheme}://{p.host}{port}{path}?{query}" if query else f"{p.scheme}://{p.host}{port}{path}"


def canonicalize(url: str, tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS) -> str | None:
    """Our canonical form of an http(s) URL (see the module docstring), or None. Idempotent."""
    tracking = (_DEFAULT_TRACKING if tracking_params is DEFAULT_TRACKING_PARAMS
                else _tracking_set(tuple(tracking_params)))
    return _canonicalize(url, tracking)


def _canonicalize(url: str, tracking: frozenset[str]) -> str | None:
    try:
        return _canon_parts(parse_url(url), tracking)
    except InvalidURL:
        return None


canonical = canonicalize  # the name conformance/SOURCES.md's examples use
