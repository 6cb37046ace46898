"""The learned change-rate prior: predicts λ for URLs with little or no history (cold start).

Trained each round (a Poisson GLM, log link: :class:`crawl.glm.PoissonGLM`, scikit-learn's
``PoissonRegressor`` without importing scikit-learn) on every URL with some evidence (one re-check or
a trusted Last-Modified age is enough: the fit weights rows by exposure), from features that exist
before the second fetch: hashed URL tokens (host-name words, path segments, extension), depth, path length, query, the host's pooled rate (leave-one-out, so a row does
not see its own label) and the sitemap changefreq. The target is the CGM-corrected event count over
the exposure, fitted as a rate with the exposure as sample weight (the standard Poisson-rate fit).
:mod:`crawl.schedule` combines the prediction with each page's own evidence by Gamma-Poisson
shrinkage, so the prior only matters until a page has its own history.

Each round persists the model and its metrics (Poisson deviance on held-out URLs, against the
constant-rate baseline) at ``state/crawl=ID/model/v=NNNNN/`` so a user can see whether it helps.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.changerate import MAX_RATE, MIN_RATE, changefreq_rate
from crawl.store import Store

if TYPE_CHECKING:  # SciPy takes a while to import (scikit-learn ~0.7 s more): only the functions that fit load them
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import HashingVectorizer

    from crawl.glm import PoissonGLM

MIN_EXPOSURE_DAYS = 0.0     # any evidence trains: the fit weights each row by its exposure
MIN_TRAIN = 40              # fewer usable URLs: fall back to host pooling
HOLDOUT_SHARE = 0.2         # by URL hash, stable across rounds
MAX_TRAIN = 200_000         # training rows kept (a stable hash sample): the fit stays seconds on any CrawlDb
MAX_HOLDOUT = 50_000        # held-out rows scored for the metrics (a stable hash sample too)
HOST_PRIOR_DAYS = 5.0       # host pooling: global rate counts as this many days of exposure
N_FEATURES = 2 ** 16
_TOKEN = r"[a-z]+|[0-9]+"


@dataclass
class PriorModel:
    """A fitted prior (or the host-pooling fallback when ``model`` is None) and its metrics."""
    global_rate: float
    model: PoissonGLM | None = None  # or a scikit-learn PoissonRegressor pickled by an earlier version
    metrics: dict[str, Any] = field(default_factory=dict)


def _vectorizer() -> HashingVectorizer:
    """The reference :func:`url_tokens` computes without scikit-learn (its tests compare both)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(n_features=N_FEATURES, token_pattern=_TOKEN, lowercase=True, alternate_sign=False,
                             norm=None, binary=True)


def url_documents(urls: pa.Array | pa.ChunkedArray) -> list[str]:
    """Each URL as a bag of prefixed tokens: host words (``h_``), path words (``p_``), extension (``e_``).

    Prefixing keeps "news" in a host name apart from "/news/" in a path (as the vectoriser's token
    pattern splits at ``_``, the prefix is a token of its own). The strings :func:`url_tokens` hashes.
    """
    return _documents(urls).to_pylist()


def _documents(urls: pa.Array | pa.ChunkedArray) -> pa.Array:
    """:func:`url_documents` as an Arrow array, built with Arrow string kernels (no per-row Python)."""
    host, path, ext = _url_parts(urls)
    host_t = pc.replace_substring_regex(pc.utf8_lower(host), r"([a-z]+)", "h_\\1")
    path_t = pc.replace_substring_regex(pc.utf8_lower(path), r"([a-z]+)", "p_\\1")
    first = pc.extract_regex(pc.utf8_lower(path), r"^/(?P<s>[a-z]+)").field("s")
    doc = pc.binary_join_element_wise(host_t, path_t, pc.fill_null(pc.binary_join_element_wise("e", ext, "_"), ""),
                                      pc.fill_null(pc.binary_join_element_wise("s", first, "_"), ""), " ")
    return pc.replace_substring_regex(pc.fill_null(doc, ""), r"[0-9]+", " ")


