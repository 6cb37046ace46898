"""The prior's model without scikit-learn (:mod:`crawl.glm`) against scikit-learn itself: MurmurHash3,
the Poisson GLM's fit and predictions, the Poisson deviance; and a round's prior fit that imports no
scikit-learn (its import was ~0.7 s of the driver's CPU in a run's first round)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from pyrun import python_c
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import mean_poisson_deviance as sk_deviance
from sklearn.utils import murmurhash3_32 as sk_murmur

from crawl import glm, prior


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=30))
def test_murmurhash_matches_scikit_learns(tokens: list[str]) -> None:
    assert glm.murmurhash3_32(tokens).tolist() == [sk_murmur(t, 0) for t in tokens]


def test_murmurhash_on_every_length_and_long_tokens() -> None:
    tokens = ["", "\u00e9", "\U0001f600x"] + ["abcdefghij"[:n] for n in range(11)] + ["x" * 1000, "y" * 37]
    assert glm.murmurhash3_32(tokens).tolist() == [sk_murmur(t, 0) for t in tokens]
    assert glm.murmurhash3_32([]).shape == (0,)


def _design(n: int, seed: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """A prior-shaped design: URL tokens (sparse, binary) + numeric columns, rates and exposures."""
    rng = np.random.default_rng(seed)
    urls = [f"http://h{i % 17}.example.com/{['news', 'shop', 'docs', 'a'][i % 4]}/p{i % 50}.html" for i in range(n)]
    db = pa.table({"url": pa.array(urls), "url_hash": pa.array(rng.integers(0, 2 ** 63, n).astype(np.uint64)),
                   "host": pa.array([f"h{i % 17}.example.com" for i in range(n)]),
                   "depth": pa.array(rng.integers(0, 5, n).astype(np.int32)),
                   "sitemap_changefreq": pa.array([None, "daily", "weekly"] * (n // 3) + [None] * (n % 3), pa.string())})
    exposure = rng.uniform(0.1, 10, n)
    events = rng.poisson(exposure * np.where(np.arange(n) % 4 == 0, 1.0, 0.1)).astype(np.float64)
    x = prior.features(db, rng.uniform(0.01, 2, n))
    return x, events / exposure, exposure


def test_the_glm_is_scikit_learns_poisson_regressor() -> None:
    for n, seed, alpha in ((300, 1, 1e-3), (1200, 2, 1e-3), (500, 3, 0.5)):
        x, y, w = _design(n, seed)
        ours = glm.PoissonGLM(alpha=alpha, max_iter=300).fit(x, y, sample_weight=w)
        ref = PoissonRegressor(alpha=alpha, max_iter=300).fit(x, y, sample_weight=w)
        assert ours.n_iter_ == ref.n_iter_
        np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-9)
        np.testing.assert_allclose(ours.predict(x), ref.predict(x), rtol=1e-9)
        pred = ref.predict(x)
        assert np.isclose(glm.mean_poisson_deviance(y, pred, w), sk_deviance(y, pred, sample_weight=w), rtol=1e-12)
    y0 = np.array([0.0, 0.0, 2.0, 1.0])
    assert np.isclose(glm.mean_poisson_deviance(y0, np.full(4, 0.5)), sk_deviance(y0, np.full(4, 0.5)))


def test_a_prior_fit_imports_no_scikit_learn() -> None:
    code = ("import sys\n"
            "import numpy as np, pyarrow as pa\n"
            "from crawl import prior\n"
            "n = 400\n"
            "urls = [f'http://h{i % 13}.example.com/{[\"news\", \"shop\"][i % 2]}/p{i}.html' for i in range(n)]\n"
            "rng = np.random.default_rng(3)\n"
            "db = pa.table({'url': pa.array(urls), 'url_hash': pa.array(rng.integers(0, 2 ** 63, n).astype(np.uint64)),\n"
            "               'host': pa.array([f'h{i % 13}.example.com' for i in range(n)]),\n"
            "               'depth': pa.array(rng.integers(0, 5, n).astype(np.int32)),\n"
            "               'sitemap_changefreq': pa.array([None] * n, pa.string())})\n"
            "exposure = rng.uniform(0.5, 10, n)\n"
            "events = rng.poisson(exposure * 0.3).astype(np.float64)\n"
            "m = prior.fit(db, events, exposure, np.ones(n))\n"
            "p = prior.predict(m, db, events, exposure, np.ones(n))\n"
            "assert m.model is not None and 'holdout_deviance' in m.metrics and p.shape == (n,)\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] == 'sklearn'))\n")
    assert python_c(code).split("\n")[-2] == "[]"
