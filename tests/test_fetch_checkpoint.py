"""Fetch checkpoints (crawl.checkpoint) against the real simulated web: an attempt that is stopped
keeps its finished segments, and the next attempt fetches only what they do not hold.

Oracle: the simulated web's access log (which paths were asked twice), the WARC records read back at
the rows' pointers, and the checkpoint files on disk.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_fetch import cfg_for, fetchlist, host_urls, log_for

from crawl.checkpoint import PartitionCheckpoints, fetchlist_key
from crawl.errors import FetchStopped
from crawl.fetch import fetch_partition
from crawl.store import Store
from crawl.warc import read_record

HOSTS = ("news-001.sim.test", "docs-001.sim.test", "archive-001.sim.test")
EVERY = 5


def _pages(log: list[dict]) -> Counter[str]:
    return Counter(r["host"] + r["path"] for r in log if r["path"] != "/robots.txt")


def test_stopped_attempt_keeps_its_segments_and_the_rerun_fetches_the_rest(simweb, tmp_path: Path) -> None:
    sw = simweb
    urls = [u for h in HOSTS for u in host_urls(sw, h, 14)]
    fl = fetchlist(urls)
    cfg = cfg_for(sw, politeness_delay_s=0.2, fetch_checkpoint_every=EVERY, fetch_checkpoint_s=0.0,
                  root=str(tmp_path), crawl_id="ck")
    store = Store(cfg.root, cfg.crawl_id)
    prefix = store.staged(1, store.warc_prefix(1, 0))
    ck = PartitionCheckpoints(store, 1, 0, fetchlist_key(fl))
    since = time.time()
    stop_at = time.monotonic() + 1.5
    with pytest.raises(FetchStopped):  # the lease check says no after about two seconds
        fetch_partition(cfg, fl, root=cfg.root, warc_prefix=prefix, now=datetime.now(UTC),
                        should_continue=lambda: time.monotonic() < stop_at, checkpoint=ck.save,
                        resume=ck.load(prefix))
    first = _pages(log_for(sw, set(HOSTS), since))
    commits = ck.commits()
    assert commits and sum(first.values()) < len(urls), "stop came too late to leave work for a rerun"
    assert list(Path(cfg.root).rglob("*.tmp")) == [], "the stopped segment's WARC files are aborted"

    resume = ck.load(prefix)
    assert resume.next_segment == len(commits) and resume.done and resume.robots_rows.num_rows == len(HOSTS)
    mid = time.time()
    out = fetch_partition(cfg, fl, root=cfg.root, warc_prefix=prefix, now=datetime.now(UTC),
                          checkpoint=ck.save, resume=resume)
    second = _pages(log_for(sw, set(HOSTS), mid))
    again = sum(n for p, n in second.items() if p in first)
    print(f"\nstopped after {sum(first.values())} requests in {len(commits)} segments; the rerun made "
          f"{sum(second.values())}, {again} of them again; {len(resume.done)} URLs resumed")
    # repeated: at most the rows after the last cut plus the requests in flight (one per host)
    assert again <= EVERY + 2 * len(HOSTS)
    assert not any(p.endswith("/robots.txt") for p in second)
    # every input URL has a row, none fetched twice, and every WARC pointer reads back its record
    rows = out.fetches.to_pylist()
    pages = [r for r in rows if r["subset"] not in ("robotstxt", "sitemap")]
    assert set(urls) <= {r["url"] for r in pages}
    fetched = Counter(r["url"] for r in pages if r["status"] == "fetched")
    assert max(fetched.values()) == 1
    segs = {r["warc_filename"] for r in rows if r["warc_filename"]}
    assert len(segs) > 2 and all("-00" in s.rsplit("/", 1)[-1] for s in segs)
    for r in rows:
        if r["warc_filename"]:
            rec = read_record(cfg.root, r["warc_filename"], r["warc_record_offset"], r["warc_record_length"])
            assert rec.url == r["url"], r
    assert len({r["origin"] for r in out.robots_rows.to_pylist()}) == out.robots_rows.num_rows == len(HOSTS)


def test_checkpoints_of_another_fetch_list_are_not_applied(simweb, tmp_path: Path) -> None:
    sw = simweb
    urls = host_urls(sw, "archive-001.sim.test", 12)
    cfg = cfg_for(sw, politeness_delay_s=0.0, fetch_checkpoint_every=EVERY, root=str(tmp_path), crawl_id="ck")
    store = Store(cfg.root, cfg.crawl_id)
    prefix = store.staged(1, store.warc_prefix(1, 0))
    old = PartitionCheckpoints(store, 1, 0, fetchlist_key(fetchlist(urls)))
    fetch_partition(cfg, fetchlist(urls), root=cfg.root, warc_prefix=prefix, now=datetime.now(UTC),
                    checkpoint=old.save)
    warcs = sorted(Path(cfg.root).rglob("*.warc.gz"))
    assert len(old.commits()) >= 2 and len(warcs) >= 2
    # generate wrote the partition again, differently: the old progress must not count
    regenerated = PartitionCheckpoints(store, 1, 0, fetchlist_key(fetchlist(urls[:6])))
    resume = regenerated.load(prefix)
    assert not resume.done and resume.next_segment == 0 and resume.fetches.num_rows == 0
    assert old.commits() == [] and sorted(Path(cfg.root).rglob("*.warc.gz")) == []
    # the same list again: everything is done
    again = PartitionCheckpoints(store, 1, 0, fetchlist_key(fetchlist(urls)))
    fetch_partition(cfg, fetchlist(urls), root=cfg.root, warc_prefix=prefix, now=datetime.now(UTC),
                    checkpoint=again.save)
    assert set(urls) <= again.load(prefix).done


def test_slow_hosts_are_checkpointed_by_time(simweb, tmp_path: Path) -> None:
    """fetch_checkpoint_s cuts a segment when rows come slowly (long delays), not only by count."""
    sw = simweb
    urls = host_urls(sw, "docs-001.sim.test", 6)
    cfg = cfg_for(sw, politeness_delay_s=0.3, fetch_checkpoint_every=0, fetch_checkpoint_s=0.5,
                  root=str(tmp_path), crawl_id="ck", sitemaps=False)
    store = Store(cfg.root, cfg.crawl_id)
    prefix = store.staged(1, store.warc_prefix(1, 0))
    ck = PartitionCheckpoints(store, 1, 0, fetchlist_key(fetchlist(urls)))
    out = fetch_partition(cfg, fetchlist(urls), root=cfg.root, warc_prefix=prefix, now=datetime.now(UTC),
                          checkpoint=ck.save)
    commits = ck.commits()
    assert len(commits) >= 3 and out.stats["segments"] == len(commits)
    assert sum(m["rows"] for m in commits) == out.fetches.num_rows
    assert sorted(out.stats["warc_files"]) == sorted(f for m in commits for f in m["warc_files"])


def test_damaged_checkpoints_are_dropped_not_trusted(tmp_path: Path) -> None:
    """A commit whose tables are gone (or a torn commit file) restarts the partition, it does not
    fail every rerun."""
    store = Store(str(tmp_path), "ck")
    ck = PartitionCheckpoints(store, 1, 0, "k1")
    store.write_json(f"{ck.dir}/seg=0000.json", {"key": "k1", "segment": 0, "attempt": 0, "open": []})
    seg = store.staged(1, store.warc_prefix(1, 0)) + "-0000-warc.warc.gz"
    store.write_bytes(seg, b"a segment of the damaged attempt")
    resume = ck.load(store.staged(1, store.warc_prefix(1, 0)))
    assert resume.next_segment == 0 and not resume.done and resume.fetches.num_rows == 0
    assert not store.exists(ck.dir) and not store.exists(seg)
    store.write_bytes(f"{ck.dir}/seg=0000.json", b"{torn")
    assert ck.load(store.staged(1, store.warc_prefix(1, 0))).next_segment == 0 and not store.exists(ck.dir)
