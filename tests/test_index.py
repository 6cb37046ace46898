"""The page index's URL columns, as Common Crawl defines them, for hosts of every shape.

The expected values are written out by hand from Common Crawl's index schema
(``cc-index-table``'s ``cc-index-schema-flat.json`` and its ``HostName`` rules: an IP address has
no TLD and no registered domain; the TLD is the last label; the registered domain is one label below
the ICANN registry suffix of the Public Suffix List), not computed by the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawl.index import INDEX_SCHEMA, build_index
from crawl.records import FETCH_SCHEMA, PAGE_SCHEMA
from crawl.update import DUP_INFO_SCHEMA

# Common Crawl's columnar index, in its order (cc-index-schema-flat.json) with its types
CC_COLUMNS = [
    ("url_surtkey", "string"), ("url", "string"), ("url_host_name", "string"), ("url_host_tld", "string"),
    ("url_host_2nd_last_part", "string"), ("url_host_3rd_last_part", "string"),
    ("url_host_4th_last_part", "string"), ("url_host_5th_last_part", "string"),
    ("url_host_registry_suffix", "string"), ("url_host_registered_domain", "string"),
    ("url_host_private_suffix", "string"), ("url_host_private_domain", "string"),
    ("url_host_name_reversed", "string"), ("url_protocol", "string"), ("url_port", "integer"),
    ("url_path", "string"), ("url_query", "string"), ("fetch_time", "timestamp"), ("fetch_status", "short"),
    ("fetch_redirect", "string"), ("content_digest", "string"), ("content_mime_type", "string"),
    ("content_mime_detected", "string"), ("content_charset", "string"), ("content_languages", "string"),
    ("content_truncated", "string"), ("warc_record_id", "binary"), ("warc_filename", "string"),
    ("warc_record_offset", "integer"), ("warc_record_length", "integer"), ("warc_segment", "string"),
    ("crawl", "string"), ("subset", "string"),
]
# Spark type -> Arrow types that hold it without loss
COMPATIBLE = {
    "string": {pa.string(), pa.large_string()}, "short": {pa.int16(), pa.int32(), pa.int64()},
    "integer": {pa.int32(), pa.int64()}, "timestamp": {pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")},
}

# url -> (host name, tld, registered domain, protocol, port, path, query)
CASES = {
    "http://www.bbc.co.uk/news": ("www.bbc.co.uk", "uk", "bbc.co.uk", "http", None, "/news", None),
    "https://a.b.example.com:8443/p/q.html?x=1&y=2": ("a.b.example.com", "com", "example.com", "https", 8443,
                                                      "/p/q.html", "x=1&y=2"),
    "http://example.com/?": ("example.com", "com", "example.com", "http", None, "/", ""),
    "http://shop.example.org.uk/": ("shop.example.org.uk", "uk", "example.org.uk", "http", None, "/", None),
    "http://foo.blogspot.com/": ("foo.blogspot.com", "com", "blogspot.com", "http", None, "/", None),  # ICANN suffix
    "http://127.0.0.1:8080/status": ("127.0.0.1", None, None, "http", 8080, "/status", None),
    "http://[::1]:8080/x?a": ("[::1]", None, None, "http", 8080, "/x", "a"),
    "http://[2001:db8::1]/": ("[2001:db8::1]", None, None, "http", None, "/", None),
    "http://xn--mnchen-3ya.de/stadt": ("xn--mnchen-3ya.de", "de", "xn--mnchen-3ya.de", "http", None, "/stadt", None),
    "http://www.xn--e1afmkfd.xn--p1ai/": ("www.xn--e1afmkfd.xn--p1ai", "xn--p1ai", "xn--e1afmkfd.xn--p1ai", "http",
                                          None, "/", None),
    "http://city.kawasaki.jp/": ("city.kawasaki.jp", "jp", "city.kawasaki.jp", "http", None, "/", None),  # !rule
    "http://a.b.kawasaki.jp/": ("a.b.kawasaki.jp", "jp", "a.b.kawasaki.jp", "http", None, "/", None),  # *.kawasaki.jp
}
# hosts without a public suffix: the TLD is still the last label; the registered domain is the host
# itself (this project's choice, so that the column is always a usable grouping key; Common Crawl
# leaves it NULL)
NO_SUFFIX = {
    "http://localhost:8000/x": ("localhost", "localhost", "localhost"),
    "http://news-001.sim.test/": ("news-001.sim.test", "test", "news-001.sim.test"),
    "http://intranet/": ("intranet", "intranet", "intranet"),
}


def _index(urls: list[str]) -> list[dict]:
    n = len(urls)
    t = datetime(2026, 11, 30, 12, tzinfo=UTC)
    fetched = pa.table({
        "url": urls, "url_hash": pa.array(range(1, n + 1), pa.uint64()), "host": [None] * n, "depth": [0] * n,
        "fetch_time": [t] * n, "status": ["fetched"] * n, "http_status": [200] * n, "redirect_location": [None] * n,
        "content_type": ["text/html; charset=utf-8"] * n, "content_length": [10] * n, "truncated": [None] * n,
        "payload_digest": ["sha1:AAAA"] * n, "etag": [None] * n, "last_modified": [None] * n,
        "x_robots_tag": [None] * n, "error": [None] * n, "subset": ["warc"] * n,
        "warc_filename": ["warc/x.warc.gz"] * n, "warc_record_offset": list(range(n)), "warc_record_length": [1] * n,
        "warc_type": ["response"] * n, "revisit_of_url": [None] * n, "revisit_of_date": [None] * n,
        "retry_after_s": [None] * n,
    }, schema=FETCH_SCHEMA)
    fetched = fetched.append_column("part", pa.array([0] * n, pa.int32()))
    rows = build_index(fetched, PAGE_SCHEMA.empty_table(), DUP_INFO_SCHEMA.empty_table(), 1).to_pylist()
    return sorted(rows, key=lambda r: r["warc_record_offset"])


@pytest.mark.parametrize("url", list(CASES))
def test_host_columns_of_varied_hosts(url: str) -> None:
    (row,) = _index([url])
    got = tuple(row[c] for c in ("url_host_name", "url_host_tld", "url_host_registered_domain", "url_protocol",
                                 "url_port", "url_path", "url_query"))
    assert got == CASES[url]
    assert row["url"] == url


def test_hosts_without_a_public_suffix() -> None:
    rows = _index(list(NO_SUFFIX))
    got = {r["url"]: (r["url_host_name"], r["url_host_tld"], r["url_host_registered_domain"]) for r in rows}
    assert got == NO_SUFFIX


def test_many_rows_one_host_agree_with_one_row() -> None:
    """The host columns are computed once per distinct host: rows of one host, interleaved with others,
    get the same values as when indexed alone."""
    urls = [u for u in CASES for _ in range(3)][::-1]
    rows = _index(urls)
    for url, row in zip(urls, rows, strict=True):
        assert (row["url_host_name"], row["url_host_tld"], row["url_host_registered_domain"]) == CASES[url][:3]


def test_common_crawl_column_names_order_and_types() -> None:
    """Every Common Crawl column we write keeps its name, its relative order and a compatible type, so
    Common Crawl's recipes run unchanged; our own columns come after them."""
    cc_names = [c for c, _ in CC_COLUMNS]
    ours = [f.name for f in INDEX_SCHEMA]
    shared = [c for c in ours if c in cc_names]
    assert shared == [c for c in cc_names if c in shared]
    assert ours[:len(shared)] == shared  # ours follow
    cc_types = dict(CC_COLUMNS)
    for f in INDEX_SCHEMA:
        if f.name in cc_types:
            assert f.type in COMPATIBLE[cc_types[f.name]], (f.name, f.type)
    # the ones users query most are all there (crawl and subset are the hive partition directories)
    for c in ("url_surtkey", "url", "url_host_name", "url_host_tld", "url_host_registered_domain", "url_protocol",
              "url_port", "url_path", "url_query", "fetch_time", "fetch_status", "fetch_redirect", "content_digest",
              "content_mime_type", "content_mime_detected", "content_charset", "content_languages",
              "content_truncated", "warc_filename", "warc_record_offset", "warc_record_length", "warc_segment"):
        assert c in ours, c


