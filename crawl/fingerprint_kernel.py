"""The compiled passes behind :func:`crawl.fingerprint.fingerprints_many` (lowercase, SimHash and the
text digest's bytes in one loop over each text) and :func:`crawl.fingerprint.collapse_many` (parse's
text column), with numba; also the batch parse's charset passes (:func:`utf8_valid`,
:func:`single_byte_to_utf8`: what Lexbor is given, see ``crawl.sniff._lexbor_input``).

Why compiled loops: the NumPy chain (lower + encode in Python, word edges, polynomial prefix sums,
shingle mixing, unpacked bit counts, a NumPy whitespace collapse) made ~a dozen full-size temporaries
per page and cost ~0.3 ms per simulated-web page, a third of parse. One pass keeps the state in
registers. Why numba: a maintained JIT with wheels on PyPI (llvmlite bundles LLVM), so ``make
install`` stays ``pip install`` with no compiler or Cython build step; compiled code is cached on
disk (``cache=True``) and loaded by later processes.

The passes read the Python strings themselves (a list of ``str`` goes in as numba's reflected list,
each string without a copy): encoding every text to UTF-8 and joining the bytes cost more than the
pass. :func:`fingerprint_batch` reads code points with ``numba.cpython.unicode._get_code_point``
(whatever the string's internal width). :func:`collapse_batch` views each string's code units as an
array of its width (``_kind`` 1, 2 or 4 bytes, ``_data``: :func:`_codes8` and siblings) so that its
loop compiles once per width, with no per-character switch on the width: ~1.6x less CPU for the
collapse of the simulated web's texts (all 2-byte strings). The same for the fingerprint pass did
not pay (its loop is bound by its word-hash and digest chains) and doubled the first compile, so it
was left as it is (bench/RESULTS.md, "Text kernels per string width"). ``_get_code_point``, ``_kind``
and ``_data`` are numba-internal (the unicode model since numba 0.47); the pinned version is tested.

This module imports numba; :mod:`crawl.fingerprint` imports it only when it first fingerprints, so
processes that only compute payload digests never load numba or LLVM.

The algorithm is the one :mod:`crawl.fingerprint`'s docstring defines; per character of the text:

- the lowered character is ``str.lower`` of the character (table ``low``; -1 marks the characters
  ``str.lower`` does not map one to one: capital sigma, whose lowercase depends on its neighbours, and
  those lowering to two characters -- the caller then lowers the text in Python);
- its UTF-8 bytes go through the SimHash tokeniser and word hash; a whitespace character after a
  ``stop`` character (``.!?``) ends a sentence, and the words of a sentence shorter than a shingle are
  dropped (the word count goes back to where the sentence began);
- the digest's bytes (``" ".join(NFKC(text).lower().split())``): mode 0 maps each character on its
  own (table ``dig``: 0 = its lowercase, ASCII letters and the ``_SAFE`` ones NFKC keeps; k > 0 =
  replacement k, NFKC + lower of a ``_REPLACE`` character; -1 = anything else, status 2: the caller
  normalises in Python); mode 1 (the caller knows the text is NFKC-normalised) is the lowered text
  itself; mode 2 (input already lowered, no digest) only hashes. Whitespace (``str.isspace``, table
  ``ws``) collapses to single spaces, none at either end, as it is emitted. A lone surrogate (no
  UTF-8) is status 3 in modes 0 and 1; mode 2 hashes it as ``surrogatepass`` encodes it.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import carray, njit, types
from numba.core.errors import NumbaPendingDeprecationWarning
from numba.cpython.unicode import _get_code_point
from numba.extending import intrinsic

# a list of str is passed as a reflected list (unboxed without copying the strings); numba has
# announced its replacement, typed.List, since 0.44, whose construction costs ~50 us per page here
warnings.filterwarnings("ignore", message=r"(?s).*reflected list", category=NumbaPendingDeprecationWarning)

_P = np.uint64(0x100000001B3)
_C1 = np.uint64(0x9E3779B97F4A7C15)
_C2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LSB = np.uint64(0x0101010101010101)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_FF = np.uint64(0xFF)

#: words per SimHash feature (``crawl.fingerprint.SHINGLE``): a sentence of fewer words adds none
SHINGLE = 3

#: status of a text: done / lower it in Python (mode 2 then) / digest it in Python (SimHash is done) /
#: a lone surrogate (the text has no UTF-8)
OK, NEEDS_LOWER, NEEDS_DIGEST, SURROGATE = 0, 1, 2, 3


def _jit(fn):  # type: ignore[no-untyped-def]
    """``njit(cache=True)``, or without the on-disk cache when numba finds no writable place for it
    (package directory read-only, no writable user cache directory, no ``NUMBA_CACHE_DIR``): such a
    process compiles at first use instead of failing."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(fn)


