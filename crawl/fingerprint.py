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
3. *short sentences are left out*: a sentence ends at ``.``, ``!`` or ``?`` followed by whitespace
   (``str.isspace``), and at the end of the text; the words of a sentence of fewer than 3 words are
   dropped before shingling. Why: the text a near copy gets from its site inside the article is made
   of such sentences -- a link call-out whose anchor text parse strips ("See <a>...</a>." leaves
   "See ."), "Share.", "Print.", "Advertisement." -- and each one inserted shifted 3 shingles, so a
   syndicated copy with a dozen of them was 4-9 bits from its original (bench/RESULTS.md, "Near
   copies ... (session 19, helper neardup19)"). Shingles still run across sentence ends, so a text
   without a short sentence has the SimHash it always had (tests/test_fingerprint.py's golden values);
4. features are word 3-shingles of the words kept, each hashed by mixing its three word hashes; every
   occurrence counts once, so a shingle's weight is its frequency in the page;
5. the 64 bit columns of all feature hashes are counted (``np.unpackbits`` + SWAR lane sums) and bit
   *i* of the fingerprint is set when more than half of the features have it set.

Everything is fixed arithmetic on bytes (no Python ``hash()``, no per-process seed), so fingerprints
are identical across processes, machines and runs. Texts with fewer than three words kept have no
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

#: RFC 4648's base32 alphabet, the digits of every ``sha1:`` digest (``crawl.digests`` reads them back)
B32_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_TABLE = bytes.maketrans(bytes(range(32)), B32_ALPHABET.encode("ascii"))  # 5-bit value -> its digit


def _spread_masks() -> tuple[int, ...]:
    """Masks of :func:`b32_sha1`'s bit spreading: at each step every lane keeps the low half of its bits
    (the mask) and moves the high half up into the next lane (80 bits in 128-bit lanes, then 40 in 64,
    20 in 32, 10 in 16, 5 in 8)."""
    masks = []
    for width, keep in ((128, 40), (64, 20), (32, 10), (16, 5)):
        masks.append(sum(((1 << keep) - 1) << (lane * width) for lane in range(256 // width)))
    return tuple(masks)


_M40, _M20, _M10, _M5 = _spread_masks()
_M80 = (1 << 80) - 1


def b32_sha1(digest: bytes) -> str:
    """``base64.b32encode`` of a 20-byte SHA-1 digest (no padding: 160 bits are 32 characters).

    Why not base64's: in Python 3.11 it is pure Python, ~1.8 us a call here, and every page's WARC
    records (payload and two block digests) and its text digest need one. The 160 bits are spread
    so that each 5-bit digit sits in a byte of its own (four mask-and-shift steps on one integer),
    then one ``bytes.translate`` spells the bytes: ~0.7 us, against 1.2 for the table of 10-bit
    pairs this replaced (tests/test_warc.py compares with base64 over generated digests)."""
    x = int.from_bytes(digest, "big")
    x = (x & _M80) | ((x >> 80) << 128)
    x = (x & _M40) | ((x & ~_M40) << 24)
    x = (x & _M20) | ((x & ~_M20) << 12)
    x = (x & _M10) | ((x & ~_M10) << 6)
    x = (x & _M5) | ((x & ~_M5) << 3)
    return x.to_bytes(32, "big").translate(_B32_TABLE).decode("ascii")


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


# Unsafe characters that NFKC maps on their own whatever surrounds them: class 0, and their NFKC
# starts with an ASCII or safe character (so nothing before can compose with it). Between safe
# neighbours they are replaced one by one (the ellipsis, trademark sign, ligatures, fullwidth forms...).
_SAFE_SET = frozenset(_SAFE)
_REPLACE = {
    c: n for lo, hi in ((0xA0, 0x2C00), (0xFB00, 0xFB50), (0xFF00, 0xFFF0)) for c in map(chr, range(lo, hi))
    if c not in _SAFE_SET and unicodedata.combining(c) == 0 and (n := unicodedata.normalize("NFKC", c)) != c
    and (n[0].isascii() or n[0] in _SAFE_SET) and not _UNICODE_WS_RE.search(n)
}


def _nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, normalising only the runs that can change."""
    # NFKC's quick check in C (~1 ns per character): ~half the simulated web's texts need no change,
    # and the scan below costs ~5x more
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text
    return _nfkc_scan(text)


def _nfkc_scan(text: str) -> str:
    """:func:`_nfkc` of a text known to need normalising."""
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
        return text
    if others == 0:
        return out
    m = _UNSAFE_RE.search(text)  # characters whose neighbours matter: normalise whole runs
    out: list[str] = []
    pos = 0
    n = len(text)
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
        out.append(text[pos:s])
        out.append(span)
        pos = e
        m = _UNSAFE_RE.search(text, e)
    out.append(text[pos:])
    return "".join(out)


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The per-character tables of :mod:`crawl.fingerprint_kernel`, built on first use (~0.1 s) from
    this Python's own ``str.lower``, ``str.isspace`` and ``unicodedata``:

    - ``low`` (int32, code points below ``_LOW_LIMIT``): ``str.lower`` of the character when it is one
      character and does not depend on its neighbours, else -1 (capital sigma; U+0130, which lowers to
      two). Above the limit no character has a lowercase (a test checks this Python's Unicode);
    - ``dig`` (int16, BMP): what the text digest makes of the character on its own, NFKC then lower:
      0 = its lowercase (ASCII and ``_SAFE``: NFKC keeps them and they never combine), k > 0 =
      replacement k (``_REPLACE``: NFKC maps them one by one between such neighbours; none may hold
      capital sigma), -1 = not known per character;
    - ``repl`` / ``repl_off``: the replacements' UTF-8, concatenated, replacement k at
      ``repl[repl_off[k]:repl_off[k + 1]]``;
    - ``ws`` (uint8, BMP): ``str.isspace``, what ``str.split`` splits on;
    - ``word``: the SimHash tokeniser's ASCII word bytes ``[0-9a-z_]``;
    - ``stop``: the ASCII characters that end a sentence when whitespace follows, ``.!?``;
    - the most digest bytes one character can give, for the output buffer.
    """
    low = np.arange(_LOW_LIMIT, dtype=np.int32)
    dig = np.full(0x10000, -1, np.int16)
    dig[:0x80] = 0
    ws = np.zeros(0x10000, np.uint8)
    repl: list[bytes] = [b""]
    index: dict[bytes, int] = {}
    for cp in range(0x80, _LOW_LIMIT):
        c = chr(cp)
        lo = c.lower()
        if lo == c:
            continue
        low[cp] = ord(lo) if len(lo) == 1 and c != "\u03a3" else -1
    for cp in range(0x10000):
        c = chr(cp)
        ws[cp] = c.isspace()
        if cp < 0x80 or low[cp] < 0 or 0xD800 <= cp < 0xE000:
            continue
        if c in _SAFE_SET:
            dig[cp] = 0
        elif c in _REPLACE and "\u03a3" not in _REPLACE[c]:
            r = _REPLACE[c].lower().encode()
            dig[cp] = index.setdefault(r, len(repl))
            if dig[cp] == len(repl):
                repl.append(r)
    repl_off = np.zeros(len(repl) + 1, np.int32)
    np.cumsum([len(r) for r in repl], out=repl_off[1:])
    word = np.zeros(0x80, np.uint8)
    word[[*range(48, 58), *range(97, 123), 95]] = 1
    stop = np.zeros(0x80, np.uint8)
    stop[list(b".!?")] = 1
    per_char = max(4, *map(len, repl))  # a lowercase is at most 4 bytes of UTF-8
    return (low, dig, np.frombuffer(b"".join(repl), np.uint8), repl_off, ws, word, stop, per_char)


#: characters from here up have no lowercase (``str.lower`` keeps them): the ``low`` table's size
_LOW_LIMIT = 0x20000


# P**k (mod 2**64) for in-word byte positions k: the word hash's powers, grown by doubling
_P = 0x100000001B3
_pow_table = np.ones(1, np.uint64)


def _powers(n: int) -> np.ndarray:
    global _pow_table
    if _pow_table.size < n:
        size = max(1 << (n - 1).bit_length(), 1 << 16)
        table = np.empty(size, np.uint64)
        table[0] = 1
        np.cumprod(np.full(size - 1, _P, np.uint64), out=table[1:])  # wraps modulo 2**64
        _pow_table = table
    return _pow_table


def _run_kernel(texts: list[str], mode: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(SimHashes, statuses, digest bytes, digest offsets) of ``texts`` from
    :func:`crawl.fingerprint_kernel.fingerprint_batch` (numba is imported here, on first use)."""
    from crawl.fingerprint_kernel import fingerprint_batch

    low, dig, repl, repl_off, ws, word, stop, per_char = _tables()
    n = len(texts)
    sims = np.zeros(n, np.int64)
    status = np.zeros(n, np.int8)
    out = np.empty(0 if mode == 2 else per_char * sum(map(len, texts)) + 8, np.uint8)
    out_off = np.zeros(n + 1, np.int64)
    pw = _powers(4 * max(map(len, texts)) + 1)  # a character is at most 4 bytes
    fingerprint_batch(texts, low, dig, repl, repl_off, ws, word, stop, mode, pw, sims, status, out, out_off)
    return sims, status, out, out_off.tolist()


def warm_up() -> None:
    """Load (or compile) the kernels and build their tables now: the embedded workers' preload calls
    this in the background (:func:`crawl.warmup.dask_setup`) so the first parse task does not wait on
    it (in a fresh process ~0.6-0.9 s of CPU with numba's on-disk cache, ~5 s when it must compile)."""
    fingerprints_many(["Warm-up text: caf\u00e9 \u2026 \u0393\u03b5\u03b9\u03ac"])
    collapse_many(["warm  up"], [False])


def fingerprints(text: str) -> tuple[int, str]:
    """``(simhash(text), text_digest(text))`` in one pass over ``text`` (:func:`fingerprints_many` of
    one text)."""
    if not text:
        return 0, text_digest(text)
    sims, digests = fingerprints_many([text])
    return int(sims[0]), digests[0]  # type: ignore[return-value]


# characters fingerprinted by one kernel call: bounds the digest buffer (~4 bytes per character)
_BATCH_CHARS = 1 << 21


def fingerprints_many(texts: Sequence[str | None]) -> tuple[np.ndarray, list[str | None]]:
    """``[fingerprints(t) for t in texts]`` as (int64 SimHash array, digest list); an empty or None
    text gets ``(0, None)``.

    Why: parse fingerprints every page of a partition. Each text goes once through the compiled pass
    of :mod:`crawl.fingerprint_kernel` (lowercase, word hashes, shingles, bit counts and the digest's
    normalised, collapsed UTF-8 together, reading the ``str`` itself), a batch of texts per call; only
    SHA-1 and base32 stay per text in Python. Texts the kernel's per-character tables do not cover
    (capital sigma, U+0130, characters NFKC does not map on their own: composing marks, most scripts
    beyond Latin when the text is not NFKC-normalised) take the Python definitions for that step. The
    values are those of the definitions (:func:`simhash`, :func:`text_digest`) exactly: tests compare
    with a plain-Python reference and whole-text NFKC on arbitrary text. Measured: bench/RESULTS.md,
    "Fingerprint kernel".
    """
    n = len(texts)
    sims = np.zeros(n, np.int64)
    digests: list[str | None] = [None] * n
    rows: list[int] = []
    batch: list[str] = []
    size = 0
    for i, text in enumerate(texts):
        if not text:
            continue
        rows.append(i)
        batch.append(text)
        size += len(text)
        if size >= _BATCH_CHARS:
            _fingerprint_rows(rows, batch, sims, digests)
            rows, batch, size = [], [], 0
    if rows:
        _fingerprint_rows(rows, batch, sims, digests)
    return sims, digests


def _fingerprint_rows(rows: list[int], texts: list[str], sims: np.ndarray, digests: list[str | None]) -> None:
    """Fingerprints of ``texts`` (rows ``rows`` of the caller's) into ``sims`` and ``digests``."""
    got, status, out, off = _run_kernel(texts, 0)
    sims[rows] = got
    view = memoryview(out)
    for k, (i, st) in enumerate(zip(rows, status.tolist(), strict=True)):
        if st == 0:
            digests[i] = _b32sha1(view[off[k]:off[k + 1]])
            continue
        text = texts[k]
        if st == 2 and unicodedata.is_normalized("NFKC", text):  # C quick check: the digest is the lowered text
            _, st1, out1, off1 = _run_kernel([text], 1)
            if st1[0] == 0:
                digests[i] = _b32sha1(memoryview(out1)[:off1[1]])
                continue
        if st != 2:  # str.lower maps a character by its neighbours or to two characters, or a lone surrogate
            sims[i] = simhash(text)
        digests[i] = text_digest(text)  # a lone surrogate raises here, as the definition does


def collapse_many(texts: Sequence[str], verbatim: Sequence[bool] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """UTF-8 of ``" ".join(t.split())`` of each of ``texts`` (of ``t`` itself where ``verbatim[i]``),
    concatenated: (bytes, int64 offsets, int64 lengths in characters), text i at ``off[i]:off[i + 1]``.
    A lone surrogate raises ``UnicodeEncodeError`` as ``str.encode`` does.

    Why: parse's text column collapses every HTML page's text (~17 KB); ``str.split`` made a Python
    string per word, the NumPy version (of the UTF-8, encoded first and joined) four full-size passes
    plus a scan for whitespace beyond ASCII. This is one compiled pass over the strings
    (:func:`crawl.fingerprint_kernel.collapse_batch`) writing the buffer the Arrow column is built from,
    and counting the characters the column's ``text_length`` gives (Arrow's ``utf8_length`` was a
    second pass over the bytes).
    """
    from crawl.fingerprint_kernel import collapse_batch

    texts = list(texts)
    n = len(texts)
    off = np.zeros(n + 1, np.int64)
    lengths = np.zeros(n, np.int64)
    if not n:
        return np.empty(0, np.uint8), off, lengths
    flags = np.zeros(n, np.uint8) if verbatim is None else np.array(verbatim, np.uint8)
    out = np.empty(4 * sum(map(len, texts)), np.uint8)  # UTF-8: at most 4 bytes per character
    bad = collapse_batch(texts, flags, _tables()[4], out, off, lengths)
    if bad >= 0:
        texts[bad].encode("utf-8")  # raises, naming the character
    return out, off, lengths


def _b32sha1(data: bytes | memoryview) -> str:
    return b32_sha1(hashlib.sha1(data).digest())


def simhash(text: str) -> int:
    """64-bit SimHash of ``text`` over word 3-shingles (short sentences left out, see the module's
    docstring), as a signed int64 Python int (0 = none)."""
    return int(_run_kernel([text.lower()], 2)[0][0]) if text else 0


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
    "warm_up",
]
