"""Trap and scope rules: Nutch/StormCrawler-style URL filters driven by :class:`crawl.config.CrawlConfig`.

:func:`filter_reason` answers for one canonical URL, :func:`filter_reasons` for a column (same answers)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from crawl.config import CrawlConfig
from crawl.scope import host_allowed, hosts_allowed
from crawl.url.columns import (
    _AMP,
    _AT,
    _BLOCK_ROWS,
    _COLON,
    _DEDUP_MAX_SHARE,
    _DEDUP_MIN_ROWS,
    _HASH,
    _QMARK,
    _SHORT_MASKS,
    _SLASH,
    _as_string_array,
    _buffers,
    _classify,
    _count_in,
    _first_in,
    _last_in,
    _rows_of,
    _u32_at,
    _view_array,
)
from crawl.url.parse import WEB_SCHEMES, InvalidURL, parse_url

TOO_LONG = "too_long"
TOO_DEEP = "too_deep"
REPEATED_SEGMENTS = "repeated_segments"
TOO_MANY_SEGMENTS = "too_many_segments"
QUERY_EXPLOSION = "query_explosion"
OUT_OF_SCOPE = "out_of_scope"
BAD_SCHEME = "bad_scheme"
FILTER_REASONS = (BAD_SCHEME, TOO_LONG, TOO_DEEP, TOO_MANY_SEGMENTS, REPEATED_SEGMENTS, QUERY_EXPLOSION,
                  OUT_OF_SCOPE)


def is_bad_scheme(url: str, schemes: tuple[str, ...] = WEB_SCHEMES) -> bool:
    """Only absolute URLs of the crawl's schemes (``allowed_schemes``: http(s), ftp opt-in) are crawlable."""
    return not url[:8].lower().startswith(tuple(f"{s}://" for s in schemes))


def is_too_long(url: str, max_length: int) -> bool:
    return len(url) > max_length


def is_too_deep(depth: int, max_depth: int) -> bool:
    """Depth counts link hops from a seed (seeds are 0)."""
    return depth > max_depth


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def has_repeated_segments(path: str, max_repeats: int) -> bool:
    """Some segment occurs more than ``max_repeats`` times in the path (Nutch's loop rule); 0 = off.

    Counting occurrences anywhere catches ``/a/a/a``, cycles such as ``/a/b/a/b/a/b`` (every segment of
    a repeated block repeats) and Nutch's ``/x/y/x/z/x`` — the shapes relative-link and calendar traps
    take.
    """
    if max_repeats <= 0:
        return False
    segs = _segments(path)
    if len(segs) <= max_repeats:
        return False
    counts: dict[str, int] = {}
    for s in segs:
        c = counts[s] = counts.get(s, 0) + 1
        if c > max_repeats:
            return True
    return False


def has_too_many_segments(path: str, max_segments: int) -> bool:
    return len(_segments(path)) > max_segments


def has_query_explosion(query: str, max_params: int) -> bool:
    return sum(1 for p in query.split("&") if p) > max_params


def is_out_of_scope(host: str, allowed_hosts: str) -> bool:
    """``allowed_hosts`` is a regex searched in the host (anchor it yourself); empty = any host.
    Matched by :mod:`crawl.scope` (RE2, linear time)."""
    return not host_allowed(host, allowed_hosts)


def filter_reason(url: str, depth: int, cfg: CrawlConfig) -> str | None:
    """Why ``url`` (canonical, at link ``depth``) must not be crawled, or None if it may.

    Host, path and query are the URL model's (:func:`crawl.url.parse.parse_url`); a URL the model
    refuses is ``bad_scheme`` (not an absolute URL of ``cfg.allowed_schemes``, by default http(s))."""
    schemes = tuple(cfg.allowed_schemes)
    if is_bad_scheme(url, schemes):
        return BAD_SCHEME
    try:
        u = parse_url(url, schemes=schemes)
    except InvalidURL:
        return BAD_SCHEME
    if is_too_long(url, cfg.max_url_length):
        return TOO_LONG
    if is_too_deep(depth, cfg.max_depth):
        return TOO_DEEP
    host, path, query = u.host, u.path, u.query
    if has_too_many_segments(path, cfg.max_path_segments):
        return TOO_MANY_SEGMENTS
    if has_repeated_segments(path, cfg.max_path_repeats):
        return REPEATED_SEGMENTS
    if has_query_explosion(query, cfg.max_query_params):
        return QUERY_EXPLOSION
    if is_out_of_scope(host, cfg.allowed_hosts):
        return OUT_OF_SCOPE
    return None


