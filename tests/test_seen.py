"""The seen-set: Bloom sizing and error rate, exact dedup against a Python set, files read back."""

from __future__ import annotations

import math
import uuid

import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest

from crawl.config import CrawlConfig
from crawl.seen import (
    BloomFilter,
    BloomFormatError,
    bloom_from_seen,
    bloom_size,
    confirm,
    dedup_new,
    first_occurrence,
    merge_seen,
    read_seen,
    shard_of,
    sorted_unique,
    split_by_shard,
    write_seen,
)


def _hashes(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)


@pytest.mark.parametrize("n,p", [(1_000_000, 0.01), (10_000, 0.001), (5_000_000, 0.05)])
def test_sizing_follows_the_formula(n: int, p: float) -> None:
    m, k = bloom_size(n, p)
    textbook = -n * math.log(p) / math.log(2) ** 2
    # integer k and the 0.95 p design margin cost at most a few percent over the textbook size
    assert textbook <= m <= textbook * 1.04
    assert abs(k - textbook / n * math.log(2)) <= 1
    # and the theoretical rate at capacity really is under p
    assert (1 - math.exp(-k * n / m)) ** k <= p


def test_default_config_sizing_is_under_10_bits_per_url() -> None:
    cfg = CrawlConfig()
    bloom = BloomFilter.create(cfg.bloom_expected_urls, cfg.bloom_fp_rate)
    assert 9.5 < bloom.bits_per_item <= 10.0
    assert bloom.k == 7
    assert bloom.words.nbytes * 8 >= bloom.m


def test_measured_false_positive_rate_and_no_false_negatives() -> None:
    rng = np.random.default_rng(12345)
    n, p = 1_000_000, 0.01
    bloom = BloomFilter.create(n, p)
    added = _hashes(rng, n)
    bloom.add(added)
    assert bloom.count == n
    assert bloom.contains(added).all()  # never a false negative
    probes = _hashes(rng, n)
    probes = probes[~confirm(probes, np.sort(added))]
    measured = bloom.contains(probes).mean()
    assert measured <= p
    assert measured > p / 3  # the filter is not trivially empty or oversized
    assert abs(measured - bloom.estimated_fp_rate()) < 0.002
    assert not bloom.needs_resize()
    bloom.add(_hashes(rng, 10))
    assert bloom.needs_resize()


def test_sequential_and_signed_inputs_probe_well() -> None:
    # sequential hashes (a poor caller hash) still spread thanks to the splitmix64 mixing
    bloom = BloomFilter.create(100_000, 0.01)
    bloom.add(np.arange(100_000, dtype=np.uint64))
    assert bloom.contains(np.arange(100_000, dtype=np.uint64)).all()
    assert bloom.contains(np.arange(10**9, 10**9 + 100_000, dtype=np.uint64)).mean() < 0.015
    # int64 columns carrying the same bits answer the same as uint64
    signed = np.array([-1, -(2**63), 5], dtype=np.int64)
    bloom.add(signed)
    assert bloom.contains(signed.view(np.uint64)).all()
    with pytest.raises(TypeError):
        bloom.contains(np.array([1.5]))


def test_confirm_binary_search() -> None:
    seen = np.array([3, 10, 2**64 - 1], dtype=np.uint64)
    q = np.array([0, 3, 4, 10, 11, 2**64 - 1, 2**64 - 2], dtype=np.uint64)
    assert confirm(q, seen).tolist() == [False, True, False, True, False, True, False]
    assert confirm(q, np.empty(0, dtype=np.uint64)).tolist() == [False] * 7


@pytest.mark.parametrize("capacity", [50, 200_000])
def test_dedup_new_is_exact_against_a_python_set(capacity: int) -> None:
    """capacity=50 makes the filter answer "maybe" for nearly everything: adversarial false positives."""
    rng = np.random.default_rng(capacity)
    # a small universe so candidates repeat within the batch and overlap the seen-set
    universe = _hashes(rng, 60_000)
    seen = np.unique(rng.choice(universe, 30_000))
    bloom = BloomFilter.create(capacity, 0.01)
    bloom.add(seen)
    candidates = rng.choice(universe, 50_000)
    if capacity == 50:
        false_pos = bloom.contains(candidates) & ~confirm(candidates, seen)
        assert false_pos.sum() > 5_000  # really adversarial: most unseen candidates are Bloom "maybe"
    is_new = dedup_new(candidates, bloom, seen)

    seen_set = set(seen.tolist())
    expected = []
    for h in candidates.tolist():
        expected.append(h not in seen_set)
        seen_set.add(h)
    assert is_new.tolist() == expected
    # and without a filter the answer is the same
    assert dedup_new(candidates, None, seen).tolist() == expected


