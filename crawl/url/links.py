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
host, no ``xn--``) is serialised by hand: 15 -> 2.5 Ada calls per simulated-web page. The key of
every row is computed in C (Arrow hashing, NumPy) (:func:`resolve_run_keys`; 118k rows, 46k keys on
the parse bench's 2,997 simulated-web pages), and the plain keys' answers too (:func:`_plain_keys`: RE2
tests, one string join; Python once per authority and per directory and leading ``../`` run), so
Python runs per key only for the rest (ports, upper-case hosts, dot segments...: ~6 % of the keys).
History: an Arrow column path that *replaced Ada's parsing* for the common shapes once sat here;
``bench/urls_bench.py`` measured it at 2.2x the per-pair calls on 1 M links, below issue 8's 3x, and
it went. ``_plain_keys`` keeps Ada for everything it parsed and only takes over the string work the
per-key Python did after it (2.1x on that part, 1.3-1.4x on the link stage: bench/RESULTS.md,
"Parse CPU, links as columns"); the hypothesis and WHATWG-data tests hold it equal to :func:`resolve`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.url.columns import _MISSING, _as_string_array
from crawl.url.parse import _DEFAULT_PORTS, WEB_SCHEMES, resolve

# exact lower-case prefixes only: "HTTP://x" and "http:x" take the per-pair path ("http:x" is relative
# to an http base)
_ABSOLUTE = ("http://", "https://")


_CTRL_OR_SPACE = re.compile(r"[\x00-\x20]")  # stripped or removed by the WHATWG parser: no prefix keys then
_DOT_SEGMENTS = (".", "..")
# a non-empty href not starting with ? or #, without ":" or what _CTRL_OR_SPACE finds, in one RE2 pass
_PATH_RELATIVE_COLUMN = r"^[^?#:\x00-\x20][^:\x00-\x20]*$"


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
# http(s) URL whose host is ASCII letter / digit / hyphen labels, the last starting with a letter (so
# never an IPv4 number), an optional port, then nothing or a path / query / fragment of kept characters
_PLAIN_ABSOLUTE = re.compile(
    r"(https?)://((?:[A-Za-z0-9-]{1,63}\.){0,126}[A-Za-z][A-Za-z0-9-]{0,62})(?::([0-9]{1,5}))?(" + _KEPT + r"*)")


def _plain_rest(rest: str) -> bool:
    """``rest`` holds only kept characters and no dot segment (none starts it or follows a ``/``, and
    no ``%2``: no ``%2e`` spelling), so WHATWG appends it as it is. Substring tests before the one
    regex: this runs for every href Ada would otherwise parse."""
    return (rest[:1] != "." and "/." not in rest and "%2" not in rest
            and _KEPT_RE.fullmatch(rest) is not None)


def _plain_absolute(href: str, schemes: tuple[str, ...]) -> str | None | object:
    r"""WHATWG's serialisation of an absolute http(s) ``href`` without Ada when it needs no work but
    dropping a default port, adding the root path and lower-casing an ASCII host (no ``xn--`` label in
    any case: IDNA is Ada's), kept characters after it; ``_MISSING`` for anything else (Ada decides).
    Scheme-relative hrefs (``//host/p``) come here with the base's scheme put before them."""
    m = _PLAIN_ABSOLUTE.fullmatch(href)
    if m is None or "xn--" in href:
        return _MISSING
    scheme, host, port, rest = m.groups()
    host = host.lower()  # ASCII letters only: WHATWG's domain to ASCII lower-cases them
    if "xn--" in host:  # an upper-case XN-- label
        return _MISSING
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


def _root(pre: tuple[str, str | None], base: str, schemes: tuple[str, ...], roots: dict[str, str | None]) -> str | None:
    """Ada's answer for ``/`` against the base's scheme and authority ``pre[0]`` (once per authority),
    None unless it ends with the root ``/``."""
    root = roots[pre[0]] if pre[0] in roots else roots.setdefault(pre[0], resolve("/", base, schemes))
    return root if root is not None and root.endswith("/") else None


def _directory(lead: str, pre: tuple[str, str | None], base: str, schemes: tuple[str, ...],
               roots: dict[str, str | None]) -> str | None:
    """The directory (ending in ``/``) a path-relative href starting with ``lead`` (a run of ``./``
    and ``../``) resolves in against the base whose prefixes are ``pre``; None when Ada decides.

    Without Ada when the base's directory path is plain (kept characters, no dot segment: WHATWG
    copies it as it is): each ``..`` drops its last segment (never above the root), after the
    authority's root Ada gave once (:func:`_root`). Else Ada's answer for ``lead + "x"``."""
    path = pre[1][len(pre[0]):]  # type: ignore[index]  # "" (no path), "/", "/a/b/"
    root = _root(pre, base, schemes, roots) if not path or _plain_rest(path) else None
    if root is None:
        d = resolve(lead + "x", base, schemes)
        return d[:-1] if d is not None and d.endswith("/x") else None
    if ".." not in lead:  # every segment kept: the path as it is ("" or ending in "/")
        return root + path[1:]
    segments = path[1:-1].split("/") if len(path) > 1 else []
    keep = len(segments) - lead.split("/").count("..")
    return root + "".join(seg + "/" for seg in segments[:max(keep, 0)])


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
    h = _pylist(hrefs)
    b = _pylist(bases)
    if len(b) != len(h):
        raise ValueError(f"resolve_many: {len(h)} hrefs but {len(b)} bases")
    run_bases: list[str | None] = []
    sizes: list[int] = []
    for base, run in groupby(b):  # a page's links share its base: one run each
        run_bases.append(base)
        sizes.append(sum(1 for _ in run))
    return resolve_runs(h, run_bases, sizes, schemes)


def resolve_runs(hrefs: list[str | None], bases: Sequence[str | None], sizes: Sequence[int],
                 schemes: tuple[str, ...] = WEB_SCHEMES) -> pa.Array:
    """:func:`resolve_many` with the bases given once per run of rows (see :func:`resolve_run_keys`)."""
    answers, key_id = resolve_run_keys(hrefs, bases, sizes, schemes)
    return answers.take(pa.array(key_id))


def first_rows(ids: np.ndarray) -> np.ndarray:
    """Row of the first occurrence of each id, for ids numbered in the order of their first rows (as
    Arrow's ``dictionary_encode`` numbers them): where the running maximum grows."""
    if len(ids) == 0:
        return np.zeros(0, np.int64)
    top = np.maximum.accumulate(ids)
    return np.flatnonzero(np.concatenate(([True], top[1:] > top[:-1])))


def resolve_run_keys(hrefs: list[str | None], bases: Sequence[str | None], sizes: Sequence[int],
                     schemes: tuple[str, ...] = WEB_SCHEMES) -> tuple[pa.Array, np.ndarray]:
    """The answers of :func:`resolve_many` per distinct key, and each row's key id (``answers.take(ids)``
    is the row's answer), with the bases given once per run of rows: rows ``sum(sizes[:k])`` to
    ``sum(sizes[:k + 1]) - 1`` of ``hrefs`` are resolved against ``bases[k]`` (a page's links and its
    base, so the caller repeats nothing per row). Key ids are numbered in the order of their first
    rows; two keys may give the same answer.

    Why per distinct key: the rows of a partition hold ~2.6 times fewer distinct (href, what of the
    base it reads) keys than rows (menus and footers). The key of every row is computed in C (the
    hrefs dictionary-encoded by Arrow, their shape classified once per distinct href, the base's
    authority / directory id once per distinct base, the combination in NumPy); the plain keys are
    answered as columns (:func:`_plain_keys`) and Python runs once per other distinct key, in the order of
    their first rows. The caches (an authority's root, a (lead, directory)'s directory) hold what depends
    only on their key, so which base of a shared prefix fills them first does not change an answer (the
    hypothesis test mixes bases sharing a prefix in any order).
    """
    schemes = tuple(schemes)
    n = len(hrefs)
    if len(sizes) != len(bases) or sum(sizes) != n:
        raise ValueError(f"resolve_runs: {len(bases)} bases with run sizes summing to {sum(sizes)}, {n} hrefs")
    if n == 0:
        return pa.array([], pa.string()), np.zeros(0, np.int32)
    enc = pc.dictionary_encode(pa.array(hrefs, pa.string()))
    distinct = enc.dictionary
    null = enc.indices.is_null().to_numpy(zero_copy_only=False) if enc.indices.null_count else None
    href_id = pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False)  # null rows: their own key below
    # shape of each distinct href: 0 absolute http(s), 1 starts with / or \, 2 plain path-relative, 3 other
    shape = np.full(max(1, len(distinct)), 3, np.int8)  # (one slot when every href is null)
    if len(distinct):
        first = pc.utf8_slice_codeunits(distinct, 0, 1)
        slash = pc.fill_null(pc.is_in(first, pa.array(["/", "\\"])), False).to_numpy(zero_copy_only=False)
        absolute = pc.or_(pc.starts_with(distinct, _ABSOLUTE[0]),
                          pc.starts_with(distinct, _ABSOLUTE[1])).to_numpy(zero_copy_only=False)
        path_rel = pc.match_substring_regex(distinct, _PATH_RELATIVE_COLUMN)  # (_path_relative's test)
        shape[path_rel.to_numpy(zero_copy_only=False) & ~slash] = 2
        shape[slash] = 1
        shape[absolute] = 0
    # per run: ids of its base's authority, directory (-1: no such prefix) and of the base itself; the
    # prefixes once per distinct base (a page's canonical candidates repeat its base)
    prefixes: dict[str | None, tuple[str, str | None] | None] = {}
    auth_ids: dict[str, int] = {}
    dir_ids: dict[str, int] = {}
    g = len(bases)
    base_enc = pc.dictionary_encode(pa.array(bases if isinstance(bases, list) else list(bases), pa.string()),
                                    null_encoding="encode")
    g_base = base_enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    b_auth: list[int] = []
    b_dir: list[int] = []
    for base in base_enc.dictionary.to_pylist():
        pre = prefixes[base] = _base_prefixes(base)
        if pre is None:
            b_auth.append(-1)
            b_dir.append(-1)
        else:
            b_auth.append(auth_ids.setdefault(pre[0], len(auth_ids)))
            b_dir.append(-1 if pre[1] is None else dir_ids.setdefault(pre[1], len(dir_ids)))
    n_bases = len(b_auth)
    g_auth = np.asarray(b_auth, np.int64)[g_base]
    g_dir = np.asarray(b_dir, np.int64)[g_base]
    run = np.repeat(np.arange(g), np.asarray(sizes, np.int64))
    a, d = len(auth_ids), len(dir_ids)
    row_shape = shape[href_id]
    auth = g_auth[run]
    dirs = g_dir[run]
    # the part of the base a row's answer depends on: nothing (0), its authority, its directory, all of it
    kind = np.full(n, 3, np.int8)  # 3: the whole base
    kind[row_shape == 0] = 0
    kind[(row_shape == 1) & (auth >= 0)] = 1
    kind[(row_shape == 2) & (dirs >= 0)] = 2
    ctx = np.select([kind == 0, kind == 1, kind == 2], [0, 1 + auth, 1 + a + dirs], 1 + a + d + g_base[run])
    key = href_id.astype(np.int64) * (1 + a + d + n_bases) + ctx
    if null is not None:
        key[null] = -1
    key_enc = pc.dictionary_encode(pa.array(key))  # keys numbered in the order of their first rows
    key_id = key_enc.indices.to_numpy(zero_copy_only=False)
    firsts = first_rows(key_id)
    roots: dict[str, str | None] = {}
    dir_cache: dict[tuple[str, str], str | None] = {}
    k_run = run[firsts]
    k_kind = kind[firsts]
    fast, fast_vals = _plain_keys(distinct, href_id[firsts], k_kind, k_run, bases, g_auth, g_dir,
                                  None if null is None else null[firsts], schemes, prefixes, roots, dir_cache)
    slow = np.flatnonzero(~fast)
    out = [_resolve_key(hrefs[i], bases[r], k, schemes, prefixes, roots, dir_cache)
           for i, r, k in zip(firsts[slow].tolist(), k_run[slow].tolist(), k_kind[slow].tolist(), strict=True)]
    if len(slow) == len(firsts):
        return pa.array(out, pa.string()), key_id
    return pc.replace_with_mask(fast_vals, pa.array(~fast), pa.array(out, pa.string())), key_id


