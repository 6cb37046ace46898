"""The URL model: parse an http(s) URL into scheme, userinfo, host, port, path, query, fragment.

Every module takes a URL's host and origin from :func:`parse_url` / :func:`host_of` /
:func:`origin_of`, so "which server is this" has one answer (the SSRF guard, politeness keys,
robots.txt per origin and the index's host column all agree).

Resolution (:func:`resolve`) follows the WHATWG URL Standard for the two schemes a crawler fetches,
http and https, with a regex fast path for the ordinary ASCII URL, because link extraction calls it
for every ``href``. Anything that is not http(s) after resolution (``mailto:``, ``javascript:``,
``ftp:``...) or that the standard rejects gives None from :func:`resolve` and :class:`InvalidURL`
from :func:`parse_url`."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import idna

_DEFAULT_PORTS = {"http": 80, "https": 443}
_C0_SPACE = "".join(chr(i) for i in range(0x21))
_TAB_NL = re.compile(r"[\t\n\r]")
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTH_END = re.compile(r"[/\\?#]")
_SLASHES = re.compile(r"[/\\]")

# Fast path: an absolute http(s) URL of plain ASCII characters that no encode set touches, with a
# lowercase letters-digits-hyphen host and no port. Everything else takes the full parser.
_FAST_RE = re.compile(
    r"(https?)://([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*)"
    r"((?:/[A-Za-z0-9\-._~!$&'()*+,;=:@%/\[\]|]*)?)"
    r"(\?[A-Za-z0-9\-._~!$&()*+,;=:@%/?\[\]|{}`^]*)?"
    r"(#[A-Za-z0-9\-._~!$&'()*+,;=:@%/?\[\]|{}^#]*)?"
)


def _enc_table(extra: str) -> list[str]:
    table = []
    for i in range(128):
        c = chr(i)
        table.append(f"%{i:02X}" if (i < 0x20 or i == 0x7F or c in extra) else c)
    return table


_FRAGMENT_SET = ' "<>`'
_QUERY_SET = ' "#<>' + "'"  # the special-query set (http/https are special)
_PATH_SET = ' "#<>?`{}^'
_USERINFO_SET = _PATH_SET + "/:;=@[\\]|"
_TABLES = {s: _enc_table(s) for s in (_FRAGMENT_SET, _QUERY_SET, _PATH_SET, _USERINFO_SET)}
_NEEDS = {
    s: re.compile("[\x00-\x1f\x7f-\U0010ffff" + re.escape(s) + "]")
    for s in (_FRAGMENT_SET, _QUERY_SET, _PATH_SET, _USERINFO_SET)
}


def _pct_char(c: str) -> str:
    try:
        b = c.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: WHATWG sees U+FFFD
        b = "\ufffd".encode()
    return "".join(f"%{x:02X}" for x in b)


def _encode(s: str, encode_set: str) -> str:
    """Percent-encode ``s`` with a WHATWG encode set (existing ``%`` escapes are left alone)."""
    if not _NEEDS[encode_set].search(s):
        return s
    table = _TABLES[encode_set]
    return "".join(table[o] if (o := ord(c)) < 128 else _pct_char(c) for c in s)


class Parts(NamedTuple):
    """A parsed http(s) URL; ``query``/``fragment`` are None when absent (not when empty)."""

    scheme: str
    username: str
    password: str
    host: str
    port: int | None
    path: tuple[str, ...]
    query: str | None
    fragment: str | None

    def serialize(self) -> str:
        out = [self.scheme, "://"]
        if self.username or self.password:
            out.append(self.username)
            if self.password:
                out.append(":" + self.password)
            out.append("@")
        out.append(self.host)
        if self.port is not None:
            out.append(f":{self.port}")
        out.append("/" + "/".join(self.path))
        if self.query is not None:
            out.append("?" + self.query)
        if self.fragment is not None:
            out.append("#" + self.fragment)
        return "".join(out)


# ---------------------------------------------------------------------------------------------------
# hosts
# ---------------------------------------------------------------------------------------------------
_FORBIDDEN_DOMAIN = re.compile(r"[\x00-\x20#/:<>?@\[\\\]^|%\x7f]")
_ASCII_HOST_RE = re.compile(r"[A-Za-z0-9._\-]+")


def _ipv4_number(part: str) -> int | None:
    if not part:
        return None
    base = 10
    if part[:2] in ("0x", "0X"):
        part, base = part[2:], 16
    elif len(part) > 1 and part[0] == "0":
        part, base = part[1:], 8
    if not part:
        return 0
    try:
        if base == 10 and not part.isascii():
            return None
        if not all(c in "0123456789abcdefABCDEF" for c in part):
            return None
        return int(part, base)
    except ValueError:
        return None


def _ends_in_number(host: str) -> bool:
    parts = host.split(".")
    if parts[-1] == "":
        if len(parts) == 1:
            return False
        parts.pop()
    last = parts[-1]
    if last and last.isascii() and last.isdigit():
        return True
    return _ipv4_number(last) is not None and last[:2] in ("0x", "0X")


def _parse_ipv4(host: str) -> str | None:
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        return None
    nums = []
    for p in parts:
        n = _ipv4_number(p)
        if n is None:
            return None
        nums.append(n)
    if any(n > 255 for n in nums[:-1]) or nums[-1] >= 256 ** (5 - len(nums)):
        return None
    addr = nums[-1]
    for i, n in enumerate(nums[:-1]):
        addr += n * 256 ** (3 - i)
    return ".".join(str((addr >> s) & 255) for s in (24, 16, 8, 0))


def _parse_ipv6(s: str) -> str | None:
    """WHATWG IPv6 parser and serializer (compressed, lower-case hex), or None on failure."""
    addr = [0] * 8
    piece = 0
    compress = None
    i, n = 0, len(s)
    if s[:1] == ":":
        if s[1:2] != ":":
            return None
        i += 2
        piece += 1
        compress = piece
    while i < n:
        if piece == 8:
            return None
        if s[i] == ":":
            if compress is not None:
                return None
            i += 1
            piece += 1
            compress = piece
            continue
        value = length = 0
        while length < 4 and i < n and s[i] in "0123456789abcdefABCDEF":
            value = value * 16 + int(s[i], 16)
            i += 1
            length += 1
        if i < n and s[i] == ".":
            if length == 0:
                return None
            i -= length
            if piece > 6:
                return None
            seen = 0
            while i < n:
                v4 = None
                if seen > 0:
                    if s[i] == "." and seen < 4:
                        i += 1
                    else:
                        return None
                if i >= n or not s[i].isdigit() or not s[i].isascii():
                    return None
                while i < n and s[i].isascii() and s[i].isdigit():
                    d = int(s[i])
                    if v4 is None:
                        v4 = d
                    elif v4 == 0:
                        return None
                    else:
                        v4 = v4 * 10 + d
                    if v4 > 255:
                        return None
                    i += 1
                addr[piece] = addr[piece] * 0x100 + v4
                seen += 1
                if seen in (2, 4):
                    piece += 1
            if seen != 4:
                return None
            break
        if i < n and s[i] == ":":
            i += 1
            if i >= n:
                return None
        elif i < n:
            return None
        addr[piece] = value
        piece += 1
    if compress is not None:
        swaps = piece - compress
        piece = 7
        while piece != 0 and swaps > 0:
            addr[piece], addr[compress + swaps - 1] = addr[compress + swaps - 1], addr[piece]
            piece -= 1
            swaps -= 1
    elif piece != 8:
        return None
    # serialise: compress the first longest run of >= 2 zero pieces
    best_start, best_len, cur_start, cur_len = -1, 1, -1, 0
    for k in range(8):
        if addr[k] == 0:
            if cur_start < 0:
                cur_start, cur_len = k, 0
            cur_len += 1
            if cur_len > best_len:
                best_start, best_len = cur_start, cur_len
        else:
            cur_start = -1
    out = []
    k = 0
    while k < 8:
        if k == best_start:
            out.append("::" if k == 0 else ":")
            k += best_len
            continue
        out.append(f"{addr[k]:x}" + (":" if k < 7 else ""))
        k += 1
    return "[" + "".join(out) + "]"


def _pct_decode_bytes(s: str) -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    if b"%" not in b:
        return b
    out = bytearray()
    i, n = 0, len(b)
    while i < n:
        c = b[i]
        if c == 0x25 and i + 2 < n + 0 and _is_hex(b[i + 1]) and _is_hex(b[i + 2]):
            out.append(int(b[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(c)
            i += 1
    return bytes(out)


def _is_hex(c: int) -> bool:
    return 48 <= c <= 57 or 65 <= c <= 70 or 97 <= c <= 102


def _valid_xn_label(label: str) -> bool:
    try:
        u = label[4:].encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        return False
    if not u or u.isascii():
        return False
    try:  # UTS #46 4.1: a decoded label must consist of "valid" code points (nothing that maps)
        if idna.uts46_remap(u, std3_rules=False, transitional=False) != u:
            return False
    except (idna.IDNAError, ValueError, IndexError):
        return False
    return _valid_unicode_label(u)


def _valid_unicode_label(u: str) -> bool:
    if unicodedata.normalize("NFC", u) != u:
        return False
    if unicodedata.category(u[0])[0] == "M":
        return False
    try:
        idna.uts46_remap(u, std3_rules=False, transitional=False)
        for pos, ch in enumerate(u):
            cp = ord(ch)
            if cp in (0x200C, 0x200D) and not idna.valid_contextj(u, pos):
                return False
    except (idna.IDNAError, ValueError, IndexError):
        return False
    return True


def _domain_to_ascii(domain: str) -> str | None:
    """UTS #46 ToASCII as WHATWG calls it (no STD3 rules, no hyphen or DNS-length checks)."""
    try:
        mapped = idna.uts46_remap(domain, std3_rules=False, transitional=False)
    except (idna.IDNAError, ValueError, IndexError):
        return None
    labels = mapped.split(".")
    out = []
    for label in labels:
        if label.isascii():
            low = label.lower()
            if low.startswith("xn--") and not _valid_xn_label(low):
                return None
            out.append(low)
            continue
        if not _valid_unicode_label(label):
            return None
        try:
            out.append("xn--" + label.encode("punycode").decode("ascii"))
        except UnicodeError:
            return None
    if any(_bidi_label(lab) for lab in labels) and not _bidi_ok(labels):
        return None
    return ".".join(out)


