"""The URL seen-set: a vectorised Bloom filter in front of a sharded, sorted Parquet set of URL hashes.

Why two layers: the update step must answer "have we ever seen this URL?" for millions of discovered
links per round. The exact answer lives in the Parquet seen-set (one sorted ``uint64`` column per
shard, versioned per round by the caller's path, like BUbiNG's sorted hash file); reading and
binary-searching it for every link is exact but costs I/O. The Bloom filter (~9.7 bits per URL at
1 %) answers "definitely new" for almost all truly new URLs without touching the seen-set, and only
its "maybe" answers are confirmed with :func:`confirm`. A Bloom false positive therefore never loses
a URL: :func:`dedup_new` is exact.

Invariant the caller keeps: every hash in the seen-set has also been added to the Bloom filter (the
filter is rebuilt from the seen-set with :func:`bloom_from_seen` when it is missing, corrupt or
:meth:`BloomFilter.needs_resize`). A Bloom filter has no false negatives, so "no" is trusted.

Everything is whole-array NumPy: hashes come in as ``np.ndarray[uint64]`` (xxh3_64 of the canonical
URL, computed by the caller), never as Python ints in a loop. Files go through fsspec, so a crawl
root on ``s3://`` works like a local folder; writes go to a temporary name and are renamed into
place so a crash never leaves a torn file under the final name.
"""

from __future__ import annotations

import io
import math
import struct
import uuid
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "BloomFilter", "BloomFormatError", "bloom_from_seen", "bloom_size", "confirm", "dedup_new",
    "first_occurrence", "merge_seen", "read_seen", "shard_of", "sorted_unique", "split_by_shard", "write_seen",
]

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)
_S30, _S27, _S31, _S6, _M63, _ONE = _U64(30), _U64(27), _U64(31), _U64(6), _U64(63), _U64(1)

# Chunk size for add/contains: the k probe arrays of a 64 Ki chunk stay in L2, and np.bitwise_or.at on
# small chunks measured 5x faster than on 1 Mi (9 M vs 1.9 M adds/s on this box); lookups 18 M/s vs 12 M/s.
_CHUNK = 1 << 16

_MAGIC = b"RCBLOOM1"
# magic, m (bits), k (probes), count (items added), capacity (expected n), fp_rate (design target)
_HEADER = struct.Struct("<8sQIQQd")

# Size for a slightly lower rate than asked: the textbook m assumes a real-valued k and truly independent
# hashes; with an integer k and double hashing the measured rate sits a hair above p (1.02 % measured at
# 1 % on 1e6 keys). Designing for 0.95 p costs ~0.1 bit/URL (9.7 instead of 9.6 at 1 %) and keeps the
# measured rate under p at full capacity.
_SAFETY = 0.95


class BloomFormatError(ValueError):
    """A Bloom file is not ours, or it is truncated; the caller rebuilds it from the seen-set."""