class _UrlParts(NamedTuple):
    """Byte ranges of the host, path and query for every row of a column (``lo``/``hi`` pairs)."""

    host_lo: np.ndarray
    host_hi: np.ndarray
    path_lo: np.ndarray   # path_lo == path_hi: the path is "/" (no slash before the query)
    path_hi: np.ndarray
    query_lo: np.ndarray  # query_lo == query_hi: no or an empty query
    query_hi: np.ndarray


def _split_url_bytes(off: np.ndarray, d: np.ndarray, rest: np.ndarray,
                     need_host: bool) -> tuple[_UrlParts, np.ndarray]:
    """Host, path and query of simple URLs (the URL model's, see :func:`_filter_block`) as byte
    ranges, and the positions of every '/' in ``d`` from ``rest`` on; ``rest`` is where the part after
    "://" starts in each row."""
    stop = off[1:]
    # the '/' of "://" would be a third of all: blank them in a copy before scanning
    d_sl = d.copy()
    after_scheme = rest[rest - off[:-1] >= 7]  # rows too short for a scheme keep all their bytes
    d_sl[after_scheme - 1] = 0
    d_sl[after_scheme - 2] = 0
    sl = np.flatnonzero(d_sl == _SLASH)
    end = _first_in(np.flatnonzero(d == _HASH), rest, stop)
    slash = _first_in(sl, rest, end)
    qmark = _first_in(np.flatnonzero(d == _QMARK), rest, end)
    has_q = qmark < end
    no_path = (slash == end) | (has_q & (qmark < slash))
    auth_hi = np.where(no_path, np.where(has_q, qmark, end), slash)
    path_lo = np.where(no_path, auth_hi, slash)
    path_hi = np.where(no_path, auth_hi, np.where(has_q, qmark, end))
    query_lo = np.where(has_q, qmark + 1, end)
    host_lo = host_hi = auth_hi
    if need_host:  # scan the authorities only, copied out through string views
        auth = _view_array([d], None, rest, auth_hi - rest)
        aoff, ad = _buffers(auth)
        a_lo, a_hi = aoff[:-1], aoff[1:]
        at = _last_in(np.flatnonzero(ad == _AT), a_lo, a_hi)
        h_lo = np.where(at >= 0, at + 1, a_lo)
        v6 = (h_lo < a_hi) & (ad[np.minimum(h_lo, max(len(ad) - 1, 0))] == ord("[")) if len(ad) else h_lo < 0
        close = _first_in(np.flatnonzero(ad == ord("]")), h_lo, a_hi)
        colon = _first_in(np.flatnonzero(ad == _COLON), h_lo, a_hi)
        # "[..." without ']' is cut to nothing (``host[:find("]") + 1]`` with find == -1)
        h_hi = np.where(v6, np.where(close < a_hi, close + 1, h_lo), colon)
        host_lo, host_hi = rest + (h_lo - a_lo), rest + (h_hi - a_lo)
    return _UrlParts(host_lo, host_hi, path_lo, path_hi, query_lo, end), sl