def _bidi_label(label: str) -> bool:
    return any(unicodedata.bidirectional(c) in ("R", "AL", "AN") for c in label)


def _bidi_ok(labels: list[str]) -> bool:
    for lab in labels:
        if not lab:
            continue
        try:
            idna.check_bidi(lab, check_ltr=True)
        except idna.IDNAError:
            return False
    return True


@lru_cache(maxsize=65536)
def parse_host(raw: str) -> str | None:
    """WHATWG host parser for special schemes: domain -> lower-case ASCII, IPv4/IPv6 normalised."""
    if raw.startswith("["):
        if not raw.endswith("]"):
            return None
        return _parse_ipv6(raw[1:-1])
    if _ASCII_HOST_RE.fullmatch(raw) and "xn--" not in raw.lower():
        ascii_host = raw.lower()
    else:
        domain = _pct_decode_bytes(raw).decode("utf-8", "replace")
        ascii_host = _domain_to_ascii(domain)
        if ascii_host is None or _FORBIDDEN_DOMAIN.search(ascii_host):
            return None
    if not ascii_host:
        return None
    if _ends_in_number(ascii_host):
        return _parse_ipv4(ascii_host)
    return ascii_host


# ---------------------------------------------------------------------------------------------------
# the parser
# ---------------------------------------------------------------------------------------------------
_DOT = {".", "%2e"}
_DOTDOT = {"..", ".%2e", "%2e.", "%2e%2e"}


