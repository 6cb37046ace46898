"""What an answer means: output rows for fetched pages, redirects, failures and host errors, and
the ``Retry-After``/backoff policy of 429/503.

Why apart: every input URL must end with a row; the rules that turn a response (or an exception)
into rows, retries and host backoff are kept in one place.
"""

from __future__ import annotations

import email.utils
import logging
import random
from datetime import UTC, datetime
from typing import Any

from crawl import records as R
from crawl import url as U
from crawl.config import CrawlConfig
from crawl.errors import FetchStopped
from crawl.fetch.http import FTP_PREFIX, _Response
from crawl.fetch.scheduler import _Host, _Job, _origin
from crawl.net import (
    NetError,
    PrivateAddressError,
    classify_error,
)
from crawl.warc import stored_response_headers

log = logging.getLogger(__name__)

SUBSET_WARC = "warc"
SUBSET_DIAG = "crawldiagnostics"
SUBSET_ROBOTS = "robotstxt"
SUBSET_SITEMAP = "sitemap"  # rows of sitemap requests; their records go in the robotstxt WARC file

# the row's error for a 2xx whose body did not arrive whole (the "length" cap is our own limit: fetched)
_CUT_ERRORS = {"time": "timeout", "disconnect": "reset"}

# what a request may raise from the network, a refused address or a stop; anything else is a bug of ours
# (or of a library) and is logged with its traceback, not only turned into a row's error code
_NETWORK_ERRORS = (OSError, TimeoutError, NetError, FetchStopped)


def _failure_code(exc: BaseException, url: str) -> str:
    """The row's error code for a failed request (:func:`crawl.net.classify_error`); an exception
    that is not a network failure is logged with its traceback, since its row alone would hide it."""
    if not isinstance(exc, _NETWORK_ERRORS):
        log.warning("unexpected %s requesting %s (internal error?)", type(exc).__name__, url, exc_info=exc)
    return classify_error(exc)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def backoff_delay(cfg: CrawlConfig, n: int, rng: random.Random) -> float:
    """The n-th (0-based) host backoff: base doubling, capped, with ±jitter (Nutch NUTCH-2946)."""
    base = min(cfg.backoff_cap_s, cfg.backoff_base_s * (2.0 ** min(n, 60)))
    return base * (1.0 + rng.uniform(-cfg.backoff_jitter, cfg.backoff_jitter))


def _row(job: _Job, host: str, fetch_time: datetime, status: str, **kw: Any) -> dict[str, Any]:
    row = {"url": job.url, "url_hash": job.url_hash, "host": host, "depth": job.depth,
           "fetch_time": fetch_time, "status": status, "http_status": 0, "unit": job.unit}
    row.update(kw)
    return row


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


_ROW_HEADERS = {"content-type": "content_type", "etag": "etag", "last-modified": "last_modified",
                "x-robots-tag": "x_robots_tag"}


def _row_headers(headers: list[tuple[str, str]]) -> dict[str, str | None]:
    """The row columns taken from response headers (the first of each name, as :func:`_header`), in
    one pass over the headers instead of one per column."""
    out: dict[str, str | None] = dict.fromkeys(_ROW_HEADERS.values())
    left = len(_ROW_HEADERS)
    for k, v in headers:
        col = _ROW_HEADERS.get(k.lower())
        if col is not None and out[col] is None:
            out[col] = v
            left -= 1
            if not left:
                break
    return out