# the column forms of the plain checks (RE2 through Arrow). _PLAIN_COLUMN: kept characters only, no "/."
# and no "%2" (_plain_rest but its first-character test), in one pass: N is a kept character but "/" and
# "%"; a run of "/" and "%" ends the string or is followed by an N its last one allows (no "." after "/",
# no "2" after "%"). _ABSOLUTE_COLUMN: an absolute URL WHATWG serialises as it is (_PLAIN_ABSOLUTE's
# host, lower-case, never an IPv4 number; no port; a path). RE2 takes no {0,126} of a group: a host of
# at most 253 characters has at most 127 labels of >= 1 character, which _HOST_253 checks
_N = r"A-Za-z0-9\-._~!$&()*+,;=:@?#"
_PLAIN_COLUMN = f"^(?:[{_N}]|[/%]*(?:/[{_N.replace('.', '')}]|%[{_N.replace('0-9', '013-9')}]))*[/%]*$"
_ABSOLUTE_COLUMN = r"^https?://(?:[a-z0-9-]{1,63}\.)*[a-z][a-z0-9-]{0,62}/" + _KEPT + "*$"
_HOST_253 = r"^https?://[a-z0-9.-]{1,253}/"
_LEAD_COLUMN = "^(?P<lead>" + _LEAD_DOTS.pattern + ")"  # a path-relative href's leading ./ and ../ run


