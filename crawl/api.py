"""Read-side functions for the HTTP API and the CLI: crawl summaries and stored-copy lookup."""

from __future__ import annotations

from typing import Any

from crawl import query
from crawl.store import Store
from crawl.url import KNOWN_SCHEMES, canonicalize
from crawl.warc import read_record


def list_crawls(root: str) -> list[str]:
    store = Store(root, "_")
    return sorted(p.rsplit("crawl=", 1)[1] for p in store.ls("state") if "crawl=" in p)


def crawl_summary(root: str, crawl_id: str) -> dict[str, Any] | None:
    """Counts over the current CrawlDb plus the last round's manifest; None for an unknown crawl."""
    store = Store(root, crawl_id)
    if not store.ls(store.state()):
        return None
    current = store.current_round()
    out: dict[str, Any] = {"crawl_id": crawl_id, "last_round": current, "last_round_stats": None,
                           "known": 0, "fetched": 0, "queued": 0, "failed": 0, "gone": 0, "duplicates": 0,
                           "robots_denied": 0, "status": {}}
    if current == 0:
        return out
    con = query.connect(root, crawl_id)
    row = con.execute("""
        SELECT count(*) AS known,
               count(*) FILTER (WHERE status IN ('fetched', 'not_modified')) AS fetched,
               count(*) FILTER (WHERE status IN ('unfetched', 'deferred')) AS queued,
               count(*) FILTER (WHERE status IN ('retry', 'http_error')) AS failed,
               count(*) FILTER (WHERE status = 'gone') AS gone,
               count(*) FILTER (WHERE status IN ('duplicate', 'near_duplicate')) AS duplicates,
               count(*) FILTER (WHERE status = 'robots_denied') AS robots_denied
        FROM crawldb
    """).fetchone()
    out.update(dict(zip(["known", "fetched", "queued", "failed", "gone", "duplicates", "robots_denied"],
                        (int(v) for v in row), strict=True)))
    out["status"] = dict(con.execute("SELECT status, count(*) FROM crawldb GROUP BY 1 ORDER BY 1").fetchall())
    out["last_round_stats"] = store.read_json(store.round_dir(current, "manifest.json"))
    return out


def lookup(root: str, crawl_id: str, url: str) -> dict[str, Any] | None:
    """The latest capture of ``url`` (canonicalised) in the page index; None when never captured,
    also in a crawl that has not published a round yet (its page index is not visible until then)."""
    canon = canonicalize(url, schemes=KNOWN_SCHEMES)  # any capture: ftp ones too, where a crawl opted in
    if canon is None:
        raise ValueError(f"not an http(s) or ftp URL: {url!r}")
    if Store(root, crawl_id).current_round() == 0:
        return None
    con = query.connect(root, crawl_id)
    rel = con.execute("""
        SELECT url, url_surtkey, fetch_time, fetch_status, crawl_status, content_digest, content_mime_type,
               content_charset, content_truncated, duplicate_of, warc_type, warc_filename,
               warc_record_offset, warc_record_length, round, subset
        FROM pages WHERE url = ? AND subset <> 'robotstxt'
        ORDER BY fetch_time DESC LIMIT 1
    """, [canon])
    row = rel.fetchone()
    if row is None:
        return None
    cols = [d[0] for d in rel.description]
    rec = dict(zip(cols, row, strict=True))
    rec["fetch_time"] = rec["fetch_time"].isoformat() if rec["fetch_time"] else None
    # The stored body: the latest 2xx response of this URL; for a revisit (identical payload stored
    # earlier, maybe under another URL, or a 304: server-not-modified) the response record with the
    # same digest. An error capture (or a 304 kept as a diagnostic) has no body of its own, so the body
    # comes from the last capture that had one.
    body = con.execute("""
        WITH mine AS (
            SELECT warc_type, content_digest, fetch_time FROM pages
            WHERE url = ? AND subset = 'warc' AND warc_type IN ('response', 'resource', 'revisit')
            ORDER BY fetch_time DESC LIMIT 1
        )
        SELECT p.warc_filename, p.warc_record_offset, p.warc_record_length
        FROM pages p, mine
        WHERE p.subset = 'warc' AND p.warc_type IN ('response', 'resource') AND p.content_digest = mine.content_digest
        ORDER BY (p.url = ?) DESC, p.fetch_time DESC LIMIT 1
    """, [canon, canon]).fetchone()
    rec["body_record"] = dict(zip(("warc_filename", "warc_record_offset", "warc_record_length"), body,
                                  strict=True)) if body else None
    return rec


def read_body(root: str, capture: dict[str, Any]) -> bytes:
    """The stored payload of a capture: its ``body_record`` when :func:`lookup` found one (revisits,
    304s), else the record the capture itself points at."""
    where = capture.get("body_record") or capture
    rec = read_record(root, where["warc_filename"], int(where["warc_record_offset"]),
                      int(where["warc_record_length"]))
    return rec.payload
