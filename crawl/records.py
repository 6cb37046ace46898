"""Arrow schemas of the files that pass between the steps of a round.

They are the contracts between modules: ``frontier`` writes fetch lists, ``fetch`` reads them and writes
fetch records (plus WARC files), ``parse`` reads fetch records and WARC and writes parsed pages and
links, ``crawldb`` merges all of it into the next CrawlDb version. Keeping the schemas in one place
means a column is renamed once.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("ms", tz="UTC")

# One row per URL to fetch this round; a partition holds whole politeness keys (hosts).
FETCHLIST_SCHEMA = pa.schema([
    ("url", pa.string()),            # canonical URL
    ("url_hash", pa.uint64()),
    ("host", pa.string()),
    ("depth", pa.int32()),
    ("priority", pa.float64()),
    ("etag", pa.string()),           # from the last capture, for conditional GET
    ("last_modified", pa.string()),  # HTTP-date from the last capture
    ("prev_digest", pa.string()),    # payload digest of the last capture
    ("pkey", pa.string()),           # politeness key the frontier partitioned by (the fetcher's queue key)
])

# The robots.txt cache kept in crawl state: the latest usable answer per origin (RFC 9309 §2.3: a
# robots.txt applies to one scheme + host + port). ``host`` is kept for per-host lookups (Crawl-delay).
ROBOTS_CACHE_SCHEMA = pa.schema([
    ("origin", pa.string()),
    ("host", pa.string()),
    ("fetched_at", TS),
    ("status", pa.int32()),
    ("body", pa.binary()),
    # politeness key of the host whose server answered, when a redirect led to another key's host:
    # the frontier then queues this host under that key (one task owns both), see round.generate
    ("robots_key", pa.string()),
])

# Fetch status values written by fetch.py (and carried into the CrawlDb by update).
FETCHED = "fetched"              # 2xx, body stored (WARC response or revisit)
NOT_MODIFIED = "not_modified"    # 304 on a conditional GET (a server-not-modified WARC revisit)
REDIRECT = "redirect"            # 3xx; target in redirect_location (absolute, not canonicalised)
HTTP_ERROR = "http_error"        # 4xx/5xx other than 429/503 backoff statuses
GONE = "gone"                    # 404/410 (permanent), or transient failures past the last retry
RETRY = "retry"                  # transient: timeout, reset, 429/503, 5xx, host deferred
ROBOTS_DENIED = "robots_denied"
DEFERRED = "deferred"            # not tried this round (host backoff, crawl-delay above cap, robots 5xx)
FILTERED = "filtered"            # refused by a URL filter (length, scope) at fetch time
FETCH_STATUSES = (FETCHED, NOT_MODIFIED, REDIRECT, HTTP_ERROR, GONE, RETRY, ROBOTS_DENIED, DEFERRED, FILTERED)

# One row per fetch attempt (including robots.txt and sitemap fetches, subset tells them apart).
FETCH_SCHEMA = pa.schema([
    ("url", pa.string()),
    ("url_hash", pa.uint64()),
    ("host", pa.string()),
    ("depth", pa.int32()),
    ("fetch_time", TS),
    ("status", pa.string()),             # one of FETCH_STATUSES
    ("http_status", pa.int32()),         # 0 when no HTTP answer
    ("redirect_location", pa.string()),
    ("content_type", pa.string()),       # Content-Type header as sent
    ("content_length", pa.int64()),      # bytes of the (decoded) payload kept
    ("truncated", pa.string()),          # Common Crawl: null, "length", "time", "disconnect"
    ("payload_digest", pa.string()),     # "sha1:BASE32" of the payload
    ("etag", pa.string()),
    ("last_modified", pa.string()),
    ("x_robots_tag", pa.string()),
    ("error", pa.string()),
    ("subset", pa.string()),             # "warc" | "crawldiagnostics" | "robotstxt"
    ("warc_filename", pa.string()),      # relative to the crawl root
    ("warc_record_offset", pa.int64()),
    ("warc_record_length", pa.int64()),
    ("warc_type", pa.string()),          # "response" | "revisit" | "resource" | null
    ("revisit_of_url", pa.string()),
    ("revisit_of_date", pa.string()),
    ("retry_after_s", pa.float64()),
])

# One row per <url> entry read from a host's sitemaps (fetched by fetch.py inside the host's politeness
# schedule; update turns them into CrawlDb rows/evidence: source 'sitemap', sitemap_lastmod/changefreq).
SITEMAP_SCHEMA = pa.schema([
    ("host", pa.string()),
    ("sitemap_url", pa.string()),        # the sitemap file the entry came from
    ("loc", pa.string()),                # as written (absolute), not canonicalised
    ("lastmod", TS),
    ("changefreq", pa.string()),
    ("fetch_time", TS),                  # when the sitemap was fetched
])

# One row per parsed document (HTML or another registered MIME type).
PAGE_SCHEMA = pa.schema([
    ("url", pa.string()),
    ("url_hash", pa.uint64()),
    ("title", pa.string()),
    ("text", pa.string()),
    ("text_length", pa.int32()),
    ("content_charset", pa.string()),
    ("content_mime_detected", pa.string()),
    ("content_languages", pa.string()),
    ("canonical_url", pa.string()),      # rel=canonical, resolved (not canonicalised)
    ("meta_noindex", pa.bool_()),
    ("meta_nofollow", pa.bool_()),
    ("outlink_count", pa.int32()),
    ("simhash", pa.int64()),             # 64-bit SimHash of the text, as signed int64
    ("text_digest", pa.string()),        # sha1 base32 of the normalised text
    ("page_count", pa.int32()),          # documents with pages (PDF); null otherwise
    # images (null otherwise): what the image parser read from the header, see crawl.media
    ("image_format", pa.string()),
    ("image_width", pa.int32()),
    ("image_height", pa.int32()),
    ("image_mode", pa.string()),
    ("exif_datetime", pa.timestamp("ms")),  # EXIF has no time zone: naive local camera time
    ("camera_make", pa.string()),
    ("camera_model", pa.string()),
])

# The parsed pages' columns only the text files carry (``crawl.index.TEXT_SCHEMA``, written by the parse
# task from the in-memory pages): the rounds' pages part files leave them out, so the page text is
# compressed and stored once (it was most of the part file's bytes and a third of the parse task's
# Parquet CPU), and update, which reads the part files, never needed it.
PAGE_TEXT_COLUMNS = ("title", "text")

# A round's ``pages`` part file (``rounds/N/pages/part=K.parquet``): PAGE_SCHEMA without the text columns.
PAGE_PART_SCHEMA = pa.schema([f for f in PAGE_SCHEMA if f.name not in PAGE_TEXT_COLUMNS])

# One row per extracted link (resolved against <base href>, not yet canonicalised).
LINK_SCHEMA = pa.schema([
    ("from_url", pa.string()),
    ("to_url", pa.string()),
    ("kind", pa.string()),               # a | area | frame | iframe | link | redirect | sitemap
    ("nofollow", pa.bool_()),
])


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()
