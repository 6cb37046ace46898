"""The polite per-partition fetcher: one fetch list in, fetch rows + WARC files out.

One module per job (design notes in :mod:`crawl.fetch.core`):

- :mod:`.scheduler`: jobs, origins, politeness slots, the slot heap, gaps (no sockets);
- :mod:`.h1`: the HTTP/1.1 client (keep-alive pool, httptools parser, SSRF guard at the socket);
- :mod:`.http`: the request (GET through :mod:`.h1` or FTP session), capped body read, gunzip cap;
- :mod:`.outcome`: what an answer means (rows, redirects, failures, host errors, backoff);
- :mod:`.robots` and :mod:`.sitemaps`: the crawler-control files;
- :mod:`.warcwriter`: the writer thread, segment cuts, records;
- :mod:`.core`: ``_Fetcher`` (state, setup, dispatcher) and :func:`fetch_partition`.
"""

from crawl.fetch.core import ROBOTS_CACHE_SCHEMA, FetchOutput, _Fetcher, event_loop_factory, fetch_partition
from crawl.fetch.http import FTP_PREFIX, _gunzip_capped, _Response
from crawl.fetch.outcome import (
    SUBSET_DIAG,
    SUBSET_ROBOTS,
    SUBSET_SITEMAP,
    SUBSET_WARC,
    backoff_delay,
    parse_retry_after,
)
from crawl.fetch.robots import ROBOTS_MAX_REDIRECTS
from crawl.fetch.scheduler import _Host, _Job, _Slot
from crawl.fetch.sitemaps import SITEMAP_MAX_BYTES, SITEMAP_MAX_ENTRIES_PER_HOST
from crawl.fetch.warcwriter import _WarcWriter

__all__ = [
    "FTP_PREFIX", "ROBOTS_CACHE_SCHEMA", "ROBOTS_MAX_REDIRECTS", "SITEMAP_MAX_BYTES", "SITEMAP_MAX_ENTRIES_PER_HOST",
    "SUBSET_DIAG", "SUBSET_ROBOTS", "SUBSET_SITEMAP", "SUBSET_WARC", "FetchOutput", "_Fetcher", "_Host", "_Job",
    "_Response", "_Slot", "_WarcWriter", "_gunzip_capped", "backoff_delay", "event_loop_factory",
    "fetch_partition", "parse_retry_after",
]