class _Outcomes:
    """What a page answer means for the task: its row (fetched, redirect, gone, failure), a held body,
    a redirect hop, a host error with its backoff, and the settling of a host's remaining URLs."""

    async def _page(self, h: _Host, job: _Job) -> None:
        cfg = self.cfg
        t = self.wall()
        self.stats["requests"] += 1
        headers: dict[str, str] = {}
        if job.etag:
            headers["If-None-Match"] = job.etag
        if job.last_modified:
            headers["If-Modified-Since"] = job.last_modified
        try:
            if job.url.startswith(FTP_PREFIX):
                r = await self._ftp_request(h, job.url, cfg.max_body_bytes)
            else:
                r = await self._request(h, job.url, headers, cfg.max_body_bytes)
        except Exception as exc:  # noqa: BLE001 - network failures become rows
            self._failed(h, job, t, exc)
            return
        base: dict[str, Any] = _row_headers(r.headers)
        base["http_status"] = r.status
        s = r.status
        cut = r.truncated
        if 200 <= s < 300 and cut not in _CUT_ERRORS:  # whole, or cut at our own size cap
            self._fetched(h, job, t, r, base)
            return
        if s == 304 and job.prev_digest and headers:  # the stored copy our validators named is current
            base.update(subset=SUBSET_WARC, content_length=len(r.body), truncated=cut,
                        **self._store(SUBSET_WARC, job.url, t, r, not_modified_of=job.prev_digest))
            self.rows.append(_row(job, h.host, t, R.NOT_MODIFIED, **base))
            return
        base.update(subset=SUBSET_DIAG, content_length=len(r.body), truncated=cut,
                    **self._store(SUBSET_DIAG, job.url, t, r))
        if 200 <= s < 300:  # cut by time or the network (uncut 2xx returned above); a final 1xx falls to http_error
            # a body cut by the total deadline or the network is not the page: a transient failure
            # (retried per retry_schedule_s), its capture a diagnostic with WARC-Truncated; update
            # takes no ETag/Last-Modified/digest from it (a later 304 would vouch for the cut body)
            self._host_error(h, job, t, _CUT_ERRORS[cut], base, None)
        elif s == 304:  # to a request without validators, or with no stored copy known: a diagnostic
            self.rows.append(_row(job, h.host, t, R.NOT_MODIFIED, **base))
        elif 300 <= s < 400:
            self._redirect(h, job, t, r, base)
        elif s in (429, 503):
            self._host_error(h, job, t, f"http_{s}", base, self._slow_down(h, r))
        elif s in (404, 410):
            self.rows.append(_row(job, h.host, t, R.GONE, **base))
        elif s >= 500:
            self._host_error(h, job, t, f"http_{s}", base, None)
        else:
            self.rows.append(_row(job, h.host, t, R.HTTP_ERROR, **base))

    def _slow_down(self, h: _Host, r: _Response) -> float:
        """Seconds a 429/503 asks the key to wait: its ``Retry-After``, else the host's next backoff;
        at most ``cfg.backoff_cap_s`` either way (the wait outlives the round: a server's
        ``Retry-After`` of a century must not shut its host out for good)."""
        # an HTTP-date is the server's real clock, so compare with ours, not the task's `now`
        wait = parse_retry_after(r.retry_after, datetime.now(UTC))
        if wait is None:
            wait = backoff_delay(self.cfg, h.backoff_n, h.rng)
            h.backoff_n += 1
        return min(wait, self.cfg.backoff_cap_s)

    def _fetched(self, h: _Host, job: _Job, t: datetime, r: _Response, base: dict[str, Any]) -> None:
        cols = self._store(SUBSET_WARC, job.url, t, r, dedup=True)
        self.stats["bytes"] += len(r.body)
        if self.hold_left:
            self._hold(job.url, r, base["content_type"])
        self.rows.append(_row(job, h.host, t, R.FETCHED, subset=SUBSET_WARC, content_length=len(r.body),
                              truncated=r.truncated, **base, **cols))

    def _hold(self, url: str, r: _Response, ct: str | None = None) -> None:
        """Keep the body of the row about to be appended for the task's parse, with the headers its
        WARC record gives back (FTP ``resource`` records have none); once a body does not fit in the
        budget, keep no more. A record whose headers may not round-trip verbatim is not kept."""
        size = len(r.body)
        if size > self.hold_left:
            self.hold_left = 0
            self.stats["parse_held_over_budget"] = 1
            return
        headers = [] if url.startswith(FTP_PREFIX) else stored_response_headers(r.headers, size)
        if headers is None:
            self.stats["parse_held_not_verbatim"] += 1
            return
        self.held[len(self.rows)] = (headers, r.body)
        self.hold_left -= size
        if self.on_hold is not None:  # a revisit is told only on the writer thread: dropped at the end
            self.on_hold(len(self.rows), url, ct, headers, r.body)

    def _redirect(self, h: _Host, job: _Job, t: datetime, r: _Response, base: dict[str, Any]) -> None:
        target = U.resolve(r.location, job.url, self.schemes) if r.location else None
        if target is None:
            self.rows.append(_row(job, h.host, t, R.HTTP_ERROR, error="redirect_without_location", **base))
            return
        self.rows.append(_row(job, h.host, t, R.REDIRECT, redirect_location=target, **base))
        canon = U.canonicalize(target, self.cfg.tracking_params, self.schemes) or target
        where = _origin(canon, h.host, self.schemes)
        if where is None or where[0] != h.origin:  # another origin has its own robots.txt to ask first
            self.stats["redirect_cross_host"] += 1
            return  # a new URL for the CrawlDb (update turns redirect rows into links)
        hop = _Job(canon, U.url_hash(canon), job.depth, hops=job.hops + 1, unit=job.unit, followup=True)
        if hop.hops > self.cfg.max_redirects:
            self.rows.append(_row(hop, h.host, t, R.FILTERED, error="max_redirects", subset=SUBSET_DIAG))
            return
        reason = U.filter_reason(canon, job.depth, self.cfg)
        if reason is not None:
            self.rows.append(_row(hop, h.host, t, R.FILTERED, error=reason, subset=SUBSET_DIAG))
            return
        if h.policy is not None and not h.policy.allowed(canon):
            self.rows.append(_row(hop, h.host, t, R.ROBOTS_DENIED, error="robots", subset=SUBSET_DIAG))
            return
        if not h.closed:
            h.queue.appendleft(hop)  # next request of this host, after the delay
            self._enlive(hop.unit)
        else:
            self.rows.append(_row(hop, h.host, t, R.DEFERRED, error="host_closed", subset=SUBSET_DIAG))

    def _failed(self, h: _Host, job: _Job, t: datetime, exc: BaseException) -> None:
        code = _failure_code(exc, job.url)
        if isinstance(exc, PrivateAddressError) or code == "private_address":
            self.rows.append(_row(job, h.host, t, R.FILTERED, error=code, subset=SUBSET_DIAG))
            self.settle_host(h, R.FILTERED, code)  # the whole host resolves there
            return
        if code == "dns":
            self.rows.append(_row(job, h.host, t, R.RETRY, error=code, subset=SUBSET_DIAG))
            self.settle_host(h, R.RETRY, code)  # every URL of the host would fail the same way
            return
        if code == "invalid_url":
            self.rows.append(_row(job, h.host, t, R.FILTERED, error=code, subset=SUBSET_DIAG))
            return
        self._host_error(h, job, t, code, {"subset": SUBSET_DIAG}, None)

    def _host_error(self, h: _Host, job: _Job, t: datetime, error: str, base: dict[str, Any],
                    wait: float | None) -> None:
        """Count an error against the host; on 429/503 push its next-allowed time by ``wait``. The
        count is told as it changes (:meth:`back_off` with the wait, else :meth:`tell_host`)."""
        h.errors += 1
        self.stats["host_errors"] += 1
        if wait is not None:
            self.back_off(h.slot, wait, h)
            if h.slot.next_at < self.deadline_s and h.errors < self.cfg.max_host_errors:
                self.rows.append(_row(job, h.host, t, R.RETRY, error=error, retry_after_s=wait, **base))
                h.queue.appendleft(_Job(job.url, job.url_hash, job.depth, job.etag, job.last_modified,
                                        job.hops, unit=job.unit, followup=True, prev_digest=job.prev_digest))
                self._enlive(job.unit)
                return
            self.rows.append(_row(job, h.host, t, R.RETRY, error=error, retry_after_s=wait, **base))
            self.settle_host(h, R.DEFERRED, "host_backoff", retry_after=wait)
            return
        self.tell_host(h)  # the count outlives a crash of the task (crawl.tasks.PendingWaits)
        self.rows.append(_row(job, h.host, t, R.RETRY, error=error, **base))
        if h.errors >= self.cfg.max_host_errors:
            self.settle_host(h, R.DEFERRED, "host_errors")

    def settle_host(self, h: _Host, status: str, error: str, retry_after: float | None = None) -> None:
        """Give every queued URL of the host a final row without fetching it (never lose a URL).

        Queued robots.txt and sitemap requests get their own subset's row, so no consumer mistakes
        them for pages."""
        t = self.wall()
        while h.queue:
            job = h.queue.popleft()
            if job.followup:
                self._unlive(job.unit)
            subset = SUBSET_ROBOTS if job.robots else SUBSET_SITEMAP if job.sitemap else SUBSET_DIAG
            self.rows.append(_row(job, h.host, t, status, error=error, subset=subset,
                                  retry_after_s=retry_after))
        h.closed = True
