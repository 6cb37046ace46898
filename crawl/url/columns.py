"""Arrow/NumPy byte-position kernels behind the column forms, and :func:`url_columns` (the URL model's
fields as columns).

Column functions (:func:`url_columns`, :func:`crawl.url.canon.canonicalize_many`,
:func:`crawl.url.filters.filter_reasons`, :func:`crawl.url.surt.surts`) run once per round over every
discovered link, so they do not loop in Python: an RE2
pattern picks the "simple" URLs (ASCII, nothing the WHATWG parser would change but host case, default
port and fragment; see ``_SIMPLE_PAT``), their boundaries come from NumPy scans of the Arrow data
buffer, and results are assembled as Arrow string views (one C++ copy per row). Rows outside the
simple class go through the scalar function, so the answers are identical by construction, and the
tests compare both on adversarial input (Hypothesis). ``bench/urls_bench.py`` measures both paths; a
column form stays only while it is >= 3x its scalar function (bench/RESULTS.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa

# Why bytes and NumPy: Arrow's split/regex-extract kernels build a list or a new string per row and run
# at ~1-1.5 M rows/s, slower than this whole step is allowed to be. A URL of the "simple" class below is
# ASCII, so one byte is one character and every boundary (host end, '?', '&', '=', '#') is a byte
# position found with one vectorised compare over the data buffer plus a ``searchsorted`` per row. The
# output strings are Arrow string views into the input's bytes (see :func:`_view_array`), joined by
# Arrow kernels where a row needs pieces, never built row by row in Python.

# The simple class: URLs whose canonical form only needs host case, default-port removal, fragment
# removal, '/' for an empty path and query-parameter work; every exclusion sends a row to the exact
# scalar path instead:
# * lower-case ``http``/``https`` scheme, no userinfo, host of letters-digits-hyphen labels whose last
#   label starts with a letter or '-' (not an IPv4-ish number); "xn--" is checked apart (IDNA labels
#   need validation); a port in 1-65535 without a leading zero;
# * path and query of characters no WHATWG encode set touches (as ``_FAST_RE``), no path segment that
#   starts with '.' (dot segments);
# * no ';' in the path: path parameters may hold a session id the scalar path strips;
# * '%' only as an escape of a byte that is not unreserved (``_norm_pct`` only upper-cases its hex,
#   which :func:`_upper_escapes` does in place); so no ``%2E``: a '%2e' segment is a dot segment.
# A fragment may hold anything: it is dropped, and everything before the first '#' parses the same
# with or without it.
_P = r"A-Za-z0-9\-_~!$&'()*+,=:@\[\]|"      # path characters but '.', '/', '%', ';' (path params)
_Q = r"A-Za-z0-9\-._~!$&()*+,;=:@/?\[\]|{}`^"  # query characters but '%'
_ESC = r"%(?i:[01][0-9a-f]|2[0-9a-cf]|3[a-f]|40|5[b-e]|60|7[b-df]|[89a-f][0-9a-f])"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_SLASH, _QMARK, _HASH, _AMP, _EQ, _DASH, _COLON, _AT = (ord(c) for c in "/?#&=-:@")


def _as_string_array(urls: Sequence[str | None] | pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(urls, pa.ChunkedArray):
        urls = urls.combine_chunks()
    if not isinstance(urls, pa.Array):
        urls = pa.array(list(urls), type=pa.string())
    return urls.cast(pa.string()) if urls.type != pa.string() else urls


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0 as int64, n + 1 of them; the row bytes) of a ``pa.string()`` array, no copy.

    The data is cut to the array's own rows (a slice shares its parent's buffer), so a byte position
    found by scanning it always belongs to one of the rows.
    """
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = data[off[0]:off[-1]]
    return off - off[0], data


