"""robots.txt in the fetcher: the fetch (RFC 9309: redirects, unavailable vs unreachable), the TTL
cache read, and applying a policy to an origin's queue (defer, Crawl-delay, disallowed URLs).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from crawl import records as R
from crawl import url as U
from crawl.fetch.outcome import (
    _CUT_ERRORS,
    SUBSET_DIAG,
    SUBSET_ROBOTS,
    SUBSET_SITEMAP,
    _failure_code,
    _header,
    _row,
)
from crawl.fetch.scheduler import _GAP_MARGIN_S, _Host, _Job, _Slot
from crawl.robots import policy_from_response

ROBOTS_MAX_REDIRECTS = 5  # RFC 9309 §2.3.1.2: follow at least five consecutive redirects


def _fresh_robots(cache: pa.Table | None, now: datetime, ttl_s: float) -> dict[str, tuple[int, bytes]]:
    """Latest fresh cached robots answer per origin (vectorised filter, then a small dict)."""
    if cache is None or cache.num_rows == 0 or "origin" not in cache.column_names:
        return {}
    cutoff = pa.scalar(now - timedelta(seconds=ttl_s), R.TS)
    fresh = cache.filter(pc.and_(pc.greater(cache["fetched_at"].cast(R.TS), cutoff),
                                 pc.is_valid(cache["status"])))
    fresh = fresh.sort_by([("origin", "ascending"), ("fetched_at", "descending")])
    out: dict[str, tuple[int, bytes]] = {}
    for h, s, b in zip(fresh["origin"].to_pylist(), fresh["status"].to_pylist(),
                       fresh["body"].to_pylist(), strict=True):
        out.setdefault(h, (s, b or b""))
    return out


class _RobotsFetch:
    """robots.txt of an origin: fetched (redirects followed at the target key's pace) and applied."""

    async def _robots(self, h: _Host, job: _Job) -> None:
        cfg = self.cfg
        url = job.url
        status: int | None = None
        body: bytes | None = None
        robots_key: str | None = None  # the key of the host that answered, when it is not h's
        for hop in range(ROBOTS_MAX_REDIRECTS + 1):
            answer = self.robots_answers.get(url)
            if answer is not None:  # this task has that file's answer (asked, or fresh in the cache)
                if hop:  # the cache row names the answering host's key, as after a request
                    key = self._key_of_url(url)
                    robots_key = key if key != h.slot.key else None
                self.stats["robots_reused"] += 1
                status, body = answer
                break
            other: _Slot | None = None  # the slot of another politeness key a hop goes to
            if hop:  # a redirect hop is a request too: obey the gap of the host it goes to
                key = self._key_of_url(url)
                robots_key = key if key != h.slot.key else None
                target = self.slots.get(key) if robots_key else None
                if robots_key is None:
                    await self._gap(h)
                elif target is None:
                    # another task may be fetching that host now: do not ask it from here. The
                    # cache row names the key, so the frontier puts this host in that key's queue
                    # from the next round on, where the redirect is followed at that host's pace.
                    self.stats["robots_redirect_other_partition"] += 1
                    self.rows.append(_row(_Job(url, U.url_hash(url), 0, unit=job.unit), h.host, self.wall(), R.DEFERRED,
                                          error="robots_other_partition", subset=SUBSET_ROBOTS))
                    self.robots_rows.append({"origin": h.origin, "host": h.host, "fetched_at": self.wall(),
                                             "status": None, "body": None, "robots_key": robots_key})
                    self.settle_host(h, R.DEFERRED, "robots_other_partition")
                    return
                elif await self._acquire(target):
                    other = target
                    self.stats["robots_redirect_other_key"] += 1
                else:
                    self.rows.append(_row(_Job(url, U.url_hash(url), 0, unit=job.unit), h.host, self.wall(), R.RETRY,
                                          error="robots_redirect_busy", subset=SUBSET_ROBOTS))
                    status, body = None, None
                    break
            t = self.wall()
            rjob = _Job(url, U.url_hash(url), 0, unit=job.unit)
            self.stats["robots_requests"] += 1
            try:
                r = await self._request(h, url, {}, cfg.robots_max_bytes, slot=other)
            except Exception as exc:  # noqa: BLE001 - every failure is an answer: "unreachable"
                code = _failure_code(exc, url)
                if code == "private_address" and hop == 0:  # the host itself is refused
                    self.rows.append(_row(rjob, h.host, t, R.FILTERED, error=code, subset=SUBSET_ROBOTS))
                    self.settle_host(h, R.FILTERED, code)
                    return
                if code == "dns" and hop == 0:  # retried in a later round, like its URLs
                    self.rows.append(_row(rjob, h.host, t, R.RETRY, error=code, subset=SUBSET_ROBOTS))
                    self.settle_host(h, R.RETRY, code)
                    return
                self.rows.append(_row(rjob, h.host, t, R.RETRY, error=code, subset=SUBSET_ROBOTS))
                status, body = None, None
                break
            finally:
                if other is not None:
                    self._release(other)
            row = _row(rjob, h.host, t, R.FETCHED if 200 <= r.status < 300 else R.HTTP_ERROR,
                       http_status=r.status, content_type=_header(r.headers, "content-type"),
                       content_length=len(r.body), truncated=r.truncated, subset=SUBSET_ROBOTS,
                       **self._store(SUBSET_ROBOTS, url, t, r))
            status, body = r.status, r.body
            if 200 <= r.status < 300 and r.truncated in _CUT_ERRORS:
                # cut by the total deadline or the network: the rules that did not arrive may be the
                # ones that matter, so the file is unreachable (RFC 9309 2.3.1.4), not the cut part
                row.update(status=R.RETRY, error=_CUT_ERRORS[r.truncated])
                status, body = None, None
            if r.status in (429, 503):  # the host is deferred; its key waits as after a page's 429/503
                self.back_off(other or h.slot, self._slow_down(h, r), h)
            if 300 <= r.status < 400 and r.location:
                target = U.resolve(r.location, url)
                row.update(status=R.REDIRECT, redirect_location=target)
                self.rows.append(row)
                if target is None or hop == ROBOTS_MAX_REDIRECTS:
                    break  # unresolved 3xx: "unavailable", allow all
                url = target
                continue
            self.rows.append(row)
            break
        h.policy = policy_from_response(status, body, cfg.robots_max_bytes, cfg.robots_agent)
        if not h.policy.defer_host:  # an unavailable robots.txt (5xx, 429, unreachable) is not cached
            # nor asked again by this task: a host whose robots.txt redirects here, or the file's own
            # host after such a redirect, takes this answer (each was one more request of the same file)
            self.robots_answers[job.url] = self.robots_answers[url] = (status, body)
            self.robots_rows.append({"origin": h.origin, "host": h.host, "fetched_at": self.wall(),
                                     "status": status, "body": body, "robots_key": robots_key})
        self.apply_policy(h)
        if cfg.sitemaps and not h.closed:
            self._queue_sitemaps(h, h.policy.sitemaps or [h.origin + "/sitemap.xml"])

    def apply_policy(self, h: _Host) -> None:
        """Robots decided: defer, slow down, or mark disallowed URLs before they take a slot."""
        p = h.policy
        assert p is not None
        if p.defer_host:
            self.settle_host(h, R.DEFERRED, "robots_unavailable")
            return
        cd = p.crawl_delay
        if cd is not None and cd > self.cfg.max_crawl_delay_s:
            self.settle_host(h, R.DEFERRED, "crawl_delay_above_cap")
            return
        h.delay = max(self.cfg.politeness_delay_s, cd or 0.0)
        s = h.slot
        s.delay = max(s.delay, h.delay)
        if s.delay > 0:  # the robots.txt request itself counts: gap from it with the new delay
            ref = s.last_answer if self.one_in_flight else s.last_start
            s.next_at = max(s.next_at, ref + s.delay + _GAP_MARGIN_S, s.last_start + s.delay)
        keep: deque[_Job] = deque()
        t = self.wall()
        for job in h.queue:
            if job.robots or p.allowed(job.url):
                keep.append(job)
            else:
                if job.followup:
                    self._unlive(job.unit)
                self.rows.append(_row(job, h.host, t, R.ROBOTS_DENIED, error="robots",
                                      subset=SUBSET_SITEMAP if job.sitemap else SUBSET_DIAG))
        h.queue = keep
