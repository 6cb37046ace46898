"""The change-rate prior's model without scikit-learn: a Poisson GLM (log link, L2 penalty) fitted with
SciPy's L-BFGS-B, its Poisson deviance, and the MurmurHash3 that places URL tokens in feature columns.

Why: :mod:`crawl.prior` used three things of scikit-learn (``PoissonRegressor``, ``mean_poisson_deviance``,
``murmurhash3_32``), and importing any part of scikit-learn imports ``sklearn.utils``, which imports
SciPy's ``stats`` package: ~0.7 s of CPU in a process that already holds SciPy's sparse matrices, paid
by the driver of ``crawl run`` in its first round (the prior is fitted every round), where the whole
3-round benchmark run costs ~10 s (bench/RESULTS.md, "(session 8, helper round1)"). The same objective
with the same optimiser and settings needs only ``scipy.optimize`` (~0.26 s to import).

:class:`PoissonGLM` minimises what scikit-learn's ``PoissonRegressor(solver="lbfgs")`` minimises, from
the same start and with the same L-BFGS-B options: the sample-weighted mean of the half Poisson
deviance ``exp(η) - y·η`` plus ``alpha/2·‖w‖²`` (intercept unpenalised), ``η = X·w + b``, starting at
``w = 0``, ``b = log(weighted mean of y)``. Its coefficients agree with scikit-learn's to the optimiser's
tolerance (not bit for bit: NumPy's ``exp`` is not the C library's), which ``tests/test_glm.py`` checks.
A model pickled by an earlier version (a ``PoissonRegressor``) still loads and predicts: :mod:`crawl.prior`
only calls ``predict``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmurhash3_32(tokens: Sequence[str]) -> np.ndarray:
    """Signed 32-bit MurmurHash3 (x86_32, seed 0) of each string's UTF-8 bytes, as ``int64``: what
    ``sklearn.utils.murmurhash3_32(t, 0)`` gives for each ``t``. Vectorised over the strings, in groups of
    similar length (a long token does not widen every row's buffer)."""
    data = [t.encode("utf-8") for t in tokens]
    n = len(data)
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    lens = np.fromiter((len(b) for b in data), np.int64, n)
    nblocks = lens // 4
    # groups by the number of 4-byte blocks rounded up to a power of two
    group = np.ceil(np.log2(nblocks + 1)).astype(np.int64)
    with np.errstate(over="ignore"):
        for g in np.unique(group):
            rows = np.flatnonzero(group == g)
            width = 4 * (int(nblocks[rows].max()) + 1)  # every row's tail word fits
            buf = np.zeros((rows.size, width), np.uint8)
            glens = lens[rows]
            flat = np.frombuffer(b"".join(data[i] for i in rows), np.uint8)
            starts = np.repeat(np.arange(rows.size) * width, glens)
            offsets = np.arange(flat.size) - np.repeat(np.cumsum(glens) - glens, glens)
            buf.reshape(-1)[starts + offsets] = flat
            words = buf.view("<u4")
            gblocks = nblocks[rows]
            h = np.zeros(rows.size, np.uint32)
            for j in range(words.shape[1] - 1):
                k = _rotl(words[:, j] * _C1, 15) * _C2
                mixed = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
                h = np.where(j < gblocks, mixed, h)
            tail = words[np.arange(rows.size), gblocks]  # the 0-3 bytes after the blocks, zero padded
            k = _rotl(tail * _C1, 15) * _C2
            h = np.where(glens % 4 > 0, h ^ k, h)
            h ^= glens.astype(np.uint32)
            h ^= h >> np.uint32(16)
            h *= np.uint32(0x85EBCA6B)
            h ^= h >> np.uint32(13)
            h *= np.uint32(0xC2B2AE35)
            h ^= h >> np.uint32(16)
            out[rows] = h.view(np.int32)
    return out


class PoissonGLM:
    """Poisson regression, log link, L2 penalty ``alpha`` on the coefficients (not the intercept):
    ``fit`` / ``predict`` / ``coef_`` / ``intercept_`` / ``n_iter_`` as scikit-learn's ``PoissonRegressor``
    with ``solver="lbfgs"``, for a sparse or dense float64 ``X``."""

    def __init__(self, alpha: float = 1.0, max_iter: int = 100, tol: float = 1e-4) -> None:
        self.alpha, self.max_iter, self.tol = alpha, max_iter, tol

    def fit(self, x: Any, y: np.ndarray, sample_weight: np.ndarray | None = None) -> PoissonGLM:
        from scipy.optimize import minimize

        y = np.ascontiguousarray(y, np.float64)
        if (y < 0).any():
            raise ValueError("Poisson regression needs y >= 0")
        sw = np.ones(y.size) if sample_weight is None else np.ascontiguousarray(sample_weight, np.float64)
        n_features = x.shape[1]
        coef = np.zeros(n_features + 1)
        coef[-1] = np.log(np.average(y, weights=sw))
        sw_sum = float(np.sum(sw))
        xt = x.T
        alpha = self.alpha

        def loss_gradient(c: np.ndarray) -> tuple[float, np.ndarray]:
            w = c[:-1]
            raw = x @ w + c[-1]
            mu = np.exp(raw)
            loss = float(np.sum(sw * (mu - y * raw)) / sw_sum) + 0.5 * alpha * float(w @ w)
            g = sw * (mu - y) / sw_sum
            grad = np.empty_like(c)
            grad[:-1] = xt @ g + alpha * w
            grad[-1] = g.sum()
            return loss, grad

        res = minimize(loss_gradient, coef, method="L-BFGS-B", jac=True,
                       options={"maxiter": self.max_iter, "maxls": 50, "gtol": self.tol,
                                "ftol": 64 * np.finfo(float).eps})
        self.n_iter_ = int(res.nit)
        self.coef_, self.intercept_ = res.x[:-1].copy(), float(res.x[-1])
        return self

    def predict(self, x: Any) -> np.ndarray:
        return np.exp(x @ self.coef_ + self.intercept_)


def mean_poisson_deviance(y: np.ndarray, pred: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
    """Weighted mean Poisson deviance ``2·(y·log(y/μ) - y + μ)`` (``y·log(y/μ)`` = 0 where y = 0), as
    ``sklearn.metrics.mean_poisson_deviance``."""
    y, pred = np.asarray(y, np.float64), np.asarray(pred, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ylog = np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0) / pred), 0.0)
    return float(np.average(2 * (ylog - y + pred), weights=sample_weight))


__all__ = ["PoissonGLM", "mean_poisson_deviance", "murmurhash3_32"]