def test_dedup_new_edges() -> None:
    empty = np.empty(0, dtype=np.uint64)
    bloom = BloomFilter.create(100, 0.01)
    assert dedup_new(empty, bloom, empty).tolist() == []
    cand = np.array([7, 7, 8, 7], dtype=np.uint64)
    assert dedup_new(cand, bloom, empty).tolist() == [True, False, True, False]
    seen = np.array([8], dtype=np.uint64)
    bloom.add(seen)
    assert dedup_new(cand, bloom, seen).tolist() == [True, False, False, False]


def test_sorted_unique_and_first_occurrence() -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(0, 500, size=5000).astype(np.uint64)
    assert np.array_equal(sorted_unique(x), np.unique(x))
    vals, first = first_occurrence(x)
    ref_vals, ref_first = np.unique(x, return_index=True)
    assert np.array_equal(vals, ref_vals) and np.array_equal(first, ref_first)
    assert sorted_unique(np.empty(0, np.uint64)).size == 0 and first_occurrence(np.empty(0, np.uint64))[1].size == 0


def test_shards_cover_every_hash_once() -> None:
    rng = np.random.default_rng(7)
    h = _hashes(rng, 10_001)
    shards = split_by_shard(h, 4)
    assert len(shards) == 4
    assert sum(s.size for s in shards) == h.size
    for i, part in enumerate(shards):
        assert (part % np.uint64(4) == i).all()
        assert (shard_of(part, 4) == i).all()
    assert np.array_equal(np.sort(np.concatenate(shards)), np.sort(h))


@pytest.mark.parametrize("root", ["local", "memory"])
def test_seen_and_bloom_files_round_trip(root: str, tmp_path) -> None:
    base = str(tmp_path) if root == "local" else f"memory://seen-test-{uuid.uuid4().hex}"
    rng = np.random.default_rng(3)
    hashes = _hashes(rng, 20_000)
    hashes = np.concatenate([hashes, hashes[:100]])  # duplicates must be dropped

    seen_path = f"{base}/seen/round=00001/shard=0.parquet"
    write_seen(seen_path, hashes)
    back = read_seen(seen_path)
    assert back.dtype == np.uint64
    assert np.array_equal(back, np.unique(hashes))
    fs, path = fsspec.core.url_to_fs(seen_path)
    with fs.open(path, "rb") as fh:
        table = pq.read_table(fh)
    assert table.schema.names == ["url_hash"] and str(table.schema.field("url_hash").type) == "uint64"
    assert [p for p in fs.ls(path.rsplit("/", 1)[0], detail=False) if ".tmp-" in p] == []
    assert read_seen(f"{base}/seen/round=00001/missing.parquet").size == 0

    nxt = merge_seen(back, np.array([1, 2, 2], dtype=np.uint64))
    assert nxt.size == back.size + 2 and bool(np.all(nxt[1:] > nxt[:-1]))

    bloom = bloom_from_seen(back, 0.01)
    bloom_path = f"{base}/bloom/shard=0.bloom"
    bloom.save(bloom_path)
    bloom.save(bloom_path)  # overwriting in place works (rename over the old file)
    loaded = BloomFilter.load(bloom_path)
    assert (loaded.m, loaded.k, loaded.count, loaded.capacity, loaded.fp_rate) == (
        bloom.m, bloom.k, bloom.count, bloom.capacity, bloom.fp_rate)
    assert np.array_equal(loaded.words, bloom.words)
    assert loaded.contains(back).all()
    probes = _hashes(rng, 1000)
    assert np.array_equal(loaded.contains(probes), bloom.contains(probes))
    loaded.add(np.array([42], dtype=np.uint64))  # the loaded array is writable
    assert loaded.contains(np.array([42], dtype=np.uint64)).all()


def test_bloom_load_rejects_foreign_and_torn_files(tmp_path) -> None:
    bloom = BloomFilter.create(1000, 0.01)
    data = bloom.to_bytes()
    (tmp_path / "torn.bloom").write_bytes(data[:-8])
    (tmp_path / "foreign.bloom").write_bytes(b"PAR1" + data[4:])
    with pytest.raises(BloomFormatError):
        BloomFilter.load(str(tmp_path / "torn.bloom"))
    with pytest.raises(BloomFormatError):
        BloomFilter.load(str(tmp_path / "foreign.bloom"))
