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
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa

from crawl.config import DEFAULT_TRACKING_PARAMS
from crawl.url.columns import (
    _DEDUP_MAX_SHARE,
    _DEDUP_MIN_ROWS,
    _MISSING,
    _as_string_array,
    _buffers,
    _classify,
    _in_blocks,
    _params,
    _rows_of,
    _Simple,
    _sorted_within_rows,
    _split_simple,
    _view_array,
)
from crawl.url.parse import URL, WEB_SCHEMES, InvalidURL, parse_url

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


def canonicalize(url: str, tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS,
                 schemes: tuple[str, ...] = WEB_SCHEMES) -> str | None:
    """Our canonical form of a URL of ``schemes`` (http(s) unless the crawl allows ftp; see the
    module docstring), or None. Idempotent."""
    tracking = (_DEFAULT_TRACKING if tracking_params is DEFAULT_TRACKING_PARAMS
                else _tracking_set(tuple(tracking_params)))
    return _canonicalize(url, tracking, tuple(schemes))


def _canonicalize(url: str, tracking: frozenset[str], schemes: tuple[str, ...] = WEB_SCHEMES) -> str | None:
    try:
        return _canon_parts(parse_url(url, schemes=schemes), tracking)
    except InvalidURL:
        return None


canonical = canonicalize  # the name conformance/SOURCES.md's examples use


# ---------------------------------------------------------------------------------------------------
# the column form (see crawl/url/columns.py for the byte-position kernels and the "simple" class)
# ---------------------------------------------------------------------------------------------------
def _upper_escapes(off: np.ndarray, d: np.ndarray, rows: np.ndarray, sub: pa.Array) -> np.ndarray:
    """A copy of ``d`` with the hex digits of every escape in ``rows`` (given again as the array
    ``sub``) upper-cased, as ``_norm_pct`` does; a '%' in a fragment may change bytes that are dropped."""
    soff, sd = _buffers(sub)
    pct = np.flatnonzero(sd == ord("%"))
    r = _rows_of(soff, pct)
    pos = off[rows[r]] + (pct - soff[r])
    d = d.copy()
    for h in (pos + 1, pos + 2):
        h = h[h < len(d)]
        low = h[(d[h] >= ord("a")) & (d[h] <= ord("f"))]
        d[low] -= 32
    return d


