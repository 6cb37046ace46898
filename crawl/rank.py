"""Link-based importance: PageRank (damping 0.85) over the crawl's cumulative link graph.

Computed per round with a SciPy sparse matrix over the link files of every round so far, restricted
to URLs in the CrawlDb, and normalised to mean 1 so it multiplies cleanly with freshness utilities.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crawl.store import Store

DAMPING = 0.85
ITERATIONS = 40
TOLERANCE = 1e-9


def link_edges(store: Store, round_no: int) -> tuple[np.ndarray, np.ndarray]:
    """(from_hash, to_hash) pairs from the link files of rounds 1..round_no (repeats included)."""
    froms, tos = [], []
    base = f"links/crawl={store.crawl_id}"
    dirs = [d for d in store.ls(base) if int(d.rsplit("round=", 1)[1]) <= round_no]
    # round_no itself is computed before its publish: its links are still staged (crawl.store)
    dirs.append(store.staged(round_no, f"{base}/round={round_no:05d}"))
    for rdir in dirs:
        for rel in store.ls(rdir):
            if rel.endswith(".parquet"):
                t = store.read_table(rel).select(["from_hash", "to_hash"])
                froms.append(t.column("from_hash").to_numpy())
                tos.append(t.column("to_hash").to_numpy())
    if not froms:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    return np.concatenate(froms).astype(np.uint64), np.concatenate(tos).astype(np.uint64)


def pagerank(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """PageRank of n nodes given edges as index arrays; dangling mass is spread uniformly."""
    if n == 0:
        return np.empty(0)
    if src.size == 0:
        return np.full(n, 1.0 / n)
    m = sp.csr_matrix((np.ones(src.size), (dst, src)), shape=(n, n))
    out_deg = np.asarray(m.sum(axis=0)).ravel()
    inv = np.divide(1.0, out_deg, out=np.zeros(n), where=out_deg > 0)
    m = m @ sp.diags(inv)
    dangling = out_deg == 0
    r = np.full(n, 1.0 / n)
    for _ in range(ITERATIONS):
        nxt = DAMPING * (m @ r + r[dangling].sum() / n) + (1.0 - DAMPING) / n
        if np.abs(nxt - r).sum() < TOLERANCE:
            r = nxt
            break
        r = nxt
    return r


def importance(store: Store, round_no: int, url_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(importance normalised to mean 1, distinct in-link count) for each hash in ``url_hashes``."""
    n = url_hashes.size
    if n == 0:
        return np.empty(0), np.empty(0, np.int64)
    order = np.argsort(url_hashes)
    sorted_h = url_hashes[order]
    f, t = link_edges(store, round_no)
    fi = np.searchsorted(sorted_h, f).clip(0, n - 1)
    ti = np.searchsorted(sorted_h, t).clip(0, n - 1)
    ok = (sorted_h[fi] == f) & (sorted_h[ti] == t) & (fi != ti)
    # distinct edges by a sort of src*n+dst (np.unique on pairs is a slow lexsort)
    key = np.sort(order[fi[ok]].astype(np.int64) * n + order[ti[ok]])
    key = key[np.concatenate(([True], key[1:] != key[:-1]))] if key.size else key
    src, dst = key // n, key % n
    pr = pagerank(src, dst, n)
    inl = np.bincount(dst, minlength=n)
    return pr * n, inl


__all__ = ["importance", "link_edges", "pagerank"]
