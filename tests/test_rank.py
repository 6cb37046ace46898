"""PageRank against answers worked out by hand and by an independent method (the principal
eigenvector of the dense Google matrix from numpy.linalg), dangling nodes included; and the
importance of CrawlDb URLs computed from real link files in a crawl root."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from crawl.index import LINKS_SCHEMA
from crawl.rank import DAMPING, for_round, importance, is_full_round, pagerank
from crawl.store import Store


def _google_stationary(src: np.ndarray, dst: np.ndarray, n: int, d: float = DAMPING) -> np.ndarray:
    """Stationary distribution of the random surfer: follow a link with probability d (a node without
    out-links jumps anywhere), else jump anywhere; the eigenvector of eigenvalue 1, normalised."""
    g = np.zeros((n, n))
    for s, t in zip(src.tolist(), dst.tolist(), strict=True):
        g[t, s] = 1.0
    out = g.sum(axis=0)
    g = np.where(out > 0, g / np.where(out > 0, out, 1.0), 1.0 / n)  # dangling columns: uniform
    m = d * g + (1.0 - d) / n
    vals, vecs = np.linalg.eig(m)
    v = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return v / v.sum()


def test_two_nodes_with_a_dangling_one_by_hand() -> None:
    # A -> B, B has no out-link (its rank is spread over both). With d = 0.85:
    #   r_A = 0.15/2 + 0.85 * r_B/2 ;  r_A + r_B = 1  =>  r_A = 0.5 / 1.425, r_B = 1 - r_A
    r = pagerank(np.array([0]), np.array([1]), 2)
    assert np.allclose(r, [0.5 / 1.425, 1 - 0.5 / 1.425], atol=1e-9)


def test_cycle_is_uniform_and_star_by_hand() -> None:
    assert np.allclose(pagerank(np.array([0, 1, 2]), np.array([1, 2, 0]), 3), 1 / 3, atol=1e-12)
    # star: leaves 1..3 link to hub 0, the hub links nowhere (dangling). By symmetry the leaves share
    # x and the hub has h = 1 - 3x; a leaf gets only teleport and the hub's spread mass:
    #   x = 0.15/4 + 0.85 * h/4  =>  x = (0.15 + 0.85) / (4 + 3 * 0.85)
    x = 1.0 / (4 + 3 * 0.85)
    r = pagerank(np.array([1, 2, 3]), np.array([0, 0, 0]), 4)
    assert np.allclose(r, [1 - 3 * x, x, x, x], atol=1e-9)


def test_random_graphs_match_the_eigenvector() -> None:
    rng = np.random.default_rng(7)
    for n, m in ((12, 20), (40, 90), (60, 150)):
        src = rng.integers(0, n, m)
        dst = rng.integers(0, n, m)
        keep = (src != dst) & (src >= 3)  # nodes 0, 1, 2 link nowhere
        pairs = np.unique(src[keep] * n + dst[keep])  # distinct edges, as importance() passes them
        src, dst = pairs // n, pairs % n
        assert (np.bincount(src, minlength=n) == 0).sum() >= 3  # dangling nodes present
        r = pagerank(src, dst, n)
        assert abs(r.sum() - 1.0) < 1e-9
        assert np.allclose(r, _google_stationary(src, dst, n), atol=1e-6), n


def test_no_edges_and_no_nodes() -> None:
    assert np.allclose(pagerank(np.empty(0, np.int64), np.empty(0, np.int64), 5), 0.2)
    assert pagerank(np.empty(0, np.int64), np.empty(0, np.int64), 0).size == 0


def test_importance_from_link_files(tmp_path) -> None:
    """Link files of rounds 1..2 (round 3 ignored), repeats and self links dropped, links to URLs
    outside the CrawlDb ignored; importance is PageRank times n (mean 1), in-links distinct."""
    store = Store(str(tmp_path), "rk")
    h = np.array([101, 202, 303, 404], np.uint64)  # CrawlDb URLs: A B C D (D dangling)
    unknown = np.uint64(999)

    def links(pairs, round_no):
        f = pa.array([p[0] for p in pairs], pa.uint64())
        t = pa.array([p[1] for p in pairs], pa.uint64())
        return pa.table({"from_hash": f, "to_hash": t, "to_url": pa.array(["u"] * len(pairs)),
                         "kind": pa.array(["a"] * len(pairs)),
                         "round": pa.array([round_no] * len(pairs), pa.int32())}, schema=LINKS_SCHEMA)

    A, B, C, D = (int(x) for x in h)
    store.write_table(store.links_file(1, 0), links([(A, B), (A, B), (B, C), (A, A), (A, int(unknown))], 1))
    store.write_table(store.links_file(2, 1), links([(C, A), (C, D), (B, C)], 2))
    store.write_table(store.links_file(3, 0), links([(D, A), (D, B)], 3))  # a later round: not yet
    order = np.array([2, 0, 3, 1])  # any order of the hashes
    imp, inl = importance(store, 2, h[order])
    # distinct edges A->B, B->C, C->A, C->D over nodes A B C D
    expect = _google_stationary(np.array([0, 1, 2, 2]), np.array([1, 2, 0, 3]), 4) * 4
    assert np.allclose(imp, expect[order], atol=1e-6)
    assert abs(imp.mean() - 1.0) < 1e-9
    assert inl.tolist() == np.array([1, 1, 1, 1])[order].tolist()
    # round 3 counted once asked for: D's links to A and B now exist
    imp3, inl3 = importance(store, 3, h)
    assert inl3.tolist() == [2, 2, 1, 1]
    assert np.allclose(imp3, _google_stationary(np.array([0, 1, 2, 2, 3, 3]), np.array([1, 2, 0, 3, 0, 1]), 4) * 4,
                       atol=1e-6)


def test_between_full_runs_new_urls_get_one_step_from_the_rounds_links(tmp_path) -> None:
    """Off the cadence, known rows keep their importance and in-links; a new URL gets
    (1 - d) + d * sum(imp(j) / outdeg(j)) over its linkers j in this round's link files only."""
    store = Store(str(tmp_path), "rk")

    def links(pairs, round_no):
        return pa.table({"from_hash": pa.array([p[0] for p in pairs], pa.uint64()),
                         "to_hash": pa.array([p[1] for p in pairs], pa.uint64()),
                         "to_url": pa.array(["u"] * len(pairs)), "kind": pa.array(["a"] * len(pairs)),
                         "round": pa.array([round_no] * len(pairs), pa.int32())}, schema=LINKS_SCHEMA)

    A, B, N1, N2 = 11, 22, 33, 44
    store.write_table(store.links_file(4, 0), links([(B, N1), (A, N2)], 4))  # an older round: not read
    # round 5: A (importance 2) links N1 and B; B (importance 0.5) links N1 (twice: counted once)
    store.write_table(store.links_file(5, 0), links([(A, N1), (A, B), (B, N1), (B, N1)], 5))
    h = np.array([N2, A, N1, B], np.uint64)
    imp_now = np.array([np.nan, 2.0, np.nan, 0.5])
    inl_now = np.array([np.nan, 7, np.nan, 3])
    imp, inl, how = for_round(store, 5, h, imp_now, inl_now, every=4)
    assert how == "incremental"
    d = DAMPING
    assert np.allclose(imp, [1 - d, 2.0, (1 - d) + d * (2.0 / 2 + 0.5 / 1), 0.5])
    assert inl.tolist() == [0, 7, 2, 3]
    # on the cadence (and when nothing has an importance yet) the full PageRank runs
    assert for_round(store, 8, h, imp_now, inl_now, every=4)[2] == "full"
    assert for_round(store, 5, h, np.full(4, np.nan), inl_now, every=4)[2] == "full"
    assert not is_full_round(5, 4, imp_now) and is_full_round(5, 1, imp_now)
