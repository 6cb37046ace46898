r"""Link resolution for a whole partition at once (:func:`resolve_many`), equal to
:func:`crawl.url.parse.resolve` per row.

Ada resolves each distinct (href, base) pair once (menus and footers repeat on every page of a
site), and each distinct absolute ``http://`` / ``https://`` href once whatever its base: after a
special scheme and ``//`` the WHATWG parser never reads the base (special authority states), so
the ~40 % of simulated-web hrefs that are absolute cost one dictionary lookup on later pages.
Against an ``http(s)`` base, a href starting with ``/`` or ``\`` reads only the base's scheme and
authority (WHATWG "relative slash" state copies them and parses the href's own path), and a plain
path-relative href (``page.html``, ``../x``) only the base up to its last path separator (the last
segment is dropped, unless it is a dot segment that the base's own parse already applied), so
those are keyed by that prefix: every page of a site shares its menus' resolutions (~1/3 fewer
Ada calls on the simulated web). Within those keys a *plain* href, made of characters WHATWG copies
as they are and without dot segments, is the prefix Ada gives once per authority (``/``) or per
directory and leading ``../`` run (``../x``) plus the href; a plain absolute URL (lower-case ASCII
host, no ``xn--``) is serialised by hand: 15 -> 2.5 Ada calls per simulated-web page. An Arrow
column path for the common href shapes (absolute, root-relative, directory-relative, ``../``) used
to sit here; ``bench/urls_bench.py`` measured it at 2.2x the per-pair calls' CPU time on 1 M
simulated-web links once Ada does the parsing, below the 3x a column form must earn (issue 8).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa

from crawl.url.columns import _MISSING, _as_string_array
from crawl.url.parse import _DEFAULT_PORTS, WEB_SCHEMES, resolve

# exact lower-case prefixes only: "HTTP://x" and "http:x" take the per-pair path ("http:x" is relative
# to an http base)
_ABSOLUTE = ("http://", "https://")


_CTRL_OR_SPACE = re.compile(r"[\x00-\x20]")  # stripped or removed by the WHATWG parser: no prefix keys then
_DOT_SEGMENTS = (".", "..")


def _base_prefixes(base: str | None) -> tuple[str, str | None] | None:
    r"""(scheme + authority, base up to its last path separator or None) of an ``http(s)`` base: what
    a root-relative resp. a path-relative href's resolution reads of it; None for any other base.

    The authority ends at the first ``/``, ``\``, ``?`` or ``#`` after ``://``; the path at ``?`` or
    ``#``. No directory prefix when the last segment is a dot segment (``..``, ``%2e.``, ...): the
    base's parse has already applied it, so the bytes before it do not say what the directory is."""
    if base is None or not base.startswith(_ABSOLUTE) or _CTRL_OR_SPACE.search(base):
        return None
    start = base.index("://") + 3
    end = len(base)
    for ch in "?#":
        i = base.find(ch, start, end)
        if i != -1:
            end = i
    auth_end = end
    for ch in "/\\":
        i = base.find(ch, start, auth_end)
        if i != -1:
            auth_end = i
    cut = max(base.rfind("/", auth_end, end), base.rfind("\\", auth_end, end))
    if cut == -1:  # no path: the root directory
        return base[:auth_end], base[:auth_end]
    last = base[cut + 1:end].lower().replace("%2e", ".")
    return base[:auth_end], None if last in _DOT_SEGMENTS else base[:cut + 1]


def _path_relative(href: str) -> bool:
    r"""A non-empty href that WHATWG resolves in "path" state relative to the base's directory: no
    scheme (no ``:`` at all, to be safe), not starting with ``/ \ ? #``, no characters it strips."""
    return (href[:1] not in ("", "/", "\\", "?", "#") and ":" not in href
            and _CTRL_OR_SPACE.search(href) is None)


# --- resolution without Ada for hrefs WHATWG keeps as they are ------------------------------------
# Characters the WHATWG URL parser copies unchanged into the path, query and fragment of a special
# URL (none of the percent-encode sets holds them; ' is in the special-query set, so left out), and
# that it neither strips nor treats as a separator beyond / ? #. No backslash (a separator in special
# URLs), no whitespace or controls (stripped or encoded), no non-ASCII (encoded).
_KEPT = r"[A-Za-z0-9\-._~!$&()*+,;=:@%/?#]"
_KEPT_RE = re.compile(_KEPT + "*")
# leading "./" and "../" segments of a path-relative href (what it pops off the base's directory)
_LEAD_DOTS = re.compile(r"(?:\.\.?/)*")
# http(s) URL whose host is lower-case ASCII labels, the last starting with a letter (so never an
# IPv4 number), an optional port, then nothing or a path / query / fragment of kept characters
_PLAIN_ABSOLUTE = re.compile(
    r"(https?)://((?:[a-z0-9-]{1,63}\.){0,126}[a-z][a-z0-9-]{0,62})(?::([0-9]{1,5}))?(" + _KEPT + r"*)")


