"""Content fingerprints: exact payload digests, normalised-text digests and near-duplicate SimHash.

``payload_digest`` follows the WARC / Common Crawl convention (``sha1:`` + base32 of the SHA-1 of the
stored payload) so our index joins against any Common Crawl tooling. The SimHash and the text digest
live in the same module because all three answer "have we stored this content before?".

SimHash (Manku, Jain, Das Sarma, WWW 2007) is computed entirely in NumPy, because parse runs it on
every page and a Python loop over ~5,000 shingles per page would cost more than parsing the HTML:

1. lowercase, UTF-8 encode; a *word* is a maximal run of ``[0-9a-z_]`` or non-ASCII bytes (so UTF-8
   letters stay inside words; punctuation and whitespace separate them);
2. each word gets a 64-bit polynomial hash over its bytes (one prefix sum over the text in wrapping
   uint64 arithmetic, no per-word loop), finalised with the SplitMix64 mixer;
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

import base64
import hashlib
import unicodedata

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

def payload_digest(data: bytes) -> str:
    """``sha1:BASE32`` of ``data``, the form used in ``WARC-Payload-Digest`` and CC's ``content_digest``."""
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def normalise_text(text: str) -> str:
    """NFKC, lowercase, whitespace collapsed to single spaces and trimmed.

    Why: the text digest should not change when only markup layout, non-breaking spaces or letter
    case change, so that "same text" means same words in the same order.
    """
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def text_digest(text: str) -> str:
    """Base32 SHA-1 of the normalised text (32 characters, no ``sha1:`` prefix, as ``PAGE_SCHEMA``)."""
    return base64.b32encode(hashlib.sha1(normalise_text(text).encode("utf-8")).digest()).decode("ascii")


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, vectorised (uint64 arithmetic wraps modulo 2**64)."""
    x = x ^ (x >> _S30)
    x = x * _M1
    x = x ^ (x >> _S27)
    x = x * _M2
    return x ^ (x >> _S31)


def word_hashes(text: str) -> np.ndarray:
    """64-bit hashes (uint64) of the lowercased words of ``text``, in order.

    A word's hash is sum(byte * P**k) over its bytes at in-word position k, computed for all words
    at once from one prefix sum over the text: (prefix[end] - prefix[start]) * P**-start.
    """
    b = np.frombuffer(text.lower().encode("utf-8", "surrogatepass"), dtype=np.uint8)
    n = b.size
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    isw = ((b >= 97) & (b <= 122)) | ((b >= 48) & (b <= 57)) | (b == 95) | (b >= 128)
    padded = np.zeros(n + 2, dtype=np.int8)
    padded[1:-1] = isw
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
    w = word_hashes(text)
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
    "SHINGLE", "hamming", "hamming_array", "normalise_text", "payload_digest", "simhash", "text_digest",
    "word_hashes",
]