def _plain_column(values: pa.Array) -> np.ndarray:
    """:func:`_plain_rest` of each string but its first-character test (the callers make it)."""
    return pc.match_substring_regex(values, _PLAIN_COLUMN).to_numpy(zero_copy_only=False)


def _as_is_column(values: pa.Array, schemes: tuple[str, ...]) -> np.ndarray:
    """Each absolute URL that :func:`_plain_absolute` gives back unchanged (its scheme one of ``schemes``)."""
    ok = pc.and_(pc.match_substring_regex(values, _ABSOLUTE_COLUMN), pc.match_substring_regex(values, _HOST_253))
    ok = pc.and_(ok, pc.invert(pc.match_substring(values, "xn--"))).to_numpy(zero_copy_only=False)
    if not ("http" in schemes and "https" in schemes):  # (the pattern allows only these two)
        allowed = np.zeros(len(values), bool)
        for scheme in ("http", "https"):
            if scheme in schemes:
                allowed |= pc.starts_with(values, scheme + "://").to_numpy(zero_copy_only=False)
        ok &= allowed
    return ok & _plain_column(values)


def _plain_keys(distinct: pa.Array, k_href: np.ndarray, k_kind: np.ndarray, k_run: np.ndarray,
                bases: Sequence[str | None], g_auth: np.ndarray, g_dir: np.ndarray, k_null: np.ndarray | None,
                schemes: tuple[str, ...], prefixes: dict[str | None, tuple[str, str | None] | None],
                roots: dict[str, str | None], dirs: dict[tuple[str, str], str | None]) -> tuple[np.ndarray, pa.Array]:
    """(mask, answers) of the keys whose answer :func:`_resolve_key` builds from plain strings, computed
    as columns: an absolute href WHATWG keeps as it is (kind 0: the href), a scheme-relative one against
    a valid base (kind 1: the base's scheme + the href, when that is kept as it is), a plain ``/``-href
    (kind 1: the authority's root + the href) and a plain path-relative href (kind 2: the directory its
    leading ``./`` / ``../`` run resolves in + the rest). Python runs once per authority resp. (lead,
    directory), with :func:`_resolve_key`'s caches, not per key. The other keys (mask False) are
    :func:`_resolve_key`'s.

    Why: the ~46k distinct keys of the parse bench's 2,997 simulated-web pages cost ~2 us each in Python
    (regex checks, prefix look-ups, the concatenation), over half of the link resolution."""
    n = len(k_href)
    prefix_id = np.full(n, -1, np.int64)  # each key's answer = table[prefix_id] + tail
    table: list[str] = [""]
    tails: list[pa.Array] = []
    where: list[np.ndarray] = []
    if k_null is not None:
        k_kind = np.where(k_null, -1, k_kind)

    def prefix_ids(sel: np.ndarray, group: np.ndarray, leads: list[str] | None) -> np.ndarray:
        """Ids into ``table`` of each key's prefix (-1: Python decides): one per group, found by the
        group's first key. ``leads``: kind 2's leading dot runs (one per key of ``sel``)."""
        ids, first, inv = np.unique(group, return_index=True, return_inverse=True)
        lut = np.full(len(ids), -1, np.int64)
        for j, (k, r) in enumerate(zip(first.tolist(), k_run[sel[first]].tolist(), strict=True)):
            base = bases[r]
            pre = prefixes[base]
            if leads is None:
                p = _root(pre, base, schemes, roots)  # type: ignore[arg-type]
            else:
                dk = (leads[k], pre[1])  # type: ignore[index]
                p = dirs[dk] if dk in dirs else dirs.setdefault(dk, _directory(leads[k], pre, base, schemes, roots))  # type: ignore[arg-type]
            if p is not None:
                lut[j] = len(table)
                table.append(p)
        return lut[inv.reshape(-1)]

    # kind 0: the href itself
    sel = np.flatnonzero(k_kind == 0)
    if len(sel):
        vals = distinct.take(pa.array(k_href[sel]))
        ok = _as_is_column(vals, schemes)
        prefix_id[sel[ok]] = 0
        tails.append(vals.filter(pa.array(ok)))
        where.append(sel[ok])
    # kind 1: a /-href after its authority's root (less its "/"); //host/... after the base's scheme
    sel = np.flatnonzero(k_kind == 1)
    if len(sel):
        vals = distinct.take(pa.array(k_href[sel]))
        pid = prefix_ids(sel, g_auth[k_run[sel]], None)
        root_ok = pid >= 0
        two = pc.starts_with(vals, "//").to_numpy(zero_copy_only=False)
        one = ~two & root_ok & _plain_column(vals)
        # the root ends with "/": its text before it, by one more table entry per root
        cut = {t: len(table) + i for i, t in enumerate(sorted(set(pid[one].tolist())))}
        for t in sorted(cut):
            table.append(table[t][:-1])
        if one.any():
            prefix_id[sel[one]] = [cut[t] for t in pid[one].tolist()]
            tails.append(vals.filter(pa.array(one)))
            where.append(sel[one])
        sr = np.flatnonzero(two & root_ok)
        if len(sr):
            schemes_of = {t: table[t][:table[t].index(":") + 1] for t in set(pid[sr].tolist())}
            full = pc.binary_join_element_wise(pa.array([schemes_of[t] for t in pid[sr].tolist()], pa.string()),
                                               vals.take(pa.array(sr)), "")
            ok = _as_is_column(full, schemes)
            prefix_id[sel[sr[ok]]] = 0
            tails.append(full.filter(pa.array(ok)))
            where.append(sel[sr[ok]])
    # kind 2: the directory of the leading dot run, then the rest
    sel = np.flatnonzero(k_kind == 2)
    if len(sel):
        vals = distinct.take(pa.array(k_href[sel]))
        lead = pc.struct_field(pc.extract_regex(vals, _LEAD_COLUMN), [0])
        rest = pc.replace_substring_regex(vals, _LEAD_COLUMN, "", max_replacements=1)
        first = pc.utf8_slice_codeunits(rest, 0, 1)
        ok = _plain_column(rest) & ~pc.is_in(first, pa.array([".", "/"])).to_numpy(zero_copy_only=False)
        s2 = np.flatnonzero(ok)
        if len(s2):
            lead_enc = pc.dictionary_encode(lead.take(pa.array(s2)))
            lead_id = lead_enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            leads = lead_enc.dictionary.to_pylist()
            group = lead_id * (int(g_dir.max(initial=0)) + 1) + g_dir[k_run[sel[s2]]]
            pid = prefix_ids(sel[s2], group, [leads[i] for i in lead_id.tolist()])
            good = pid >= 0
            prefix_id[sel[s2[good]]] = pid[good]
            tails.append(rest.take(pa.array(s2[good])))
            where.append(sel[s2[good]])
    fast = prefix_id >= 0
    if not fast.any():
        return fast, pa.nulls(n, pa.string())
    # each fast key's tail, in key order
    rows = np.concatenate(where)
    order = np.argsort(rows, kind="stable")
    tail = pa.concat_arrays(tails).take(pa.array(order))
    head = pa.array(table, pa.string()).take(pa.array(prefix_id[rows[order]]))
    vals = pc.binary_join_element_wise(head, tail, "")
    # spread over all keys (slow keys null, replaced by the caller)
    pos = np.full(n, -1, np.int64)
    pos[rows[order]] = np.arange(len(rows))
    return fast, vals.take(pa.array(pos, mask=pos < 0))


