"""The compiled pass behind :func:`crawl.fingerprint.fingerprints_many`: lowercasing, SimHash and the
text digest's bytes in one loop over each text's UTF-8, with numba.

Why a compiled loop: the NumPy chain (lower + encode in Python, word edges, polynomial prefix sums,
shingle mixing, unpacked bit counts, a NumPy whitespace collapse) made ~a dozen full-size temporaries
per page and cost ~0.3 ms per simulated-web page, a third of parse. One pass over the bytes keeps the
state in registers. Why numba: a maintained JIT with wheels on PyPI (llvmlite bundles LLVM), so
``make install`` stays ``pip install`` with no compiler or Cython build step; compiled code is cached
on disk (``cache=True``) and loaded by later processes.

This module imports numba; :mod:`crawl.fingerprint` imports it only when it first fingerprints, so
processes that only compute payload digests never load numba or LLVM.

The algorithm is the one :mod:`crawl.fingerprint`'s docstring defines; per character of the text:

- the lowered character is ``str.lower`` of the character (table ``low``; -1 marks the characters
  ``str.lower`` does not map one to one: capital sigma, whose lowercase depends on its neighbours, and
  those lowering to two characters -- the caller then lowers the text in Python);
- its UTF-8 bytes go through the SimHash tokeniser and word hash;
- the digest's bytes (``" ".join(NFKC(text).lower().split())``): mode 0 maps each character on its
  own (table ``dig``: 0 = its lowercase, ASCII letters and the ``_SAFE`` ones NFKC keeps; k > 0 =
  replacement k, NFKC + lower of a ``_REPLACE`` character; -1 = anything else, status 2: the caller
  normalises in Python); mode 1 (the caller knows the text is NFKC-normalised) is the lowered text
  itself; mode 2 (input already lowered, no digest) only hashes. Whitespace (``str.isspace``, table
  ``ws``) collapses to single spaces, none at either end, as it is emitted.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_P = np.uint64(0x100000001B3)
_C1 = np.uint64(0x9E3779B97F4A7C15)
_C2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LSB = np.uint64(0x0101010101010101)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_FF = np.uint64(0xFF)

#: status of a text: done / lower it in Python (mode 2 then) / digest it in Python (SimHash is done)
OK, NEEDS_LOWER, NEEDS_DIGEST = 0, 1, 2


def _jit(fn):  # type: ignore[no-untyped-def]
    """``njit(cache=True)``, or without the on-disk cache when numba finds no writable place for it
    (package directory read-only, no writable user cache directory, no ``NUMBA_CACHE_DIR``): such a
    process compiles at first use instead of failing."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(fn)


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
    """UTF-8 of code point ``cp`` into ``out`` at ``o``; returns the position after it."""
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
def _one(src, a, b, low, dig, repl, repl_off, ws, word, mode, pw, out, o0, words, buf):  # type: ignore[no-untyped-def]
    """(SimHash, status, end of the digest bytes in ``out``) of ``src[a:b]``; digest bytes from ``o0``.

    ASCII bytes take a branch-free path (a word edge or a space every few bytes would otherwise be a
    mispredicted branch): the word hash and its in-word position reset to 0 under a mask, the hash so
    far is stored at every byte and the word count advances where a word ended; a whitespace byte is
    written as a space and kept only after a non-space (``last``: the last byte kept was a space)."""
    h = _ZERO
    pos = 0
    inword = np.uint64(0)
    nwords = 0
    o = o0
    last = True
    dig_ok = mode != 2
    i = a
    while i < b:
        c = src[i]
        if c < 0x80:  # ASCII: the common case
            lc = np.int64(c)
            if 65 <= lc <= 90:  # predictable: uppercase is rare and input of mode 2 has none
                lc += 32
            i += 1
            iw = np.uint64(word[lc])
            mask = _ZERO - iw
            words[nwords] = h
            nwords += np.int64(inword & (_ONE - iw))  # a word ended before this byte
            h = (h + np.uint64(lc) * pw[pos]) & mask
            pos = (pos + 1) & np.int64(mask)
            inword = iw
            if dig_ok:
                space = ws[lc]
                out[o] = 32 if space else lc
                o += 1 if not (space and last) else 0
                last = space != 0
            continue
        if c < 0xE0:
            cp = (np.int64(c & 0x1F) << 6) | np.int64(src[i + 1] & 0x3F)
            i += 2
        elif c < 0xF0:
            cp = ((np.int64(c & 0x0F) << 12) | (np.int64(src[i + 1] & 0x3F) << 6)
                  | np.int64(src[i + 2] & 0x3F))
            i += 3
        else:
            cp = ((np.int64(c & 0x07) << 18) | (np.int64(src[i + 1] & 0x3F) << 12)
                  | (np.int64(src[i + 2] & 0x3F) << 6) | np.int64(src[i + 3] & 0x3F))
            i += 4
        if mode == 2 or cp >= low.size:
            lc = cp
        else:
            lc = np.int64(low[cp])
            if lc < 0:
                return np.int64(0), NEEDS_LOWER, o0
        if dig_ok:
            if mode == 1:  # the lowered text itself
                if lc < ws.size and ws[lc]:
                    if not last:
                        out[o] = 32
                        o += 1
                        last = True
                else:
                    o = _put(out, o, lc)
                    last = False
            elif cp < dig.size and dig[cp] >= 0:
                kind = dig[cp]
                if kind == 0:  # its lowercase; never whitespace
                    o = _put(out, o, lc)
                    last = False
                else:  # a replacement: ASCII whitespace in it collapses, its other bytes do not
                    for k in range(repl_off[kind], repl_off[kind + 1]):
                        r = repl[k]
                        if r < 0x80 and ws[r]:
                            if not last:
                                out[o] = 32
                                o += 1
                                last = True
                        else:
                            out[o] = r
                            o += 1
                            last = False
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
    if dig_ok and last and o > o0:  # a trailing space
        o -= 1
    status = OK if dig_ok or mode == 2 else NEEDS_DIGEST
    return _simhash_of_words(words, nwords), status, o


