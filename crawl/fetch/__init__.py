"""The polite per-partition fetcher (see :mod:`crawl.fetch.core` for the design notes)."""

from crawl.fetch.core import (
    ROBOTS_CACHE_SCHEMA,
    FetchOutput,
    backoff_delay,
    event_loop_factory,
    fetch_partition,
    parse_retry_after,
)

__all__ = ["ROBOTS_CACHE_SCHEMA", "FetchOutput", "backoff_delay", "event_loop_factory", "fetch_partition",
           "parse_retry_after"]
