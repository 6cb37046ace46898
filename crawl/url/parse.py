"""The URL model: parse an http(s) (or ftp) URL into scheme, userinfo, host, port, path, query, fragment.

Every module takes a URL's host and origin from :func:`parse_url` / :func:`host_of` /
:func:`origin_of`, so "which server is this" has one answer (the SSRF guard, politeness keys,
robots.txt per origin and the index's host column all agree).

Parsing is Ada's (the WHATWG URL parser of Node.js) through the ``ada-url`` package, called at its C
level: one parse, then the serialised URL and the offsets of its components, sliced here. Why not a
hand-written parser: WHATWG host parsing (IPv4 in decimal/octal/hex/short forms, IPv6 compression,
IDNA/UTS #46, percent-decoding of hosts) is exactly where a crawler's SSRF guard and politeness keys
went wrong before. ada-url was chosen over can-ada by ``bench/urlparse_bench.py``: can-ada parses ~4x
faster but takes no base URL, so it cannot resolve links (figures in bench/RESULTS.md).

Schemes: the model knows ``http``, ``https`` and ``ftp`` (:data:`KNOWN_SCHEMES`); every function takes
the schemes its caller accepts (``schemes``, default :data:`WEB_SCHEMES`, http and https). A crawl
opts in to FTP with the config key ``allowed_schemes``; the filters (:func:`crawl.url.filter_reason`),
canonicalisation of links and the fetcher pass it, everything else keeps the web's two.

On top of the WHATWG answer, our one normalisation: a trailing dot of the host is removed
(``HOST.`` and ``host`` are one server for politeness and the guard). :func:`resolve` keeps the
WHATWG serialisation as it is (links are stored as the standard resolves them).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

import idna
from ada_url._ada_wrapper import ffi, lib  # Ada's C API (ada_c.h), pinned with ada-url

_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21}
KNOWN_SCHEMES = tuple(_DEFAULT_PORTS)  # what the model can parse (WHATWG special schemes with a host)
WEB_SCHEMES = ("http", "https")  # what is accepted unless a caller says otherwise
_OMITTED = 0xFFFFFFFF
_IPV4_DOTTED = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_SCHEME_RE = re.compile(r"[\x00-\x20]*([A-Za-z][A-Za-z0-9+.\-]*):")


class InvalidURL(ValueError):
    """A URL the crawler cannot use: unparsable, relative without a base, or a scheme not accepted."""


@dataclass(frozen=True, slots=True)
class URL:
    """A parsed absolute http(s) URL (WHATWG URL Standard) with our host normalisation.

    ``host`` is lower-case ASCII (IDNA/punycode) with any trailing dot removed, a dotted-decimal IPv4
    address (every IPv4 form normalised), or a compressed IPv6 address in brackets. ``port`` is an
    explicit non-default port, else None. ``path`` starts with ``/``; ``query``/``fragment`` exclude
    their ``?``/``#`` (empty when absent).
    """

    scheme: str
    username: str
    password: str
    host: str
    port: int | None
    path: str
    query: str
    fragment: str
    _href: str = field(default="", compare=False, repr=False)

    @property
    def effective_port(self) -> int:
        return self.port if self.port is not None else _DEFAULT_PORTS[self.scheme]

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``: what robots.txt, politeness and the SSRF guard are scoped to."""
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port is not None else "")

    @property
    def href(self) -> str:
        """The WHATWG serialisation (userinfo, fragment and a trailing host dot as parsed)."""
        return self._href

    @property
    def is_ip(self) -> bool:
        return is_ip_host(self.host)

    @property
    def has_query(self) -> bool:
        """A ``?`` was there, even with nothing after it (``query`` is ``""`` either way). In the
        serialisation a ``?`` before any ``#`` can only start the query: the path encodes its own."""
        return "?" in self._href.split("#", 1)[0]


