"""Near-duplicate search over 64-bit SimHash fingerprints (Manku, Jain & Das Sarma, WWW 2007).

Why not all-pairs: a round compares ~10^5-10^6 new pages with ~10^7 stored ones. Two fingerprints within
Hamming distance k, with the 64 bits cut into ``blocks`` > k contiguous blocks, agree exactly on at
least ``blocks - k`` of them (each differing bit spoils at most one block). So we index every
fingerprint under each combination of ``blocks - k`` blocks (the fingerprint ANDed with that
combination's mask), equi-join on (combination, masked value) in DuckDB, and verify the candidates
with ``bit_count(xor(a, b)) <= k``. With the default ``blocks = k + 1`` (4 blocks of 16 bits for
k = 3) there are only 4 combinations; ``blocks = 6`` (20 combinations of 3 blocks, 32-bit keys) trades
more index rows for far fewer candidates on very large sets.

Bounding the blow-up:

* identical fingerprints are collapsed first: the join runs over *distinct* values, and each value
  carries its lowest stored and lowest new url_hash, so a template cluster of 50,000 identical pages
  costs 50,000 rows, not 50,000^2 pairs;
* a (combination, key) bucket holding more than ``max_bucket`` distinct values is skipped; pairs in it
  are then found only through another combination they share (documented recall loss, only on
  pathological inputs; random 64-bit values put n/65,536 in a 16-bit bucket);
* SimHash 0 means "no fingerprint" (texts too short for a shingle, see ``crawl.fingerprint``) and
  would put every empty page into one cluster: callers leave those rows out, and this module also
  drops 0 and nulls defensively.

Which page is the original: a new page maps to a stored (``existing``) page when one is within k,
else to a new page within k whose url_hash is smaller than its own (so within one batch the smaller
url_hash is the original, deterministically); among several, the closest, ties to the lowest url_hash.
A page never matches its own url_hash (a recrawl of the same URL is a change, not a duplicate). Chains
are not collapsed: if B ~ A and C ~ B but C is farther than k from A, C points at B.

``minhash_pairs`` is the MinHash-LSH alternative (``datasketch``) on shingled text; the benchmark
``bench/seen_bench.py`` compares both. SimHash is the default: it needs only the 8-byte fingerprint the
parse step already stores, while MinHash needs the text (or 128 x 4-byte signatures) at search time.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping
from typing import TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import xxhash

from crawl import duck

__all__ = ["NEARDUP_SCHEMA", "block_masks", "candidates", "minhash_pairs", "near_duplicate_pairs"]

NEARDUP_SCHEMA = pa.schema([
    ("url_hash", pa.uint64()),      # the new page that is a near-duplicate
    ("dup_of_hash", pa.uint64()),   # the page it duplicates (stored if any, else an earlier new one)
    ("distance", pa.int32()),       # Hamming distance of the two SimHashes, 0..k
])

_MAX_COMBINATIONS = 256


def _signed(mask: int) -> int:
    return mask - (1 << 64) if mask >= 1 << 63 else mask


def block_masks(k: int, blocks: int | None = None) -> list[int]:
    """The int64 masks to index under: one per combination of ``blocks - k`` of ``blocks`` blocks."""
    if not 0 <= k < 64:
        raise ValueError(f"k must be in [0, 63], got {k!r}")
    blocks = k + 1 if blocks is None else blocks
    if not k < blocks <= 64:
        raise ValueError(f"blocks must be in ({k}, 64] for k={k}, got {blocks!r}")
    widths = [64 // blocks + (1 if i < 64 % blocks else 0) for i in range(blocks)]
    block_bits, shift = [], 0
    for width in widths:
        block_bits.append(((1 << width) - 1) << shift)
        shift += width
    combos = list(itertools.combinations(range(blocks), blocks - k))
    if len(combos) > _MAX_COMBINATIONS:
        raise ValueError(f"{len(combos)} block combinations for k={k}, blocks={blocks}: too many")
    return [_signed(sum(block_bits[i] for i in combo)) for combo in combos]


def _prepare(table: pa.Table, name: str) -> pa.Table:
    missing = {"url_hash", "simhash"} - set(table.column_names)
    if missing:
        raise ValueError(f"{name}: missing column(s) {sorted(missing)}")
    return pa.table({
        "url_hash": table.column("url_hash").cast(pa.uint64()),
        "simhash": table.column("simhash").cast(pa.int64()),
    })


def near_duplicate_pairs(
    new: pa.Table,
    existing: pa.Table | None = None,
    k: int = 3,
    *,
    blocks: int | None = None,
    max_bucket: int = 10_000,
    con: duckdb.DuckDBPyConnection | None = None,
) -> pa.Table:
    """Near-duplicates of the ``new`` pages among ``existing`` and among ``new`` itself.

    Both tables have ``url_hash`` (uint64, unique within a table) and ``simhash`` (int64). Returns one row
    per new page that has a near-duplicate (``NEARDUP_SCHEMA``), sorted by url_hash. Use
    ``CrawlConfig.simhash_max_distance`` for k.
    """
    masks = block_masks(k, blocks)
    existing = existing if existing is not None else pa.table({
        "url_hash": pa.array([], pa.uint64()), "simhash": pa.array([], pa.int64())})
    own = con is None
    con = duck.connect() if con is None else con
    try:
        con.register("nd_new", _prepare(new, "new"))
        con.register("nd_existing", _prepare(existing, "existing"))
        con.register("nd_masks", pa.table({
            "t": pa.array(range(len(masks)), pa.int32()), "mask": pa.array(masks, pa.int64())}))
        result = con.sql(_SQL, params={"k": int(k), "max_bucket": int(max_bucket)}).to_arrow_table()
    finally:
        for view in ("nd_new", "nd_existing", "nd_masks"):
            con.unregister(view)
        if own:
            con.close()
    return result.cast(NEARDUP_SCHEMA)


def _contiguous(mask: int) -> tuple[int, int] | None:
    """(shift, width) when ``mask``'s bits are one run of at most 24 bits, else None."""
    m = mask & ((1 << 64) - 1)
    if m == 0:
        return None
    shift = (m & -m).bit_length() - 1
    run = m >> shift
    width = run.bit_length()
    return (shift, width) if run == (1 << width) - 1 and width <= 24 else None


