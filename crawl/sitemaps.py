"""Sitemaps: parse sitemap XML (urlset or sitemapindex) and turn entries into CrawlDb evidence.

Sitemaps feed discovery (listed URLs become CrawlDb rows with ``source = 'sitemap'``) and change
evidence (``lastmod`` / ``changefreq``, which :mod:`crawl.schedule` uses only for hosts whose dates
are not lies). Parsing is a pure function of the bytes, safe on hostile input:

- gzip bodies (magic bytes, whatever the Content-Type) are decompressed up to ``max_bytes``;
- no DTD, entity or network access (lxml with ``resolve_entities=False``, ``no_network=True``, and
  any document declaring a DOCTYPE is refused), so XXE and billion-laughs have nothing to expand;
- namespaces are ignored (real sitemaps use the sitemaps.org one, the 0.84 one, or none),
  whitespace around values is trimmed, and at most ``max_entries`` URLs / child sitemaps are kept.

The fetcher calls :func:`parse_sitemap` and writes :data:`SITEMAP_ENTRY_SCHEMA` rows; update calls
:func:`sitemap_rows` to add/annotate CrawlDb rows.
"""

from __future__ import annotations

import gzip
import io
import zlib
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from lxml import etree

from crawl import crawldb
from crawl.records import SITEMAP_SCHEMA, TS

MAX_SITEMAP_BYTES = 50 * 1024 * 1024     # sitemaps.org limit (uncompressed)
MAX_ENTRIES = 50_000                     # sitemaps.org limit per file
MAX_CHILD_SITEMAPS = 1_000               # per index file
MAX_INDEX_DEPTH = 2                      # index → index → urlset at most (caller follows children)

# one row per sitemap entry, written by the fetcher next to its fetch rows (rounds/N/sitemaps/)
SITEMAP_ENTRY_SCHEMA = SITEMAP_SCHEMA

Entry = tuple[str, datetime | None, str | None]


def _decompress(body: bytes, max_bytes: int) -> bytes | None:
    if body[:2] != b"\x1f\x8b":
        return body[:max_bytes] if len(body) <= max_bytes else None
    out = io.BytesIO()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    chunk = memoryview(body)
    try:
        data = d.decompress(chunk, max_bytes + 1)
        out.write(data)
        if out.tell() > max_bytes:
            return None
    except (zlib.error, gzip.BadGzipFile):
        return None
    return out.getvalue()


def parse_lastmod(text: str | None) -> datetime | None:
    """W3C datetime (YYYY, YYYY-MM-DD, or full ISO 8601 with zone) → aware UTC datetime, or None."""
    if not text:
        return None
    s = text.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        if len(s) == 4 and s.isdigit():
            dt = datetime(int(s), 1, 1)
        elif len(s) == 7 and s[4] == "-":
            dt = datetime(int(s[:4]), int(s[5:7]), 1)
        else:
            dt = datetime.fromisoformat(s)
    except ValueError:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def parse_sitemap(body: bytes, base_url: str, max_entries: int = MAX_ENTRIES,
                  max_bytes: int = MAX_SITEMAP_BYTES) -> tuple[list[Entry], list[str]]:
    """(entries (loc, lastmod, changefreq), child sitemap URLs) of a sitemap body; empty when unusable.

    ``base_url`` is only used to drop relative ``loc`` values (sitemaps must list absolute URLs).
    """
    del base_url  # locations must be absolute; nothing is resolved against the sitemap URL
    data = _decompress(body or b"", max_bytes)
    if not data:
        return [], []
    head = data[:4096].lower()
    if b"<!doctype" in head or b"<!entity" in data.lower():
        return [], []
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                             recover=True, remove_comments=True, remove_pis=True)
    try:
        root = etree.fromstring(data, parser)
    except (etree.XMLSyntaxError, ValueError):
        return [], []
    if root is None:
        return [], []
    kind = _local(root.tag)
    entries: list[Entry] = []
    children: list[str] = []
    item_tag = "sitemap" if kind == "sitemapindex" else "url"
    # tag -> local name: a file repeats a handful of tags, so each is split and lowered once
    # (per element that was most of the parse's Python time)
    names: dict[object, str] = {}
    for item in root.iter():
        tag = item.tag
        name = names.get(tag)
        if name is None:
            name = names[tag] = _local(tag)
        if name != item_tag:
            continue
        fields: dict[str, str] = {}
        for child in item:
            tag = child.tag
            name = names.get(tag)
            if name is None:
                name = names[tag] = _local(tag)
            if name in ("loc", "lastmod", "changefreq") and child.text:
                fields[name] = child.text.strip()
        loc = fields.get("loc", "")
        if not loc.lower().startswith(("http://", "https://")):
            continue
        if kind == "sitemapindex":
            if len(children) < min(max_entries, MAX_CHILD_SITEMAPS):
                children.append(loc)
        elif len(entries) < max_entries:
            cf = fields.get("changefreq")
            entries.append((loc, parse_lastmod(fields.get("lastmod")), cf.lower() if cf else None))
        if len(entries) >= max_entries or len(children) >= MAX_CHILD_SITEMAPS:
            break
    return entries, children


