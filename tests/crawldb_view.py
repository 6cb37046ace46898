"""The CrawlDb of one version as the README tells users to read it (its `crawldb` view), for tests that
use the CrawlDb files as their oracle.

A bare ``read_parquet('…/crawldb/v=N/*.parquet')`` reads only the shard files: after an incremental
round (``importance_every_rounds``/``prior_every_rounds`` > 1) the rows that round changed or found are
in ``v=N/overlay/``, so a test's oracle must read what a user reads, not what our own reader
(``crawl.crawldb.source_sql``) derives. ``tests/test_incremental.py`` checks the README's statement
itself against the server's access log.

Also the fetch rows of a round (:func:`fetch_rows`), the staged files the round's update reads.
"""

from __future__ import annotations

from pathlib import Path


def crawldb_relation(state_dir: Path | str, version: int) -> str:
    """A DuckDB relation (a parenthesised SELECT) of CrawlDb ``version`` under ``state/crawl=ID``."""
    return (f"(SELECT * EXCLUDE (filename) FROM read_parquet('{state_dir}/crawldb/v={version:05d}/**/*.parquet', "
            "filename = true, hive_partitioning = false) "
            "QUALIFY row_number() OVER (PARTITION BY url_hash ORDER BY filename LIKE '%/overlay/%' DESC) = 1)")


def fetch_rows(root: Path, round_no: int, columns: list[str] | None = None, crawl_id: str = "t") -> list[dict]:
    """The fetch rows of round ``round_no`` (every partition's ``fetched`` file, read with pyarrow)."""
    import pyarrow.parquet as pq

    files = sorted((root / "state" / f"crawl={crawl_id}" / "rounds" / f"{round_no:05d}" / "fetched").glob("*.parquet"))
    assert files, f"round {round_no} has no fetched files"
    return [r for f in files for r in pq.read_table(f, columns=columns).to_pylist()]