def candidates(existing: np.ndarray, new: np.ndarray, k: int = 3, *, blocks: int | None = None) -> np.ndarray:
    """Mask of the ``existing`` fingerprints within Hamming distance ``k`` of some ``new`` one: the only
    stored pages :func:`near_duplicate_pairs` can pair with a new page. The pigeonhole lookup as
    there (a pair agrees exactly on one of :func:`block_masks`), in NumPy: per mask a table lookup of
    every stored fingerprint's block (or a sorted search when the mask is not one run of bits), then
    the distance of each candidate pair. A round's few thousand pages against a crawl's 10^7 stored
    fingerprints costs a pass over one int64 column, not a join of every stored value.

    Passing only these to :func:`near_duplicate_pairs` finds the same pairs, except that its
    ``max_bucket`` cut counts fewer values per bucket, so it can only skip less."""
    existing = np.asarray(existing, np.int64)
    new = np.sort(np.asarray(new, np.int64))  # distinct, sorted (np.unique hashes first: slower, NumPy 2.4)
    new = new[np.r_[True, new[1:] != new[:-1]]] if new.size else new
    keep = np.zeros(existing.size, bool)
    if new.size == 0 or existing.size == 0:
        return keep
    for mask in block_masks(k, blocks):
        m = np.int64(mask)
        keys = new & m
        order = np.argsort(keys, kind="stable")
        sk, sv = keys[order], new[order]
        run = _contiguous(mask)
        if run is not None:  # one gather per stored value into a table of the new blocks
            shift, width = run
            lim = np.uint64((1 << width) - 1)
            table = np.zeros(1 << width, bool)
            table[((sk.view(np.uint64) >> np.uint64(shift)) & lim).astype(np.int64)] = True
            hit = np.flatnonzero(table[((existing.view(np.uint64) >> np.uint64(shift)) & lim).astype(np.int64)])
        else:
            ek = existing & m
            i = np.searchsorted(sk, ek).clip(0, sk.size - 1)
            hit = np.flatnonzero(sk[i] == ek)
        if hit.size == 0:
            continue
        ek = existing[hit] & m
        lo, hi = np.searchsorted(sk, ek, "left"), np.searchsorted(sk, ek, "right")
        n_pairs = hi - lo
        ex_i = np.repeat(hit, n_pairs)
        starts = np.repeat(lo - np.cumsum(np.r_[0, n_pairs[:-1]]), n_pairs)
        new_v = sv[starts + np.arange(ex_i.size)]
        close = np.bitwise_count((existing[ex_i] ^ new_v).view(np.uint64)) <= k  # of the bits, not of abs()
        keep[ex_i[close]] = True
    return keep