def is_ip_host(host: str) -> bool:
    """Is a URL model host an IP address (dotted-decimal IPv4 or bracketed IPv6)?"""
    return host.startswith("[") or _IPV4_DOTTED.fullmatch(host) is not None


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: the WHATWG parser sees U+FFFD
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def _ada_obj(url: str, base: str | None):  # noqa: ANN202 - a cffi handle
    """One Ada parse of ``url`` against ``base`` -> Ada's URL handle (the caller frees it)."""
    b = _utf8(url)
    if base is None:
        return lib.ada_parse(b, len(b))
    bb = _utf8(base)
    obj = lib.ada_parse_with_base(b, len(b), bb, len(bb))
    if not lib.ada_is_valid(obj) and not lib.ada_can_parse(bb, len(bb)):
        # an unusable base: an absolute URL still stands on its own (Ada refuses any input then)
        lib.ada_free(obj)
        obj = lib.ada_parse(b, len(b))
    return obj


def _ada_href(url: str, base: str | None,
              schemes: tuple[str, ...]) -> tuple[str, tuple[int, int, int, int, int, int, int, int]] | None:
    """One Ada parse -> (href, its components: protocol_end, username_end, host_start, host_end, port,
    pathname_start, search_start, hash_start), or None if Ada refuses it or the scheme is not in
    ``schemes`` (the one check :func:`_ada` and :func:`resolve` share)."""
    obj = _ada_obj(url, base)
    try:
        if not lib.ada_is_valid(obj):
            return None
        h = lib.ada_get_href(obj)
        href = ffi.buffer(h.data, h.length)[:].decode("utf-8")
        c = lib.ada_get_components(obj)
        parts = (c.protocol_end, c.username_end, c.host_start, c.host_end, c.port,
                 c.pathname_start, c.search_start, c.hash_start)
    finally:
        lib.ada_free(obj)
    scheme = href[:parts[0] - 1]
    if scheme not in schemes or scheme not in _DEFAULT_PORTS:
        return None
    return href, parts


def _ada(url: str, base: str | None, schemes: tuple[str, ...] = WEB_SCHEMES) -> URL | None:
    """One Ada parse -> :class:`URL` (host as WHATWG gives it), or None if Ada refuses it or the
    result's scheme is not in ``schemes``."""
    parsed = _ada_href(url, base, schemes)
    if parsed is None:
        return None
    href, (pe, ue, hs, he, port, ps, ss, fs) = parsed
    host = href[hs + 1:he] if href[hs:hs + 1] == "@" else href[hs:he]
    if not _xn_labels_ok(host):
        return None
    n = len(href)
    path_end = ss if ss != _OMITTED else (fs if fs != _OMITTED else n)
    return URL(
        href[:pe - 1],
        href[pe + 2:ue] if ue > pe + 2 else "",
        href[ue + 1:hs] if hs > ue and href[ue] == ":" else "",
        host,
        None if port == _OMITTED else int(port),
        href[ps:path_end],
        href[ss + 1:(fs if fs != _OMITTED else n)] if ss != _OMITTED else "",
        href[fs + 1:] if fs != _OMITTED else "",
        href,
    )


def _xn_labels_ok(host: str) -> bool:
    """Every ``xn--`` label of ``host`` is valid (see :func:`_valid_xn_label`)."""
    return "xn--" not in host or all(_valid_xn_label(lab) for lab in host.split(".") if lab.startswith("xn--"))


@lru_cache(maxsize=4096)
def _valid_xn_label(label: str) -> bool:
    """UTS #46 validity of an ``xn--`` label (WHATWG "domain to ASCII" with CheckHyphens off).

    Why here: ada-url 4.0.0 accepts ``xn--`` labels that do not decode to a valid label (WPT
    urltestdata #291-296, #794); the crawler must not call such a host a server name.
    """
    try:
        u = label[4:].encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        return False
    if not u or u.isascii() or unicodedata.normalize("NFC", u) != u or unicodedata.category(u[0])[0] == "M":
        return False
    try:  # a decoded label must consist of valid code points (nothing UTS #46 maps), CONTEXTJ rules
        if idna.uts46_remap(u, std3_rules=False, transitional=False) != u:
            return False
        return all(idna.valid_contextj(u, i) for i, ch in enumerate(u) if ch in "\u200c\u200d")
    except (idna.IDNAError, ValueError, IndexError):
        return False


