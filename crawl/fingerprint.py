"""Content fingerprints: exact payload digests, normalised-text digests and near-duplicate SimHash.

``payload_digest`` follows the WARC / Common Crawl convention (``sha1:`` + base32 of the SHA-1 of the
stored payload) so our index joins against any Common Crawl tooling. The SimHash and the text digest
live in the same module because all three answer "have we stored this content before?".

SimHash (Manku, Jain, Das Sarma, WWW 2007) is computed entirely in NumPy, because parse runs it on
every page and a Python loop over ~5,000 shingles per page would cost more than parsing the HTML:

1. lowercase, UTF-8 encode; a *word* is a maximal run of ``[0-9a-z_]`` or non-ASCII bytes (so UTF-8
   letters stay inside words; punctuation and whitespace separate them);
2. each word gets a 64-bit polynomial hash over its bytes (byte * P**position summed per word with
   one ``reduceat`` over the text in wrapping uint64 arithmetic, no per-word loop, then shifted to
   position 0), finalised with the SplitMix64 mixer;
3. features are word 3-shingles, each hashed by mixing its three word hashes; every occurrence counts
   once, so a shingle's weight is its frequency in the page;
4. the 64 bit columns of all feature hashes are counted (``np.unpackbits`` + SWAR lane sums) and bit
   *i* of the fingerprint is set when more than half of the features have it set.

Everything is fixed arithmetic on bytes (no Python ``hash()``, no per-process seed), so fingerprints
are identical across processes, machines and runs. Texts with fewer than three words have no
shingle and get SimHash 0: callers must treat 0 as "no fingerprint" and leave it out of
near-duplicate search.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

SHINGLE = 3
_MASK64 = (1 << 64) - 1

# Polynomial hash base (FNV-64 prime, odd so it is invertible modulo 2**64) and its inverse.
_P = 0x100000001B3
_P_INV = pow(_P, -1, 1 << 64)
_pow_tables: tuple[np.ndarray, np.ndarray] = (np.ones(1, np.uint64), np.ones(1, np.uint64))


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """P**i and P**-i (mod 2**64) for i < n; tables grow by doubling and are shared by later calls."""
    global _pow_tables
    pw, ipw = _pow_tables
    if pw.size < n:
        size = max(1 << (n - 1).bit_length(), 1 << 15)
        pw = np.cumprod(np.full(size, _P, dtype=np.uint64))
        ipw = np.cumprod(np.full(size, _P_INV, dtype=np.uint64))
        pw = np.concatenate([np.ones(1, np.uint64), pw[:-1]])
        ipw = np.concatenate([np.ones(1, np.uint64), ipw[:-1]])
        _pow_tables = (pw, ipw)
    return pw, ipw


_C1 = np.uint64(0x9E3779B97F4A7C15)
_C2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

#: RFC 4648's base32 alphabet, the digits of every ``sha1:`` digest (``crawl.digests`` reads them back)
B32_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [a + b for a in B32_ALPHABET for b in B32_ALPHABET]  # 10 bits -> two base32 characters
_B32_SHIFTS = tuple(range(150, -1, -10))


def b32_sha1(digest: bytes) -> str:
    """``base64.b32encode`` of a 20-byte SHA-1 digest (no padding: 160 bits are 32 characters).

    Why not base64's: in Python 3.11 it is pure Python, ~4 µs a call, and the WARC writer thread
    encodes three digests per page (payload and two block digests); this is half of it."""
    n = int.from_bytes(digest, "big")
    pairs = _B32_PAIRS
    return "".join([pairs[(n >> s) & 1023] for s in _B32_SHIFTS])


def payload_digest(data: bytes) -> str:
    """``sha1:BASE32`` of ``data``, the form used in ``WARC-Payload-Digest`` and CC's ``content_digest``."""
    return "sha1:" + _b32sha1(data)


def normalise_text(text: str) -> str:
    """NFKC, lowercase, whitespace collapsed to single spaces and trimmed.

    Why: the text digest should not change when only markup layout, non-breaking spaces or letter
    case change, so that "same text" means same words in the same order.
    """
    return " ".join(_nfkc(text).lower().split())