def _as_u64(hashes: np.ndarray | list[int]) -> np.ndarray:
    arr = np.asarray(hashes)
    if arr.dtype != np.uint64:
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"hashes must be an integer array (uint64 url_hash), got {arr.dtype}")
        # int64 (e.g. an Arrow column typed signed) holds the same 64 bits: reinterpret, do not convert
        arr = arr.view(np.uint64) if arr.dtype == np.int64 else arr.astype(np.uint64)
    return arr.ravel()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a whole array: cheap, and decorrelates h1/h2 even for sequential input."""
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


def bloom_size(expected: int, fp_rate: float) -> tuple[int, int]:
    """Bits m and probes k for ``expected`` items at ``fp_rate``.

    Starts from the textbook m = -n ln p / ln^2 2, k = round(m/n ln 2), then, for the integer k on either
    side of the optimum, takes the smallest m with (1 - e^(-kn/m))^k <= 0.95 p (see ``_SAFETY``). The
    result is within ~1 % of the textbook m.
    """
    if expected <= 0:
        raise ValueError(f"expected must be > 0, got {expected!r}")
    if not 0.0 < fp_rate < 0.5:
        raise ValueError(f"fp_rate must be in (0, 0.5), got {fp_rate!r}")
    target = fp_rate * _SAFETY
    k_real = -math.log(target) / math.log(2)
    best: tuple[int, int] | None = None
    for k in {max(1, math.floor(k_real)), max(1, math.ceil(k_real))}:
        m = math.ceil(-k * expected / math.log1p(-(target ** (1.0 / k))))
        if best is None or m < best[0]:
            best = (m, k)
    assert best is not None
    m, k = best
    return max(m, 64), k


@dataclass
class BloomFilter:
    """A standard Bloom filter (one bit array, k probes by double hashing) over uint64 URL hashes.

    Probe i of a hash x is (h1 + i*h2) mod m with h1 = splitmix64(x), h2 = splitmix64(h1) (Kirsch &
    Mitzenmacher: two hashes suffice). The bit array is ``uint64`` words. ``capacity`` is the expected
    item count it was sized for; past it the false-positive rate climbs, see :meth:`needs_resize`.
    """

    m: int
    k: int
    capacity: int
    fp_rate: float
    words: np.ndarray
    count: int = 0

    @classmethod
    def create(cls, expected: int, fp_rate: float) -> BloomFilter:
        m, k = bloom_size(expected, fp_rate)
        return cls(m=m, k=k, capacity=int(expected), fp_rate=float(fp_rate),
                   words=np.zeros((m + 63) // 64, dtype=np.uint64))

    # -- probing ---------------------------------------------------------------------------------------
    def _first_probe(self, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = _U64(self.m)
        h1 = _mix(chunk)
        h2 = _mix(h1)
        g = h1 % m
        d = h2 % (m - _ONE) + _ONE  # step in [1, m-1], never 0, so the k probes are not all one bit
        return g, d

    def _advance(self, g: np.ndarray, d: np.ndarray) -> np.ndarray:
        # (g + d) mod m without a second division: both are < m < 2^63, so one conditional subtract.
        m = _U64(self.m)
        g = g + d
        g -= m * (g >= m)
        return g

    def add(self, hashes: np.ndarray) -> None:
        """Add hashes. ``count`` grows by the number given (duplicates included: it is an upper bound)."""
        arr = _as_u64(hashes)
        words = self.words
        for start in range(0, arr.size, _CHUNK):
            g, d = self._first_probe(arr[start:start + _CHUNK])
            for i in range(self.k):
                np.bitwise_or.at(words, g >> _S6, _ONE << (g & _M63))
                if i + 1 < self.k:
                    g = self._advance(g, d)
        self.count += int(arr.size)

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """Bool array: False = certainly never added; True = maybe (false positive at ~fp_rate)."""
        arr = _as_u64(hashes)
        out = np.empty(arr.size, dtype=bool)
        words = self.words
        for start in range(0, arr.size, _CHUNK):
            g, d = self._first_probe(arr[start:start + _CHUNK])
            res = np.ones(g.size, dtype=bool)
            for i in range(self.k):
                res &= ((words[g >> _S6] >> (g & _M63)) & _ONE).astype(bool)
                if i + 1 < self.k:
                    g = self._advance(g, d)
            out[start:start + g.size] = res
        return out

    # -- sizing ----------------------------------------------------------------------------------------
    @property
    def bits_per_item(self) -> float:
        """Bits of the array per item of capacity (the figure to compare with the ~9.6 textbook value)."""
        return self.m / self.capacity

    def estimated_fp_rate(self) -> float:
        """(1 - e^(-k*count/m))^k: the expected false-positive rate at the current fill."""
        return (1.0 - math.exp(-self.k * self.count / self.m)) ** self.k

    def needs_resize(self) -> bool:
        """True once more items were added than the filter was sized for.

        Then the caller builds a larger one from the seen-set (``bloom_from_seen(seen, 2 * len(seen))``):
        a Bloom filter cannot grow in place, and an overfull one lets more "maybe" answers through to
        the (exact but slower) seen-set check.
        """
        return self.count > self.capacity

    # -- persistence -----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        header = _HEADER.pack(_MAGIC, self.m, self.k, self.count, self.capacity, self.fp_rate)
        return header + self.words.astype("<u8", copy=False).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        if len(data) < _HEADER.size:
            raise BloomFormatError("Bloom file shorter than its header")
        magic, m, k, count, capacity, fp_rate = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise BloomFormatError(f"not a Bloom filter file (magic {magic!r})")
        n_words = (m + 63) // 64
        if len(data) != _HEADER.size + 8 * n_words or k <= 0 or capacity <= 0:
            raise BloomFormatError(f"Bloom file truncated or inconsistent (m={m}, {len(data)} bytes)")
        words = np.frombuffer(data, dtype="<u8", offset=_HEADER.size).astype(np.uint64)  # writable copy
        return cls(m=m, k=k, capacity=capacity, fp_rate=fp_rate, words=words, count=count)

    def save(self, fs_path: str) -> None:
        """Write atomically (temp name + rename) to any fsspec path."""
        _atomic_write(fs_path, self.to_bytes())

    @classmethod
    def load(cls, fs_path: str) -> BloomFilter:
        fs, path = fsspec.core.url_to_fs(fs_path)
        with fs.open(path, "rb") as fh:
            return cls.from_bytes(fh.read())


def _atomic_write(fs_path: str, data: bytes) -> None:
    """Write to a sibling temp name, then rename: readers see the old file or the whole new one."""
    fs, path = fsspec.core.url_to_fs(fs_path)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with fs.open(tmp, "wb") as fh:
            fh.write(data)
        fs.mv(tmp, path)
    finally:
        if fs.exists(tmp):
            fs.rm(tmp)


# -- the exact seen-set ------------------------------------------------------------------------------------
def sorted_unique(hashes: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a uint64 array.

    Why not ``np.unique``/``np.union1d``/``np.isin``: with NumPy 2.4 they measured 11-15 s on 10 M random
    uint64 here (hash-based path), while ``np.sort`` (SIMD quicksort) plus a neighbour mask takes 0.15 s.
    """
    arr = np.sort(_as_u64(hashes))
    if arr.size > 1:
        keep = np.empty(arr.size, dtype=bool)
        keep[0] = True
        np.not_equal(arr[1:], arr[:-1], out=keep[1:])
        arr = arr[keep]
    return arr