def _path(segments: list[str], path: str, absolute: bool) -> tuple[str, ...]:
    """WHATWG path state: append ``path``'s segments to ``segments`` resolving dot segments."""
    parts = _SLASHES.split(path) if path else [""]
    if absolute:
        parts = parts[1:] if len(parts) > 1 else [""]
    last = len(parts) - 1
    for idx, seg in enumerate(parts):
        low = seg.lower() if ("." in seg or "%" in seg) else seg
        if low in _DOTDOT:
            if segments:
                segments.pop()
            if idx == last:
                segments.append("")
        elif low in _DOT:
            if idx == last:
                segments.append("")
        else:
            segments.append(_encode(seg, _PATH_SET))
    return tuple(segments)


def _split_tail(rest: str) -> tuple[str, str | None, str | None]:
    frag = None
    h = rest.find("#")
    if h >= 0:
        frag = _encode(rest[h + 1:], _FRAGMENT_SET)
        rest = rest[:h]
    query = None
    q = rest.find("?")
    if q >= 0:
        query = _encode(rest[q + 1:], _QUERY_SET)
        rest = rest[:q]
    return rest, query, frag


def _authority(scheme: str, rest: str) -> Parts | None:
    m = _AUTH_END.search(rest)
    end = m.start() if m else len(rest)
    auth, tail = rest[:end], rest[end:]
    username = password = ""
    if "@" in auth:
        at = auth.rfind("@")
        userinfo, auth = auth[:at], auth[at + 1:]
        if not auth:
            return None
        user, _, pw = userinfo.partition(":")
        username = _encode(user, _USERINFO_SET)
        password = _encode(pw, _USERINFO_SET)
    port_s = ""
    if auth.startswith("["):
        close = auth.find("]")
        if close < 0:
            return None
        host_s, after = auth[:close + 1], auth[close + 1:]
        if after:
            if after[0] != ":":
                return None
            port_s = after[1:]
    else:
        host_s, colon, port_s = auth.partition(":")
        if colon and not host_s:
            return None
    if not host_s:
        return None
    port = None
    if port_s:
        if not (port_s.isascii() and port_s.isdigit()):
            return None
        port = int(port_s)
        if port > 65535:
            return None
        if port == _DEFAULT_PORTS[scheme]:
            port = None
    host = parse_host(host_s)
    if host is None:
        return None
    path_s, query, frag = _split_tail(tail)
    return Parts(scheme, username, password, host, port, _path([], path_s, True), query, frag)


