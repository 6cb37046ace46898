"""URLs: one model (parse), our canonical form, trap filters, keys, hashes and their column forms.

Layout (one job per module):

* :mod:`crawl.url.parse` -- the URL model (:class:`URL`, :func:`parse_url`, :func:`host_of`,
  :func:`origin_of`) and WHATWG resolution (:func:`resolve`);
* :mod:`crawl.url.canon` -- our canonicalisation policy (:func:`canonicalize`, :func:`canonicalize_many`);
* :mod:`crawl.url.filters` -- trap and scope rules (:func:`filter_reason`, :func:`filter_reasons`);
* :mod:`crawl.url.surt` -- SURT keys, registered domain, TLD, politeness keys;
* :mod:`crawl.url.hashing` -- xxh3 URL hashes (:func:`url_hash`, :func:`url_hashes`);
* :mod:`crawl.url.columns` -- Arrow/NumPy byte-position kernels behind the column forms, and
  :func:`url_columns` (the URL model's fields as columns);
* :mod:`crawl.url.links` -- link resolution for a whole partition (:func:`resolve_many`).
"""

from __future__ import annotations

from crawl.url.canon import canonical, canonicalize, canonicalize_many
from crawl.url.columns import URL_FIELDS, url_columns
from crawl.url.filters import (
    BAD_SCHEME,
    FILTER_REASONS,
    OUT_OF_SCOPE,
    QUERY_EXPLOSION,
    REPEATED_SEGMENTS,
    TOO_DEEP,
    TOO_LONG,
    TOO_MANY_SEGMENTS,
    filter_reason,
    filter_reasons,
    has_query_explosion,
    has_repeated_segments,
    has_too_many_segments,
    is_bad_scheme,
    is_out_of_scope,
    is_too_deep,
    is_too_long,
)
from crawl.url.hashing import url_hash, url_hashes
from crawl.url.links import resolve_many
from crawl.url.parse import (
    KNOWN_SCHEMES,
    URL,
    WEB_SCHEMES,
    InvalidURL,
    host_of,
    is_ip_host,
    origin_of,
    parse_url,
    resolve,
)
from crawl.url.surt import politeness_key, registered_domain, surt, surts, tld

__all__ = [
    "BAD_SCHEME", "FILTER_REASONS", "KNOWN_SCHEMES", "WEB_SCHEMES", "OUT_OF_SCOPE", "QUERY_EXPLOSION", "REPEATED_SEGMENTS", "TOO_DEEP", "TOO_LONG",
    "TOO_MANY_SEGMENTS", "URL", "URL_FIELDS", "InvalidURL", "canonical", "canonicalize", "canonicalize_many", "filter_reason",
    "filter_reasons", "has_query_explosion", "has_repeated_segments", "has_too_many_segments", "host_of",
    "is_bad_scheme", "is_ip_host", "is_out_of_scope", "is_too_deep", "is_too_long", "origin_of", "parse_url", "politeness_key",
    "registered_domain", "resolve", "resolve_many", "surt", "surts", "tld", "url_columns", "url_hash", "url_hashes",
]