def first_occurrence(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each value's first occurrence), via one unstable argsort.

    The minimum original index per run of equal values is the first occurrence, whatever order the
    (fast, unstable) sort left the ties in.
    """
    arr = _as_u64(hashes)
    if arr.size == 0:
        return arr.copy(), np.empty(0, dtype=np.intp)
    order = np.argsort(arr)
    vals = arr[order]
    starts = np.flatnonzero(np.concatenate(([True], vals[1:] != vals[:-1])))
    return vals[starts], np.minimum.reduceat(order, starts)


def shard_of(hashes: np.ndarray, url_shards: int) -> np.ndarray:
    """Shard number of each hash: ``url_hash % url_shards`` (``CrawlConfig.url_shards``)."""
    return (_as_u64(hashes) % _U64(url_shards)).astype(np.int64)


def split_by_shard(hashes: np.ndarray, url_shards: int) -> list[np.ndarray]:
    """One array per shard, order within a shard kept.

    One boolean mask per shard: shards are few (``url_shards``), and a stable argsort measured ~15x slower.
    """
    arr = _as_u64(hashes)
    shard = arr % _U64(url_shards)
    return [arr[shard == _U64(i)] for i in range(url_shards)]


def confirm(maybe_hashes: np.ndarray, seen_hashes: np.ndarray) -> np.ndarray:
    """Bool array: is each hash in ``seen_hashes`` (which must be sorted ascending)? Binary search."""
    maybe = _as_u64(maybe_hashes)
    seen = _as_u64(seen_hashes)
    if seen.size == 0:
        return np.zeros(maybe.size, dtype=bool)
    idx = np.searchsorted(seen, maybe)
    idx[idx == seen.size] = seen.size - 1
    return seen[idx] == maybe


def dedup_new(candidates: np.ndarray, bloom: BloomFilter | None, seen_sorted: np.ndarray) -> np.ndarray:
    """Exact ``is_new`` for each candidate: not in the seen-set and the first occurrence in this batch.

    The Bloom filter screens first; only its "maybe" answers are checked against ``seen_sorted`` (sorted,
    unique), so a false positive costs one binary search and never drops a new URL. ``bloom=None``
    checks every candidate against the seen-set. Nothing is added anywhere: after committing the new
    URLs the caller does ``bloom.add(candidates[is_new])`` and writes ``merge_seen(seen, ...)``.
    """
    cand = _as_u64(candidates)
    is_new = np.zeros(cand.size, dtype=bool)
    if cand.size == 0:
        return is_new
    uniq, first = first_occurrence(cand)
    unseen = np.ones(uniq.size, dtype=bool)
    maybe = bloom.contains(uniq) if bloom is not None else np.ones(uniq.size, dtype=bool)
    if maybe.any():
        unseen[maybe] = ~confirm(uniq[maybe], seen_sorted)
    is_new[first[unseen]] = True
    return is_new


def merge_seen(seen_sorted: np.ndarray, new_hashes: np.ndarray) -> np.ndarray:
    """The next version of a shard's seen-set: sorted union."""
    return sorted_unique(np.concatenate([_as_u64(seen_sorted), _as_u64(new_hashes)]))


def write_seen(fs_path: str, hashes: np.ndarray) -> None:
    """Write one shard's seen-set as Parquet: a single ``url_hash`` uint64 column, sorted and unique."""
    arr = sorted_unique(hashes)
    table = pa.table({"url_hash": pa.array(arr, type=pa.uint64())})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    _atomic_write(fs_path, buf.getvalue())


def read_seen(fs_path: str) -> np.ndarray:
    """Read one shard's seen-set back as a sorted ``uint64`` array (empty if the file does not exist)."""
    fs, path = fsspec.core.url_to_fs(fs_path)
    if not fs.exists(path):
        return np.empty(0, dtype=np.uint64)
    with fs.open(path, "rb") as fh:
        table = pq.read_table(fh, columns=["url_hash"])
    arr = table.column("url_hash").to_numpy().astype(np.uint64, copy=False)
    if arr.size > 1 and not bool(np.all(arr[1:] > arr[:-1])):
        arr = sorted_unique(arr)  # written by someone else: restore the sorted-unique invariant confirm() needs
    return arr


def bloom_from_seen(seen_sorted: np.ndarray, fp_rate: float, expected: int | None = None) -> BloomFilter:
    """A fresh filter holding the whole seen-set, sized for ``expected`` (default: twice its size)."""
    seen = _as_u64(seen_sorted)
    bloom = BloomFilter.create(max(int(expected or 0), 2 * seen.size, 1024), fp_rate)
    bloom.add(seen)
    return bloom