def _pointer_to(item):  # type: ignore[no-untyped-def]
    """An intrinsic casting a ``void *`` to a pointer to ``item``s (for ``numba.carray``)."""
    @intrinsic
    def cast(typingctx, ptr):  # type: ignore[no-untyped-def]
        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            return builder.bitcast(args[0], context.get_value_type(sig.return_type))
        return types.CPointer(item)(types.voidptr), codegen
    return cast


_as_u8, _as_u16, _as_u32 = _pointer_to(types.uint8), _pointer_to(types.uint16), _pointer_to(types.uint32)


@_jit
def _codes8(s):  # type: ignore[no-untyped-def]
    """The code points of a 1-byte-kind ``str`` ``s`` as a uint8 array over its data (no copy): one of
    :func:`_codes8`/``16``/``32`` by ``s._kind``, so that the loops over them compile per width."""
    return carray(_as_u8(s._data), (len(s),))


@_jit
def _codes16(s):  # type: ignore[no-untyped-def]
    return carray(_as_u16(s._data), (len(s),))


@_jit
def _codes32(s):  # type: ignore[no-untyped-def]
    return carray(_as_u32(s._data), (len(s),))


@_jit
def _mix(x):  # type: ignore[no-untyped-def]
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


@_jit
def _put(out, o, cp):  # type: ignore[no-untyped-def]
    """UTF-8 of code point ``cp`` into ``out`` at ``o`` (surrogates as ``surrogatepass``); returns the
    position after it."""
    if cp < 0x80:
        out[o] = cp
        return o + 1
    if cp < 0x800:
        out[o] = 0xC0 | (cp >> 6)
        out[o + 1] = 0x80 | (cp & 0x3F)
        return o + 2
    if cp < 0x10000:
        out[o] = 0xE0 | (cp >> 12)
        out[o + 1] = 0x80 | ((cp >> 6) & 0x3F)
        out[o + 2] = 0x80 | (cp & 0x3F)
        return o + 3
    out[o] = 0xF0 | (cp >> 18)
    out[o + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[o + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[o + 3] = 0x80 | (cp & 0x3F)
    return o + 4


@_jit
def _space(out, o, last):  # type: ignore[no-untyped-def]
    """A whitespace character outside the ASCII fast paths: one space for a run of them, written only
    after a non-space (``last`` = 0: the last byte kept was not a space); returns the position after it.
    The caller then sets ``last`` = 1."""
    if not last:
        out[o] = 32
        return o + 1
    return o


@_jit
def _one(s, low, dig, repl, repl_off, ws, word, stop, mode, pw, out, o0, words, buf):  # type: ignore[no-untyped-def]
    """(SimHash, status, end of the digest bytes in ``out``) of string ``s``; digest bytes from ``o0``.

    ASCII takes a branch-free path (a word edge or a space every few characters would otherwise be a
    mispredicted branch): the word hash and its in-word byte position reset to 0 under a mask, the
    hash so far is stored at every character and the word count advances where a word ended; a
    whitespace character is written as a space and kept only after a non-space (``last``: the last
    byte kept was a space, or nothing was kept yet).

    Sentences (for SimHash only): a sentence ends at a ``stop`` character (``.``, ``!``, ``?``)
    followed by whitespace, and at the end of the text; the words of a sentence of fewer than
    ``SHINGLE`` words are taken back (``nwords`` returns to ``sent``, where the sentence began). The
    check costs a predictable branch after a stop character only."""
    h = _ZERO
    pos = 0
    inword = np.uint64(0)
    nwords = 0
    o = o0
    last = np.int64(1)
    dig_ok = mode != 2
    sent = 0  # index in ``words`` of the current sentence's first word
    pend = False  # the last character was a stop character
    for i in range(len(s)):
        cp = np.int64(_get_code_point(s, i))
        if cp < 0x80:  # ASCII: the common case
            lc = cp
            if 65 <= lc <= 90:  # predictable: uppercase is rare and input of mode 2 has none
                lc += 32
            iw = np.uint64(word[lc])
            mask = _ZERO - iw
            words[nwords] = h
            nwords += np.int64(inword & (_ONE - iw))  # a word ended before this character
            h = (h + np.uint64(lc) * pw[pos]) & mask
            pos = (pos + 1) & np.int64(mask)
            inword = iw
            if pend and ws[lc]:  # a sentence ended at the stop character before this whitespace
                if nwords - sent < SHINGLE:
                    nwords = sent
                sent = nwords
            pend = stop[lc] != 0
            if dig_ok:
                sp = np.int64(ws[lc])
                out[o] = 32 if sp else lc
                o += 1 - (sp & last)
                last = sp
            continue
        if mode == 2 or cp >= low.size:
            lc = cp
        else:
            lc = np.int64(low[cp])
            if lc < 0:
                return np.int64(0), NEEDS_LOWER, o0
        if pend:
            if lc < ws.size and ws[lc]:
                if nwords - sent < SHINGLE:
                    nwords = sent
                sent = nwords
            pend = False
        if dig_ok:
            if 0xD800 <= cp < 0xE000:
                return np.int64(0), SURROGATE, o0
            if mode == 1:  # the lowered text itself
                if lc < ws.size and ws[lc]:
                    o = _space(out, o, last)
                    last = 1
                else:
                    o = _put(out, o, lc)
                    last = 0
            elif cp < dig.size and dig[cp] >= 0:
                kind = dig[cp]
                if kind == 0:  # its lowercase; never whitespace
                    o = _put(out, o, lc)
                    last = 0
                else:  # a replacement: ASCII whitespace in it collapses, its other bytes do not
                    for k in range(repl_off[kind], repl_off[kind + 1]):
                        r = repl[k]
                        if r < 0x80 and ws[r]:
                            o = _space(out, o, last)
                            last = 1
                        else:
                            out[o] = r
                            o += 1
                            last = 0
            else:
                dig_ok = False
        # SimHash: every byte of a non-ASCII character is a word byte
        if lc < 0x80:  # a non-ASCII character lowering to ASCII (the Kelvin sign)
            iw = np.uint64(word[lc])
            mask = _ZERO - iw
            words[nwords] = h
            nwords += np.int64(inword & (_ONE - iw))
            h = (h + np.uint64(lc) * pw[pos]) & mask
            pos = (pos + 1) & np.int64(mask)
            inword = iw
        else:
            n = _put(buf, 0, lc)
            for k in range(n):
                h += np.uint64(buf[k]) * pw[pos]
                pos += 1
            inword = _ONE
    if inword:
        words[nwords] = h
        nwords += 1
    if nwords - sent < SHINGLE:  # the text's last sentence
        nwords = sent
    if dig_ok and last and o > o0:  # a trailing space
        o -= 1
    status = OK if dig_ok or mode == 2 else NEEDS_DIGEST
    return _simhash_of_words(words, nwords), status, o


@_jit
def _simhash_of_words(words, n):  # type: ignore[no-untyped-def]
    """SimHash of the first ``n`` word hashes (before mixing): 3-shingles mixed, then each of the 64
    bits set when more than half of the shingles have it. SWAR count: lane j's byte k counts bit
    8k + j, flushed to ``counts`` every 255 shingles so no byte carries into the next."""
    nfeat = n - 2
    if nfeat <= 0:
        return np.int64(0)
    for t in range(n):
        words[t] = _mix(words[t])
    counts = np.zeros(64, np.int64)
    for start in range(0, nfeat, 255):
        l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = _ZERO
        for t in range(start, min(start + 255, nfeat)):
            f = _mix(words[t] * _C1 + words[t + 1] * _C2 + words[t + 2])
            l0 += f & _LSB
            l1 += (f >> np.uint64(1)) & _LSB
            l2 += (f >> np.uint64(2)) & _LSB
            l3 += (f >> np.uint64(3)) & _LSB
            l4 += (f >> np.uint64(4)) & _LSB
            l5 += (f >> np.uint64(5)) & _LSB
            l6 += (f >> np.uint64(6)) & _LSB
            l7 += (f >> np.uint64(7)) & _LSB
        for k in range(8):
            sh = np.uint64(8 * k)
            counts[8 * k] += np.int64((l0 >> sh) & _FF)
            counts[8 * k + 1] += np.int64((l1 >> sh) & _FF)
            counts[8 * k + 2] += np.int64((l2 >> sh) & _FF)
            counts[8 * k + 3] += np.int64((l3 >> sh) & _FF)
            counts[8 * k + 4] += np.int64((l4 >> sh) & _FF)
            counts[8 * k + 5] += np.int64((l5 >> sh) & _FF)
            counts[8 * k + 6] += np.int64((l6 >> sh) & _FF)
            counts[8 * k + 7] += np.int64((l7 >> sh) & _FF)
    fp = _ZERO
    for j in range(64):
        if counts[j] * 2 > nfeat:
            fp |= _ONE << np.uint64(j)
    return np.int64(fp)


@_jit
def fingerprint_batch(texts, low, dig, repl, repl_off, ws, word, stop, mode, pw, sims, status, out, out_off):  # type: ignore[no-untyped-def]
    """:func:`_one` of each string of ``texts``: SimHash to ``sims[t]``, status to ``status[t]``,
    digest bytes to ``out[out_off[t]:out_off[t + 1]]``. ``pw[k]`` = P**k for every in-word byte
    position (4 per character of the longest text)."""
    longest = 0
    for t in range(len(texts)):
        longest = max(longest, len(texts[t]))
    words = np.empty(longest // 2 + 2, np.uint64)  # a word and a separator take two characters
    buf = np.zeros(4, np.uint8)
    o = 0
    for t in range(len(texts)):
        out_off[t] = o
        h, st, e = _one(texts[t], low, dig, repl, repl_off, ws, word, stop, mode, pw, out, o, words, buf)
        sims[t] = h
        status[t] = st
        o = e
    out_off[len(texts)] = o


@_jit
def collapse_batch(texts, verbatim, ws, out, out_off, out_len):  # type: ignore[no-untyped-def]
    """UTF-8 of ``" ".join(text.split())`` of each string of ``texts`` into ``out[out_off[t]:out_off[t
    + 1]]`` (``verbatim[t]``: the text as it is), and its length in characters into ``out_len[t]`` (the
    page's ``text_length``: counted here, the bytes written less the continuation bytes, instead of a
    second pass over the column). Whitespace is ``str.isspace`` (table ``ws``, ASCII and BMP); ASCII
    takes a branch-free path. Returns -1, or the first text holding a lone surrogate."""
    o = 0
    for t in range(len(texts)):
        out_off[t] = o
        s = texts[t]
        keep = verbatim[t] != 0
        k = s._kind
        if k == 1:
            e, length = _collapse_one(_codes8(s), keep, ws, out, o)
        elif k == 2:
            e, length = _collapse_one(_codes16(s), keep, ws, out, o)
        else:
            e, length = _collapse_one(_codes32(s), keep, ws, out, o)
        if e < 0:
            return t
        o = e
        out_len[t] = length
    out_off[len(texts)] = o
    return -1


@_jit
def _collapse_one(a, keep, ws, out, o):  # type: ignore[no-untyped-def]
    """:func:`collapse_batch` of one string's code points ``a`` (:func:`_codes8`) written from ``out[o]``:
    (end of its bytes, its length in characters), or (-1, 0) for a lone surrogate."""
    o0 = o
    extra = 0  # bytes written beyond one per character
    last = np.int64(0 if keep else 1)  # the last byte kept was a space (or nothing was kept yet)
    for i in range(a.size):
        cp = np.int64(a[i])
        if cp < 0x80:
            sp = 0 if keep else np.int64(ws[cp])
            out[o] = 32 if sp else cp
            o += 1 - (sp & last)
            last = sp
            continue
        if 0xD800 <= cp < 0xE000:
            return -1, 0
        if not keep and cp < ws.size and ws[cp]:
            o = _space(out, o, last)
            last = 1
        else:
            e = _put(out, o, cp)
            extra += e - o - 1
            o = e
            last = 0
    if last and o > o0:  # a trailing space
        o -= 1
    return o, o - o0 - extra


_HIGH = np.uint64(0x8080808080808080)


@_jit
def utf8_valid(b, w):  # type: ignore[no-untyped-def]
    """Whether bytes ``b`` are valid UTF-8 as Python's strict ``bytes.decode("utf-8")`` has it (no
    overlong forms, no surrogates, nothing past U+10FFFF, no truncated or stray continuation bytes);
    ``w``: the same bytes as uint64 words (the whole ones), for an 8-bytes-at-a-time ASCII skip.

    Why: parse hands a page's bytes to Lexbor as they are when they are valid UTF-8 (see
    ``crawl.sniff._lexbor_input``); the strict decode that said so built a ``str`` of the whole page
    only to drop it (~6.6 us of ~20 KB; this ~3.5 us)."""
    n = b.size
    i = 0
    while i < n:
        if (i & 7) == 0:  # at a word boundary: skip whole ASCII words
            k = i >> 3
            while k < w.size and (w[k] & _HIGH) == 0:
                k += 1
            i = k << 3
            if i >= n:
                return True
        c = b[i]
        if c < 0x80:
            i += 1
        elif c < 0xC2:  # a continuation byte out of place, or an overlong two-byte form
            return False
        elif c < 0xE0:
            if i + 1 >= n or (b[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif c < 0xF0:
            if i + 2 >= n:
                return False
            c1 = b[i + 1]
            if (c1 & 0xC0) != 0x80 or (b[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):  # overlong; surrogate
                return False
            i += 3
        elif c < 0xF5:
            if i + 3 >= n:
                return False
            c1 = b[i + 1]
            if (c1 & 0xC0) != 0x80 or (b[i + 2] & 0xC0) != 0x80 or (b[i + 3] & 0xC0) != 0x80:
                return False
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):  # overlong; past U+10FFFF
                return False
            i += 4
        else:
            return False
    return True


@_jit
def single_byte_to_utf8(b, w, table, table_off, out):  # type: ignore[no-untyped-def]
    """UTF-8 of bytes ``b`` in a single-byte charset into ``out`` (3 bytes per input byte at most);
    byte ``c`` becomes ``table[table_off[c]:table_off[c + 1]]``, bytes below 0x80 themselves (runs of
    whole ASCII words of ``w``, ``b`` as uint64, copied at once). Returns the length written.

    Why: a windows-1252 page went to Lexbor as a ``str`` (``bytes.decode``) that selectolax encodes
    back to UTF-8 at once: two passes and a ``str`` of the page for bytes one table pass gives."""
    o = 0
    n = b.size
    i = 0
    while i < n:
        if (i & 7) == 0:  # at a word boundary: copy the run of whole ASCII words
            k = i >> 3
            while k < w.size and (w[k] & _HIGH) == 0:
                k += 1
            e = k << 3
            if e > i:
                out[o:o + e - i] = b[i:e]
                o += e - i
                i = e
                if i >= n:
                    break
        c = b[i]
        if c < 0x80:
            out[o] = c
            o += 1
        else:
            for k in range(table_off[c], table_off[c + 1]):
                out[o] = table[k]
                o += 1
        i += 1
    return o