def _why_invalid(url: str, base: str | None, schemes: tuple[str, ...] = WEB_SCHEMES) -> str:
    """A specific reason for a URL the parser refused (Ada itself only says no)."""
    m = _SCHEME_RE.match(url)
    if not m or (base is not None and m.group(1).lower() not in _DEFAULT_PORTS and len(m.group(1)) == 1):
        return "relative URL without a base" if base is None else f"cannot be resolved against {base!r}"
    scheme = m.group(1).lower()
    if scheme not in schemes or scheme not in _DEFAULT_PORTS:
        allowed = " and ".join(x for x in schemes if x in _DEFAULT_PORTS)
        return f"unsupported scheme {scheme!r} (only {allowed} are crawled)"
    auth = re.split(r"[/\\?#]", url[m.end():].lstrip("/\\"), maxsplit=1)[0]
    hostport = auth.rpartition("@")[2]
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0 or _ada(f"http://{hostport[:close + 1]}/", None) is None:
            return f"invalid IPv6 address {hostport[:close + 1] if close >= 0 else hostport!r}"
        port_s = hostport[close + 2:] if hostport[close + 1:close + 2] == ":" else ""
    else:
        host_s, _, port_s = hostport.partition(":")
        if not host_s:
            return "empty host"
    if port_s and not (port_s.isascii() and port_s.isdigit() and int(port_s) <= 65535):
        return f"invalid port {port_s!r}"
    return f"invalid host {hostport.rpartition(':')[0] if port_s else hostport!r}"


def parse_url(url: str, base: str | None = None, schemes: tuple[str, ...] = WEB_SCHEMES) -> URL:
    """Parse (resolving against ``base``) a URL of one of ``schemes`` into a :class:`URL`;
    :class:`InvalidURL` with a specific message for anything else (never a silent empty host)."""
    if not isinstance(url, str):
        raise InvalidURL(f"URL must be a string, got {type(url).__name__}")
    u = _ada(url, base, tuple(schemes))
    if u is None:
        raise InvalidURL(f"{_why_invalid(url, base, tuple(schemes))}: {url!r}")
    if u.host.endswith("."):
        host = u.host.rstrip(".")
        if not host:
            raise InvalidURL(f"empty host: {url!r}")
        again = _ada(f"http://{host}/", None)  # "foo.09.." less its dots would be a bad IPv4 address
        if again is None or again.host != host:
            raise InvalidURL(f"invalid host {u.host!r} (not a server name without its trailing dots): {url!r}")
        u = URL(u.scheme, u.username, u.password, host, u.port, u.path, u.query, u.fragment, u._href)
    return u


def resolve(input: str, base: str | None,  # noqa: A002 - the interface name
            schemes: tuple[str, ...] = WEB_SCHEMES) -> str | None:
    """Resolve ``input`` against ``base`` the WHATWG way -> its serialisation; None if unparsable or
    not of ``schemes``. (Link extraction's answer: no exception per bad ``href``.)"""
    # what _ada checks, on the href alone: link resolution calls this ~15 times per page, and building
    # the URL dataclass cost more than Ada's parse (bench/parse_bench.py); Ada's component offsets are
    # read only for an IDNA host (1.9 vs 2.6 us per call on simulated-web links)
    obj = _ada_obj(input, base)
    try:
        if not lib.ada_is_valid(obj):
            return None
        h = lib.ada_get_href(obj)
        href = ffi.buffer(h.data, h.length)[:].decode("utf-8")
        idna = "xn--" in href
        if idna:
            c = lib.ada_get_components(obj)
            hs, he = c.host_start, c.host_end
    finally:
        lib.ada_free(obj)
    scheme = href.partition(":")[0]  # a serialised scheme ends at the first colon
    if scheme not in schemes or scheme not in _DEFAULT_PORTS:
        return None
    if idna:
        host = href[hs + 1:he] if href[hs:hs + 1] == "@" else href[hs:he]
        if not _xn_labels_ok(host):
            return None
    return href


def host_of(url: str, schemes: tuple[str, ...] = WEB_SCHEMES) -> str:
    """The host of a URL as :class:`URL` gives it; :class:`InvalidURL` if unparsable."""
    return parse_url(url, schemes=schemes).host


def origin_of(url: str, schemes: tuple[str, ...] = WEB_SCHEMES) -> str:
    """``scheme://host[:port]`` of a URL; :class:`InvalidURL` if unparsable."""
    return parse_url(url, schemes=schemes).origin
