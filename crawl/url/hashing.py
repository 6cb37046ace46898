"""URL hashes: xxh3_64 of the canonical URL (the CrawlDb key), one URL or a column at once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import xxhash

from crawl.url.columns import _as_string_array, _buffers, _u32_at


def url_hash(url: str) -> int:
    """xxh3_64 of the URL's UTF-8 as given; pass the canonical URL (the CrawlDb key)."""
    return xxhash.xxh3_64_intdigest(url.encode("utf-8"))


def url_hashes(urls: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> np.ndarray:
    """:func:`url_hash` over canonical URLs -> uint64 array (null -> 0).

    Computed over the column's bytes with a NumPy XXH3 (identical values, see ``_xxh3_column``).
    """
    arr = _as_string_array(urls)
    if len(arr) == 0:
        return np.zeros(0, np.uint64)
    off, d = _buffers(arr)
    start, ln = off[:-1], np.diff(off)
    out = np.empty(len(arr), np.uint64)
    long_rows = []
    for lo in range(0, len(arr), _HASH_BLOCK):  # blocks whose temporaries stay in cache
        out[lo:lo + _HASH_BLOCK], long_b = _xxh3_column(d, start[lo:lo + _HASH_BLOCK], ln[lo:lo + _HASH_BLOCK])
        long_rows.extend((long_b + lo).tolist())
    h = xxhash.xxh3_64_intdigest
    for i in long_rows:
        out[i] = h(d[start[i]:start[i] + ln[i]].tobytes())
    if arr.null_count:
        out[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out


# ---------------------------------------------------------------------------------------------------
# XXH3-64 (seed 0) over an Arrow string column, in NumPy
# ---------------------------------------------------------------------------------------------------
# Why: ``xxhash.xxh3_64_intdigest`` per string costs a Python call (~0.2 us) per URL; the same
# algorithm as NumPy uint64 arithmetic over all rows of a length class at once is several times
# faster and gives the identical value (tests compare with the xxhash package on every length class).
# Strings over 240 bytes (rare for URLs) take the per-string call.
_XXH_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)
_P64_1 = np.uint64(0x9E3779B185EBCA87)
_P64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P64_3 = np.uint64(0x165667B19E3779F9)
_PMX1 = np.uint64(0x165667919E3779F9)
_PMX2 = np.uint64(0x9FB21C651E98DF25)
_M32 = np.uint64(0xFFFFFFFF)


_HASH_BLOCK = 16_384


def _s64(off: int) -> np.uint64:
    return np.uint64(int.from_bytes(_XXH_SECRET[off:off + 8], "little"))


def _s32(off: int) -> np.uint64:
    return np.uint64(int.from_bytes(_XXH_SECRET[off:off + 4], "little"))


def _u64_at(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Little-endian 8-byte words at byte positions that are all at most ``len(buf) - 8``."""
    words = np.ndarray(shape=(max(len(buf) - 7, 0),), dtype="<u8", buffer=buf, strides=(1,))
    return words[pos].astype(np.uint64)


def _fold64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Low 64 bits xor high 64 bits of the 128-bit product (XXH_mult64to128, portable form)."""
    a_lo, a_hi, b_lo, b_hi = a & _M32, a >> np.uint64(32), b & _M32, b >> np.uint64(32)
    lo_lo, hi_lo, lo_hi, hi_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi, a_hi * b_hi
    cross = (lo_lo >> np.uint64(32)) + (hi_lo & _M32) + lo_hi
    upper = (hi_lo >> np.uint64(32)) + (cross >> np.uint64(32)) + hi_hi
    lower = (cross << np.uint64(32)) | (lo_lo & _M32)
    return lower ^ upper


def _mix16(buf: np.ndarray, pos: np.ndarray, sec: int) -> np.ndarray:
    return _fold64(_u64_at(buf, pos) ^ _s64(sec), _u64_at(buf, pos + 8) ^ _s64(sec + 8))


def _avalanche(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(37))
    h = h * _PMX1
    return h ^ (h >> np.uint64(32))


def _xxh64_avalanche(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P64_2
    h = h ^ (h >> np.uint64(29))
    h = h * _P64_3
    return h ^ (h >> np.uint64(32))


def _rotl(h: np.ndarray, r: int) -> np.ndarray:
    return (h << np.uint64(r)) | (h >> np.uint64(64 - r))


def _xxh3_column(d: np.ndarray, start: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, rows left to the caller: over 240 bytes) for byte strings ``d[start:start+ln]``."""
    out = np.zeros(len(start), np.uint64)
    u64 = np.uint64
    r = np.flatnonzero(ln == 0)
    out[r] = _xxh64_avalanche(np.full(len(r), _s64(56) ^ _s64(64), np.uint64))
    r = np.flatnonzero((ln >= 1) & (ln <= 3))
    if len(r):
        s, n = start[r], ln[r]
        c1, c2, c3 = d[s].astype(u64), d[s + (n >> 1)].astype(u64), d[s + n - 1].astype(u64)
        combined = (c1 << u64(16)) | (c2 << u64(24)) | c3 | (n.astype(u64) << u64(8))
        out[r] = _xxh64_avalanche(combined ^ (_s32(0) ^ _s32(4)))
    r = np.flatnonzero((ln >= 4) & (ln <= 8))
    if len(r):
        s, n = start[r], ln[r]
        in1 = _u32_at(d, s).astype(u64)
        in2 = _u32_at(d, s + n - 4).astype(u64)
        h = (in2 + (in1 << u64(32))) ^ (_s64(8) ^ _s64(16))
        h = h ^ (_rotl(h, 49) ^ _rotl(h, 24))
        h = h * _PMX2
        h = h ^ ((h >> u64(35)) + n.astype(u64))
        h = h * _PMX2
        out[r] = h ^ (h >> u64(28))
    r = np.flatnonzero((ln >= 9) & (ln <= 16))
    if len(r):
        s, n = start[r], ln[r]
        lo = _u64_at(d, s) ^ (_s64(24) ^ _s64(32))
        hi = _u64_at(d, s + n - 8) ^ (_s64(40) ^ _s64(48))
        acc = n.astype(u64) + lo.byteswap() + hi + _fold64(lo, hi)
        out[r] = _avalanche(acc)
    r = np.flatnonzero((ln >= 17) & (ln <= 128))
    if len(r):
        s, n = start[r], ln[r]
        acc = n.astype(u64) * _P64_1 + _mix16(d, s, 0) + _mix16(d, s + n - 16, 16)
        for bound, k in ((32, 1), (64, 2), (96, 3)):
            m = np.flatnonzero(n > bound)
            if not len(m):
                break
            sm, nm = s[m], n[m]
            acc[m] += _mix16(d, sm + 16 * k, 32 * k) + _mix16(d, sm + nm - 16 * (k + 1), 32 * k + 16)
        out[r] = _avalanche(acc)
    r = np.flatnonzero((ln >= 129) & (ln <= 240))
    if len(r):
        s, n = start[r], ln[r]
        acc = n.astype(u64) * _P64_1
        for i in range(8):
            acc += _mix16(d, s + 16 * i, 16 * i)
        acc_end = _mix16(d, s + n - 16, 136 - 17)
        acc = _avalanche(acc)
        rounds = n // 16
        for i in range(8, 15):
            m = np.flatnonzero(rounds > i)
            if not len(m):
                break
            acc_end[m] += _mix16(d, s[m] + 16 * i, 16 * (i - 8) + 3)
        out[r] = _avalanche(acc + acc_end)
    return out, np.flatnonzero(ln > 240)
