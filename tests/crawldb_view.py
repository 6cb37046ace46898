"""The CrawlDb of one version as the README tells users to read it (its `crawldb` view), for tests that
use the CrawlDb files as their oracle.

A bare ``read_parquet('…/crawldb/v=N/*.parquet')`` reads only the shard files: after an incremental
round (``importance_every_rounds``/``prior_every_rounds`` > 1) the rows that round changed or found are
in ``v=N/overlay/``, so a test's oracle must read what a user reads, not what our own reader
(``crawl.crawldb.source_sql``) derives. ``tests/test_incremental.py`` checks the README's statement
itself against the server's access log.
"""

from __future__ import annotations

from pathlib import Path


def crawldb_relation(state_dir: Path | str, version: int) -> str:
    """A DuckDB relation (a parenthesised SELECT) of CrawlDb ``version`` under ``state/crawl=ID``."""
    return (f"(SELECT * EXCLUDE (filename) FROM read_parquet('{state_dir}/crawldb/v={version:05d}/**/*.parquet', "
            "filename = true, hive_partitioning = false) "
            "QUALIFY row_number() OVER (PARTITION BY url_hash ORDER BY filename LIKE '%/overlay/%' DESC) = 1)")
