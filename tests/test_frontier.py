"""Generate: budget, per-host politeness caps, coverage share, whole hosts per partition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from crawl import crawldb, frontier
from crawl.config import load_config
from crawl.url import url_hash

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _db(n_hosts: int, per_host: int, fetched_share: float, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    urls, hosts, counts, prio, due = [], [], [], [], []
    for h in range(n_hosts):
        for i in range(per_host):
            urls.append(f"http://host-{h:03d}.sim.test/p/{i}")
            hosts.append(f"host-{h:03d}.sim.test")
            counts.append(int(rng.random() < fetched_share))
            prio.append(float(rng.random()))
            due.append(NOW - timedelta(minutes=1) if rng.random() < 0.9 else NOW + timedelta(days=1))
    return crawldb.conform(pa.table({
        "url": urls, "url_hash": pa.array([url_hash(u) for u in urls], pa.uint64()), "host": hosts, "pkey": hosts,
        "fetch_count": pa.array(counts, pa.int32()), "priority": prio,
        "next_fetch_time": pa.array(due, pa.timestamp("ms", tz="UTC")),
        "status": ["fetched" if c else "unfetched" for c in counts],
    }))


def test_budget_coverage_share_and_due_time():
    db = _db(40, 50, fetched_share=0.5)
    cfg = load_config(overrides={"max_pages": 400, "coverage_share": 0.3, "politeness_delay_s": 0}, use_env=False)
    sel = frontier.select(cfg, db, NOW)
    assert sel.num_rows == 400
    assert frontier.fresh_count(sel) == 120  # exactly the reserved share: both pools have enough
    chosen = set(sel.column("url_hash").to_pylist())
    not_due = db.filter(pa.compute.greater(db.column("next_fetch_time"), pa.scalar(NOW, pa.timestamp("ms", tz="UTC"))))
    assert chosen.isdisjoint(not_due.column("url_hash").to_pylist())


def test_unused_share_flows_to_the_other_pool():
    db = _db(10, 20, fetched_share=0.95, seed=1)  # few never-fetched URLs
    cfg = load_config(overrides={"max_pages": 150, "coverage_share": 0.5, "politeness_delay_s": 0}, use_env=False)
    sel = frontier.select(cfg, db, NOW)
    n_fresh_due = sum(1 for r in db.to_pylist() if r["fetch_count"] == 0 and r["next_fetch_time"] <= NOW)
    assert frontier.fresh_count(sel) == n_fresh_due < 75
    assert sel.num_rows == 150


def test_host_cap_from_politeness_and_crawl_delay():
    db = _db(5, 100, fetched_share=0.0, seed=2)
    cfg = load_config(overrides={"max_pages": 1000, "politeness_delay_s": 10.0, "round_duration_s": 300.0},
                      use_env=False)
    assert frontier.host_cap(cfg) == 30
    delays = pa.table({"host": ["host-000.sim.test"], "delay_s": [60.0]})
    sel = frontier.select(cfg, db, NOW, delays)
    per_host = {h: c for h, c in zip(*np.unique(sel.column("host").to_pylist(), return_counts=True), strict=True)}
    assert per_host["host-000.sim.test"] == 5  # 300 s / 60 s Crawl-delay
    assert all(c == 30 for h, c in per_host.items() if h != "host-000.sim.test")
    due = pa.compute.less_equal(db.column("next_fetch_time"), pa.scalar(NOW, pa.timestamp("ms", tz="UTC")))
    host1 = pa.compute.and_(pa.compute.equal(db.column("host"), "host-001.sim.test"), due)
    top = db.filter(host1).sort_by([("priority", "descending")])
    got = sel.filter(pa.compute.equal(sel.column("host"), "host-001.sim.test"))
    assert set(got.column("url").to_pylist()) == set(top.column("url").to_pylist()[:30])  # best priority first


def test_partitions_hold_whole_hosts_and_are_stable():
    db = _db(60, 10, fetched_share=0.3, seed=3)
    cfg = load_config(overrides={"max_pages": 600, "partitions": 7, "politeness_delay_s": 0}, use_env=False)
    sel = frontier.select(cfg, db, NOW)
    parts = frontier.split(cfg, sel)
    assert sum(p.num_rows for p in parts) == sel.num_rows
    owner: dict[str, int] = {}
    for k, p in enumerate(parts):
        for h in set(p.column("host").to_pylist()):
            assert owner.setdefault(h, k) == k
    again = frontier.split(cfg, frontier.select(cfg, db, NOW))
    assert [p.column("url").to_pylist() for p in parts] == [p.column("url").to_pylist() for p in again]


def test_co_locate_moves_a_host_to_its_robots_servers_key() -> None:
    from crawl.frontier import balanced_partition_of, co_locate

    t = pa.table({"host": ["a.test", "b.test", "c.test", "d.test"], "pkey": ["a.test", "b.test", "c.test", "d.test"]})
    out = co_locate(t, {"a.test": "b.test", "c.test": "a.test"})  # c -> a -> b: followed to the end
    assert out.column("pkey").to_pylist() == ["b.test", "b.test", "b.test", "d.test"]
    parts = balanced_partition_of(out.column("pkey"), 8)
    assert parts[0] == parts[1] == parts[2]
    assert co_locate(t, {}).equals(t)


def test_hosts_sharing_a_key_share_one_cap() -> None:
    """Three hosts on one address: their one queue runs at the largest delay among them, so the key
    gets one host's round budget (round_duration_s / delay), best priority first across its hosts."""
    db = _db(4, 40, fetched_share=0.0, seed=3)
    ip = {"host-000.sim.test": "10.0.0.1", "host-001.sim.test": "10.0.0.1", "host-002.sim.test": "10.0.0.1",
          "host-003.sim.test": "10.0.0.2"}
    db = db.set_column(db.schema.get_field_index("pkey"), "pkey",
                       pa.array([ip[h] for h in db.column("host").to_pylist()], pa.string()))
    cfg = load_config(overrides={"max_pages": 1000, "politeness_delay_s": 10.0, "round_duration_s": 300.0,
                                 "politeness_key": "ip"}, use_env=False)
    delays = pa.table({"host": ["host-001.sim.test"], "delay_s": [20.0]})
    sel = frontier.select(cfg, db, NOW, delays)
    per_key = dict(zip(*np.unique(sel.column("pkey").to_pylist(), return_counts=True), strict=True))
    assert per_key["10.0.0.1"] == 30 + 15 + 30  # select caps hosts only: the sum of three hosts
    capped = frontier.cap_keys(cfg, sel, delays)
    per_key = dict(zip(*np.unique(capped.column("pkey").to_pylist(), return_counts=True), strict=True))
    assert per_key == {"10.0.0.1": 15, "10.0.0.2": 30}  # 300 s / the key's largest delay (20 s)
    shared = sel.filter(pa.compute.equal(sel.column("pkey"), "10.0.0.1")).sort_by([("priority", "descending")])
    got = capped.filter(pa.compute.equal(capped.column("pkey"), "10.0.0.1"))
    assert set(got.column("url").to_pylist()) == set(shared.column("url").to_pylist()[:15])
    assert capped.column_names == sel.column_names
    fixed = cfg.replace(max_pages_per_host_per_round=7)  # an explicit per-host cap stays per host
    assert frontier.cap_keys(fixed, sel, delays).num_rows == sel.num_rows