def _plain_rest(rest: str) -> bool:
    """``rest`` holds only kept characters and no dot segment (none starts it or follows a ``/``, and
    no ``%2``: no ``%2e`` spelling), so WHATWG appends it as it is. Substring tests before the one
    regex: this runs for every href Ada would otherwise parse."""
    return (rest[:1] != "." and "/." not in rest and "%2" not in rest
            and _KEPT_RE.fullmatch(rest) is not None)


def _plain_absolute(href: str, schemes: tuple[str, ...]) -> str | None | object:
    r"""WHATWG's serialisation of an absolute http(s) ``href`` without Ada when it needs no work but
    dropping a default port and adding the root path: a lower-case ASCII host (no ``xn--`` label: IDNA
    is Ada's), kept characters after it; ``_MISSING`` for anything else (Ada decides)."""
    m = _PLAIN_ABSOLUTE.fullmatch(href)
    if m is None or "xn--" in href:
        return _MISSING
    scheme, host, port, rest = m.groups()
    if rest[:1] not in ("", "/", "?", "#") or "/." in rest or "%2" in rest:
        return _MISSING
    if scheme not in schemes:
        return None
    if port is not None:
        n = int(port)
        if n > 65535:
            return _MISSING
        port = "" if n == _DEFAULT_PORTS[scheme] else f":{n}"
    return f"{scheme}://{host}{port or ''}{rest if rest[:1] == '/' else '/' + rest}"


def _pylist(values: Sequence[str | None] | pa.Array | pa.ChunkedArray) -> list[str | None]:
    if isinstance(values, list):
        return values
    return _as_string_array(values).to_pylist()


def resolve_many(
    hrefs: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    bases: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    schemes: tuple[str, ...] = WEB_SCHEMES,
) -> pa.Array:
    """:func:`resolve` of ``hrefs[i]`` against ``bases[i]`` for every row -> Arrow string array, null
    where the result is not a URL of ``schemes`` (http(s) by default) or the href is null."""
    schemes = tuple(schemes)
    h = _pylist(hrefs)
    b = _pylist(bases)
    if len(b) != len(h):
        raise ValueError(f"resolve_many: {len(h)} hrefs but {len(b)} bases")
    cache: dict[tuple[str | None, ...] | str, str | None] = {}
    prefixes: dict[str | None, tuple[str, str | None] | None] = {}
    # what Ada makes of "/" against an authority, of "x" / "../x" against a directory: plain hrefs
    # (kept characters, no dot segment) resolve to that prefix + the href
    roots: dict[str, str | None] = {}
    dirs: dict[tuple[str, str], str | None] = {}
    out: list[str | None] = []
    append = out.append
    get = cache.get
    for href, base in zip(h, b, strict=True):
        if href is None:
            append(None)
            continue
        key: tuple[str | None, ...] | str
        kind = 0
        if href.startswith(_ABSOLUTE):
            key = href
        else:
            pre = prefixes[base] if base in prefixes else prefixes.setdefault(base, _base_prefixes(base))
            if pre is None:
                key = (href, base)
            elif href[:1] in ("/", "\\"):
                key = (href, pre[0], "authority")
                kind = 1
            elif pre[1] is not None and _path_relative(href):
                key = (href, pre[1], "directory")
                kind = 2
            else:
                key = (href, base)
        r = get(key, _MISSING)
        if r is _MISSING:
            if kind == 0:
                r = _plain_absolute(href, schemes) if key is href else _MISSING
            elif kind == 1:
                if href[1:2] not in ("/", "\\") and _plain_rest(href):
                    root = roots[pre[0]] if pre[0] in roots else roots.setdefault(pre[0], resolve("/", base, schemes))
                    if root is not None and root.endswith("/"):
                        r = root[:-1] + href
            else:
                lead = _LEAD_DOTS.match(href).end()  # type: ignore[union-attr]
                rest = href[lead:]
                if rest[:1] != "/" and _plain_rest(rest):
                    dk = (href[:lead], pre[1])
                    d = dirs[dk] if dk in dirs else dirs.setdefault(dk, resolve(href[:lead] + "x", base, schemes))
                    if d is not None and d.endswith("/x"):
                        r = d[:-1] + rest
            if r is _MISSING:
                r = resolve(href, None if key is href else base, schemes)
            cache[key] = r
        append(r)  # type: ignore[arg-type]
    return pa.array(out, type=pa.string())