def _first_in(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row, the first of the sorted byte positions ``pos`` in ``[lo, hi)``, else ``hi``."""
    if len(pos) == 0:
        return hi.copy()
    k = np.searchsorted(pos, lo)
    cand = pos[np.minimum(k, len(pos) - 1)]
    return np.where((k < len(pos)) & (cand < hi), cand, hi)


def _last_in(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row, the last of the sorted byte positions ``pos`` in ``[lo, hi)``, else -1."""
    if len(pos) == 0:
        return np.full(len(lo), -1, np.int64)
    k = np.searchsorted(pos, hi) - 1
    cand = pos[np.maximum(k, 0)]
    return np.where((k >= 0) & (cand >= lo), cand, -1)


def _count_in(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row, how many of the sorted byte positions ``pos`` lie in ``[lo, hi)``."""
    return np.searchsorted(pos, np.maximum(hi, lo)) - np.searchsorted(pos, lo)


def _rows_of(off: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return np.searchsorted(off, pos, side="right") - 1


def _simple_pattern(esc: str) -> str:
    return (
        rf"^https?://(?:[A-Za-z0-9\-]+\.)*[A-Za-z\-][A-Za-z0-9\-]*(?::{_PORT})?"
        rf"(?:/(?:(?:[{_P}]|{esc})(?:[{_P}.]|{esc})*)?)*"
        rf"(?:\?(?:[{_Q}]|{esc})*)?"
        r"(?s:#.*)?$"
    )


_SIMPLE_PAT = _simple_pattern(_ESC)  # what the vectorised path takes
_UPPER_ESC = r"%(?:[01][0-9A-F]|2[0-9A-CF]|3[A-F]|40|5[B-E]|60|7[B-DF]|[89A-F][0-9A-F])"
_STRICT_PAT = _simple_pattern(_UPPER_ESC)  # escapes already upper-case: the URL's bytes are kept


def _classify(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array | None]:
    """(simple rows, the simple rows with a lower-case escape, those rows as an array or None).

    The strict pattern runs over the column; only rows it refuses (few, in real links) are tried
    against the one that also accepts lower-case hex. "xn--" anywhere sends a row to the scalar path.
    """
    import pyarrow.compute as pc

    simple = pc.match_substring_regex(arr, _STRICT_PAT).fill_null(False).to_numpy(zero_copy_only=False)
    lower = np.zeros(len(arr), bool)
    cand = np.flatnonzero(~simple)
    sub = None
    if len(cand):
        cand_arr = arr.take(pa.array(cand))
        loose = pc.match_substring_regex(cand_arr, _SIMPLE_PAT).fill_null(False).to_numpy(zero_copy_only=False)
        if loose.any():
            lower[cand[loose]] = True
            simple |= lower
            sub = cand_arr.filter(pa.array(loose))
    off, d = _buffers(arr)
    dash = np.flatnonzero(d[1:] == _DASH)  # position p: d[p + 1] == '-'
    dd = dash[(dash + 2 < len(d)) & (d[np.minimum(dash + 2, len(d) - 1)] == _DASH) & (dash >= 1)]
    if len(dd):  # "xn--" at dd - 1: an IDNA label, which the full parser must validate
        xn = _rows_of(off, dd[((d[dd - 1] | 0x20) == ord("x")) & ((d[dd] | 0x20) == ord("n"))] - 1)
        if len(xn) and lower[xn].any():
            keep = ~np.isin(np.flatnonzero(lower), xn)
            sub = sub.filter(pa.array(keep)) if sub is not None else None
        simple[xn] = False
        lower[xn] = False
    return simple, lower, sub


def _simple_mask(arr: pa.Array) -> np.ndarray:
    """Rows of the simple class (see ``_SIMPLE_PAT``); nulls are not simple."""
    return _classify(arr)[0]


class _Simple(NamedTuple):
    """Byte positions of the simple rows of a column (see ``_SIMPLE_PAT``)."""

    data: np.ndarray
    start: np.ndarray     # first byte of the row
    host: np.ndarray      # first byte of the host (after "://")
    host_end: np.ndarray  # first '/', '?' or '#' after the host (and port), or the end of the row
    port: np.ndarray      # the ':' before the port, or host_end when there is none
    default_port: np.ndarray  # the port is the scheme's default: dropped
    q: np.ndarray         # the '?' (or the fragment start / row end when there is no query)
    end: np.ndarray       # the '#' or the end of the row: everything before it is the URL proper


def _split_simple(off: np.ndarray, d: np.ndarray, rows: np.ndarray) -> _Simple:
    """Boundaries of simple ``rows``: three byte scans ('#', '?', '/') over the data, then per-row
    searches. A port is looked for only where a digit ends the authority."""
    start, stop = off[rows], off[rows + 1]
    host = start + 7 + (d[start + 4] == ord("s")) if len(rows) else start
    end = _first_in(np.flatnonzero(d == _HASH), host, stop)
    q = _first_in(np.flatnonzero(d == _QMARK), host, end)
    host_end = _first_in(np.flatnonzero(d == _SLASH), host, q)
    port = host_end.copy()
    default = np.zeros(len(rows), bool)
    last = d[np.maximum(host_end - 1, 0)] if len(d) else np.zeros(len(rows), np.uint8)
    cand = np.flatnonzero((last >= ord("0")) & (last <= ord("9")))
    found = np.zeros(len(cand), bool)
    for k in range(2, 7):  # ':' then 1-5 digits; the host itself holds no ':'
        at = host_end[cand] - k
        hit = ~found & (at >= host[cand]) & (d[np.maximum(at, 0)] == _COLON)
        port[cand[hit]] = at[hit]
        found |= hit
    has_port = cand[found]
    if len(has_port):
        p0, p1 = port[has_port] + 1, host_end[has_port]
        val = np.zeros(len(has_port), np.int64)
        for k in range(5):
            digit = np.where(p0 + k < p1, d[np.minimum(p0 + k, len(d) - 1)].astype(np.int64) - 48, -1)
            val = np.where(digit >= 0, val * 10 + digit, val)
        https = host[has_port] - start[has_port] == 8
        default[has_port] = np.where(https, val == 443, val == 80)
    return _Simple(d, start, host, host_end, port, default, q, end)


def _params(s: _Simple) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array, np.ndarray]:
    """(row, first byte, end byte, name) of every non-empty '&'-separated query parameter, in URL
    order, plus a flag per row for empty parameters. Scans only the query bytes (copied out through
    string views), not the whole column."""
    qrows = np.flatnonzero(s.end - s.q > 1)
    qa = _view_array([s.data], None, s.q[qrows] + 1, s.end[qrows] - s.q[qrows] - 1)
    qoff, qd = _buffers(qa)
    amp = np.flatnonzero(qd == _AMP)
    # a parameter after a trailing '&' starts where the next row's first one does: the stable sort
    # must put it first, so the '&' starts come first in the concatenation
    pstart = np.concatenate([amp + 1, qoff[:-1]])
    prow = np.concatenate([_rows_of(qoff, amp), np.arange(len(qrows))])
    order = np.argsort(pstart, kind="stable")
    pstart, prow = pstart[order], prow[order]
    nxt_same = np.zeros(len(prow), bool)
    nxt_same[:-1] = prow[1:] == prow[:-1]
    pend = np.where(nxt_same, np.roll(pstart, -1) - 1, qoff[prow + 1])
    empty_rows = np.zeros(len(s.start), bool)
    keep = pend > pstart
    empty_rows[qrows[prow[~keep]]] = True
    prow, pstart, pend = prow[keep], pstart[keep], pend[keep]
    name_end = _first_in(np.flatnonzero(qd == _EQ), pstart, pend)
    names = _view_array([qd], None, pstart, name_end - pstart)
    shift = s.q[qrows][prow] + 1 - qoff[prow]  # query coordinates -> column coordinates
    return qrows[prow], pstart + shift, pend + shift, names, empty_rows


def _sorted_within_rows(rows: np.ndarray, keys: pa.Array) -> np.ndarray:
    """A stable order of elements (grouped by non-decreasing ``rows``) sorting ``keys`` inside each row.

    Only rows that are not already in order go through Arrow's (stable) sort.
    """
    import pyarrow.compute as pc

    n = len(rows)
    order = np.arange(n)
    if n < 2:
        return order
    same = rows[1:] == rows[:-1]
    desc = pc.greater(keys.slice(0, n - 1), keys.slice(1)).to_numpy(zero_copy_only=False) & same
    if not desc.any():
        return order
    bad = np.zeros(int(rows[-1]) + 1, bool)
    bad[rows[1:][desc]] = True
    sub = np.flatnonzero(bad[rows])
    t = pa.table({"r": rows[sub], "k": keys.take(pa.array(sub))})
    sub_order = pc.sort_indices(t, sort_keys=[("r", "ascending"), ("k", "ascending")]).to_numpy()
    order[sub] = sub[sub_order]
    return order


def _u32_at(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The little-endian 4-byte words starting at each byte position (unaligned reads, no copy of
    ``buf``); bytes past its end read as 0."""
    if len(buf) < 4:
        tail = np.zeros(24, np.uint8)
        tail[:len(buf)] = buf
        return np.ndarray(shape=(21,), dtype="<u4", buffer=tail, strides=(1,))[np.minimum(pos, 20)]
    words = np.ndarray(shape=(len(buf) - 3,), dtype="<u4", buffer=buf, strides=(1,))
    last = len(buf) - 4
    out = words[np.minimum(pos, last)]
    over = np.flatnonzero(pos > last)
    if len(over):  # the last few bytes: shift the last word right, zeros come in
        shift = np.minimum(pos[over] - last, 4).astype("<u4") * 8
        out[over] = np.where(shift >= 32, 0, out[over] >> np.minimum(shift, 31))
    return out


_SHORT_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], "<u4")