def test_generate_reads_only_due_rows_of_live_urls(tmp_path):
    """crawldb.read_due: DuckDB filters the shards to rows due at ``now`` (gone/filtered never), and
    returns every live URL's hash (for seed dedup); checked against the rows as written."""
    from datetime import UTC, datetime, timedelta

    import numpy as np

    from crawl import crawldb
    from crawl.store import Store

    store = Store(str(tmp_path), "due")
    now = datetime(2026, 6, 1, tzinfo=UTC)
    rows = [  # url, status, next_fetch_time
        ("http://a.test/1", "fetched", now - timedelta(hours=1)),
        ("http://a.test/2", "fetched", now + timedelta(hours=1)),
        ("http://a.test/3", "unfetched", None),
        ("http://b.test/4", "gone", now - timedelta(days=1)),
        ("http://b.test/5", "filtered", None),
        ("http://b.test/6", "not_modified", now),
    ]
    db = crawldb.conform(pa.table({
        "url": [r[0] for r in rows], "url_hash": pa.array(np.arange(1, 7, dtype=np.uint64) * 1_000_003),
        "host": [r[0].split("/")[2] for r in rows], "status": [r[1] for r in rows],
        "next_fetch_time": pa.array([r[2] for r in rows], pa.timestamp("ms", tz="UTC")),
        "priority": [1.0] * 6,
    }))
    crawldb.write(store, 3, 4, db)
    due, live = crawldb.read_due(store, 3, 4, now)
    assert sorted(due.column("url").to_pylist()) == ["http://a.test/1", "http://a.test/3", "http://b.test/6"]
    assert due.column_names == list(crawldb.GENERATE_COLUMNS)
    assert sorted(live.tolist()) == [k * 1_000_003 for k in (1, 2, 3, 6)]
    empty, none = crawldb.read_due(store, 0, 4, now)
    assert empty.num_rows == 0 and none.size == 0


def test_partitions_carry_near_equal_urls_of_whole_hosts():
    """split deals hosts out largest first to the emptiest partition: whole hosts, and no partition more
    than the largest host above the smallest (a hash of the host left 15-30 % differences)."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(1, 60, 300)
    hosts = np.repeat([f"h{i:03d}.test" for i in range(sizes.size)], sizes)
    t = pa.table({"host": pa.array(hosts.tolist()), "pkey": pa.array(hosts.tolist()),
                  "url": [f"http://{h}/{i}" for i, h in enumerate(hosts)]})
    cfg = load_config(overrides={"partitions": 4}, use_env=False)
    parts = frontier.split(cfg, t)
    rows = [p.num_rows for p in parts]
    assert sum(rows) == t.num_rows
    assert max(rows) - min(rows) <= sizes.max()
    owner: dict[str, int] = {}
    for k, p in enumerate(parts):
        for h in p.column("host").to_pylist():
            assert owner.setdefault(h, k) == k