def _segment_keys(d: np.ndarray, lo: np.ndarray, hi: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Per byte range, ``row << 32 | h`` with ``h`` a 32-bit mix of its length, first 12 and last 4
    bytes: equal ranges of a row get equal keys; sorting the keys groups each row's equal ranges."""
    ln = hi - lo
    short = ln <= 12
    h = ln.astype(np.uint32) * np.uint32(0x9E3779B1)
    for i, (at, keep) in enumerate(((lo, np.minimum(ln, 4)), (lo + 4, np.maximum(np.minimum(ln - 4, 4), 0)),
                                    (lo + 8, np.maximum(np.minimum(ln - 8, 4), 0)))):
        w = _u32_at(d, at) & _SHORT_MASKS[keep]
        h = (h ^ w) * np.uint32(0x85EBCA6B + 2 * i)
        h ^= h >> np.uint32(15)
    tail = np.flatnonzero(~short)
    if len(tail):
        h[tail] = (h[tail] ^ _u32_at(d, hi[tail] - 4)) * np.uint32(0xC2B2AE35)
    return (row.astype(np.uint64) << np.uint64(32)) | h.astype(np.uint64)


def _repeated_exact(d: np.ndarray, lo: np.ndarray, hi: np.ndarray, row: np.ndarray, k: int) -> np.ndarray:
    """Rows where some segment occurs more than ``k`` times, by dictionary codes of the segment
    strings (exact; used on the few candidate rows)."""
    import pyarrow.compute as pc

    if not len(lo):
        return np.zeros(0, np.int64)
    segs = pc.dictionary_encode(_view_array([d], None, lo, hi - lo))
    ncode = len(segs.dictionary) + 1
    key = np.sort(row.astype(np.int64) * ncode + segs.indices.to_numpy(zero_copy_only=False))
    hit = np.flatnonzero(key[k:] == key[:-k]) if len(key) > k else np.zeros(0, np.int64)
    return np.unique(key[hit] // ncode)


def _repeat_candidates(d: np.ndarray, lo: np.ndarray, hi: np.ndarray, row: np.ndarray, k: int) -> np.ndarray:
    """Rows where some segment (byte ranges ``lo``/``hi`` of ``row``) may occur more than ``k`` times.

    Equal segments of a row always get equal keys (:func:`_segment_keys`), so no repeat is missed;
    different ones rarely collide, and the caller confirms every candidate exactly. Cheaper than
    building and dictionary-encoding a string per segment.
    """
    key = np.sort(_segment_keys(d, lo, hi, row))
    hit = np.flatnonzero(key[k:] == key[:-k]) if len(key) > k else np.zeros(0, np.int64)
    return np.unique((key[hit] >> np.uint64(32)).astype(np.int64))


def filter_reasons(urls: pa.Array | pa.ChunkedArray, depths: np.ndarray, cfg: CrawlConfig) -> pa.Array:
    """:func:`filter_reason` for many URLs -> string array (null = keep; a null URL is ``bad_scheme``).

    Every check runs over the whole column: the URL is split into host/path/query byte ranges with
    NumPy (the URL model's fields for the simple class, :func:`filter_reason` per row otherwise),
    segments and parameters are counted from byte positions, repeated segments are found by sorting (row, segment-hash) keys and confirming the
    candidates with dictionary codes, the scope regex runs on the host column. With many repeated URLs
    (links to the same pages from many pages) the URL checks run once per distinct URL and only the
    depth check per row.
    """
    import pyarrow.compute as pc

    arr = _as_string_array(urls)
    depths = np.asarray(depths)
    n = len(arr)
    if n == 0:
        return pa.array([], pa.string())
    code = None
    if n >= _DEDUP_MIN_ROWS:
        enc = pc.dictionary_encode(arr)
        if len(enc.dictionary) < _DEDUP_MAX_SHARE * n:
            per_url = _filter_codes(enc.dictionary, np.zeros(len(enc.dictionary), np.int64), cfg)
            idx = enc.indices.fill_null(0).to_numpy(zero_copy_only=False)
            code = per_url[idx] if len(per_url) else np.full(n, -1, np.int8)
            if enc.indices.null_count:
                code[~enc.indices.is_valid().to_numpy(zero_copy_only=False)] = _CODE[BAD_SCHEME]
            # depth comes third: after bad_scheme and too_long, before the other URL checks
            deep = (depths > cfg.max_depth) & (code != _CODE[BAD_SCHEME]) & (code != _CODE[TOO_LONG])
            code[deep] = _CODE[TOO_DEEP]
    if code is None:
        code = _filter_codes(arr, depths, cfg)
    valid = code >= 0
    return pa.array(list(FILTER_REASONS), pa.string()).take(pa.array(np.where(valid, code, 0), mask=~valid))


_CODE = {r: i for i, r in enumerate(FILTER_REASONS)}


def _filter_codes(arr: pa.Array, depths: np.ndarray, cfg: CrawlConfig) -> np.ndarray:
    """Reason codes (index into ``FILTER_REASONS``, -1 = keep) in cache-sized blocks."""
    return np.concatenate([_filter_block(arr.slice(i, _BLOCK_ROWS), depths[i:i + _BLOCK_ROWS], cfg)
                           for i in range(0, len(arr), _BLOCK_ROWS)] or [np.zeros(0, np.int8)])


def _filter_block(arr: pa.Array, depths: np.ndarray, cfg: CrawlConfig) -> np.ndarray:
    import pyarrow.compute as pc

    n = len(arr)
    code = np.full(n, -1, np.int8)  # index into FILTER_REASONS, -1 = keep

    def mark(rows_or_mask: np.ndarray, why: str) -> None:
        idx = np.flatnonzero(rows_or_mask) if rows_or_mask.dtype == bool else rows_or_mask
        idx = idx[code[idx] < 0]
        code[idx] = FILTER_REASONS.index(why)

    if n == 0:
        return code
    off, d = _buffers(arr)
    start = off[:-1]
    ln = np.diff(off)
    lowered = pc.ascii_lower(pc.utf8_slice_codeunits(arr, 0, 8))
    https = pc.starts_with(lowered, "https://").fill_null(False).to_numpy(zero_copy_only=False)
    http = pc.starts_with(lowered, "http://").fill_null(False).to_numpy(zero_copy_only=False)
    mark(~(http | https), BAD_SCHEME)
    ascii_rows = ln == pc.utf8_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    too_long = ln > cfg.max_url_length  # bytes >= characters; count characters only where they differ
    check = np.flatnonzero(too_long & ~ascii_rows)
    if len(check):
        too_long[check] = pc.utf8_length(arr.take(pa.array(check))).to_numpy(zero_copy_only=False) > cfg.max_url_length
    mark(too_long, TOO_LONG)
    mark(depths > cfg.max_depth, TOO_DEEP)

    # a bad-scheme row is decided already: give it empty pieces (its byte 7 may sit inside a
    # multi-byte character, which must not start a string view)
    rest = np.where(https, start + 8, np.where(http, start + 7, off[1:]))
    parts, sl = _split_url_bytes(off, d, rest, bool(cfg.allowed_hosts))
    # segments: each '/' of the path followed by a byte that is neither '/' nor the path's end starts
    # one. The row of every '/' comes from per-row counts (a repeat, not a search per '/').
    sl_row = np.repeat(np.arange(n), _count_in(sl, off[:-1], off[1:]))
    p_lo, p_hi = parts.path_lo[sl_row], parts.path_hi[sl_row]
    nxt = np.empty_like(sl)
    nxt[:-1] = sl[1:]
    nxt[-1:] = len(d)
    is_seg = (sl >= p_lo) & (sl + 1 < p_hi) & (nxt != sl + 1)
    seg_lo, seg_row = sl[is_seg] + 1, sl_row[is_seg]
    seg_hi = np.minimum(nxt[is_seg], p_hi[is_seg])
    nseg = np.bincount(seg_row, minlength=n)
    mark(nseg > cfg.max_path_segments, TOO_MANY_SEGMENTS)
    k = cfg.max_path_repeats
    if k > 0:
        pick = ((nseg > k) & (code < 0))[seg_row]
        if pick.any():
            hit_rows = _repeat_candidates(d, seg_lo[pick], seg_hi[pick], seg_row[pick], k)
            if len(hit_rows):  # confirm exactly: a hash can only add candidates, never lose one
                is_hit = np.zeros(n, bool)
                is_hit[hit_rows] = True
                sel = is_hit[seg_row]
                mark(_repeated_exact(d, seg_lo[sel], seg_hi[sel], seg_row[sel], k), REPEATED_SEGMENTS)
    # query parameters: a parameter starts after the '?' or an '&' and is not empty
    qrows = np.flatnonzero((parts.query_hi > parts.query_lo) & (code < 0))
    if len(qrows):
        amp = np.flatnonzero(d == _AMP)
        amp_row = _rows_of(off, amp)
        in_q = (amp >= parts.query_lo[amp_row]) & (amp < parts.query_hi[amp_row])
        p_lo = np.concatenate([parts.query_lo[qrows], amp[in_q] + 1])
        p_row = np.concatenate([qrows, amp_row[in_q]])
        nonempty = (p_lo < parts.query_hi[p_row]) & (d[np.minimum(p_lo, len(d) - 1)] != _AMP)
        nparams = np.bincount(p_row[nonempty], minlength=n)
        mark(nparams > cfg.max_query_params, QUERY_EXPLOSION)
    if cfg.allowed_hosts:
        hosts = _view_array([d], None, parts.host_lo, parts.host_hi - parts.host_lo)
        low = pc.ascii_lower(hosts)
        non_ascii = np.flatnonzero(~pc.string_is_ascii(hosts).to_numpy(zero_copy_only=False))
        if len(non_ascii):  # Python's str.lower, as filter_reason does
            fixed = [h.lower() for h in hosts.take(pa.array(non_ascii)).to_pylist()]
            mask = np.zeros(n, bool)
            mask[non_ascii] = True
            low = pc.replace_with_mask(low, pa.array(mask), pa.array(fixed, pa.string()))
        mark(~hosts_allowed(low, cfg.allowed_hosts), OUT_OF_SCOPE)
    # the byte split above is the URL model's answer only for the simple class (no userinfo, dot
    # segments, IP or IDNA host...); every other row takes filter_reason, so both always agree
    rest = np.flatnonzero(~_classify(arr)[0] & arr.is_valid().to_numpy(zero_copy_only=False))
    for i, u in zip(rest.tolist(), arr.take(pa.array(rest, pa.int64())).to_pylist(), strict=True):
        why = filter_reason(u, int(depths[i]), cfg)
        code[i] = -1 if why is None else _CODE[why]
    return code
