"""Sitemaps in the fetcher: which files of an origin are queued (own origin, robots-allowed, capped),
fetching them and reading their entries (capped per origin, own origin only).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

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
)
from crawl.fetch.scheduler import _Host, _Job

if TYPE_CHECKING:  # the parser's module is imported lazily (see _read_sitemap)
    from crawl.sitemaps import Entry

log = logging.getLogger(__name__)


# sitemaps.org: a sitemap file may be up to 50 MB uncompressed (and list 50,000 URLs); the cap applies
# to the decoded bytes, also for gzip'd .xml.gz files, and bounds each file's memory
SITEMAP_MAX_BYTES = 50_000_000
SITEMAP_MAX_ENTRIES_PER_HOST = 50_000  # entries kept per host and task, over all its sitemap files


def _own(loc: str, prefix: str) -> bool:
    """Does ``loc`` lie under ``prefix`` (``scheme://host[:port]/``, lower case), compared case-blind
    as Arrow's ``utf8_lower`` lowers? An ASCII ``loc`` (all real ones) is lowered by ``str.lower``,
    which is the same mapping there; any other goes through Arrow's kernel (``str.lower`` maps some
    letters differently: ``"İ"`` becomes two characters, Arrow's one)."""
    if loc.isascii():
        return loc.lower().startswith(prefix)
    return pc.utf8_lower(pa.scalar(loc, pa.string())).as_py().startswith(prefix)


class _SitemapEntries:
    """The sitemap entries a task read (:data:`crawl.checkpoint.CKPT_SITEMAP_SCHEMA` rows), gathered
    as Python columns and made into one Arrow table per flush.

    Why not a table per file: building a 7-column table (repeated constant columns, an Arrow kernel
    for the own-origin rule, a filter) cost ~0.1-0.3 ms per sitemap file on the event loop, whatever
    its size; the simulated web's hosts have files of ~25 entries. Here a file costs its entries'
    appends and one conversion per column at the flush, in the same row order.
    """

    FLUSH_ROWS = 50_000  # bounds the Python objects held between flushes

    def __init__(self) -> None:
        self.cols: tuple[list[Any], ...] = ([], [], [], [], [], [], [])

    def __len__(self) -> int:
        return len(self.cols[2])

    def add(self, host: str, sitemap_url: str, origin: str, entries: list[Entry], t: datetime,
            unit: str) -> int:
        """Keep the entries of one file that list its own origin (sitemaps.org: a file may only list
        URLs under its own scheme, host and port); returns how many were kept."""
        prefix = origin.lower() + "/"
        own = [e for e in entries if _own(e[0], prefix)]
        n = len(own)
        if n:
            hosts, urls, locs, lastmods, freqs, times, units = self.cols
            hosts.extend([host] * n)
            urls.extend([sitemap_url] * n)
            for loc, lastmod, freq in own:
                locs.append(loc)
                lastmods.append(lastmod)
                freqs.append(freq)
            times.extend([t] * n)
            units.extend([unit] * n)
        return n

    def full(self) -> bool:
        return len(self.cols[2]) >= self.FLUSH_ROWS

    def flush(self) -> pa.Table:
        """The gathered rows as one table (then forgotten)."""
        hosts, urls, locs, lastmods, freqs, times, units = self.cols
        self.cols = ([], [], [], [], [], [], [])
        return pa.Table.from_arrays([
            pa.array(hosts, pa.string()), pa.array(urls, pa.string()), pa.array(locs, pa.string()),
            pa.array(lastmods, R.TS), pa.array(freqs, pa.string()), pa.array(times, R.TS),
            pa.array(units, pa.string()),
        ], schema=CKPT_SITEMAP_SCHEMA)


class _SitemapFetch:
    """Sitemap files of an origin: queued after its robots.txt, fetched like pages, read into entries."""

    def _queue_sitemaps(self, h: _Host, urls: list[str], after_queued: bool = False) -> None:
        """Queue sitemap files of the host as its next requests (same gap rules as pages).

        Only the host's own files (scheme + host + port of its robots.txt origin: a sitemap may
        only list URLs under its own location), no longer than ``cfg.max_url_length``, allowed by
        its robots.txt, each once, at most ``cfg.max_sitemaps_per_host``. Root files go first in the host's queue; index children
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
            if U.is_too_long(url, self.cfg.max_url_length):  # the limit every URL we request keeps
                self.stats["sitemaps_too_long"] += 1
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
            self._enlive(job.unit)
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
            wait = self._slow_down(h, r)
            self.back_off(h.slot, wait, h)
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
        kept = self.sitemap_entries.add(h.host, job.url, h.origin, entries, t, job.unit)
        self.stats["sitemap_entries_foreign"] += len(entries) - kept
        h.sitemap_entries += kept
        self.stats["sitemap_entries"] += kept
        if self.sitemap_entries.full():
            self.sitemap_parts.append(self.sitemap_entries.flush())

    def _flush_sitemap_entries(self) -> None:
        """Entries read since the last flush become one table of ``sitemap_parts`` (before a segment
        cut takes its parts, and at the end)."""
        if self.sitemap_entries:
            self.sitemap_parts.append(self.sitemap_entries.flush())
