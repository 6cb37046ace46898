"""crawl.url.columns: every column form equals its scalar function (Hypothesis, adversarial URLs), and
block-wise processing gives the one-pass answers."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from url_cases import CFG, url_strategy, varied_urls

from crawl.url import (
    URL_FIELDS,
    InvalidURL,
    canonicalize,
    canonicalize_many,
    filter_reason,
    filter_reasons,
    parse_url,
    surt,
    surts,
    url_columns,
    url_hash,
    url_hashes,
)


def test_block_wise_processing_matches_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Big columns are processed in cache-sized blocks; block borders must not change any answer."""
    from crawl.url import canon, columns, filters

    urls = varied_urls(3000, 21)
    arr = pa.array(urls, pa.string())
    depths = np.array([i % 5 for i in range(len(urls))])
    canon_want = [None if u is None else canonicalize(u) for u in urls]
    filt_want = filter_reasons(arr, depths, CFG).to_pylist()  # one block: checked against scalar above
    surt_want = [None if u is None else surt(u) for u in urls]
    # repeats (as links are): distinct URLs are checked once, depth per row
    rng = random.Random(5)
    order = [rng.randrange(len(urls)) for _ in range(6000)]
    rep = arr.take(pa.array(order))
    rep_depths = np.array([rng.randint(0, 5) for _ in order])
    rep_want = [filter_reason(urls[i], int(dep), CFG) if urls[i] is not None else "bad_scheme"
                for i, dep in zip(order, rep_depths, strict=True)]
    for mod in (columns, filters):
        monkeypatch.setattr(mod, "_BLOCK_ROWS", 700)
    for mod in (canon, columns, filters):
        monkeypatch.setattr(mod, "_DEDUP_MIN_ROWS", 100)
    assert canonicalize_many(arr).to_pylist() == canon_want
    assert filter_reasons(arr, depths, CFG).to_pylist() == filt_want
    assert surts(arr).to_pylist() == surt_want
    got = filter_reasons(rep, rep_depths, CFG).to_pylist()
    assert got == rep_want
    assert {"too_deep", "bad_scheme", "repeated_segments", None} <= set(got)


# Columns of up to 40 adversarial URLs, with repeats (the dictionary path) and plain simulated-web
# links mixed in so both the vectorised rows and the scalar rows occur in one call.
_COLUMN = st.lists(st.one_of(url_strategy(), url_strategy(), st.sampled_from([
    "http://a.sim.test/x?b=1&a=2", "https://Www.Site.COM:443/p/q#f", "http://h1.c2:8080", None])),
    min_size=1, max_size=40)
_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _model(u: str | None) -> tuple | None:
    try:
        p = None if u is None else parse_url(u)
    except InvalidURL:
        return None
    return None if p is None else tuple(None if f == "query" and not p.has_query else getattr(p, f)
                                        for f in URL_FIELDS)


@_SETTINGS
@given(_COLUMN)
def test_url_columns_equal_parse_url(urls: list[str | None]) -> None:
    cols = url_columns(pa.array(urls, pa.string()))
    got = [tuple(cols[f][i].as_py() for f in URL_FIELDS) for i in range(len(urls))]
    want = [_model(u) or (None,) * len(URL_FIELDS) for u in urls]
    assert got == want


@_SETTINGS
@given(_COLUMN)
def test_canonicalize_many_equals_canonicalize(urls: list[str | None]) -> None:
    assert canonicalize_many(pa.array(urls, pa.string())).to_pylist() == [
        None if u is None else canonicalize(u) for u in urls]


@_SETTINGS
@given(_COLUMN, st.integers(0, 5))
def test_other_columns_equal_scalar_on_canonical_urls(urls: list[str | None], depth: int) -> None:
    canon = [c for c in (None if u is None else canonicalize(u) for u in urls) if c is not None]
    arr = pa.array(canon, pa.string())
    assert surts(arr).to_pylist() == [surt(u) for u in canon]
    assert url_hashes(arr).tolist() == [url_hash(u) for u in canon]
    depths = np.full(len(canon), depth)
    assert filter_reasons(arr, depths, CFG).to_pylist() == [filter_reason(u, depth, CFG) for u in canon]
    cols = url_columns(arr, ("host",))  # a canonical URL keeps the model's host
    assert cols["host"].to_pylist() == [parse_url(u).host for u in canon]


def test_url_columns_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="unknown fields"):
        url_columns(["http://h/"], ("hostname",))


def test_tracking_path_params_take_the_column_path() -> None:
    """A URL simple but for tracking path parameters (``;jsessionid=...``, as the simulated web's session
    ids) is canonicalised as a column without them; every other ``;`` keeps the row on the scalar path
    (a value stopping at a character but / ; or the end, an escape, U+017F folding to "s", a parameter
    in the authority or the query, one not tracked, a dot segment left), and every answer is the scalar one."""
    from crawl.url.canon import _DEFAULT_TRACKING, _without_path_params

    cases = {
        "http://h.test/a;jsessionid=AB12/b.html": "http://h.test/a/b.html",
        "https://H.test:443/p;SID=x.y/q": "https://H.test:443/p/q",
        "http://h.test/;phpsessid=~!$&()*+,=:@?q=1;sid=2#f": "http://h.test/?q=1;sid=2#f",
        "http://h.test/x.;sid=1": "http://h.test/x.",
        "http://h.test/a;sid=%41/b": None,  # an escape in the value
        "http://h.test/a;sid=a b/c": None,  # a value ending at a space
        "http://h.test/a;j\u017fessionid=1": None,  # U+017F: not "s" for the scalar path
        "http://h.test/a;foo=1;sid=2": None,  # an untracked parameter stays
        "http://h.test/a;sid=1;sid=2": None,  # the second one starts at the first's kept ";"
        "http://h.test;sid=1/a": None,  # in the authority
        "http://h.test/a?x;sid=1": None,  # in the query (and no ";" in the path)
        "http://h.test/a/..;sid=1/b": None,  # leaves a dot segment
        "http://h.test/a/b": None,
    }
    arr = pa.array(list(cases), pa.string())
    got = _without_path_params(arr, _DEFAULT_TRACKING)
    assert got is not None and got.to_pylist() == list(cases.values())
    assert canonicalize_many(arr).to_pylist() == [canonicalize(u) for u in cases]
