"""Link-based importance: PageRank (damping 0.85) over the crawl's cumulative link graph.

Computed with a SciPy sparse matrix over the link files of every round so far, restricted to URLs in
the CrawlDb, and normalised to mean 1 so it multiplies cleanly with freshness utilities. That reads
the whole link history, so it runs every ``importance_every_rounds`` rounds (:func:`for_round`); in
between, rows keep the importance they have and URLs new to the CrawlDb get one PageRank step over
the round's own link files from their linkers' current importance (:func:`incremental`).
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from crawl.store import Store

DAMPING = 0.85
ITERATIONS = 40
TOLERANCE = 1e-9


def link_edges(store: Store, round_no: int, first_round: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(from_hash, to_hash) pairs from the link files of rounds first_round..round_no (repeats included)."""
    froms, tos = [], []
    base = f"links/crawl={store.crawl_id}"
    dirs = [d for d in store.ls(base) if first_round <= int(d.rsplit("round=", 1)[1]) <= round_no]
    # round_no itself is computed before its publish: its links are still staged (crawl.store)
    dirs.append(store.staged(round_no, f"{base}/round={round_no:05d}"))
    for rdir in dirs:
        for rel in store.ls(rdir):
            if rel.endswith(".parquet"):
                with store.fs.open(store.abs(rel), "rb") as fh:  # the two hash columns only
                    t = pq.read_table(fh, columns=["from_hash", "to_hash"])
                froms.append(t.column("from_hash").to_numpy())
                tos.append(t.column("to_hash").to_numpy())
    if not froms:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    return np.concatenate(froms).astype(np.uint64), np.concatenate(tos).astype(np.uint64)


def pagerank(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """PageRank of n nodes given edges as index arrays; dangling mass is spread uniformly."""
    import scipy.sparse as sp  # imported here: SciPy is slow to import and most commands never rank

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


def incremental(store: Store, round_no: int, url_hashes: np.ndarray, importance_now: np.ndarray,
                inlinks_now: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Importance between full runs: known rows keep theirs; a row without one (NaN: new this round)
    gets one PageRank step over round ``round_no``'s link files, (1 - d) + d · Σ imp(j) / outdeg(j) over
    its linkers j (a linker without importance counts 1, the mean), and its distinct linkers as in-links.
    Reads only the round's own links, so the cost follows the round, not the crawl."""
    imp = np.asarray(importance_now, np.float64).copy()
    inl = np.nan_to_num(np.asarray(inlinks_now, np.float64), nan=0.0).astype(np.int64)
    new = np.isnan(imp)
    n = url_hashes.size
    if not new.any():
        return imp, inl
    order = np.argsort(url_hashes)
    sorted_h = url_hashes[order]
    f, t = link_edges(store, round_no, first_round=round_no)
    fi = np.searchsorted(sorted_h, f).clip(0, max(n - 1, 0))
    ti = np.searchsorted(sorted_h, t).clip(0, max(n - 1, 0))
    ok = (sorted_h[fi] == f) & (sorted_h[ti] == t) & (fi != ti) if n else np.zeros(0, bool)
    key = np.unique(order[fi[ok]].astype(np.int64) * n + order[ti[ok]])
    src, dst = key // max(n, 1), key % max(n, 1)
    out_deg = np.bincount(src, minlength=n)
    src_imp = np.where(np.isnan(imp[src]), 1.0, imp[src])
    step = (1.0 - DAMPING) + DAMPING * np.bincount(dst, weights=src_imp / np.maximum(out_deg[src], 1), minlength=n)
    imp[new] = step[new]
    inl[new] = np.bincount(dst, minlength=n)[new]
    return imp, inl


def is_full_round(round_no: int, every: int, importance_now: np.ndarray) -> bool:
    """Whether ``round_no`` runs the full PageRank: on the cadence, or when no row has an importance yet."""
    return every <= 1 or round_no % every == 0 or not np.isfinite(importance_now).any()


def for_round(store: Store, round_no: int, url_hashes: np.ndarray, importance_now: np.ndarray,
              inlinks_now: np.ndarray, every: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(importance, in-links, 'full' | 'incremental') of every row for round ``round_no``."""
    if is_full_round(round_no, every, importance_now):
        imp, inl = importance(store, round_no, url_hashes)
        return imp, inl, "full"
    imp, inl = incremental(store, round_no, url_hashes, importance_now, inlinks_now)
    return imp, inl, "incremental"


__all__ = ["for_round", "importance", "incremental", "is_full_round", "link_edges", "pagerank"]