def _url_parts(urls: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(host, path, extension) of each URL as the documents take them. The extension is the ``e``
    field of a struct: it is "" (not null) where the path has none, and "e_" joins every document."""
    arr = urls.combine_chunks() if isinstance(urls, pa.ChunkedArray) else urls
    rest = pc.replace_substring_regex(arr, r"^[a-zA-Z]+://", "")
    host = pc.replace_substring_regex(rest, r"[/?#].*$", "")
    path = pc.replace_substring_regex(pc.replace_substring_regex(rest, r"^[^/?#]*", ""), r"[?#].*$", "")
    ext = pc.extract_regex(path, r"\.(?P<e>[A-Za-z0-9]{1,6})$").field("e")
    return host, path, ext


def host_codes(db: pa.Table) -> np.ndarray:
    """An integer per distinct host (Arrow dictionary codes: no Python string per row)."""
    enc = pc.dictionary_encode(pc.fill_null(db.column("host"), "").combine_chunks())
    return enc.indices.to_numpy(zero_copy_only=False)


def host_rate(hosts: np.ndarray, events: np.ndarray, exposure: np.ndarray, global_rate: float,
              leave_one_out: bool) -> np.ndarray:
    """Each row's host pooled rate, shrunk to ``global_rate``; optionally without the row's own evidence."""
    _, inv = np.unique(hosts, return_inverse=True)
    h_ev = np.bincount(inv, weights=events)[inv]
    h_ex = np.bincount(inv, weights=exposure)[inv]
    if leave_one_out:
        h_ev, h_ex = h_ev - events, h_ex - exposure
    return (global_rate * HOST_PRIOR_DAYS + h_ev) / (HOST_PRIOR_DAYS + np.maximum(h_ex, 0.0))


def url_tokens(db: pa.Table) -> sp.csr_matrix:
    """The hashed URL tokens of every row: :func:`_vectorizer`'s ``transform`` of :func:`url_documents`,
    computed from each URL's parts with Arrow kernels and one hash per distinct token.

    Why: scikit-learn's HashingVectorizer runs a Python regex, a generator and a hash per row and token
    (a third of a fresh round's reprioritise), over documents that took ten regex passes to build. Its
    tokens are the ``[a-z]+`` runs of ``str.lower(doc)`` (the documents hold no digits), and the matrix
    is binary, so a row's tokens are a set, which the parts give directly: the runs of the lowered host
    with "h" when there is one, those of the lowered path with "p" when there is one, those of the
    extension, and "e" and "s" (every document holds "e_" and "s_", see :func:`_url_parts`; the
    "s_" word is a path run); none for a null URL. Arrow's ``utf8_lower`` and ``str.lower`` differ in
    one letter that lowers to ASCII (U+0130: "i" against "i" + U+0307), which no document holds
    (host and path are ``utf8_lower``-ed, the extension is ASCII). The matrix is the vectoriser's
    exactly (canonical CSR, binary float64 values): ``tests/test_prior_tokens.py`` compares both.

    The runs are found byte-wise (:func:`_letter_runs`), each marker's column is hashed once, and the CSR
    is built from the sorted distinct (row, column) keys: Arrow's regex split and its lists, a marker
    string per row, ``np.unique`` of the marked rows and SciPy's COO conversion took 43 k URLs (a
    CrawlDb after 3 rounds of 10 k pages) 0.105 s, this 0.074 s. (Not ``np.unique`` for the keys: with
    NumPy 2.4 it hashes first, ~0.35 s per 0.5 M int64.)
    """
    import scipy.sparse as sp

    arr = db.column("url").combine_chunks()
    n = len(arr)
    host, path, ext = _url_parts(arr)
    marks = dict(zip("hpes", _token_columns(list("hpes")).tolist(), strict=True))
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for strings, marker in ((pc.utf8_lower(host), "h"), (pc.utf8_lower(path), "p"), (pc.utf8_lower(ext), None)):
        r, c = _letter_runs(strings)
        rows.append(r)
        cols.append(c)
        if marker is not None and r.size:  # r is sorted: its distinct rows are where it steps
            rows.append(r[np.r_[True, r[1:] != r[:-1]]])
            cols.append(np.full(rows[-1].size, marks[marker], np.int64))
    valid = np.flatnonzero(pc.is_valid(arr).to_numpy(zero_copy_only=False))  # a null URL's document is empty
    for marker in "es":
        rows.append(valid)
        cols.append(np.full(valid.size, marks[marker], np.int64))
    # canonical CSR directly: one entry per distinct (row, column), sorted, binary float64 values
    key = np.sort(np.concatenate(rows).astype(np.int64) * N_FEATURES + np.concatenate(cols))
    key = key[np.r_[True, key[1:] != key[:-1]]] if key.size else key  # (np.unique hashes first: ~50x slower)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(key // N_FEATURES, minlength=n), out=indptr[1:])
    x = sp.csr_matrix((np.ones(key.size), (key % N_FEATURES).astype(np.int32), indptr.astype(np.int32)),
                      shape=(n, N_FEATURES))
    x.has_canonical_format = True
    return x


def _letter_runs(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(row, token column) of every ``[a-z]+`` run of each row, rows ascending (a null row has none).

    Byte-wise over the UTF-8 buffer: a multi-byte character's bytes are all >= 0x80, so the runs of
    ASCII letters are exactly the code point runs the vectoriser's ``[a-z]+`` finds. Each distinct run is
    hashed once (:func:`_token_columns`)."""
    from crawl.url.columns import _buffers, _view_array

    off, d = _buffers(strings.cast(pa.string()))
    if d.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    letter = (d >= ord("a")) & (d <= ord("z"))
    edge = np.zeros(d.size + 1, bool)
    edge[off] = True  # a row's first byte starts a run, its last one ends it
    prev = np.r_[False, letter[:-1]]
    nxt = np.r_[letter[1:], False]
    lo = np.flatnonzero(letter & (~prev | edge[:-1]))
    hi = np.flatnonzero(letter & (~nxt | edge[1:])) + 1
    row = np.searchsorted(off, lo, side="right") - 1
    enc = pc.dictionary_encode(_view_array([d], None, lo, hi - lo))
    col = _token_columns(enc.dictionary.to_pylist())[enc.indices.to_numpy(zero_copy_only=False)] \
        if len(enc.dictionary) else np.zeros(0, np.int64)
    return row, col


def _token_columns(tokens: list[str]) -> np.ndarray:
    """The column of each distinct token, as scikit-learn's FeatureHasher computes it (signed 32-bit
    MurmurHash3 with seed 0 of the UTF-8 bytes, its absolute value modulo :data:`N_FEATURES`)."""
    from crawl.glm import murmurhash3_32

    h = murmurhash3_32(tokens)
    return np.where(h == -2 ** 31, (2 ** 31 - 1 - (N_FEATURES - 1)) % N_FEATURES, np.abs(h) % N_FEATURES)


def features(db: pa.Table, host_rates: np.ndarray, tokens: sp.csr_matrix | None = None) -> sp.csr_matrix:
    """Sparse design matrix: hashed URL tokens (``tokens``: :func:`url_tokens` of ``db`` when already
    computed) + numeric columns (depth, query, length, host, changefreq)."""
    import scipy.sparse as sp

    urls = db.column("url").combine_chunks()
    tokens = url_tokens(db) if tokens is None else tokens
    depth = pc.fill_null(db.column("depth"), 0).to_numpy(zero_copy_only=False).astype(np.float64)
    has_query = pc.fill_null(pc.match_substring(urls, "?"), False).to_numpy(zero_copy_only=False)
    segs = pc.fill_null(pc.count_substring(urls, "/"), 3).to_numpy(zero_copy_only=False).astype(np.float64)
    cf = changefreq_rate(db.column("sitemap_changefreq"))
    numeric = np.column_stack([
        np.minimum(depth, 20) / 10.0, has_query.astype(np.float64), np.minimum(segs - 3, 20) / 10.0,
        np.log(np.clip(host_rates, MIN_RATE, MAX_RATE)) / 5.0,
        np.where(np.isnan(cf), 0.0, np.log(np.clip(np.nan_to_num(cf, nan=1.0), MIN_RATE, MAX_RATE)) / 5.0),
        np.isnan(cf).astype(np.float64),
    ])
    return sp.hstack([tokens, sp.csr_matrix(numeric)], format="csr")


def _usable(exposure: np.ndarray) -> np.ndarray:
    """Rows whose evidence can train the prior: any re-check, or a trusted Last-Modified age.

    A single re-check (changed or not after t days) and a Last-Modified age (time since the last change
    of a Poisson page is Exp(λ)) are censored exponential observations; as Poisson counts over their
    exposure they enter the GLM with weight = exposure, so short, uninformative ones weigh little and
    there is no need to wait for long histories (which left the prior unused for the first rounds).
    """
    return np.asarray(exposure, np.float64) > MIN_EXPOSURE_DAYS


def _holdout(url_hash: np.ndarray) -> np.ndarray:
    return (url_hash.astype(np.uint64) % np.uint64(1000)) < np.uint64(int(HOLDOUT_SHARE * 1000))


def fit(db: pa.Table, events: np.ndarray, exposure: np.ndarray, checks: np.ndarray,
        tokens: Callable[[], sp.csr_matrix] | None = None) -> PriorModel:
    """Fit the prior on rows with enough history; held-out rows give the deviance metrics.
    ``tokens``: gives :func:`url_tokens` of every row of ``db`` (called only when a model is fitted)."""
    from crawl.glm import PoissonGLM, mean_poisson_deviance

    total_ex = float(exposure.sum())
    global_rate = float(np.clip(events.sum() / total_ex, MIN_RATE, MAX_RATE)) if total_ex > 0 else 1.0 / 7.0
    usable = _usable(exposure)
    hosts = host_codes(db)
    held = _holdout(db.column("url_hash").to_numpy()) & usable
    train = usable & ~held
    h = db.column("url_hash").to_numpy().astype(np.uint64)
    if train.sum() > MAX_TRAIN:
        keep_share = MAX_TRAIN / train.sum()
        train &= ((h // np.uint64(1000)) % np.uint64(10_000)) < np.uint64(int(keep_share * 10_000))
    if held.sum() > MAX_HOLDOUT:  # the metrics need a sample, not every held-out URL
        keep_share = MAX_HOLDOUT / held.sum()
        held &= ((h // np.uint64(1000)) % np.uint64(10_000)) < np.uint64(int(keep_share * 10_000))
    metrics: dict[str, Any] = {"global_rate": global_rate, "usable": int(usable.sum()), "train": int(train.sum()),
                               "holdout": int(held.sum())}
    if train.sum() < MIN_TRAIN:
        metrics["fallback"] = "host pooling (too little history)"
        return PriorModel(global_rate, None, metrics)
    # host aggregates from training rows only (held-out labels never leak into any feature)
    ev_tr, ex_tr = np.where(train, events, 0.0), np.where(train, exposure, 0.0)
    hr = host_rate(hosts, ev_tr, ex_tr, global_rate, leave_one_out=True)
    # features of the sampled rows only: hashing URL tokens is per-row Python, the cost of the fit
    rows = np.flatnonzero(train | held)
    x = features(db.take(pa.array(rows)), hr[rows], None if tokens is None else tokens()[rows])
    tr, ho = train[rows], held[rows]
    y = events / np.maximum(exposure, 1e-9)
    model = PoissonGLM(alpha=1e-3, max_iter=300)
    model.fit(x[tr], y[train], sample_weight=exposure[train])
    if held.sum():
        pred = np.clip(model.predict(x[ho]), MIN_RATE, MAX_RATE)
        const = np.full(int(held.sum()), global_rate)
        w = exposure[held]
        metrics["holdout_deviance"] = float(mean_poisson_deviance(y[held], pred, sample_weight=w))
        metrics["holdout_deviance_constant"] = float(mean_poisson_deviance(y[held], const, sample_weight=w))
        host_only = np.clip(hr[held], MIN_RATE, MAX_RATE)
        metrics["holdout_deviance_host_pooling"] = float(mean_poisson_deviance(y[held], host_only, sample_weight=w))
    return PriorModel(global_rate, model, metrics)


def predict(prior: PriorModel, db: pa.Table, events: np.ndarray, exposure: np.ndarray,
            checks: np.ndarray, tokens: Callable[[], sp.csr_matrix] | None = None) -> np.ndarray:
    """Prior rate (changes/day) for every row; host pooling of all evidence when no model was fitted.
    ``tokens``: gives :func:`url_tokens` of ``db`` (called only when there is a model)."""
    if db.num_rows == 0:
        return np.empty(0)
    hosts = host_codes(db)
    usable = _usable(exposure)
    if prior.model is None:
        return np.clip(host_rate(hosts, events, exposure, prior.global_rate, leave_one_out=False), MIN_RATE, MAX_RATE)
    hr = host_rate(hosts, np.where(usable, events, 0.0), np.where(usable, exposure, 0.0), prior.global_rate,
                   leave_one_out=False)
    return np.clip(prior.model.predict(features(db, hr, None if tokens is None else tokens())), MIN_RATE, MAX_RATE)


def save(store: Store, round_no: int, prior: PriorModel) -> str:
    """Persist the model (pickle) and its metrics (JSON) for round ``round_no``; returns the directory."""
    rel = store.state("model", f"v={round_no:05d}")
    store.write_bytes(f"{rel}/model.pkl", pickle.dumps(prior))
    store.write_json(f"{rel}/metrics.json", {"round": round_no, **prior.metrics})
    return rel


def _prior_file(store: Store, round_no: int) -> str:
    return store.state("model", f"v={round_no:05d}", "prior.parquet")


def refit_due(store: Store, round_no: int, every: int) -> bool:
    """Whether round ``round_no`` refits the GLM: on the cadence, or when the previous round left no
    model or no per-row priors to reuse."""
    return every <= 1 or round_no % every == 0 or round_no <= 1 \
        or not store.exists(store.state("model", f"v={round_no - 1:05d}", "model.pkl")) \
        or not store.exists(_prior_file(store, round_no - 1))


def for_round(store: Store, round_no: int, db: pa.Table, events: np.ndarray, exposure: np.ndarray,
              checks: np.ndarray, every: int, partial: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """The prior of every row for round ``round_no`` and the stats reprioritise reports.

    Every ``every`` rounds (and whenever the previous round left no model) the GLM is refitted and
    predicts every row. In between, the previous round's model and per-row priors are reused: known
    rows keep their prior (joined by URL hash) and only rows new to the CrawlDb are featurised and
    predicted, so the per-row Python (tokenising URLs) follows the round, not the crawl. Both the
    model and the priors are saved every round under ``state/crawl=ID/model/v=NNNNN/``.

    ``partial``: ``db`` holds only the rows an incremental round rescores (never on a refit round);
    the saved priors are then the previous round's with these rows' replaced or added.
    """
    hashes = db.column("url_hash").to_numpy()
    prev_model = store.state("model", f"v={round_no - 1:05d}", "model.pkl")
    full = refit_due(store, round_no, every)
    if full and partial:
        raise ValueError(f"round {round_no} refits the prior: it needs every row, not a partial CrawlDb")
    old_h = old_p = None
    if full:
        # the URL tokens once for every row: the fit takes its sample's, the prediction all of them
        # (tokenising twice was a third of a fresh 20 k-page round's reprioritise)
        tokens = functools.cache(lambda: url_tokens(db))
        model = fit(db, events, exposure, checks, tokens)
        prior = predict(model, db, events, exposure, checks, tokens)
        refit = {"refit": True}
    else:
        model = pickle.loads(store.read_bytes(prev_model))
        old = store.read_table(_prior_file(store, round_no - 1))
        old_h, old_p = old.column("url_hash").to_numpy(), old.column("prior").to_numpy()
        i = np.searchsorted(old_h, hashes).clip(0, max(old_h.size - 1, 0))
        found = (old_h[i] == hashes) if old_h.size else np.zeros(hashes.size, bool)
        prior = np.where(found, old_p[i] if old_h.size else 0.0, np.nan)
        missing = np.flatnonzero(~found)
        if missing.size:
            prior[missing] = predict(model, db.take(pa.array(missing)), events[missing], exposure[missing],
                                     checks[missing])
        refit = {"refit": False, "predicted_rows": int(missing.size)}
    model.metrics.setdefault("fit_round", round_no)
    order = np.argsort(hashes)
    out_h, out_p = hashes[order], prior[order]
    if partial and old_h is not None and old_h.size:  # old_h is sorted: replace in place, insert the rest
        pos = np.searchsorted(old_h, out_h)
        hit = (pos < old_h.size) & (old_h[np.minimum(pos, old_h.size - 1)] == out_h)
        merged_p = old_p.copy()
        merged_p[pos[hit]] = out_p[hit]
        out_h, out_p = np.insert(old_h, pos[~hit], out_h[~hit]), np.insert(merged_p, pos[~hit], out_p[~hit])
    store.write_table(_prior_file(store, round_no),
                      pa.table({"url_hash": pa.array(out_h, pa.uint64()), "prior": pa.array(out_p)}))
    return prior, {"path": save(store, round_no, model), **model.metrics, **refit}


__all__ = ["PriorModel", "features", "fit", "for_round", "host_codes", "host_rate", "predict", "refit_due", "save",
           "url_documents"]