def _resolve_key(href: str | None, base: str | None, kind: int, schemes: tuple[str, ...],
                 prefixes: dict[str | None, tuple[str, str | None] | None], roots: dict[str, str | None],
                 dirs: dict[tuple[str, str], str | None]) -> str | None:
    """The answer for one key: ``kind`` 0 an absolute http(s) href (the base is not read), 1 a
    ``/``-href against an http(s) base's authority, 2 a plain path-relative href against its directory,
    3 anything else against the whole base. ``roots`` / ``dirs``: what Ada made of ``/`` per authority,
    and the directory ``../x`` per base directory and leading ``../`` run resolves in (plain hrefs
    resolve to that prefix + the href)."""
    if href is None:
        return None
    r: str | None | object = _MISSING
    if kind == 0:
        r = _plain_absolute(href, schemes)
        base = None
    elif kind == 1:
        pre = prefixes[base]
        if href[1:2] not in ("/", "\\"):
            if _plain_rest(href):
                root = _root(pre, base, schemes, roots)  # type: ignore[arg-type]
                if root is not None:
                    r = root[:-1] + href
        elif href[1:2] == "/" and _root(pre, base, schemes, roots) is not None:  # type: ignore[arg-type]
            # scheme-relative against a valid base (only its authority can make it invalid): the base's
            # special scheme, then the href as an absolute URL
            r = _plain_absolute(pre[0][:pre[0].index(":") + 1] + href, schemes)  # type: ignore[index]
    elif kind == 2:
        pre = prefixes[base]
        lead = _LEAD_DOTS.match(href).end()  # type: ignore[union-attr]
        rest = href[lead:]
        if rest[:1] != "/" and _plain_rest(rest):
            dk = (href[:lead], pre[1])  # type: ignore[index]
            d = dirs[dk] if dk in dirs else dirs.setdefault(dk, _directory(href[:lead], pre, base, schemes, roots))  # type: ignore[arg-type]
            if d is not None:
                r = d + rest
    if r is _MISSING:
        r = resolve(href, base, schemes)
    return r  # type: ignore[return-value]
