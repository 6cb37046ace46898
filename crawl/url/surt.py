"""Grouping keys of a URL: SURT (Common Crawl ``url_surtkey``), registered domain, TLD, politeness key.

All of them start from the URL model's host (:func:`crawl.url.parse.parse_url`), so one server has one
key whatever the spelling of its URL (userinfo, case, trailing dot, default port, IPv4 form)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa

from crawl.url.canon import _canon_query, _norm_pct
from crawl.url.columns import (
    _SLASH,
    _as_string_array,
    _buffers,
    _classify,
    _in_blocks,
    _params,
    _sorted_within_rows,
    _split_simple,
    _view_array,
)
from crawl.url.parse import WEB_SCHEMES, InvalidURL, host_of, is_ip_host, parse_url


@lru_cache(maxsize=1)
def _extractor():
    import tldextract  # deferred: building the suffix trie costs ~100 ms

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


@lru_cache(maxsize=65536)
def registered_domain(host: str) -> str:
    """eTLD+1 of ``host`` from the bundled Public Suffix List snapshot (no network).

    IP addresses and hosts without a known suffix (``localhost``, ``site.test``) return the host
    itself, so the result is always usable as a grouping key.
    """
    if not host or is_ip_host(host):
        return host
    ext = _extractor()(host)
    if ext.domain and ext.suffix:
        return f"{ext.domain}.{ext.suffix}"
    return host


def tld(host: str) -> str | None:
    """The last label of a URL model host (``uk`` of ``news.example.co.uk``, punycode for IDNs);
    None for an IP address (its last octet is no top-level domain)."""
    return None if is_ip_host(host) else host.rsplit(".", 1)[-1]


_WWW_RE = re.compile(r"^www\d*\.")


def surt(url: str, schemes: tuple[str, ...] = WEB_SCHEMES) -> str | None:
    """Common Crawl ``url_surtkey``: ``com,example)/path?a=1&b=2`` (lower case, scheme and www dropped).

    Follows the ``surt`` library's default as Common Crawl uses it: host labels reversed and joined by
    commas, a leading ``www``/``wwwN`` dropped, non-default port kept, fragment dropped, escapes
    normalised as in :func:`canonicalize`, path and query lower-cased, query parameters sorted,
    trailing slash dropped except for the root. Tracking parameters are *not* removed here: pass the
    canonical URL if they should be.
    """
    try:
        p = parse_url(url, schemes=schemes)
    except InvalidURL:
        return None
    host = p.host
    if is_ip_host(host):
        key = host
    else:
        key = ",".join(reversed(_WWW_RE.sub("", host).split(".")))
    if p.port is not None:
        key += f":{p.port}"
    path = _norm_pct(p.path).lower()
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    out = key + ")" + path
    if p.query:
        q = "&".join(sorted(_canon_query(p.query, frozenset()).lower().split("&")))
        if q:
            out += "?" + q
    return out


def surts(urls: pa.Array | pa.ChunkedArray | Sequence[str | None],
          schemes: tuple[str, ...] = WEB_SCHEMES) -> pa.Array:
    """:func:`surt` over many URLs -> Arrow string array (null where :func:`surt` gives None).

    Simple URLs (see ``_SIMPLE_PAT``; canonical URLs nearly always are) get their key from column
    kernels: host labels reversed through an Arrow list join, path and parameters lower-cased and the
    parameters sorted per row; the rest call :func:`surt` one by one. Identical answers either way.
    """
    arr = _as_string_array(urls)
    if len(arr) == 0:
        return pa.array([], pa.string())
    return _in_blocks(lambda a: _surts_block(a, tuple(schemes)), arr)


def _surts_block(arr: pa.Array, schemes: tuple[str, ...] = WEB_SCHEMES) -> pa.Array:
    import pyarrow.compute as pc

    n = len(arr)
    simple = _classify(arr)[0]
    off, d = _buffers(arr)
    rows = np.flatnonzero(simple)
    s = _split_simple(off, d, rows)
    m = len(rows)
    # host without a leading www/wwwN label, labels reversed and joined by ','
    host_hi = np.where(s.port < s.host_end, s.port, s.host_end)
    host = pc.replace_substring_regex(pc.ascii_lower(_view_array([d], None, s.host, host_hi - s.host)),
                                      r"^www[0-9]*\.", "")
    hoff, hd = _buffers(host)
    dots = np.flatnonzero(hd == ord("."))
    i0, i1 = np.searchsorted(dots, hoff[:-1]), np.searchsorted(dots, hoff[1:])
    nlab = i1 - i0 + 1
    # label j from the right of a row: between the dots at (i1 - 1 - j) and (i1 - j)
    lab_row = np.repeat(np.arange(m), nlab)
    j = np.arange(int(nlab.sum())) - np.repeat(np.cumsum(nlab) - nlab, nlab)
    right = i1[lab_row] - j  # index of the dot after the label (i1 = the host's end)
    pad = dots if len(dots) else np.zeros(1, np.int64)  # no dot in any host: every index is masked out
    lab_hi = np.where(right < i1[lab_row], pad[np.minimum(right, len(pad) - 1)], hoff[1:][lab_row])
    lab_lo = np.where(right - 1 >= i0[lab_row], pad[np.maximum(right - 1, 0)] + 1, hoff[:-1][lab_row])
    labels = _view_array([hd], None, lab_lo, lab_hi - lab_lo)
    loff = np.zeros(m + 1, np.int32)
    np.cumsum(nlab, out=loff[1:])
    key = pc.binary_join(pa.ListArray.from_arrays(pa.array(loff), labels), ",")
    consts = np.frombuffer(b"/?", np.uint8)
    has_port = (s.port < s.host_end) & ~s.default_port
    port = _view_array([d], None, s.port, np.where(has_port, s.host_end - s.port, 0))
    # path: '/' when empty, a trailing '/' dropped unless it is the root
    plen = s.q - s.host_end
    plen = plen - ((plen > 1) & (d[np.maximum(s.q - 1, 0)] == _SLASH))
    path = pc.ascii_lower(_view_array([d, consts], (plen == 0).astype(np.int8),
                                      np.where(plen > 0, s.host_end, 0), np.where(plen > 0, plen, 1)))
    prow, pstart, pend, _, _ = _params(s)
    values = pc.ascii_lower(_view_array([d], None, pstart, pend - pstart))
    order = _sorted_within_rows(prow, values)
    values = values.take(pa.array(order))
    k = np.bincount(prow, minlength=m)
    qoff = np.zeros(m + 1, np.int32)
    np.cumsum(k, out=qoff[1:])
    query = pc.binary_join(pa.ListArray.from_arrays(pa.array(qoff), values), "&")
    qmark = _view_array([consts], None, np.ones(m, np.int64), (k > 0).astype(np.int64))
    done = pc.binary_join_element_wise(key, port, pa.scalar(")"), path, qmark, query, "")
    rest = np.flatnonzero(~simple)
    if not len(rest):
        return done
    slow = pa.array([None if u is None else surt(u, schemes) for u in arr.take(pa.array(rest)).to_pylist()], pa.string())
    where = np.empty(n, np.int64)
    where[rows] = np.arange(m)
    where[rest] = m + np.arange(len(rest))
    return pa.concat_arrays([done, slow]).take(pa.array(where))


def politeness_key(url: str, mode: str = "host", resolver: Mapping[str, str] | None = None) -> str:
    """The key politeness is enforced on: the URL model's host, its registered domain, or its IP.

    ``user@HOST:80``, ``host`` and ``HOST.`` are one key (one queue, one partition); IPv6 hosts keep
    their full bracketed address. ``ip`` uses ``resolver`` (host -> IP, as the fetcher's DNS cache
    knows it) and falls back to the host when the host is not in it, so an unresolved host is still
    polite on its own. :class:`InvalidURL` if ``url`` has no usable host.
    """
    if mode not in ("host", "domain", "ip"):
        raise ValueError(f"politeness_key mode must be host, domain or ip, got {mode!r}")
    host = host_of(url)
    if mode == "host":
        return host
    if mode == "domain":
        return registered_domain(host)
    if mode == "ip":
        return (resolver or {}).get(host, host)
    raise ValueError(f"politeness_key mode must be host, domain or ip, got {mode!r}")