def _relative(rest: str, base: Parts) -> Parts | None:
    c = rest[:1]
    if c in ("/", "\\"):
        if rest[1:2] in ("/", "\\"):
            return _authority(base.scheme, rest.lstrip("/\\"))
        path_s, query, frag = _split_tail(rest)
        return base._replace(path=_path([], path_s, True), query=query, fragment=frag)
    if not rest:
        return base._replace(fragment=None)
    if c == "?":
        _, query, frag = _split_tail(rest)
        return base._replace(query=query, fragment=frag)
    if c == "#":
        return base._replace(fragment=_encode(rest[1:], _FRAGMENT_SET))
    path_s, query, frag = _split_tail(rest)
    return base._replace(path=_path(list(base.path[:-1]), path_s, False), query=query, fragment=frag)


def _clean(s: str) -> str:
    s = s.strip(_C0_SPACE)
    if "\t" in s or "\n" in s or "\r" in s:
        s = _TAB_NL.sub("", s)
    return s


@lru_cache(maxsize=1024)
def _parse_base(base: str) -> Parts | None:
    return parse(base)


def parse(url: str, base: str | None = None) -> Parts | None:
    """Parse (and resolve against ``base``) into :class:`Parts`; None unless the result is http(s)."""
    s = _clean(url)
    m = _SCHEME_RE.match(s)
    base_parts = _parse_base(base) if base is not None else None
    if m:
        scheme = m.group(1).lower()
        if scheme not in _DEFAULT_PORTS:
            return None
        rest = s[m.end():]
        if base_parts is not None and base_parts.scheme == scheme:
            if rest[:1] in ("/", "\\") and rest[1:2] in ("/", "\\"):
                return _authority(scheme, rest.lstrip("/\\"))
            return _relative(rest, base_parts)
        return _authority(scheme, rest.lstrip("/\\"))
    if base_parts is None:
        return None
    return _relative(s, base_parts)


