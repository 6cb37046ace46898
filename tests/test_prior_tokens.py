"""The prior's URL token matrix (:func:`crawl.prior.url_tokens`, Arrow kernels + one hash per distinct
token) against the oracle it replaces: scikit-learn's HashingVectorizer over the same documents.

Equal means the same CSR arrays (indices, indptr, data, shape, dtype), so the GLM fitted on them and
its predictions are the same bit for bit; a fit on both matrices is compared too.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from crawl import prior


def _oracle(urls: list[str | None]):
    return prior._vectorizer().transform(prior.url_documents(pa.array(urls, pa.string())))


def _same(urls: list[str | None]) -> None:
    got = prior.url_tokens(pa.table({"url": pa.array(urls, pa.string())}))
    want = _oracle(urls)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)


# letters that lower to ASCII in one library and not (or differently) in the other, digits, separators
_ALPHABET = st.sampled_from(list("aZzQ09/._-?#=&:%~ ") + ["\u0130", "\u212a", "\u00c9", "\u00df", "\u03a3",
                                                           "\u0131", "\ufb03", "\u1e9e", "\U0001f600"])
_PART = st.text(_ALPHABET, max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["http://", "https://", "HTTP://", "", "ftp://"]), _PART, _PART,
                          _PART, st.sampled_from(["", ".html", ".PDF", ".tar.gz", ".j2", ".\u0130x"])),
                min_size=1, max_size=20))
def test_tokens_match_the_hashing_vectorizer_on_random_urls(parts) -> None:
    _same([f"{scheme}{host}/{seg}/{rest}{ext}" for scheme, host, seg, rest, ext in parts])


def test_tokens_match_on_urls_like_a_crawls() -> None:
    rng = np.random.default_rng(7)
    words = ["news", "Blog", "item", "page", "about", "ARCHIVE", "2024", "tag", "\u0130stanbul", "caf\u00e9"]
    urls = [f"http://{rng.choice(words)}{i % 97}.example.org/{rng.choice(words)}/{rng.choice(words)}-{i}"
            f"{rng.choice(['', '.html', '.PDF', '?q=1'])}" for i in range(3000)]
    urls += ["http://x.org", "http://x.org/", "", "http://\u0130x.org/\u0130x", None, "http://1.2/3/4.5",
             "e.com/s", "http://h/e_q/S1/", "HTTP://A.B/x.PDF", "ftp://x/.j2"]
    _same(urls)


def test_the_fitted_prior_is_the_same_on_either_matrix() -> None:
    rng = np.random.default_rng(3)
    n = 400
    urls = [f"http://h{i % 13}.example.com/{['news', 'shop', 'docs'][i % 3]}/p{i}.html" for i in range(n)]
    db = pa.table({"url": pa.array(urls), "url_hash": pa.array(rng.integers(0, 2 ** 63, n).astype(np.uint64)),
                   "host": pa.array([f"h{i % 13}.example.com" for i in range(n)]),
                   "depth": pa.array(rng.integers(0, 5, n).astype(np.int32)),
                   "sitemap_changefreq": pa.array([None] * n, pa.string())})
    exposure = rng.uniform(0.5, 10, n)
    events = rng.poisson(exposure * np.where(np.arange(n) % 3 == 0, 1.0, 0.1)).astype(np.float64)
    checks = np.ones(n)
    a = prior.fit(db, events, exposure, checks, lambda: prior.url_tokens(db))
    b = prior.fit(db, events, exposure, checks, lambda: _oracle(urls))
    assert a.model is not None and b.model is not None
    assert np.array_equal(a.model.coef_, b.model.coef_) and a.metrics == b.metrics


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(st.sampled_from(list("abzAZ09/-é") + ["\u4e2d", "\U0001f600"]),
                                             max_size=10)), max_size=15))
def test_letter_runs_are_the_a_to_z_runs_of_each_row(strings) -> None:
    """The byte-wise tokeniser gives each row's ``[a-z]+`` runs (a multi-byte character ends a run, as
    in the vectoriser's pattern), rows ascending, each as its hashed column; none for a null or an
    empty row, and runs never cross from one row into the next."""
    import re

    row, col = prior._letter_runs(pa.array(strings, pa.string()))
    assert np.all(np.diff(row) >= 0)
    for i, s in enumerate(strings):
        runs = re.findall("[a-z]+", s or "")
        want = prior._token_columns(runs).tolist() if runs else []
        assert col[row == i].tolist() == want