@_jit
def _simhash_of_words(words, n):  # type: ignore[no-untyped-def]
    """SimHash of the first ``n`` word hashes: 3-shingles mixed, then each of the 64 bits set when
    more than half of the shingles have it. SWAR count: lane j's byte k counts bit 8k + j, flushed
    to ``counts`` every 255 shingles so no byte carries into the next."""
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
def fingerprint_batch(src, starts, low, dig, repl, repl_off, ws, word, mode, sims, status, out, out_off):  # type: ignore[no-untyped-def]
    """:func:`_one` of each text ``src[starts[t]:starts[t + 1]]``: SimHash to ``sims[t]``, status to
    ``status[t]``, digest bytes to ``out[out_off[t]:out_off[t + 1]]``."""
    longest = 0
    for t in range(starts.size - 1):
        longest = max(longest, starts[t + 1] - starts[t])
    words = np.empty(longest // 2 + 2, np.uint64)  # a word and a separator take two bytes at least
    pw = np.empty(longest + 1, np.uint64)  # P**k for the k-th byte of a word
    p = _ONE
    for k in range(longest + 1):
        pw[k] = p
        p *= _P
    buf = np.zeros(4, np.uint8)
    o = 0
    for t in range(starts.size - 1):
        out_off[t] = o
        s, st, e = _one(src, starts[t], starts[t + 1], low, dig, repl, repl_off, ws, word, mode, pw, out, o,
                        words, buf)
        sims[t] = s
        status[t] = st
        o = e
    out_off[starts.size - 1] = o


@_jit
def collapse_batch(src, starts, verbatim, ws, out, out_off):  # type: ignore[no-untyped-def]
    """``" ".join(text.split())`` of each UTF-8 text ``src[starts[t]:starts[t + 1]]`` into
    ``out[out_off[t]:out_off[t + 1]]`` (``verbatim[t]``: copied as it is). Whitespace is ``str.isspace``
    (table ``ws``, ASCII and BMP); ASCII bytes take a branch-free path."""
    o = 0
    for t in range(starts.size - 1):
        out_off[t] = o
        a = starts[t]
        b = starts[t + 1]
        if verbatim[t]:
            out[o:o + b - a] = src[a:b]
            o += b - a
            continue
        o0 = o
        last = True  # the last byte kept was a space (or nothing was kept): a space now is dropped
        i = a
        while i < b:
            c = src[i]
            if c < 0x80:
                space = ws[c]
                out[o] = 32 if space else c
                o += 1 if not (space and last) else 0
                last = space != 0
                i += 1
                continue
            if c < 0xE0:
                n = 2
                cp = (np.int64(c & 0x1F) << 6) | np.int64(src[i + 1] & 0x3F)
            elif c < 0xF0:
                n = 3
                cp = ((np.int64(c & 0x0F) << 12) | (np.int64(src[i + 1] & 0x3F) << 6)
                      | np.int64(src[i + 2] & 0x3F))
            else:
                n = 4
                cp = 0x10000  # no whitespace beyond the BMP
            if cp < ws.size and ws[cp]:
                if not last:
                    out[o] = 32
                    o += 1
                    last = True
            else:
                for k in range(n):
                    out[o + k] = src[i + k]
                o += n
                last = False
            i += n
        if last and o > o0:  # a trailing space
            o -= 1
    out_off[starts.size - 1] = o