def resolve(input: str, base: str | None) -> str | None:  # noqa: A002 - the interface name
    """Resolve ``input`` against ``base`` the WHATWG way; None if unparseable or not http(s)."""
    if base is None:
        m = _FAST_RE.fullmatch(input)
        if m and not _fast_unsafe(m):
            host = m.group(2)
            low = host.lower()
            if host == low and m.group(3):
                return input
            return f"{m.group(1)}://{low}{'' if m.group(3) else '/'}{input[m.end(2):]}"
    p = parse(input, base)
    return None if p is None else p.serialize()


def _fast_unsafe(m: re.Match[str]) -> bool:
    """The fast-path regex accepted it, but does the full parser have anything to change?"""
    host = m.group(2)
    path = m.group(3)
    if "xn--" in host or "XN--" in host.upper() or _ends_in_number(host):
        return True
    if path and ("/." in path or "%2" in path or "\\" in path):
        return True
    return False



# ---------------------------------------------------------------------------------------------------
# the URL model: one answer to "what is this URL's host / origin" for every module
# ---------------------------------------------------------------------------------------------------
class InvalidURL(ValueError):
    """A URL the crawler cannot use: unparsable, relative without a base, or not http(s)."""


_IPV4_DOTTED = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


@dataclass(frozen=True, slots=True)
class URL:
    """A parsed absolute http(s) URL (WHATWG URL Standard) with our host normalisation.

    ``host`` is lower-case ASCII (IDNA/punycode) with any trailing dot removed, a dotted-decimal IPv4
    address (every IPv4 form normalised), or a compressed IPv6 address in brackets. ``port`` is an
    explicit non-default port, else None. ``query``/``fragment`` exclude their ``?``/``#``.
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
        """The WHATWG serialisation of the URL as parsed (userinfo, fragment and a trailing host dot kept)."""
        return self._href

    @property
    def is_ip(self) -> bool:
        return self.host.startswith("[") or _IPV4_DOTTED.fullmatch(self.host) is not None


def _why_invalid(url: str, base: str | None) -> str:
    """A specific reason for a URL the parser refused (the parser itself only says no)."""
    s = _clean(url)
    m = _SCHEME_RE.match(s)
    if not m:
        return "relative URL without a base" if base is None else f"cannot resolve against base {base!r}"
    scheme = m.group(1).lower()
    if scheme not in _DEFAULT_PORTS:
        return f"unsupported scheme {scheme!r} (only http and https are crawled)"
    rest = s[m.end():].lstrip("/\\")
    end = _AUTH_END.search(rest)
    auth = rest[:end.start() if end else len(rest)]
    hostport = auth.rpartition("@")[2]
    if not hostport:
        return "empty host"
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0 or _parse_ipv6(hostport[1:close]) is None:
            return f"invalid IPv6 address {hostport[:close + 1] if close >= 0 else hostport!r}"
        port_s = hostport[close + 2:] if hostport[close + 1:close + 2] == ":" else ""
    else:
        host_s, _, port_s = hostport.partition(":")
        if not host_s:
            return "empty host"
    if port_s and not (port_s.isascii() and port_s.isdigit() and int(port_s) <= 65535):
        return f"invalid port {port_s!r}"
    return f"invalid host in {hostport!r}"


def parse_url(url: str, base: str | None = None) -> URL:
    """Parse (resolving against ``base``) an http(s) URL into a :class:`URL`; :class:`InvalidURL` with
    a specific message for anything else (never a silent empty host)."""
    if not isinstance(url, str):
        raise InvalidURL(f"URL must be a string, got {type(url).__name__}")
    p = parse(url, base)
    if p is None:
        raise InvalidURL(f"{_why_invalid(url, base)}: {url!r}")
    host = p.host.rstrip(".") if p.host.endswith(".") else p.host
    if not host:
        raise InvalidURL(f"empty host: {url!r}")
    return URL(p.scheme, p.username, p.password, host, p.port, "/" + "/".join(p.path),
               p.query or "", p.fragment or "", p.serialize())


def host_of(url: str) -> str:
    """The host of an http(s) URL as :class:`URL` gives it; :class:`InvalidURL` if unparsable."""
    m = _FAST_RE.fullmatch(url)
    if m and not _fast_unsafe(m):
        return m.group(2).lower()
    return parse_url(url).host


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of an http(s) URL; :class:`InvalidURL` if unparsable."""
    return parse_url(url).origin