def text_digest(text: str) -> str:
    """Base32 SHA-1 of the normalised text (32 characters, no ``sha1:`` prefix, as ``PAGE_SCHEMA``)."""
    return _b32sha1(normalise_text(text).encode("utf-8"))


# --- NFKC without normalising the whole text -------------------------------------------------------
# ``unicodedata.normalize`` gives up its quick check at the first character that NFKC changes (an
# ellipsis, a trademark sign, a non-breaking space: most real pages have one) and then rebuilds the
# whole string, ~250 us for 15 KB. Every ASCII character starts a normalisation boundary (combining
# class 0, NFKC_QC=Yes: nothing before it can combine with it or with anything after it), so the text
# can be normalised piecewise: only the runs of non-ASCII characters holding an "unsafe" one, each
# with the ASCII character before it (which may compose with a following mark). "Safe" characters,
# kept as they are, are the Latin-1/Latin Extended letters and the punctuation and currency signs that
# NFKC maps to themselves and that never combine; tests compare with ``unicodedata.normalize``.
_SAFE_RANGES = ((0xA0, 0x250), (0x2010, 0x2028), (0x2030, 0x2070), (0x20A0, 0x20C0))
_SAFE = "".join(c for lo, hi in _SAFE_RANGES for c in map(chr, range(lo, hi))
                if unicodedata.normalize("NFKC", c) == c and unicodedata.combining(c) == 0 and not c.isspace())
_UNSAFE_RE = re.compile("[^\x00-\x7f" + re.escape(_SAFE) + "]")
# whitespace that str.split() knows beyond ASCII (bytes.split() does not know these; nor \x1c-\x1f)
_UNICODE_WS = "\x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
_UNICODE_WS_RE = re.compile(f"[{_UNICODE_WS}]")
# the ones NFKC keeps (the others map to a space): the only ones an NFKC-normalised text can hold
_NFKC_STABLE_WS = "".join(c for c in _UNICODE_WS if unicodedata.normalize("NFKC", c) == c)


# Unsafe characters that NFKC maps on their own whatever surrounds them: class 0, and their NFKC
# starts with an ASCII or safe character (so nothing before can compose with it). Between safe
# neighbours they are replaced one by one (the ellipsis, trademark sign, ligatures, fullwidth forms...).
_SAFE_SET = frozenset(_SAFE)
_REPLACE = {
    c: n for lo, hi in ((0xA0, 0x2C00), (0xFB00, 0xFB50), (0xFF00, 0xFFF0)) for c in map(chr, range(lo, hi))
    if c not in _SAFE_SET and unicodedata.combining(c) == 0 and (n := unicodedata.normalize("NFKC", c)) != c
    and (n[0].isascii() or n[0] in _SAFE_SET) and not _UNICODE_WS_RE.search(n)
}


def _nfkc_spans(text: str) -> tuple[str, bool]:
    """(NFKC of ``text``, whether it may hold whitespace beyond ASCII), normalising only unsafe runs."""
    if text.isascii():
        return text, False
    # NFKC's quick check in C (~1 ns per character): ~half the simulated web's texts need no change,
    # and the scan below costs ~5x more
    if unicodedata.is_normalized("NFKC", text):
        return text, any(c in text for c in _NFKC_STABLE_WS)
    return _nfkc_scan(text)