def _texts_and_images(store, fetched: pa.Table, pages: pa.Table, via_sql: bool) -> tuple[list, list]:
    from crawl.index import IMAGES_SCHEMA, TEXT_SCHEMA, _texts_by_duckdb, write_part_texts

    if via_sql:
        text, images = _texts_by_duckdb(fetched, pages, 4)
        text, images = text.select(TEXT_SCHEMA.names).cast(TEXT_SCHEMA), images.select(IMAGES_SCHEMA.names).cast(IMAGES_SCHEMA)
    else:
        write_part_texts(store, 4, 0, fetched, pages)
        text = store.read_table(store.staged(4, store.text_file(4, 0)))
        images = store.read_table(store.staged(4, store.images_file(4, 0)))
        assert text.schema.equals(TEXT_SCHEMA) and images.schema.equals(IMAGES_SCHEMA)
    key = lambda r: (r["url_hash"], r["fetch_time"], r["url"])  # noqa: E731 - a sort key
    return sorted(text.to_pylist(), key=key), sorted(images.to_pylist(), key=key)


@given(st.lists(st.tuples(st.integers(0, 12), st.sampled_from(["fetched", "redirect", "retry"]),
                          st.sampled_from(["response", "resource", "revisit", None]),
                          st.integers(0, 10**6)), max_size=30),
       st.lists(st.tuples(st.integers(0, 12), st.booleans(), st.text(max_size=8)), max_size=20))
@settings(max_examples=150, deadline=None)
def test_text_and_images_files_are_the_inner_join_of_pages_and_stored_captures(tmp_path_factory, fetch_rows,
                                                                               page_rows) -> None:
    """write_part_texts (Arrow, no copy of the text into a database) against the SQL inner join it
    replaced: the same rows, for pages without a capture, captures without a page, revisits and
    failures, and URLs with several captures."""
    from crawl.store import Store

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    frows = []
    for h, status, wtype, ms in fetch_rows:
        r = {f.name: None for f in FETCH_SCHEMA}
        r.update(url=f"http://h.test/{h}", url_hash=h, status=status, warc_type=wtype,
                 fetch_time=datetime.fromtimestamp(t0.timestamp() + ms / 1000, UTC), payload_digest=f"sha1:{ms}")
        frows.append(r)
    prows = []
    for h, image, text in page_rows:
        r = {f.name: None for f in PAGE_SCHEMA}
        r.update(url=f"http://h.test/{h}", url_hash=h, text=text, title=text[:3], text_length=len(text),
                 page_count=len(text) or None, image_format="PNG" if image else None,
                 image_width=3 if image else None, content_languages="en")
        prows.append(r)
    fetched = pa.Table.from_pylist(frows, schema=FETCH_SCHEMA)
    pages = pa.Table.from_pylist(prows, schema=PAGE_SCHEMA)
    store = Store(str(tmp_path_factory.mktemp("texts")), "tx")
    assert _texts_and_images(store, fetched, pages, False) == _texts_and_images(store, fetched, pages, True)
