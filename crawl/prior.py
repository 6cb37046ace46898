"""The learned change-rate prior: predicts λ for URLs with little or no history (cold start).

Trained each round (scikit-learn Poisson GLM, log link) on every URL with some evidence (one re-check
or a trusted Last-Modified age is enough: the fit weights rows by exposure), from features that exist
before the second fetch: hashed URL tokens (host-name words, path segments, extension), depth, path length, query, the host's pooled rate (leave-one-out, so a row does
not see its own label) and the sitemap changefreq. The target is the CGM-corrected event count over
the exposure, fitted as a rate with the exposure as sample weight (the standard Poisson-rate fit).
:mod:`crawl.schedule` combines the prediction with each page's own evidence by Gamma-Poisson
shrinkage, so the prior only matters until a page has its own history.

Each round persists the model and its metrics (Poisson deviance on held-out URLs, against the
constant-rate baseline) at ``state/crawl=ID/model/v=NNNNN/`` so a user can see whether it helps.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import mean_poisson_deviance

from crawl.changerate import MAX_RATE, MIN_RATE, changefreq_rate
from crawl.store import Store

MIN_EXPOSURE_DAYS = 0.0     # any evidence trains: the fit weights each row by its exposure
MIN_TRAIN = 40              # fewer usable URLs: fall back to host pooling
HOLDOUT_SHARE = 0.2         # by URL hash, stable across rounds
MAX_TRAIN = 200_000         # training rows kept (a stable hash sample): the fit stays seconds on any CrawlDb
HOST_PRIOR_DAYS = 5.0       # host pooling: global rate counts as this many days of exposure
N_FEATURES = 2 ** 16
_TOKEN = r"[a-z]+|[0-9]+"


@dataclass
class PriorModel:
    """A fitted prior (or the host-pooling fallback when ``model`` is None) and its metrics."""
    global_rate: float
    model: PoissonRegressor | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def _vectorizer() -> HashingVectorizer:
    return HashingVectorizer(n_features=N_FEATURES, token_pattern=_TOKEN, lowercase=True, alternate_sign=False,
                             norm=None, binary=True)


def url_documents(urls: pa.Array | pa.ChunkedArray) -> list[str]:
    """Each URL as a bag of prefixed tokens: host words (``h_``), path words (``p_``), extension (``e_``).

    Prefixing keeps "news" in a host name apart from "/news/" in a path. Built with Arrow string
    kernels, so the only per-row Python is the list the vectoriser takes.
    """
    arr = urls.combine_chunks() if isinstance(urls, pa.ChunkedArray) else urls
    rest = pc.replace_substring_regex(arr, r"^[a-zA-Z]+://", "")
    host = pc.replace_substring_regex(rest, r"[/?#].*$", "")
    path = pc.replace_substring_regex(pc.replace_substring_regex(rest, r"^[^/?#]*", ""), r"[?#].*$", "")
    ext = pc.extract_regex(path, r"\.(?P<e>[A-Za-z0-9]{1,6})$").field("e")
    host_t = pc.replace_substring_regex(pc.utf8_lower(host), r"([a-z]+)", "h_\\1")
    path_t = pc.replace_substring_regex(pc.utf8_lower(path), r"([a-z]+)", "p_\\1")
    first = pc.extract_regex(pc.utf8_lower(path), r"^/(?P<s>[a-z]+)").field("s")
    doc = pc.binary_join_element_wise(host_t, path_t, pc.fill_null(pc.binary_join_element_wise("e", ext, "_"), ""),
                                      pc.fill_null(pc.binary_join_element_wise("s", first, "_"), ""), " ")
    return pc.replace_substring_regex(pc.fill_null(doc, ""), r"[0-9]+", " ").to_pylist()


def host_rate(hosts: np.ndarray, events: np.ndarray, exposure: np.ndarray, global_rate: float,
              leave_one_out: bool) -> np.ndarray:
    """Each row's host pooled rate, shrunk to ``global_rate``; optionally without the row's own evidence."""
    _, inv = np.unique(hosts, return_inverse=True)
    h_ev = np.bincount(inv, weights=events)[inv]
    h_ex = np.bincount(inv, weights=exposure)[inv]
    if leave_one_out:
        h_ev, h_ex = h_ev - events, h_ex - exposure
    return (global_rate * HOST_PRIOR_DAYS + h_ev) / (HOST_PRIOR_DAYS + np.maximum(h_ex, 0.0))


def features(db: pa.Table, host_rates: np.ndarray) -> sp.csr_matrix:
    """Sparse design matrix: hashed URL tokens + numeric columns (depth, query, length, host, changefreq)."""
    urls = db.column("url").combine_chunks()
    tokens = _vectorizer().transform(url_documents(urls))
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


def fit(db: pa.Table, events: np.ndarray, exposure: np.ndarray, checks: np.ndarray) -> PriorModel:
    """Fit the prior on rows with enough history; held-out rows give the deviance metrics."""
    total_ex = float(exposure.sum())
    global_rate = float(np.clip(events.sum() / total_ex, MIN_RATE, MAX_RATE)) if total_ex > 0 else 1.0 / 7.0
    usable = _usable(exposure)
    hosts = db.column("host").to_numpy(zero_copy_only=False)
    held = _holdout(db.column("url_hash").to_numpy()) & usable
    train = usable & ~held
    if train.sum() > MAX_TRAIN:
        keep_share = MAX_TRAIN / train.sum()
        h = db.column("url_hash").to_numpy().astype(np.uint64)
        train &= ((h // np.uint64(1000)) % np.uint64(10_000)) < np.uint64(int(keep_share * 10_000))
    metrics: dict[str, Any] = {"global_rate": global_rate, "usable": int(usable.sum()), "train": int(train.sum()),
                               "holdout": int(held.sum())}
    if train.sum() < MIN_TRAIN:
        metrics["fallback"] = "host pooling (too little history)"
        return PriorModel(global_rate, None, metrics)
    # host aggregates from training rows only (held-out labels never leak into any feature)
    ev_tr, ex_tr = np.where(train, events, 0.0), np.where(train, exposure, 0.0)
    hr = host_rate(hosts, ev_tr, ex_tr, global_rate, leave_one_out=True)
    x = features(db, hr)
    y = events / np.maximum(exposure, 1e-9)
    model = PoissonRegressor(alpha=1e-3, max_iter=300)
    model.fit(x[train], y[train], sample_weight=exposure[train])
    if held.sum():
        pred = np.clip(model.predict(x[held]), MIN_RATE, MAX_RATE)
        const = np.full(int(held.sum()), global_rate)
        w = exposure[held]
        metrics["holdout_deviance"] = float(mean_poisson_deviance(y[held], pred, sample_weight=w))
        metrics["holdout_deviance_constant"] = float(mean_poisson_deviance(y[held], const, sample_weight=w))
        host_only = np.clip(hr[held], MIN_RATE, MAX_RATE)
        metrics["holdout_deviance_host_pooling"] = float(mean_poisson_deviance(y[held], host_only, sample_weight=w))
    return PriorModel(global_rate, model, metrics)


def predict(prior: PriorModel, db: pa.Table, events: np.ndarray, exposure: np.ndarray,
            checks: np.ndarray) -> np.ndarray:
    """Prior rate (changes/day) for every row; host pooling of all evidence when no model was fitted."""
    hosts = db.column("host").to_numpy(zero_copy_only=False)
    if db.num_rows == 0:
        return np.empty(0)
    usable = _usable(exposure)
    if prior.model is None:
        return np.clip(host_rate(hosts, events, exposure, prior.global_rate, leave_one_out=False), MIN_RATE, MAX_RATE)
    hr = host_rate(hosts, np.where(usable, events, 0.0), np.where(usable, exposure, 0.0), prior.global_rate,
                   leave_one_out=False)
    return np.clip(prior.model.predict(features(db, hr)), MIN_RATE, MAX_RATE)


def save(store: Store, round_no: int, prior: PriorModel) -> str:
    """Persist the model (pickle) and its metrics (JSON) for round ``round_no``; returns the directory."""
    rel = store.state("model", f"v={round_no:05d}")
    store.write_bytes(f"{rel}/model.pkl", pickle.dumps(prior))
    store.write_json(f"{rel}/metrics.json", {"round": round_no, **prior.metrics})
    return rel


__all__ = ["PriorModel", "features", "fit", "host_rate", "predict", "save", "url_documents"]