def _nfkc_scan(text: str) -> tuple[str, bool]:
    """:func:`_nfkc_spans` of a text known to need normalising."""
    others = 0

    def replace(m: re.Match[str]) -> str:
        nonlocal others
        r = _REPLACE.get(m.group())
        if r is None:
            others += 1
            return m.group()
        return r

    out, count = _UNSAFE_RE.subn(replace, text)  # one C scan, a callback per unsafe character
    if count == 0:
        return text, False
    if others == 0:
        return out, False
    m = _UNSAFE_RE.search(text)  # characters whose neighbours matter: normalise whole runs
    out: list[str] = []
    pos = 0
    n = len(text)
    odd_ws = False
    while m is not None:
        i = m.start()
        s = i
        while s > pos and not text[s - 1].isascii():
            s -= 1
        if s > pos:
            s -= 1  # the ASCII character before the run: "e" + U+0301 composes to "é"
        e = i + 1
        while e < n and not text[e].isascii():
            e += 1
        span = unicodedata.normalize("NFKC", text[s:e])
        odd_ws = odd_ws or _UNICODE_WS_RE.search(span) is not None
        out.append(text[pos:s])
        out.append(span)
        pos = e
        m = _UNSAFE_RE.search(text, e)
    out.append(text[pos:])
    return "".join(out), odd_ws