def _canon_ranges(s: _Simple, tracking: frozenset[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """:func:`canonicalize` of simple rows as byte ranges: (in side buffer?, start, length, side buffer).

    Canonical = lower-case host, no default port, '/' for an empty path, no fragment, query parameters
    without empties and tracking names, stably sorted by name. Most rows come out as one range of the
    input (cut before the '#', or before a '?' whose parameters all go); only rows that need a change
    inside are reassembled from pieces into the side buffer.
    """
    import pyarrow.compute as pc

    d = s.data
    n = len(s.start)
    prefix = _view_array([d], None, s.start, s.host_end - s.start)
    host_upper = ~pc.ascii_is_lower(prefix).to_numpy(zero_copy_only=False)
    prow, pstart, pend, names, changed = _params(s)
    if tracking and len(names):
        dropped = pc.is_in(pc.ascii_lower(names), value_set=pa.array(sorted(tracking), pa.string()))
        drop = dropped.to_numpy(zero_copy_only=False)
        changed[prow[drop]] = True
        prow, pstart, pend = prow[~drop], pstart[~drop], pend[~drop]
        names = names.filter(pa.array(~drop))
    order = _sorted_within_rows(prow, names)
    changed[prow[order != np.arange(len(order))]] = True
    prow, pstart, pend = prow[order], pstart[order], pend[order]
    nparams = np.bincount(prow, minlength=n)
    multi = host_upper | (s.q == s.host_end) | s.default_port | (changed & (nparams > 0))
    # one range: the URL up to the '#', or up to the '?' when no parameter is left
    start = s.start.copy()
    length = np.where(nparams > 0, s.end, s.q) - s.start
    m = np.flatnonzero(multi)
    side = np.zeros(0, np.uint8)
    if len(m):
        side, side_len = _assemble(s, m, prefix, prow, pstart, pend, nparams)
        start[m] = np.cumsum(side_len) - side_len
        length[m] = side_len
    return multi, start, length, side


def _assemble(s: _Simple, rows: np.ndarray, prefix: pa.Array, prow: np.ndarray, pstart: np.ndarray,
              pend: np.ndarray, nparams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Canonical strings of ``rows`` joined from column pieces by Arrow kernels: lower-cased
    scheme+host (+ a port unless it is the default), path or '/', then '?' and the kept parameters
    (already in order) joined by '&'. Returns (bytes, length per row) of the strings.
    """
    import pyarrow.compute as pc

    d = s.data
    host = pc.ascii_lower(prefix.take(pa.array(rows)))
    if s.default_port[rows].any():  # cut ":80" / ":443", the tail of the prefix
        hoff, hd = _buffers(host)
        keep = np.where(s.default_port[rows], (s.port - s.start)[rows], np.diff(hoff))
        host = _view_array([hd], None, hoff[:-1], keep)
    consts = np.frombuffer(b"/?", np.uint8)
    plen = s.q[rows] - s.host_end[rows]
    path = _view_array([d, consts], (plen == 0).astype(np.int8), np.where(plen > 0, s.host_end[rows], 0),
                       np.where(plen > 0, plen, 1))
    k = nparams[rows]
    qmark = _view_array([consts], None, np.ones(len(rows), np.int64), (k > 0).astype(np.int64))
    local = np.full(len(s.start), -1, np.int64)
    local[rows] = np.arange(len(rows))
    sel = local[prow] >= 0
    values = _view_array([d], None, pstart[sel], pend[sel] - pstart[sel])
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(k, out=offsets[1:])
    params = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), values), "&")
    out = pc.binary_join_element_wise(host, path, qmark, params, "")
    off, data = _buffers(out)
    return data, np.diff(off)


def canonicalize_many(
    urls: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS,
    schemes: tuple[str, ...] = WEB_SCHEMES,
) -> pa.Array:
    """:func:`canonicalize` over many URLs -> Arrow string array, null where rejected.

    Simple URLs (the bulk of extracted links, see ``_SIMPLE_PAT``) are canonicalised as a column with
    NumPy byte-position kernels and Arrow string views; the rest go through the scalar
    :func:`canonicalize`, each distinct string once per call. Both give identical answers (tests
    compare them on adversarial inputs).
    """
    import pyarrow.compute as pc

    tracking = _tracking_set(tuple(tracking_params))
    schemes = tuple(schemes)
    arr = _as_string_array(urls)
    n = len(arr)
    if n == 0:
        return pa.array([], pa.string())
    if n >= _DEDUP_MIN_ROWS:  # links repeat (menus, footers): canonicalise each distinct string once
        enc = pc.dictionary_encode(arr)
        if len(enc.dictionary) < _DEDUP_MAX_SHARE * n:
            return _in_blocks(lambda a: _canonicalize_distinct(a, tracking, schemes), enc.dictionary).take(enc.indices)
    return _in_blocks(lambda a: _canonicalize_distinct(a, tracking, schemes), arr)


# A tracking path parameter as _strip_path_params drops it, for the column path: ";", a tracking name
# (ASCII letters matched per letter: RE2's case folding would also take U+017F for "s", which Python's
# lower() does not give), "=", a value of characters WHATWG copies into a path as they are (no "%": the
# scalar path's _norm_pct could make a "/" or ";" of an escape), then the path's next "/" or ";" or its end
# (kept: the scalar pattern's value ends there too; a value stopping at any other character is no match).
_PATH_VALUE = r"[A-Za-z0-9\-._~!$&()*+,=:@]*"
_URL_PARTS = r"^(?P<a>https?://[^/?#]*)(?P<p>[^?#]*)(?P<q>(?s:.*))$"  # authority, path, query + fragment


@lru_cache(maxsize=64)
def _path_param_pattern(tracking: frozenset[str]) -> str | None:
    names = sorted(t for t in tracking if re.fullmatch(r"[a-z0-9_.\-]+", t))
    if not names:
        return None
    alt = "|".join("".join(f"[{c}{c.upper()}]" if c.isalpha() else re.escape(c) for c in t) for t in names)
    return f";(?:{alt})={_PATH_VALUE}([/;]|$)"


def _without_path_params(arr: pa.Array, tracking: frozenset[str]) -> pa.Array | None:
    """Each URL with its tracking path parameters (``;jsessionid=...``) removed where what is left is
    simple (:func:`crawl.url.columns._classify`), else null; None when no row gives one.

    Why: the simulated web's session ids in paths sent ~10 % of a partition's distinct link targets
    to the scalar :func:`_canonicalize` (~26 % of ``canonicalize_many`` in a 20 k-page round). A simple
    URL holds no ";" in its path, so every ";" of such a row's path started a removed parameter, each
    one a whole ``;name=value`` the scalar pattern also finds (value up to "/", ";" or the end, copied
    unchanged by WHATWG, no escape), inside a segment that stays no dot segment (a simple path has
    none): the scalar path's answer for the row is its answer for the rest, which the columns give."""
    import pyarrow.compute as pc

    pat = _path_param_pattern(tracking)
    if pat is None:
        return None
    cand = np.flatnonzero(pc.fill_null(pc.match_substring(arr, ";"), False).to_numpy(zero_copy_only=False))
    if len(cand) == 0:
        return None
    sub = arr.take(pa.array(cand))
    parts = pc.extract_regex(sub, _URL_PARTS)
    a, p, q = (pc.struct_field(parts, [i]) for i in range(3))
    p2 = pc.replace_substring_regex(p, pat, r"\1")
    out = pc.binary_join_element_wise(a, p2, q, "")
    changed = pc.fill_null(pc.not_equal(p, p2), False).to_numpy(zero_copy_only=False)
    simple = _classify(out)[0] & changed
    if not simple.any():
        return None
    where = np.full(len(arr), -1, np.int64)
    where[cand[simple]] = np.flatnonzero(simple)
    return out.take(pa.array(where, mask=where < 0))


def _canonicalize_distinct(arr: pa.Array, tracking: frozenset[str],
                           schemes: tuple[str, ...] = WEB_SCHEMES, strip: bool = True) -> pa.Array:
    n = len(arr)
    simple, lower, lower_arr = _classify(arr)
    off, d = _buffers(arr)
    if lower_arr is not None:
        d = _upper_escapes(off, d, np.flatnonzero(lower), lower_arr)
    rows = np.flatnonzero(simple)
    multi, start_s, length_s, side = _canon_ranges(_split_simple(off, d, rows), tracking)
    which = np.full(n, 2, np.int8)
    which[rows] = multi
    start = np.zeros(n, np.int64)
    length = np.zeros(n, np.int64)
    start[rows], length[rows] = start_s, length_s
    valid = np.ones(n, bool)
    rest = np.flatnonzero(~simple)
    fb_data = np.zeros(0, np.uint8)
    if len(rest):
        rest_arr = arr.take(pa.array(rest))
        # rows simple but for tracking path parameters: the column path on them without those
        done: dict[int, str | None] = {}
        stripped = _without_path_params(rest_arr, tracking) if strip else None
        if stripped is not None:
            ok = np.flatnonzero(stripped.is_valid().to_numpy(zero_copy_only=False))
            if len(ok):
                got = _canonicalize_distinct(stripped.take(pa.array(ok)), tracking, schemes, strip=False)
                done = dict(zip(ok.tolist(), got.to_pylist(), strict=True))
        cache: dict[str, str | None] = {}
        out: list[str | None] = []
        append = out.append
        for j, u in enumerate(rest_arr.to_pylist()):
            if u is None:
                append(None)
                continue
            r = done.get(j, _MISSING)
            if r is _MISSING:
                r = cache.get(u, _MISSING)
            if r is _MISSING:
                r = cache[u] = _canonicalize(u, tracking, schemes)
            append(r)
        fb = pa.array(out, type=pa.string())
        fb_off, fb_data = _buffers(fb)
        start[rest], length[rest] = fb_off[:-1], np.diff(fb_off)
        valid[rest] = fb.is_valid().to_numpy(zero_copy_only=False)
    return _view_array([d, side, fb_data], which, start, length, valid)
