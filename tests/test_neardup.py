"""Near-duplicate search: exact agreement with brute-force all-pairs on planted near-duplicates."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from crawl.neardup import NEARDUP_SCHEMA, block_masks, candidates, minhash_pairs, near_duplicate_pairs


def _table(hashes: np.ndarray, sims: np.ndarray) -> pa.Table:
    return pa.table({"url_hash": pa.array(hashes, pa.uint64()), "simhash": pa.array(sims, pa.int64())})


def _flip(rng: np.random.Generator, value: np.int64, bits: int) -> np.int64:
    pos = rng.choice(64, size=bits, replace=False)
    mask = np.uint64(0)
    for p in pos:
        mask |= np.uint64(1) << np.uint64(p)
    return (value.view(np.uint64) ^ mask).view(np.int64)


def _brute_force(new: pa.Table, existing: pa.Table, k: int) -> dict[int, tuple[int, int]]:
    """The documented rule, over all pairs: stored first, then closest, then lowest url_hash."""
    nh = new.column("url_hash").to_numpy()
    ns = new.column("simhash").to_numpy().view(np.uint64)
    eh = existing.column("url_hash").to_numpy()
    es = existing.column("simhash").to_numpy().view(np.uint64)
    d_ne = np.bitwise_count(ns[:, None] ^ es[None, :]).astype(np.int64)
    d_nn = np.bitwise_count(ns[:, None] ^ ns[None, :]).astype(np.int64)
    out: dict[int, tuple[int, int]] = {}
    for i in range(nh.size):
        if ns[i] == 0:
            continue
        ok = (d_ne[i] <= k) & (eh != nh[i]) & (es != 0)
        if ok.any():
            best = min(zip(d_ne[i][ok].tolist(), eh[ok].tolist(), strict=True))
            out[int(nh[i])] = (best[1], best[0])
            continue
        ok = (d_nn[i] <= k) & (nh < nh[i]) & (ns != 0)
        if ok.any():
            best = min(zip(d_nn[i][ok].tolist(), nh[ok].tolist(), strict=True))
            out[int(nh[i])] = (best[1], best[0])
    return out


def _as_dict(result: pa.Table) -> dict[int, tuple[int, int]]:
    rows = result.to_pylist()
    return {r["url_hash"]: (r["dup_of_hash"], r["distance"]) for r in rows}


def _planted(seed: int, n_existing: int = 3000, n_new: int = 1500):
    """Random fingerprints plus near-dups at distance 0..6 of stored pages and of other new pages."""
    rng = np.random.default_rng(seed)
    es = rng.integers(-(2**63), 2**63 - 1, size=n_existing, dtype=np.int64)
    eh = rng.choice(2**40, size=n_existing + n_new, replace=False).astype(np.uint64)
    nh, ehash = eh[n_existing:], eh[:n_existing]
    ns = rng.integers(-(2**63), 2**63 - 1, size=n_new, dtype=np.int64)
    planted = {}
    for i in range(0, n_new, 3):  # a third of new pages copy a stored page with 0..6 flipped bits
        j = int(rng.integers(n_existing))
        d = int(rng.integers(0, 7))
        ns[i] = _flip(rng, es[j], d)
        planted[int(nh[i])] = (int(ehash[j]), d)
    for i in range(1, n_new, 7):  # some copy another new page
        j = int(rng.integers(n_new))
        if j != i and i % 3:
            ns[i] = _flip(rng, ns[j], int(rng.integers(0, 5)))
    return _table(nh, ns), _table(ehash, es), planted


def test_block_masks_cover_all_bits_and_pigeonhole() -> None:
    for k, blocks in [(3, None), (3, 6), (0, None), (2, 5)]:
        masks = block_masks(k, blocks)
        b = k + 1 if blocks is None else blocks
        assert len(masks) == math.comb(b, k)
        union = 0
        for m in masks:
            union |= m & ((1 << 64) - 1)
        assert union == (1 << 64) - 1
    with pytest.raises(ValueError):
        block_masks(3, 3)
    with pytest.raises(ValueError):
        block_masks(64)


@pytest.mark.parametrize("blocks", [None, 6])
def test_matches_brute_force_all_pairs(blocks: int | None) -> None:
    new, existing, planted = _planted(seed=11)
    result = near_duplicate_pairs(new, existing, k=3, blocks=blocks)
    assert result.schema == NEARDUP_SCHEMA
    got = _as_dict(result)
    assert got == _brute_force(new, existing, 3)
    # planted copies of stored pages: distance 0..3 found with the right original, 4+ not via that page
    found = missed = 0
    for url_hash, (orig, d) in planted.items():
        if d <= 3:
            assert got[url_hash][0] == orig or got[url_hash][1] <= d
            found += 1
        elif url_hash in got:
            assert got[url_hash][0] != orig
        else:
            missed += 1
    assert found > 200 and missed > 150
    assert result.column("url_hash").to_pylist() == sorted(got)
    assert max(result.column("distance").to_pylist()) <= 3


@pytest.mark.parametrize(("k", "blocks"), [(3, None), (3, 6), (2, None), (5, 7)])
def test_candidates_are_the_stored_pages_within_k_and_change_no_answer(k: int, blocks: int | None) -> None:
    """candidates(): exactly the stored fingerprints within k of a new one (all pairs by brute force),
    and the search over those alone gives the answer the search over every stored page gives."""
    new, existing, _ = _planted(seed=5)
    es, ns = existing.column("simhash").to_numpy(), new.column("simhash").to_numpy()
    want = np.bitwise_count(es.view(np.uint64)[:, None] ^ ns.view(np.uint64)[None, :]).min(axis=1) <= k
    got = candidates(es, ns, k, blocks=blocks)
    assert want.sum() > 100 and np.array_equal(got, want)
    assert _as_dict(near_duplicate_pairs(new, existing.filter(pa.array(got)), k=k, blocks=blocks)) == \
        _as_dict(near_duplicate_pairs(new, existing, k=k, blocks=blocks))


def test_other_k_values_match_brute_force() -> None:
    new, existing, _ = _planted(seed=5, n_existing=800, n_new=600)
    for k in (0, 1, 5):
        assert _as_dict(near_duplicate_pairs(new, existing, k=k)) == _brute_force(new, existing, k)


def test_deterministic_and_order_independent() -> None:
    new, existing, _ = _planted(seed=3)
    first = near_duplicate_pairs(new, existing)
    rng = np.random.default_rng(0)
    second = near_duplicate_pairs(new.take(rng.permutation(new.num_rows)),
                                  existing.take(rng.permutation(existing.num_rows)))
    assert first.equals(near_duplicate_pairs(new, existing))
    assert first.equals(second)


def test_identical_clusters_self_match_and_zero() -> None:
    # 5,000 identical new fingerprints: collapsed, all map to the smallest url_hash; no quadratic blow-up
    v = np.int64(0x0123456789ABCDEF)
    hashes = np.arange(10, 5010, dtype=np.uint64)
    new = _table(hashes, np.full(hashes.size, v))
    res = _as_dict(near_duplicate_pairs(new, None))
    assert len(res) == 4999 and set(res.values()) == {(10, 0)}
    # with a stored copy, everyone (also hash 10) maps to it
    stored = _table(np.array([99_999], np.uint64), np.array([_flip(np.random.default_rng(1), v, 2)]))
    res = _as_dict(near_duplicate_pairs(new, stored))
    assert len(res) == 5000 and set(res.values()) == {(99_999, 2)}
    # a recrawl of the same URL is not its own duplicate; a second stored copy is found instead
    stored = _table(np.array([10, 20_000], np.uint64), np.array([v, v]))
    res = _as_dict(near_duplicate_pairs(_table(np.array([10], np.uint64), np.array([v])), stored))
    assert res == {10: (20_000, 0)}
    # rows repeated in the input do not make a page its own duplicate
    twice = _table(np.array([10, 10], np.uint64), np.array([v, v]))
    assert near_duplicate_pairs(twice, twice).num_rows == 0
    # SimHash 0 ("no fingerprint") never matches anything
    zeros = _table(np.array([1, 2, 3], np.uint64), np.zeros(3, np.int64))
    assert near_duplicate_pairs(zeros, zeros).num_rows == 0


def test_huge_buckets_are_skipped_but_identical_values_still_match() -> None:
    # 300 distinct values sharing their low 48 bits (3 of 4 blocks): three buckets of 300 values each
    rng = np.random.default_rng(9)
    high = rng.choice(2**16, size=300, replace=False).astype(np.uint64) << np.uint64(48)
    sims = (high | np.uint64(0x0000_1234_5678_9ABC)).view(np.int64)
    hashes = np.arange(1, 301, dtype=np.uint64)
    new = _table(np.concatenate([hashes, hashes + np.uint64(1000)]), np.concatenate([sims, sims]))
    full = _as_dict(near_duplicate_pairs(new, None, max_bucket=10_000))
    assert full == _brute_force(new, _table(np.empty(0, np.uint64), np.empty(0, np.int64)), 3)
    capped = _as_dict(near_duplicate_pairs(new, None, max_bucket=100))
    # identical values are never lost; the different-top-block pairs are (documented recall loss)
    assert {h for h in capped} == {h + 1000 for h in range(1, 301)}
    assert all(d == 0 for _, d in capped.values())


def test_minhash_pairs_finds_edited_copies() -> None:
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(5000)]
    base = {f"a{i:02d}": " ".join(rng.choice(vocab, 300)) for i in range(20)}
    texts = dict(base)
    for key, text in base.items():
        words = text.split()
        words[100] = "edited"
        texts[f"b{key}"] = " ".join(words)  # one word changed: Jaccard of 3-grams ~0.98
    texts["empty"] = ""
    pairs = minhash_pairs(texts, threshold=0.8)
    assert pairs == {f"b{k}": k for k in base}