def _nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, normalising only the runs that can change."""
    return _nfkc_spans(text)[0]


@functools.cache
def _lower_kinds() -> tuple[np.ndarray, list[bytes]]:
    """Per BMP code point L, what NFKC + ``str.lower`` make of the characters ``str.lower`` maps to L
    alone, as :func:`_replaced_lower` reads it: 0 = L itself (each is ``_SAFE``), k > 0 = the UTF-8 at
    index k of the list (each is in ``_REPLACE``, all with that lowered replacement), -1 = anything
    else (one of them is neither, two disagree, or capital sigma, the one character ``str.lower`` maps
    by its neighbours, is involved). Non-ASCII characters lowering to ASCII must map to that ASCII
    character (only the Kelvin sign does: checked here), since the bytes do not show them. Built on
    first use (~0.05 s), from this Python's own ``unicodedata`` and ``str.lower``."""
    results: dict[int, str | None] = {}
    for cp in range(0x80, 0x10000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        low = c.lower()
        if len(low) != 1:
            continue
        r: str | None = None
        if c == "\u03a3":
            r = None
        elif c in _SAFE_SET:
            r = low
        elif c in _REPLACE and "\u03a3" not in _REPLACE[c]:
            r = _REPLACE[c].lower()
        if low.isascii():
            if r != low:
                raise RuntimeError(f"U+{cp:04X} lowers to ASCII {low!r} but NFKC + lower gives {r!r}")
            continue
        if ord(low) not in results:
            results[ord(low)] = r
        elif results[ord(low)] != r:
            results[ord(low)] = None
    kinds = np.full(0x10000, -1, np.int16)
    repl: list[bytes] = [b""]
    index: dict[bytes, int] = {}
    for cp, r in results.items():
        if r is None:
            continue
        if r == chr(cp):
            kinds[cp] = 0
        else:
            b = r.encode()
            kinds[cp] = index.setdefault(b, len(repl))
            if kinds[cp] == len(repl):
                repl.append(b)
    return kinds, repl


def _replaced_lower(raw: bytes, one_to_one: bool) -> bytes | None:
    """UTF-8 of ``NFKC(text).lower()`` from ``raw``, UTF-8 of ``text.lower()``, when ``str.lower``
    mapped each character of ``text`` to one (``one_to_one``: ``len(text.lower()) == len(text)``) and
    every non-ASCII character of ``raw`` is in the BMP with a known kind (:func:`_lower_kinds`), at
    least one a replacement; else None.

    Why: on the simulated web every text NFKC changes holds only ellipses and trademark signs, and
    the regex scan of :func:`_nfkc_scan` plus lowering and encoding the normalised text cost ~0.13 ms
    per page; this is one NumPy pass to find and classify the non-ASCII characters and a join of
    slices of ``raw``. Exact because every character of ``text`` is then ``_SAFE`` or in ``_REPLACE``,
    so NFKC replaces characters one by one (what ``_nfkc_scan`` does when all are in ``_REPLACE``), and
    ``str.lower`` maps each character on its own (no capital sigma), so each lowered character of
    ``raw`` stands for one of ``text`` whose NFKC + lower its kind gives. Reading ``raw`` rather than
    ``text``'s own UTF-8 saves encoding the text a second time.
    """
    if not one_to_one:
        return None
    a = np.frombuffer(raw + b"\0\0", np.uint8)  # two bytes of padding: reading lead + 2 stays inside
    lead = np.flatnonzero(a >= 0xC2)  # in valid UTF-8 every byte >= C2 starts a character
    if lead.size == 0:
        return None
    lb = a[lead]
    if lb.max() >= 0xF0:  # outside the BMP
        return None
    b1 = a[lead + 1].astype(np.int32) & 0x3F
    two = lb < 0xE0
    cp = np.where(two, ((lb & 0x1F).astype(np.int32) << 6) | b1,
                  ((lb & 0x0F).astype(np.int32) << 12) | (b1 << 6) | (a[lead + 2] & 0x3F))
    kinds, repl = _lower_kinds()
    k = kinds[cp]
    if k.min() < 0:
        return None
    hit = np.flatnonzero(k)
    if hit.size == 0:
        return None
    out: list[bytes] = []
    prev = 0
    for pos, two_byte, kind in zip(lead[hit].tolist(), two[hit].tolist(), k[hit].tolist(), strict=True):
        out.append(raw[prev:pos])
        out.append(repl[kind])
        prev = pos + (2 if two_byte else 3)
    out.append(raw[prev:])
    return b"".join(out)


# ASCII whitespace as str.split() sees it (bytes.split() leaves out \x1c-\x1f)
_WS_LUT = np.zeros(256, bool)
_WS_LUT[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
# word bytes of the SimHash tokeniser: [0-9a-z_] and every byte of a multi-byte UTF-8 character
_WORD_LUT = np.zeros(256, bool)
_WORD_LUT[[*range(48, 58), *range(97, 123), 95, *range(128, 256)]] = True


def fingerprints(text: str) -> tuple[int, str]:
    """``(simhash(text), text_digest(text))`` in one pass over ``text`` (:func:`fingerprints_many` of
    one text)."""
    if not text:
        return 0, text_digest(text)
    sims, digests = fingerprints_many([text])
    return int(sims[0]), digests[0]  # type: ignore[return-value]


# texts fingerprinted together by fingerprints_many: measured on simulated-web pages (~15 KB of text),
# 32 KB batches beat 64 KB and 128 KB ones: the uint64 scratch arrays of a batch then stay in L2 cache
_BATCH_BYTES = 1 << 15
_SEP = b"\x00"  # between texts of a batch: not a word byte and not whitespace


def fingerprints_many(texts: Sequence[str | None]) -> tuple[np.ndarray, list[str | None]]:
    """``[fingerprints(t) for t in texts]`` as (int64 SimHash array, digest list); an empty or None
    text gets ``(0, None)``.

    Why: parse fingerprints every page of a partition, and a page's ~40 NumPy calls cost ~70 us
    whatever its size. Here the lowered UTF-8 bytes of a few texts are concatenated (a NUL between
    them) and word hashes, shingles and bit counts run once per batch; the digest's whitespace
    collapse runs per text on bytes (:func:`collapse_ws`). The values are those of the scalar
    definitions (:func:`simhash`, :func:`text_digest`) exactly: a word's hash does not depend on its
    position, shingles that would span two texts are dropped and bits are counted per text (tests
    compare on adversarial text). Measured on simulated-web pages: bench/RESULTS.md, "Parse CPU".
    """
    n = len(texts)
    sims = np.zeros(n, np.int64)
    digests: list[str | None] = [None] * n
    batch: list[tuple[int, bytes]] = []  # (index, lowered bytes)
    size = 0
    for i, text in enumerate(texts):
        if not text:
            continue
        low = text.lower()
        try:
            raw = low.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the scalar definitions' behaviour (the digest raises)
            sims[i], digests[i] = simhash(text), text_digest(text)
            continue
        digests[i] = _b32sha1(_digest_bytes(text, raw, len(low) == len(text)))
        batch.append((i, raw))
        size += len(raw)
        if size >= _BATCH_BYTES:
            _simhash_batch(batch, sims)
            batch, size = [], 0
    if batch:
        _simhash_batch(batch, sims)
    return sims, digests


def _digest_bytes(text: str, raw: bytes, one_to_one: bool | None = None) -> bytes:
    """What the text digest hashes, ``" ".join(NFKC(text).lower().split())`` as UTF-8, given ``raw``,
    UTF-8 of ``text.lower()`` (``one_to_one``: ``len(text.lower()) == len(text)``, computed if None):
    ASCII and NFKC-normalised texts need no normalising, texts whose only changes are one-by-one
    replacements take :func:`_replaced_lower`, the rest :func:`_nfkc_scan`."""
    if text.isascii():
        return collapse_ws(raw, False)
    if unicodedata.is_normalized("NFKC", text):  # C quick check, ~1 ns per character
        return collapse_ws(raw, any(c in text for c in _NFKC_STABLE_WS))
    if one_to_one is None:
        one_to_one = len(text.lower()) == len(text)
    replaced = _replaced_lower(raw, one_to_one)
    if replaced is not None:
        return collapse_ws(replaced, False)  # neither _SAFE nor replacements hold whitespace beyond ASCII
    normal, odd_ws = _nfkc_scan(text)
    return collapse_ws(raw if normal is text else normal.lower().encode("utf-8"), odd_ws)


# str.split()'s ASCII whitespace (bytes.split() leaves out \x1c-\x1f), each to a space
_WS_TO_SPACE = bytes.maketrans(b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f", b" " * 9)


def collapse_ws(data: bytes, unicode_ws: bool = True) -> bytes:
    """``" ".join(s.split()).encode()`` for ``data = s.encode()``: every whitespace run one space,
    none at either end. ``unicode_ws=False``: the caller knows ``s`` holds no whitespace beyond ASCII.

    Why: ``str.split`` makes a Python string per word (~2,500 per page); this is a byte translation
    and one NumPy compress (plus one for the rare whitespace beyond ASCII), ~4x cheaper on
    simulated-web text (bench/RESULTS.md, "Parse CPU, session 4").
    """
    a = np.frombuffer(data.translate(_WS_TO_SPACE), np.uint8)
    if unicode_ws and not data.isascii():
        a = _unicode_ws_to_space(a)
    if a.size < 2:
        return a.tobytes().strip(b" ")
    space = a == 32
    keep = np.empty(a.size, bool)
    keep[0] = True
    np.logical_not(space[1:] & space[:-1], out=keep[1:])  # drop a space that follows a space
    return a[keep].tobytes().strip(b" ")


# UTF-8 of _UNICODE_WS: two-byte ones (lead C2) by second byte, three-byte ones as a 24-bit number
_UWS2 = sorted(c.encode()[1] for c in _UNICODE_WS if len(c.encode()) == 2)
_UWS3 = np.array(sorted(int.from_bytes(c.encode(), "big") for c in _UNICODE_WS if len(c.encode()) == 3), np.int32)
assert _UWS2 == [0x85, 0xA0] and {c.encode()[0] for c in _UNICODE_WS if len(c.encode()) == 3} == {0xE1, 0xE2, 0xE3}


def _unicode_ws_to_space(a: np.ndarray) -> np.ndarray:
    """UTF-8 bytes ``a`` with each whitespace character beyond ASCII replaced by one space (32).

    Only bytes >= C2 can start one (C2 85, C2 A0, E1-E3 + two); in valid UTF-8 such a byte is
    always a lead byte, so its next bytes are the character's own."""
    at = np.flatnonzero(a[:-1] >= 0xC2)
    if at.size == 0:
        return a
    lead, second = a[at], a[at + 1]
    two = at[(lead == 0xC2) & ((second == 0x85) | (second == 0xA0))]
    at3 = at[(lead - np.uint8(0xE1)) <= 2]
    at3 = at3[at3 < a.size - 2]
    key = (a[at3].astype(np.int32) << 16) | (a[at3 + 1].astype(np.int32) << 8) | a[at3 + 2]
    three = at3[_UWS3[np.minimum(np.searchsorted(_UWS3, key), _UWS3.size - 1)] == key]
    if two.size == 0 and three.size == 0:
        return a
    out = a.copy()
    out[two] = 32
    out[three] = 32
    keep = np.ones(a.size, bool)
    keep[two + 1] = False
    keep[three + 1] = False
    keep[three + 2] = False
    return out[keep]


def _b32sha1(data: bytes | memoryview) -> str:
    return b32_sha1(hashlib.sha1(data).digest())


# _WORD_LUT as a bytes.translate table (1 = word byte): one C pass, ~2x cheaper than NumPy compares
_WORD_TABLE = _WORD_LUT.astype(np.uint8).tobytes()


def _simhash_batch(batch: list[tuple[int, bytes]], sims: np.ndarray) -> None:
    # bookkeeping of the batch's few texts in Python: a NumPy call costs ~1 us whatever its size, and
    # a batch of two pages made ~70 of them (bench/RESULTS.md, "Parse CPU, session 5")
    starts: list[int] = []
    pos = 0
    for _, r in batch:
        starts.append(pos)
        pos += len(r) + 1  # each text is followed by one separator byte
    # one separator before the batch (the word mask's padding) and one after each text; NUL is not a
    # word byte, so no word spans two texts, and every word ends before the last byte
    joined = _SEP.join([b"", *(r for _, r in batch), b""])
    big = np.frombuffer(joined, np.uint8, offset=1)
    padded = np.frombuffer(joined.translate(_WORD_TABLE), np.int8)
    bounds = np.flatnonzero(padded[1:] != padded[:-1])
    ws = bounds[0::2]
    if ws.size < SHINGLE:
        return
    pw, ipw = _powers(big.size)
    # a word's sum(byte * P**position), then shifted to position 0: reduceat over [start, end)
    w = _mix(np.add.reduceat(np.multiply(big, pw[:big.size], dtype=np.uint64), bounds)[0::2] * ipw[ws])
    if len(batch) == 1:
        feats = _mix(w[:-2] * _C1 + w[1:-1] * _C2 + w[2:])
        nfeat = [feats.size]
    else:
        text_of = np.searchsorted(np.array(starts), ws, side="right") - 1  # batch text of each word
        same = text_of[:-2] == text_of[2:]  # a shingle's three words belong to one text
        feats = _mix(w[:-2] * _C1 + w[1:-1] * _C2 + w[2:])[same]
        nfeat = np.bincount(text_of[:-2][same], minlength=len(batch)).tolist()
    rows = [i for (i, _), n in zip(batch, nfeat, strict=True) if n]
    sizes = [n for n in nfeat if n]
    if not sizes:
        return
    counts = _segment_bit_counts(feats, sizes)
    fp = np.packbits(counts * 2 > np.array(sizes)[:, None], axis=1).view("<u8").ravel()
    sims[rows] = fp.view(np.int64)


def _segment_bit_counts(feats: np.ndarray, sizes: list[int]) -> np.ndarray:
    """:func:`_bit_counts` of consecutive runs of ``feats`` (run k has ``sizes[k]`` > 0 elements):
    an int64 array of shape (len(sizes), 64).

    The same SWAR as :func:`_bit_counts`: bytes of unpacked bits summed eight at a time as uint64,
    over segments of at most 255 features (no byte lane can carry), then the segments of a run added.
    """
    seg_start: list[int] = []  # first feature of each segment
    seg_first: list[int] = []  # first segment of each run
    pos = 0
    for n in sizes:
        seg_first.append(len(seg_start))
        seg_start.extend(range(pos, pos + n, 255))
        pos += n
    bits = np.unpackbits(feats.astype("<u8", copy=False).view(np.uint8)).view(np.uint64).reshape(feats.size, 8)
    sums = np.add.reduceat(bits, seg_start, axis=0)  # segments x 8 lanes
    seg_counts = sums.view(np.uint8).reshape(len(seg_start), 64)
    return np.add.reduceat(seg_counts, seg_first, axis=0, dtype=np.int64)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, vectorised (uint64 arithmetic wraps modulo 2**64)."""
    x = x ^ (x >> _S30)  # a new array: the in-place steps below leave the caller's alone
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def word_hashes(text: str) -> np.ndarray:
    """64-bit hashes (uint64) of the lowercased words of ``text``, in order.

    A word's hash is sum(byte * P**k) over its bytes at in-word position k, computed for all words
    at once from one prefix sum over the text: (prefix[end] - prefix[start]) * P**-start.
    """
    return _word_hashes_bytes(np.frombuffer(text.lower().encode("utf-8", "surrogatepass"), dtype=np.uint8))


def _word_hashes_bytes(b: np.ndarray) -> np.ndarray:
    """:func:`word_hashes` of already lowercased UTF-8 bytes."""
    n = b.size
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    padded = np.zeros(n + 2, dtype=np.int8)
    padded[1:-1] = _WORD_LUT.take(b)
    # word edges alternate start (+1) / end (-1), so one scan finds both
    bounds = np.flatnonzero(padded[1:] != padded[:-1])
    if bounds.size == 0:
        return np.empty(0, dtype=np.uint64)
    starts, ends = bounds[0::2], bounds[1::2]
    pw, ipw = _powers(n)
    prefix = np.empty(n + 1, dtype=np.uint64)
    prefix[0] = 0
    # word bytes are never 0, so the raw byte value is a fine coefficient (no +1 needed)
    np.cumsum(np.multiply(b, pw[:n], dtype=np.uint64), out=prefix[1:])
    return _mix((prefix[ends] - prefix[starts]) * ipw[starts])


def _bit_counts(feats: np.ndarray) -> np.ndarray:
    """How many of ``feats`` (uint64) have each of the 64 bits set, in ``np.unpackbits`` order.

    SWAR: bits are unpacked to one byte each and eight of those bytes are added as one uint64, 255
    rows at a time so no byte lane can carry into the next; then the lanes are summed as int64.
    """
    n = feats.size
    chunks = -(-n // 255)
    padded = np.zeros(255 * chunks, dtype="<u8")
    padded[:n] = feats
    bits = np.unpackbits(padded.view(np.uint8)).reshape(255, chunks * 8, 8)
    lanes = bits.view(np.uint64).reshape(255, chunks * 8)   # one uint64 per 8 bit-bytes
    sums = np.add.reduce(lanes, axis=0)                      # every byte lane <= 255: no carry
    return sums.view(np.uint8).reshape(chunks, 64).sum(axis=0, dtype=np.int64)


def simhash(text: str) -> int:
    """64-bit SimHash of ``text`` over word 3-shingles, as a signed int64 Python int (0 = none)."""
    return _simhash_of_hashes(word_hashes(text))


def _simhash_of_hashes(w: np.ndarray) -> int:
    if w.size < SHINGLE:
        return 0
    feats = _mix(w[:-2] * _C1 + w[1:-1] * _C2 + w[2:])
    counts = _bit_counts(feats)
    fp = int(np.packbits(counts * 2 > feats.size).view("<u8")[0])
    return fp - (1 << 64) if fp >= (1 << 63) else fp


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two 64-bit fingerprints (signed or unsigned ints)."""
    return ((a ^ b) & _MASK64).bit_count()


def hamming_array(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """Vectorised :func:`hamming` over int64/uint64 arrays (broadcasting)."""
    return np.bitwise_count(_as_u64(a) ^ _as_u64(b)).astype(np.int64)


def _as_u64(x: np.ndarray | int) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x.view(np.uint64) if x.dtype in (np.int64, np.uint64) else x.astype(np.uint64)
    return np.array(int(x) & _MASK64, dtype=np.uint64)


__all__ = [
    "SHINGLE", "fingerprints", "fingerprints_many", "hamming", "hamming_array", "normalise_text", "payload_digest", "simhash", "text_digest",
    "word_hashes",
]