def entry_table(sitemap_url: str, host: str, entries: list[Entry], fetch_time: datetime) -> pa.Table:
    """Entries of one sitemap as :data:`SITEMAP_ENTRY_SCHEMA` rows (what the fetcher writes)."""
    n = len(entries)
    return pa.table({
        "host": pa.array([host] * n, pa.string()),
        "sitemap_url": pa.array([sitemap_url] * n, pa.string()),
        "loc": pa.array([e[0] for e in entries], pa.string()),
        "lastmod": pa.array([e[1] for e in entries], TS),
        "changefreq": pa.array([e[2] for e in entries], pa.string()),
        "fetch_time": pa.array([fetch_time] * n, TS),
    }, schema=SITEMAP_ENTRY_SCHEMA)


def sitemap_rows(db: pa.Table, entries: pa.Table, url_hashes: np.ndarray, round_no: int,
                 depth: int = 1) -> tuple[pa.Table, pa.Table]:
    """(``db`` with sitemap_lastmod/changefreq set from ``entries``, new CrawlDb rows for unknown URLs).

    ``entries`` has canonical ``loc`` values and ``url_hashes`` their hashes (the caller canonicalises
    with crawl.url); the newest entry per URL wins. Lastmod dates within a few minutes of the
    sitemap's fetch time are kept as they are: :func:`crawl.changerate.trusted_lastmod` judges hosts.
    """
    # imported here, not at the top: the fetcher imports this module for :func:`parse_sitemap` on its
    # event loop at a worker's first sitemap, and only update (the driver) merges the rows (~35-140 ms of
    # import CPU a worker process, session 13's robosite13 in bench/RESULTS.md)
    import duckdb

    con = duckdb.connect()
    e = entries.append_column("url_hash", pa.array(url_hashes, pa.uint64()))
    con.register("e", e)
    con.register("db", db)
    latest = con.sql("""
        SELECT url_hash, any_value(loc) AS url, any_value(host) AS host, max(lastmod) AS lastmod,
               arg_max(changefreq, fetch_time) AS changefreq
        FROM e WHERE loc IS NOT NULL GROUP BY 1
    """)
    con.register("latest", latest.to_arrow_table())
    annotated = con.sql("""
        SELECT db.* REPLACE (coalesce(l.lastmod, db.sitemap_lastmod) AS sitemap_lastmod,
                             coalesce(l.changefreq, db.sitemap_changefreq) AS sitemap_changefreq)
        FROM db LEFT JOIN latest l USING (url_hash)
    """).to_arrow_table()
    new = con.sql("SELECT * FROM latest WHERE url_hash NOT IN (SELECT url_hash FROM db)").to_arrow_table()
    n = new.num_rows
    rows = crawldb.conform(pa.table({
        "url": new.column("url"), "url_hash": new.column("url_hash"), "host": new.column("host"),
        "pkey": new.column("host"), "depth": pa.array(np.full(n, depth, np.int32)),
        "discovered_round": pa.array(np.full(n, round_no, np.int32)),
        "source": pa.array(["sitemap"] * n, pa.string()), "status": pa.array(["unfetched"] * n, pa.string()),
        "fetch_count": pa.array(np.zeros(n, np.int32)), "check_count": pa.array(np.zeros(n, np.int32)),
        "change_count": pa.array(np.zeros(n, np.int32)), "retry_count": pa.array(np.zeros(n, np.int32)),
        "sitemap_lastmod": new.column("lastmod"), "sitemap_changefreq": new.column("changefreq"),
        "round": pa.array(np.full(n, round_no, np.int32)),
    }))
    return crawldb.conform(annotated), rows


__all__ = ["MAX_CHILD_SITEMAPS", "MAX_ENTRIES", "MAX_INDEX_DEPTH", "SITEMAP_ENTRY_SCHEMA", "entry_table",
           "parse_lastmod", "parse_sitemap", "sitemap_rows"]
