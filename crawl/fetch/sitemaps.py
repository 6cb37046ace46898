"""Sitemaps in the fetcher: which files of an origin are queued (own origin, robots-allowed, capped),
fetching them and reading their entries (capped per origin, own origin only).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from crawl import records as R
from crawl import url as U
from crawl.checkpoint import (
    CKPT_SITEMAP_SCHEMA,
    sitemaps_unit,
)
from crawl.fetch.http import _gunzip_capped
from crawl.fetch.outcome import (
    SUBSET_ROBOTS,
    SUBSET_SITEMAP,
    _failure_code,
    _header,
    _row,
    backoff_delay,
    parse_retry_after,
)
from crawl.fetch.scheduler import _Host, _Job

log = logging.getLogger(__name__)


# sitemaps.org: a sitemap file may be up to 50 MB uncompressed (and list 50,000 URLs); the cap applies
# to the decoded bytes, also for gzip'd .xml.gz files, and bounds each file's memory
SITEMAP_MAX_BYTES = 50_000_000
SITEMAP_MAX_ENTRIES_PER_HOST = 50_000  # entries kept per host and task, over all its sitemap files


class _SitemapFetch:
    """Sitemap files of an origin: queued after its robots.txt, fetched like pages, read into entries."""

    def _queue_sitemaps(self, h: _Host, urls: list[str], after_queued: bool = False) -> None:
        """Queue sitemap files of the host as its next requests (same gap rules as pages).

        Only the host's own files (scheme + host + port of its robots.txt origin: a sitemap may
        only list URLs under its own location), allowed by its robots.txt, each once, at most
        ``cfg.max_sitemaps_per_host``. Root files go first in the host's queue; index children
        (``after_queued``) go behind the sitemaps already queued, so an index is read
        breadth-first and the cap keeps the shallowest files.
        """
        prefix = h.origin.lower() + "/"
        p = h.policy
        jobs: list[_Job] = []
        for url in urls:
            if not url.lower().startswith(prefix):
                self.stats["sitemaps_cross_host"] += 1
                continue
            if url in h.sitemaps_seen:
                continue
            if len(h.sitemaps_seen) >= self.cfg.max_sitemaps_per_host:
                self.stats["sitemaps_over_cap"] += 1
                continue
            h.sitemaps_seen.add(url)
            job = _Job(url, U.url_hash(url), 0, sitemap=True, unit=sitemaps_unit(h.origin), followup=True)
            if p is not None and not p.allowed(url):
                self.rows.append(_row(job, h.host, self.wall(), R.ROBOTS_DENIED, error="robots",
                                      subset=SUBSET_SITEMAP))
                continue
            jobs.append(job)
        if not jobs:
            return
        at = 0
        if after_queued:
            while at < len(h.queue) and h.queue[at].sitemap:
                at += 1
        for i, job in enumerate(jobs):
            h.queue.insert(at + i, job)
            self.live[job.unit] += 1
        self.push(h.slot)

    async def _sitemap(self, h: _Host, job: _Job) -> None:
        """Fetch one sitemap file (stored in the robotstxt WARC: a crawler-control file) and read it."""
        t = self.wall()
        self.stats["sitemap_requests"] += 1
        try:
            r = await self._request(h, job.url, {}, SITEMAP_MAX_BYTES)
        except Exception as exc:  # noqa: BLE001 - network failures become rows
            self.rows.append(_row(job, h.host, t, R.RETRY, error=_failure_code(exc, job.url), subset=SUBSET_SITEMAP))
            return
        s = r.status
        base = dict(http_status=s, content_type=_header(r.headers, "content-type"),
                    etag=_header(r.headers, "etag"), last_modified=_header(r.headers, "last-modified"),
                    content_length=len(r.body), truncated=r.truncated, subset=SUBSET_SITEMAP,
                    **self._store(SUBSET_ROBOTS, job.url, t, r))
        if 200 <= s < 300:
            self.rows.append(_row(job, h.host, t, R.FETCHED, **base))
            self._read_sitemap(h, job, t, r.body)
        elif 300 <= s < 400:
            target = U.resolve(r.location, job.url) if r.location else None
            self.rows.append(_row(job, h.host, t, R.REDIRECT, redirect_location=target, **base))
            if target is not None:  # counts against the per-host cap like any sitemap file
                self._queue_sitemaps(h, [target], after_queued=True)
        elif s in (429, 503):  # the server asks us to slow down: the whole key waits
            wait = parse_retry_after(r.retry_after, datetime.now(UTC))
            if wait is None:
                wait = backoff_delay(self.cfg, h.backoff_n, h.rng)
                h.backoff_n += 1
            h.slot.next_at = max(h.slot.next_at, self.mono() + wait)
            self.rows.append(_row(job, h.host, t, R.RETRY, error=f"http_{s}", retry_after_s=wait, **base))
        else:
            self.rows.append(_row(job, h.host, t, R.GONE if s in (404, 410) else R.HTTP_ERROR, **base))

    def _read_sitemap(self, h: _Host, job: _Job, t: datetime, body: bytes) -> None:
        try:
            from crawl.sitemaps import parse_sitemap  # the freshness side owns the parser
        except ImportError:  # not installed in this checkout: the fetch rows and WARC records stay
            self.stats["sitemaps_unparsed"] += 1
            return
        data, cut = _gunzip_capped(body, SITEMAP_MAX_BYTES)
        if cut:
            self.stats["sitemaps_truncated"] += 1
        try:
            entries, children = parse_sitemap(data, job.url)
        except Exception:  # noqa: BLE001 - a broken sitemap is the site's problem, not the round's
            self.stats["sitemaps_unparsed"] += 1
            # parse_sitemap answers broken XML itself: what reaches here is worth its traceback
            log.warning("sitemap %s not parsed", job.url, exc_info=True)
            return
        if children:
            self._queue_sitemaps(h, children, after_queued=True)
        room = SITEMAP_MAX_ENTRIES_PER_HOST - h.sitemap_entries
        if not entries or room <= 0:
            if entries:
                self.stats["sitemap_entries_over_cap"] += len(entries)
            return
        if len(entries) > room:
            self.stats["sitemap_entries_over_cap"] += len(entries) - room
            entries = entries[:room]
        loc_list, lastmods, freqs = zip(*entries, strict=True)
        locs = pa.array(loc_list, pa.string())
        # sitemaps.org: a file may only list URLs under its own host (and scheme, port)
        own = pc.starts_with(pc.utf8_lower(locs), h.origin.lower() + "/")
        n = len(entries)
        # the columns that are one value for the whole file are repeated from one scalar, not
        # converted n times from a Python list (a third of the table's cost on a 500-entry file)
        tbl = pa.Table.from_arrays([
            pa.repeat(pa.scalar(h.host, pa.string()), n),
            pa.repeat(pa.scalar(job.url, pa.string()), n),
            locs,
            pa.array(lastmods, R.TS),
            pa.array(freqs, pa.string()),
            pa.repeat(pa.scalar(t, R.TS), n),
            pa.repeat(pa.scalar(job.unit, pa.string()), n),
        ], schema=CKPT_SITEMAP_SCHEMA).filter(own)
        self.stats["sitemap_entries_foreign"] += n - tbl.num_rows
        h.sitemap_entries += tbl.num_rows
        self.stats["sitemap_entries"] += tbl.num_rows
        self.sitemap_parts.append(tbl)