_SQL = """
WITH pages AS (  -- UNION (not ALL): a row repeated in the input must not count as its own second copy
    SELECT url_hash, simhash, 0 AS src FROM nd_existing WHERE simhash IS NOT NULL AND simhash <> 0
    UNION
    SELECT url_hash, simhash, 1 AS src FROM nd_new WHERE simhash IS NOT NULL AND simhash <> 0
),
vals AS (  -- one row per distinct fingerprint: the two lowest stored hashes, the lowest new hash
    SELECT simhash AS v,
           min(url_hash, 2) FILTER (WHERE src = 0) AS ex2,
           min(url_hash) FILTER (WHERE src = 1) AS new_min,
           bool_or(src = 1) AS in_new
    FROM pages GROUP BY simhash
),
vkeys AS (
    SELECT v, in_new, t, v & mask AS key FROM vals CROSS JOIN nd_masks
),
big AS (
    SELECT t, key FROM vkeys GROUP BY t, key HAVING count(*) > $max_bucket
),
usable AS (
    SELECT * FROM vkeys ANTI JOIN big USING (t, key)
),
near AS (  -- pairs of distinct values within k; v1 is a value some new page has
    SELECT v1, v2, min(dist) AS dist FROM (
        SELECT a.v AS v1, b.v AS v2, bit_count(xor(a.v, b.v))::INTEGER AS dist
        FROM usable a JOIN usable b ON a.t = b.t AND a.key = b.key AND a.v <> b.v
        WHERE a.in_new
    ) WHERE dist <= $k GROUP BY v1, v2
    UNION ALL
    SELECT v AS v1, v AS v2, 0 AS dist FROM vals WHERE in_new
),
cand AS (
    SELECT p.url_hash, 0 AS src, n.dist,
           CASE WHEN x.ex2[1] <> p.url_hash THEN x.ex2[1] ELSE x.ex2[2] END AS dup_of_hash
    FROM pages p JOIN near n ON p.simhash = n.v1 JOIN vals x ON x.v = n.v2
    WHERE p.src = 1 AND x.ex2 IS NOT NULL
    UNION ALL
    SELECT p.url_hash, 1 AS src, n.dist, x.new_min AS dup_of_hash
    FROM pages p JOIN near n ON p.simhash = n.v1 JOIN vals x ON x.v = n.v2
    WHERE p.src = 1 AND x.new_min < p.url_hash
)
SELECT url_hash, dup_of_hash, dist AS distance
FROM cand WHERE dup_of_hash IS NOT NULL AND dup_of_hash <> url_hash
QUALIFY row_number() OVER (PARTITION BY url_hash ORDER BY src, dist, dup_of_hash) = 1
ORDER BY url_hash
"""

K = TypeVar("K", bound=Hashable)


def _shingles(text: str, shingle: int) -> list[bytes]:
    words = text.lower().split()
    if len(words) < shingle:
        return [" ".join(words).encode()] if words else []
    return [" ".join(words[i:i + shingle]).encode() for i in range(len(words) - shingle + 1)]


def minhash_pairs(
    texts: Mapping[K, str],
    threshold: float = 0.8,
    *,
    num_perm: int = 128,
    shingle: int = 3,
    verify: bool = True,
) -> dict[K, K]:
    """MinHash-LSH near-duplicates of shingled texts: ``{duplicate_key: original_key}``.

    Keys are visited in sorted order; each text is matched against the earlier ones (so the smallest
    key of a cluster is the original, mirroring ``near_duplicate_pairs``) and maps to the smallest
    earlier key whose estimated Jaccard similarity of word ``shingle``-grams is >= ``threshold``
    (``verify=False`` keeps every LSH candidate, trading precision for time). Texts with no words are
    skipped.
    """
    from datasketch import MinHash, MinHashLSH  # optional path: import cost only when used

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    sigs: dict[K, MinHash] = {}
    out: dict[K, K] = {}
    for key in sorted(texts):  # type: ignore[type-var]
        grams = _shingles(texts[key], shingle)
        if not grams:
            continue
        # xxh32 instead of datasketch's default SHA-1: same 32-bit input hash quality, ~5x cheaper
        mh = MinHash(num_perm=num_perm, hashfunc=xxhash.xxh32_intdigest)
        mh.update_batch(grams)
        hits = [h for h in lsh.query(mh) if not verify or mh.jaccard(sigs[h]) >= threshold]
        if hits:
            out[key] = min(hits)  # type: ignore[type-var]
        lsh.insert(key, mh)
        sigs[key] = mh
    return out
