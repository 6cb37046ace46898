"""Link resolution for a whole partition at once (:func:`resolve_many`), equal to
:func:`crawl.url.parse.resolve` per row: the common href shapes are joined as Arrow columns, every
other distinct (href, base) pair goes through Ada once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from crawl.url.columns import _MISSING, _PORT, _as_string_array
from crawl.url.parse import resolve

# Link extraction resolves ~40 hrefs per page. Three shapes make up most of them, and for those the
# WHATWG answer is a string concatenation when the base is already in serialised form:
#   absolute   http(s)://host/path?query#fragment with a lower-case letters-digits-hyphen host, no port,
#              no userinfo, no "xn--" label and nothing any encode set touches -> the href itself
#              (an upper-case host only gets lower-cased);
#   root       /path?query#fragment (not "//")               -> scheme://authority of the base + href
#   directory  name/path?query#fragment (no scheme, no ':')   -> base up to the last '/' of its path + href
#   up         ../../name/path?query#fragment                  -> that base directory less one segment per ../
#   network    //host/path?query#fragment                      -> the base's scheme + ':' + href, as absolute
# (absolute and network hrefs may carry a port: the scheme's default one is dropped)
# with no dot segment ('.', '..', '%2e' forms: no segment starts with '.' or '%') and no character the
# path, query or fragment encode sets change. RE2 patterns pick those rows as a column; everything
# else goes through the scalar resolve(), so the answers are identical by construction (tests compare
# both on adversarial pairs).
_RP = r"A-Za-z0-9\-._~!$&'()*+,;=:@%\[\]|"     # path characters WHATWG keeps as they are ('/' aside)
_RPF = r"A-Za-z0-9\-_~!$&'()*+,;=:@\[\]|"      # ... that may start a segment (no '.', '%': dot segments)
_RQ = r"A-Za-z0-9\-._~!$&()*+,;=:@%/?\[\]|{}`^"  # query characters kept as they are
_RF = r"A-Za-z0-9\-._~!$&'()*+,;=:@%/?\[\]|{}^#"  # fragment characters kept as they are
_RSEGS = rf"(?:/(?:[{_RPF}][{_RP}]*)?)*"
_RTAIL = rf"(?:\?[{_RQ}]*)?(?:#[{_RF}]*)?$"
_RHOST = r"(?:[A-Za-z0-9\-]+\.)*[A-Za-z\-][A-Za-z0-9\-]*"  # last label not a number: no IPv4 parsing
_RABS = rf"//{_RHOST}(?::{_PORT})?/(?:[{_RPF}][{_RP}]*)?{_RSEGS}{_RTAIL}"
_RES_ABS = rf"^https?:{_RABS}"
_RES_NET = rf"^{_RABS}"  # scheme-relative "//host/path": the base's scheme, then as absolute
_RES_ROOT = rf"^/(?:[{_RPF}][{_RP}]*{_RSEGS})?{_RTAIL}"
_RDIR = rf"[{_RPF.replace(':', '')}][{_RP.replace(':', '')}]*{_RSEGS}{_RTAIL}"
_RES_DIR = rf"^{_RDIR}"
_RES_UP = rf"^(?:\.\./|\./)+(?:$|{_RDIR})"  # "../../name": the base directory less k segments, then the rest
_RESOLVE_MIN_ROWS = 256  # below this the column kernels' fixed cost is more than the scalar calls


def _base_pieces(base: str | None) -> tuple[str, str] | None:
    """(scheme://authority, base up to the last '/' of its path) of a base already in serialised
    form, else None (its links take the scalar path)."""
    if base is None or resolve(base, None) != base:
        return None
    auth_end = base.index("/", base.index("://") + 3)
    q = len(base)
    for c in "?#":
        k = base.find(c, auth_end)
        if k >= 0:
            q = min(q, k)
    return base[:auth_end], base[:base.rindex("/", auth_end, q) + 1]


def _resolve_scalar(href: str | None, base: str | None) -> str | None:
    if href is None:
        return None
    if href[:8].lower().startswith(("http://", "https://")):
        return resolve(href, None)  # absolute: the same answer as with a base, through the fast path
    return resolve(href, base)


def resolve_many(
    hrefs: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    bases: Sequence[str | None] | pa.Array | pa.ChunkedArray,
) -> pa.Array:
    """:func:`resolve` of ``hrefs[i]`` against ``bases[i]`` for every row -> Arrow string array, null
    where the result is not an http(s) URL (or the href is null).

    Why: parse resolves every link of a partition in one call. The common shapes (see ``_RES_ABS``,
    ``_RES_ROOT``, ``_RES_DIR``) are joined as columns; each other distinct (href, base) pair goes
    through :func:`resolve` once.
    """
    import pyarrow.compute as pc

    h = _as_string_array(hrefs)
    b = _as_string_array(bases)
    n = len(h)
    if len(b) != n:
        raise ValueError(f"resolve_many: {n} hrefs but {len(b)} bases")
    if n < _RESOLVE_MIN_ROWS:
        return pa.array([_resolve_scalar(x, y) for x, y in zip(h.to_pylist(), b.to_pylist(), strict=True)],
                        type=pa.string())
    benc = pc.dictionary_encode(b)
    pieces = [_base_pieces(x) for x in benc.dictionary.to_pylist()]
    base_ok = np.array([p is not None for p in pieces], bool)
    bidx = benc.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    ok_row = base_ok[bidx] & b.is_valid().to_numpy(zero_copy_only=False) if len(pieces) else np.zeros(n, bool)
    auth = pa.array([p[0] if p else "" for p in pieces], pa.string())
    dirs = pa.array([p[1] if p else "" for p in pieces], pa.string())

    def match(pattern: str) -> np.ndarray:
        return pc.match_substring_regex(h, pattern).fill_null(False).to_numpy(zero_copy_only=False)

    no_idna = ~pc.match_substring(h, "xn--", ignore_case=True).fill_null(True).to_numpy(zero_copy_only=False)
    absolute = match(_RES_ABS) & no_idna
    net = match(_RES_NET) & no_idna & ok_row
    root = match(_RES_ROOT) & ok_row & ~net
    dirrel = match(_RES_DIR) & ok_row & ~absolute & ~root
    up = match(_RES_UP) & ok_row
    out = np.empty(n, dtype=object)  # filled per class below, then one pa.array
    rows = np.flatnonzero(absolute | net)
    if len(rows):
        sub = h.take(pa.array(rows))
        is_net = net[rows]
        if is_net.any():  # "//host/p" -> "scheme:" of the base + "//host/p"
            scheme = pa.array([p[0][:p[0].index(":") + 1] if p else "" for p in pieces], pa.string())
            prefix = pc.if_else(pa.array(is_net), scheme.take(pa.array(bidx[rows])), "")
            sub = pc.binary_join_element_wise(prefix, sub, "")
        # host case and the scheme's default port are all WHATWG changes left in this class
        upper = pc.match_substring_regex(sub, r"^[^/]*//[^/]*[A-Z]").to_numpy(zero_copy_only=False)
        if upper.any():
            parts = pc.extract_regex(sub, r"^(?P<a>[^/]*//[^/]*)(?P<r>/.*)$")
            sub = pc.if_else(pa.array(upper), pc.binary_join_element_wise(
                pc.ascii_lower(parts.field("a")), parts.field("r"), ""), sub)
        sub = pc.replace_substring_regex(sub, r"^(http://[^/]*):80/", r"\1/")
        sub = pc.replace_substring_regex(sub, r"^(https://[^/]*):443/", r"\1/")
        out[rows] = sub.to_numpy(zero_copy_only=False)
    for mask, prefix in ((root, auth), (dirrel, dirs)):
        rows = np.flatnonzero(mask)
        if len(rows):
            joined = pc.binary_join_element_wise(prefix.take(pa.array(bidx[rows])), h.take(pa.array(rows)), "")
            out[rows] = joined.to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(up)
    if len(rows):
        parts = pc.extract_regex(h.take(pa.array(rows)), r"^(?P<up>(?:\.\./|\./)+)(?P<rest>.*)$")
        k = pc.count_substring(parts.field("up"), "../").to_numpy(zero_copy_only=False).astype(np.int64)
        combo = bidx[rows] * (int(k.max()) + 1) + k  # one prefix per (base, levels up)
        uniq, inv = np.unique(combo, return_inverse=True)
        prefixes = []
        for c in uniq.tolist():
            origin, dir_ = pieces[c // (int(k.max()) + 1)]  # type: ignore[misc]
            segs = dir_[len(origin) + 1:-1].split("/") if len(dir_) > len(origin) + 1 else []
            kept = segs[:max(0, len(segs) - c % (int(k.max()) + 1))]
            prefixes.append(origin + "/" + "".join(seg + "/" for seg in kept))
        out[rows] = pc.binary_join_element_wise(pa.array(prefixes, pa.string()).take(pa.array(inv.ravel())),
                                                parts.field("rest"), "").to_numpy(zero_copy_only=False)
    rest = np.flatnonzero(~(absolute | net | root | dirrel | up))
    if len(rest):
        cache: dict[tuple[str | None, str | None], str | None] = {}
        hl = h.take(pa.array(rest)).to_pylist()
        bl = b.take(pa.array(rest)).to_pylist()
        vals = []
        for key in zip(hl, bl, strict=True):
            r = cache.get(key, _MISSING)
            if r is _MISSING:
                r = cache[key] = _resolve_scalar(*key)
            vals.append(r)
        out[rest] = vals
    return pa.array(out, type=pa.string(), from_pandas=True)