def _view_array(buffers: Sequence[np.ndarray], which: np.ndarray | None, start: np.ndarray,
                length: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """``pa.string()`` of byte ranges ``buffers[which][start:start+length]`` (null where not ``valid``).

    Built as an Arrow string-view array whose views point into the buffers; the one cast to ``string``
    is a C++ copy per row, so no Python or NumPy work is spent per byte. A view is 16 bytes: length,
    then either the string inline (up to 12 bytes) or its first 4 bytes, buffer index and offset.
    """
    n = len(start)
    views = np.zeros((n, 4), "<u4")
    views[:, 0] = length
    for i, buf in enumerate(buffers):
        rows = np.arange(n) if which is None else np.flatnonzero(which == i)
        if not len(rows):
            continue
        st, ln = start[rows], length[rows]
        short = ln <= 12
        if short.all():
            lr, sr, sst, sln = rows[:0], rows, st, ln
        elif not short.any():
            lr, sr, sst, sln = rows, rows[:0], st[:0], ln[:0]
        else:
            lr, sr, sst, sln = rows[~short], rows[short], st[short], ln[short]
        if len(lr):  # prefix, buffer index, offset
            lst = st if len(lr) == len(rows) else st[~short]
            views[lr, 1] = _u32_at(buf, lst)
            views[lr, 2] = i
            views[lr, 3] = lst
        if len(sr):  # the string itself, zero-padded
            for w in range(3):
                keep = np.minimum(np.maximum(sln - 4 * w, 0), 4)
                views[sr, 1 + w] = _u32_at(buf, sst + 4 * w) & _SHORT_MASKS[keep]
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        views[~valid] = 0
    bufs = [validity, pa.py_buffer(views)] + [pa.py_buffer(b) for b in buffers]
    return pa.Array.from_buffers(pa.string_view(), n, bufs).cast(pa.string())


_BLOCK_ROWS = 65_536


def _in_blocks(fn: Callable[[pa.Array], pa.Array], arr: pa.Array) -> pa.Array:
    """``fn`` over slices of ``_BLOCK_ROWS`` rows, concatenated. The column kernels make a dozen
    temporaries per row; at this size they stay in the CPU cache (measured ~25-30 % faster on 1 M
    URLs than one pass over the whole column)."""
    if len(arr) <= _BLOCK_ROWS:
        return fn(arr)
    return pa.concat_arrays([fn(arr.slice(i, _BLOCK_ROWS)) for i in range(0, len(arr), _BLOCK_ROWS)])


_DEDUP_MIN_ROWS = 10_000
_DEDUP_MAX_SHARE = 0.9  # dictionary-encoding pays for itself when >= ~10 % of the rows are repeats


_MISSING: object = object()


# ---------------------------------------------------------------------------------------------------
# the URL model as columns
# ---------------------------------------------------------------------------------------------------
URL_FIELDS = ("scheme", "host", "port", "path", "query")


def url_columns(urls: Sequence[str | None] | pa.Array | pa.ChunkedArray,
                fields: Sequence[str] = URL_FIELDS, schemes: tuple[str, ...] = ("http", "https")
                ) -> dict[str, pa.Array]:
    """:func:`crawl.url.parse.parse_url`'s ``fields`` for every URL, as Arrow columns (``port`` int32,
    null when it is the default; ``query`` null when the URL has no ``?``, ``""`` after a bare ``?``,
    as Common Crawl's index has it; every field null where the URL is invalid or null).

    Why: update's ``host`` column and the index's URL columns cover every row of a round; they must be
    the URL model's answer (one definition of a host), at column speed. Simple URLs (``_SIMPLE_PAT``:
    no userinfo, a plain letters-digits-hyphen host, nothing WHATWG would change but host case and a
    default port) are sliced from byte positions; every other distinct URL goes through
    :func:`parse_url` once (with ``schemes``). A Hypothesis test checks both give the same answers.
    """
    import pyarrow.compute as pc

    schemes = tuple(schemes)
    bad = [f for f in fields if f not in URL_FIELDS]
    if bad:
        raise ValueError(f"url_columns: unknown fields {bad}; known: {URL_FIELDS}")
    arr = _as_string_array(urls)
    n = len(arr)
    if n >= _DEDUP_MIN_ROWS:
        enc = pc.dictionary_encode(arr)
        if len(enc.dictionary) < _DEDUP_MAX_SHARE * n:
            per = _url_columns_blocks(enc.dictionary, fields, schemes)
            return {f: col.take(enc.indices) for f, col in per.items()}
    return _url_columns_blocks(arr, fields, schemes)


_URL_TYPES = {"scheme": pa.string(), "host": pa.string(), "port": pa.int32(), "path": pa.string(),
              "query": pa.string()}


def _url_columns_blocks(arr: pa.Array, fields: Sequence[str], schemes: tuple[str, ...]) -> dict[str, pa.Array]:
    parts = [_url_columns_block(arr.slice(i, _BLOCK_ROWS), fields, schemes) for i in range(0, len(arr), _BLOCK_ROWS)]
    if not parts:
        return {f: pa.array([], _URL_TYPES[f]) for f in fields}
    return {f: pa.concat_arrays([p[f] for p in parts]) for f in fields}


def _url_columns_block(arr: pa.Array, fields: Sequence[str], schemes: tuple[str, ...]) -> dict[str, pa.Array]:
    import pyarrow.compute as pc

    from crawl.url.parse import InvalidURL, parse_url

    n = len(arr)
    simple = _classify(arr)[0]
    off, d = _buffers(arr)
    rows = np.flatnonzero(simple)
    s = _split_simple(off, d, rows)
    m = len(rows)
    has_port = s.port < s.host_end
    fast: dict[str, pa.Array] = {}
    if "scheme" in fields:
        fast["scheme"] = pa.array(np.where(s.host - s.start == 8, "https", "http").astype(object), pa.string()) \
            if m else pa.array([], pa.string())
    if "host" in fields:
        fast["host"] = pc.ascii_lower(_view_array([d], None, s.host, np.where(has_port, s.port, s.host_end) - s.host))
    if "port" in fields:
        keep = has_port & ~s.default_port
        digits = _view_array([d], None, np.where(keep, s.port + 1, 0), np.where(keep, s.host_end - s.port - 1, 0),
                             keep)
        fast["port"] = digits.cast(pa.int32())
    if "path" in fields:
        consts = np.frombuffer(b"/", np.uint8)
        plen = s.q - s.host_end
        fast["path"] = _view_array([d, consts], (plen == 0).astype(np.int8), np.where(plen > 0, s.host_end, 0),
                                   np.where(plen > 0, plen, 1))
    if "query" in fields:
        has_q = s.q < s.end
        fast["query"] = _view_array([d], None, np.where(has_q, s.q + 1, s.q), np.where(has_q, s.end - s.q - 1, 0),
                                    has_q)
    rest = np.flatnonzero(~simple)
    if not len(rest):
        return fast
    slow: dict[str, list] = {f: [] for f in fields}
    for u in arr.take(pa.array(rest)).to_pylist():
        try:
            p = None if u is None else parse_url(u, schemes=schemes)
        except InvalidURL:
            p = None
        for f in fields:
            slow[f].append(None if p is None or (f == "query" and not p.has_query) else getattr(p, f))
    where = np.empty(n, np.int64)
    where[rows] = np.arange(m)
    where[rest] = m + np.arange(len(rest))
    idx = pa.array(where)
    return {f: pa.concat_arrays([fast[f], pa.array(slow[f], _URL_TYPES[f])]).take(idx) for f in fields}
