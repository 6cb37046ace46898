"""The fetcher's sitemap entry rows (crawl.fetch.sitemaps._SitemapEntries) against the per-file Arrow
tables it built before: same rows, same order, same own-origin rule (Arrow's ``utf8_lower``), for
generated files, origins and URLs with non-ASCII letters whose lower case differs between Python
and Arrow (``İ``, ``K``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from crawl import records as R
from crawl.checkpoint import CKPT_SITEMAP_SCHEMA
from crawl.fetch.sitemaps import _SitemapEntries


def old_file_table(host: str, sitemap_url: str, origin: str, entries: list, t: datetime, unit: str) -> pa.Table:
    """The per-file table as crawl/fetch/sitemaps.py built it up to session 5 (the oracle)."""
    loc_list, lastmods, freqs = zip(*entries, strict=True)
    locs = pa.array(loc_list, pa.string())
    own = pc.starts_with(pc.utf8_lower(locs), origin.lower() + "/")
    n = len(entries)
    return pa.Table.from_arrays([
        pa.repeat(pa.scalar(host, pa.string()), n),
        pa.repeat(pa.scalar(sitemap_url, pa.string()), n),
        locs,
        pa.array(lastmods, R.TS),
        pa.array(freqs, pa.string()),
        pa.repeat(pa.scalar(t, R.TS), n),
        pa.repeat(pa.scalar(unit, pa.string()), n),
    ], schema=CKPT_SITEMAP_SCHEMA).filter(own)


ORIGINS = ["http://a.test", "https://a.test", "http://a.test:8080", "http://ibm.test", "http://xn--bcher-kva.test"]
_piece = st.sampled_from(["a.test", "A.TEST", "a.test:8080", "ibm.test", "İbm.test", "İBM.test", "\u212a.test",
                          "xn--bcher-kva.test", "b.test", "a.test.", "a.tes"])
_loc = st.builds(lambda scheme, host, path: f"{scheme}://{host}{path}",
                 st.sampled_from(["http", "https", "HTTP", "ftp"]), _piece,
                 st.sampled_from(["/", "/p", "/ünï", "", "?q", "/İ"]))
_lastmod = st.one_of(st.none(), st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1),
                                             timezones=st.just(UTC)))
_entry = st.tuples(_loc, _lastmod, st.one_of(st.none(), st.sampled_from(["daily", "never"])))
_file = st.tuples(st.sampled_from(ORIGINS), st.lists(_entry, min_size=1, max_size=8),
                  st.integers(min_value=0, max_value=10**6))


@settings(max_examples=300, deadline=None)
@given(st.lists(_file, min_size=1, max_size=6), st.integers(min_value=1, max_value=7))
def test_entry_rows_equal_the_per_file_tables(files: list, flush_rows: int) -> None:
    t0 = datetime(2026, 12, 2, tzinfo=UTC)
    acc = _SitemapEntries()
    acc.FLUSH_ROWS = flush_rows  # also flushed mid-way, as when FLUSH_ROWS entries are held
    want, parts, kept = [], [], []
    for i, (origin, entries, us) in enumerate(files):
        host = origin.split("://")[1].split(":")[0]
        url, t, unit = f"{origin}/sitemap-{i}.xml", t0 + timedelta(microseconds=us), f"sitemaps {origin}"
        want.append(old_file_table(host, url, origin, entries, t, unit))
        kept.append(acc.add(host, url, origin, entries, t, unit))
        if acc.full():
            parts.append(acc.flush())
    if acc:
        parts.append(acc.flush())
    assert kept == [w.num_rows for w in want]
    got = pa.concat_tables(parts) if parts else CKPT_SITEMAP_SCHEMA.empty_table()
    assert got.schema == CKPT_SITEMAP_SCHEMA
    assert got.to_pylist() == pa.concat_tables(want).to_pylist()


def test_non_ascii_lowering_follows_arrow() -> None:
    """``İ`` lowers to ``i`` in Arrow (one letter) but to ``i̇`` in Python: the row is the origin's."""
    acc = _SitemapEntries()
    assert acc.add("ibm.test", "http://ibm.test/s.xml", "http://ibm.test",
                   [("http://İbm.test/x", None, None), ("http://\u212a.test/", None, None)], datetime.now(UTC), "u") == 1
    assert acc.flush().column("loc").to_pylist() == ["http://İbm.test/x"]
