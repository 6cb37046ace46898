"""The update step's status transitions, round by round, against what the simulated web did.

Four real rounds (inject → generate → fetch/parse on an in-process Dask cluster → update →
reprioritise → publish) over a handful of seeds whose behaviour the simulated web fixes:
a conditional page (answers 304 while unchanged, then changes when the server's clock jumps), a
page that always fails with 500 (retried on the configured schedule, then gone), a 404, a same-host
redirect chain and a cross-host redirect. The oracle is the server's side: its access log (flushed on
request) counts the requests, and its model says when the page changed.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawl import crawldb
from crawl import round as rnd
from crawl.config import load_config
from crawl.store import Store

RETRY_S = (60.0, 120.0)  # two retries after the first failure: the third failure makes the URL gone
DAY = timedelta(days=1)
FAULT = "http://hostile-001.sim.test/fault/"
PAGE = "http://archive-001.sim.test/"  # conditional GET (ETag + Last-Modified), no per-request noise


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as c:
        yield c


def _cfg(root, simweb):
    return load_config(overrides={
        "root": str(root), "crawl_id": "upd", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.05,
        "partitions": 1, "url_shards": 2, "max_depth": 0, "sitemaps": False, "retry_schedule_s": list(RETRY_S),
        "max_host_errors": 50, "backoff_base_s": 0.2, "total_timeout_s": 3.0, "round_duration_s": 20.0,
    }, use_env=False)


def _db(cfg, round_no: int) -> dict[str, dict]:
    store = Store(cfg.root, cfg.crawl_id)
    return {r["url"]: r for r in crawldb.read(store, round_no, cfg.url_shards).to_pylist()}


def _requests(simweb, since: float) -> Counter:
    log = simweb.log()
    return Counter(f"http://{h}{p}" for h, p, ua, s in zip(
        log.column("host").to_pylist(), log.column("path").to_pylist(), log.column("user_agent").to_pylist(),
        log.column("start").to_pylist(), strict=True) if ua.startswith("RecrawlBot") and s >= since)


@pytest.fixture(scope="module")
def rounds(simweb, client, tmp_path_factory):
    """Four rounds; the CrawlDb after each, the server requests of each, and the round times."""
    cfg = _cfg(tmp_path_factory.mktemp("upd"), simweb)
    t1 = datetime.fromtimestamp(simweb.clock()["time"], UTC).replace(microsecond=0)
    seeds = [PAGE, FAULT + "500", FAULT + "404", FAULT + "redirect-chain-2", FAULT + "redirect-cross"]
    # round 2 400 days later in crawl time but not on the server (the page is unchanged: 304); then the
    # server's clock jumps too, so the page has changed by round 3
    times = [t1, t1 + 400 * DAY, t1 + 800 * DAY, t1 + 1200 * DAY]
    dbs, reqs, served = [], [], []
    for i, now in enumerate(times):
        if i >= 2:
            simweb.set_clock(now.timestamp())
        clock = simweb.clock()
        since = clock["real_time"]
        served.append(clock["time"])
        rnd.run_round(cfg, seeds if i == 0 else None, now, client=client)
        reqs.append(_requests(simweb, since))
        dbs.append(_db(cfg, i + 1))
    simweb.set_clock(datetime.now(UTC).timestamp())
    return cfg, times, dbs, reqs, served


def _ts(t: datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def test_304_is_unchanged_and_a_real_change_is_counted(rounds, simweb):
    cfg, times, dbs, reqs, served = rounds
    m = simweb.model
    pid = m.page_at(m.host_of("archive-001.sim.test"), "/")
    # the server's virtual time when each round started: what it served is the same version in rounds
    # 1 and 2 (a few seconds apart), and another in round 3 (800 days on)
    v = [int(m.version_info(np.array([pid]), t + dt)[0][0]) for t in served[:3] for dt in (0.0, 30.0)]
    assert v[0] == v[1] == v[2] == v[3] != v[4] == v[5], v

    r1, r2, r3 = (dbs[i][PAGE] for i in range(3))
    assert [reqs[i][PAGE] for i in range(3)] == [1, 1, 1]
    assert (r1["status"], r1["fetch_count"], r1["check_count"], r1["change_count"]) == ("fetched", 1, 0, 0)
    assert r1["etag"] and r1["last_modified"] and r1["payload_digest"]
    # round 2: If-None-Match answered 304 -> not_modified, a check without a change
    assert (r2["status"], r2["http_status"], r2["fetch_count"], r2["check_count"], r2["change_count"]) == \
        ("not_modified", 304, 2, 1, 0)
    assert r2["payload_digest"] == r1["payload_digest"] and r2["etag"] == r1["etag"]
    assert r2["last_change_time"] == r1["last_change_time"]
    assert _ts(r2["last_success_time"]) == pytest.approx(_ts(times[1]), abs=60)
    assert r2["unchanged_time_s"] == pytest.approx(_ts(r2["last_success_time"]) - _ts(r1["last_success_time"]),
                                                   abs=1e-3)
    assert r2["changed_time_s"] == 0
    # round 3: the server's page changed: 200 with new content, counted as a change at this fetch
    assert (r3["status"], r3["http_status"], r3["fetch_count"], r3["check_count"], r3["change_count"]) == \
        ("fetched", 200, 3, 2, 1)
    assert r3["payload_digest"] != r1["payload_digest"] and r3["etag"] != r1["etag"]
    assert r3["last_change_time"] == r3["fetch_time"]
    assert r3["unchanged_time_s"] == r2["unchanged_time_s"]
    assert r3["changed_time_s"] == pytest.approx(_ts(r3["last_success_time"]) - _ts(r2["last_success_time"]),
                                                 abs=1e-3)


def test_transient_failures_retry_on_schedule_then_gone(rounds):
    cfg, times, dbs, reqs, served = rounds
    url = FAULT + "500"
    rows = [dbs[i][url] for i in range(4)]
    assert [reqs[i][url] for i in range(4)] == [1, 1, 1, 0]  # three attempts, then never again
    assert [r["status"] for r in rows] == ["retry", "retry", "gone", "gone"]
    assert [r["retry_count"] for r in rows] == [1, 2, 3, 3]
    assert all(r["http_status"] == 500 for r in rows)
    # the wait before each retry is the configured one, counted from the failed fetch
    for r, wait in zip(rows[:2], RETRY_S, strict=True):
        assert _ts(r["next_fetch_time"]) == pytest.approx(_ts(r["fetch_time"]) + wait, abs=1e-3)
    assert rows[2]["next_fetch_time"] is None and rows[3]["fetch_time"] == rows[2]["fetch_time"]


def test_404_is_gone_at_once(rounds):
    cfg, times, dbs, reqs, served = rounds
    url = FAULT + "404"
    assert [reqs[i][url] for i in range(4)] == [1, 0, 0, 0]
    assert [dbs[i][url]["status"] for i in range(4)] == ["gone"] * 4
    assert dbs[0][url]["http_status"] == 404 and dbs[0][url]["next_fetch_time"] is None


def test_redirects(rounds):
    cfg, times, dbs, reqs, served = rounds
    db1 = dbs[0]
    seed, hop1, hop0 = FAULT + "redirect-chain-2", FAULT + "redirect-chain-2/1", FAULT + "redirect-chain-2/0"
    # a same-host chain is followed in the fetch: each hop requested once, each known with its status
    assert (reqs[0][seed], reqs[0][hop1], reqs[0][hop0]) == (1, 1, 1)
    assert (db1[seed]["status"], db1[seed]["http_status"], db1[seed]["redirect_to"]) == ("redirect", 301, hop1)
    assert (db1[hop1]["status"], db1[hop1]["redirect_to"]) == ("redirect", hop0)
    assert db1[hop0]["status"] == "fetched" and db1[hop0]["redirect_to"] is None
    assert db1[hop1]["source"] == db1[hop0]["source"] == "redirect"
    assert db1[hop0]["depth"] == db1[seed]["depth"] == 0  # a redirect is not a link hop
    # a redirect is re-checked after a week, not every round
    assert _ts(db1[seed]["next_fetch_time"]) == pytest.approx(_ts(db1[seed]["fetch_time"]) + 7 * 86400, abs=1e-3)
    # a cross-host redirect is recorded, not followed; its target is queued and fetched next round
    cross = FAULT + "redirect-cross"
    target = db1[cross]["redirect_to"]
    assert db1[cross]["status"] == "redirect" and urlsplit(target).hostname != "hostile-001.sim.test"
    assert reqs[0][target] == 0 and reqs[1][target] == 1
    assert (db1[target]["status"], db1[target]["source"], db1[target]["fetch_count"]) == ("unfetched", "redirect", 0)
    assert (dbs[1][target]["status"], dbs[1][target]["fetch_count"]) == ("fetched", 1)


def test_every_request_is_in_the_crawldb_counts(rounds):
    """The positive count behind the zeros above: per URL, the server's requests over four rounds
    equal the CrawlDb's fetch_count (robots.txt is not a CrawlDb URL). Hops of a followed redirect
    chain are left out: a hop that is due itself is requested again through the chain in the same
    round, and fetch_count counts rounds with an attempt, not requests."""
    cfg, times, dbs, reqs, served = rounds
    chain = (FAULT + "redirect-chain-2/1", FAULT + "redirect-chain-2/0")
    total = sum(reqs, Counter())
    total = Counter({u: n for u, n in total.items() if not u.endswith("/robots.txt") and u not in chain})
    assert total == Counter({u: r["fetch_count"] for u, r in dbs[3].items() if r["fetch_count"] and u not in chain})
    assert len(total) == 6


def test_fetch_task_reads_only_the_digests_of_its_fetch_list(tmp_path):
    """load_known_digests with a fetch list's prev_digest column: exactly those digests' first
    captures, as the whole table has them (a semi-join, not the crawl's history in memory)."""
    import pyarrow as pa

    from crawl.tasks import DIGESTS_SCHEMA, load_known_digests

    store = Store(str(tmp_path), "dg")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    n = 1000
    table = pa.table({"payload_digest": [f"sha1:D{i:05d}" for i in range(n)],
                      "url": [f"http://h{i % 7}.test/p{i}" for i in range(n)],
                      "fetch_time": [t0 + timedelta(minutes=i) for i in range(n)]}).cast(DIGESTS_SCHEMA)
    store.write_table(store.digests_file(3), table)
    full = load_known_digests(store, 3)
    assert len(full) == n
    wanted = pa.array(["sha1:D00007", None, "sha1:D00500", "sha1:D00007", "sha1:NOT-THERE"], pa.string())
    got = load_known_digests(store, 3, wanted)
    assert dict(got) == {k: full[k] for k in ("sha1:D00007", "sha1:D00500")}  # preloaded by the semi-join
    assert got["sha1:D00500"] == ("http://h3.test/p500", (t0 + timedelta(minutes=500)).isoformat())
    assert got.file_lookups == 0
    # any other digest (another URL's earlier capture of the same body) is found in the file by its key
    assert got.get("sha1:D00900") == full["sha1:D00900"] and got.file_lookups == 1
    assert got.get("sha1:NOT-THERE") is None and "sha1:D00901" in got
    got["sha1:NEW"] = ("http://x.test/", "2026-01-02T00:00:00+00:00")  # stored by this task
    assert got["sha1:NEW"] == ("http://x.test/", "2026-01-02T00:00:00+00:00")
    assert load_known_digests(store, 3, pa.array([None], pa.string())) == {}
    assert load_known_digests(store, 2, wanted) == {}  # no table at that version


def test_update_writes_the_digest_keys_of_each_version_and_keeps_two(rounds, tmp_path):
    """Each round's update writes its version's keys file and rounds file: the sorted keys of every
    digest of rounds 1..N, equal to what the digest files themselves give, and beside each key the round
    whose file holds its digest; only the two newest versions' files stay (this round's fetch rerun and
    the next round's fetch read them). A fetch task's lookups answer the same with the files as without
    them (a crawl from before them), and a key hit reads only its round's file."""
    import shutil

    from crawl.digests import DIGESTS_SCHEMA, KnownDigests, digest_files, digest_keys, keys_from_files

    cfg, *_ = rounds
    store = Store(cfg.root, cfg.crawl_id)
    last = store.current_round()
    assert last >= 3
    assert store.ls(store.state("digest_keys")) == [
        f(v) for v in (last - 1, last) for f in (store.digest_rounds_file, store.digest_keys_file)]
    for v in (last - 1, last):
        stored = np.frombuffer(store.read_bytes(store.digest_keys_file(v)), "<u8")
        assert stored.size and np.array_equal(stored, keys_from_files(store, digest_files(store, v)))
        round_of = {}  # each digest's key -> the round of the file that holds it, from the files themselves
        for r in range(1, v + 1):
            col = store.read_table(store.digests_file(r), columns=["payload_digest"]).column(0).combine_chunks()
            round_of.update(dict.fromkeys(digest_keys(col).tolist(), r))
        rounds_file = np.frombuffer(store.read_bytes(store.digest_rounds_file(v)), "<u4")
        assert rounds_file.tolist() == [round_of[k] for k in stored.tolist()]
    shutil.copytree(cfg.root, tmp_path / "old")
    old = Store(str(tmp_path / "old"), cfg.crawl_id)
    old.remove(old.state("digest_keys"))
    digests = store.read_tables(digest_files(store, last), DIGESTS_SCHEMA, columns=["payload_digest"])
    asked = digests.column("payload_digest").to_pylist() + [_real_digest(7)[0]]
    with_file, without = KnownDigests(store, last, {}), KnownDigests(old, last, {})
    assert [with_file.get(d) for d in asked] == [without.get(d) for d in asked]
    assert sum(v is not None for v in (with_file.get(d) for d in asked)) == len(asked) - 1
    hits = len(asked) - 1
    assert with_file.file_lookups == without.file_lookups == hits
    assert with_file.files_read == hits  # one round's file a hit
    assert without.files_read == hits * len(digest_files(store, last))  # every file a hit


def test_generate_writes_the_first_captures_of_its_fetch_lists_digests(rounds):
    """Each round's generate writes, once for its fetch tasks, the first capture of every previous digest
    of its fetch lists, as the whole digest table of the version they fetch against has it."""
    import pyarrow.compute as pc

    from crawl.digests import read_round_captures
    from crawl.records import FETCHLIST_SCHEMA
    from crawl.tasks import load_known_digests

    cfg, *_ = rounds
    store = Store(cfg.root, cfg.crawl_id)
    checked = 0
    for n in range(2, store.current_round() + 1):
        lists = store.read_tables(store.part_files(n, "fetchlist"), FETCHLIST_SCHEMA)
        prev = set(pc.drop_null(lists.column("prev_digest")).to_pylist())
        full = load_known_digests(store, n - 1)
        got = read_round_captures(store, n)
        assert got is not None, n
        times = [t.isoformat() for t in got.column("fetch_time").to_pylist()]
        urls = got.column("url").to_pylist()
        assert dict(zip(got.column("payload_digest").to_pylist(), zip(urls, times, strict=True), strict=True)) == \
            {d: full[d] for d in prev}, n
        checked += len(prev)
    assert checked


def _real_digest(i: int) -> tuple[str, bytes]:
    import hashlib

    from crawl.fingerprint import payload_digest

    body = f"page body {i}".encode()
    return payload_digest(body), hashlib.sha1(body).digest()


def test_stored_digests_are_found_by_key_and_a_miss_reads_no_file(tmp_path):
    """KnownDigests over real SHA-1 digests in three rounds' files: each stored digest is found with
    its first capture (as the whole table read by pyarrow has it) after one file read; a digest that
    is not stored is answered from the keys alone, without reading the file."""
    import pyarrow as pa

    from crawl.digests import KnownDigests
    from crawl.tasks import DIGESTS_SCHEMA, load_known_digests

    store = Store(str(tmp_path), "dk")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for v in (1, 2, 3):
        ids = range((v - 1) * 400, v * 400 + 50)  # 50 digests again in the next round's file (later captures)
        store.write_table(store.digests_file(v), pa.table({
            "payload_digest": [_real_digest(i)[0] for i in ids], "url": [f"http://h.test/{v}/{i}" for i in ids],
            "fetch_time": [t0 + timedelta(days=v, seconds=i) for i in ids]}).cast(DIGESTS_SCHEMA))
    full = load_known_digests(store, 3)
    assert len(full) == 1250
    known = KnownDigests(store, 3, {})
    for n, i in enumerate(range(0, 1250, 7)):
        d = _real_digest(i)[0]
        assert known.get(d) == full[d] and known.file_lookups == n + 1, i
    before = known.file_lookups
    assert all(known.get(_real_digest(i)[0]) is None for i in range(5000, 5500))
    assert known.file_lookups == before  # no key of a fresh digest matched: the file was not read
    known.close()


def test_a_key_hit_reads_the_row_groups_of_its_rounds_files(tmp_path):
    """Digest files in small sorted row groups and the keys and rounds files write_keys makes (round 2's
    rounds file lost, as in a crawl from before them): every stored digest is found with its first
    capture, as the whole table has it, from only the file(s) of its round(s); a digest stored in two
    rounds' files is read from both, and its earliest capture wins; a fresh digest reads nothing."""
    import pyarrow as pa

    from crawl.digests import KnownDigests, first_captures, write_keys
    from crawl.tasks import DIGESTS_SCHEMA, load_known_digests

    store = Store(str(tmp_path), "rg")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for v in (1, 2, 3):
        ids = range((v - 1) * 400, v * 400 + 50)  # 50 digests again in the next round's file (later captures)
        t = pa.table({"payload_digest": [_real_digest(i)[0] for i in ids],
                      "url": [f"http://h.test/{v}/{i}" for i in ids],
                      "fetch_time": [t0 + timedelta(days=v, seconds=i) for i in ids]}).cast(DIGESTS_SCHEMA)
        store.write_table(store.digests_file(v), t.sort_by("payload_digest"), row_group_size=64)
        write_keys(store, v, t.column("payload_digest"))
        if v == 2:
            store.remove(store.digest_rounds_file(2))  # round 3's write derives its rounds from the files
    full = load_known_digests(store, 3)
    assert len(full) == 1250
    known = KnownDigests(store, 3, {})
    twice = {_real_digest(i)[0] for v in (1, 2) for i in range(v * 400, v * 400 + 50)}
    expected_reads = 0
    for i in range(1250):
        d = _real_digest(i)[0]
        assert known.get(d) == full[d], i
        expected_reads += 2 if d in twice else 1
    assert known.file_lookups == 1250 and known.files_read == expected_reads
    assert all(known.get(_real_digest(i)[0]) is None for i in range(5000, 5200)) and known.file_lookups == 1250
    # the semi-join over every file, row groups pruned by their statistics, gives the whole table's answers
    asked = [_real_digest(i)[0] for i in range(0, 1300, 3)]
    got = first_captures(store, [store.digests_file(v) for v in (1, 2, 3)], pa.array(asked + [None]))
    times = [ts.isoformat() for ts in got.column("fetch_time").to_pylist()]
    urls = got.column("url").to_pylist()
    assert dict(zip(got.column("payload_digest").to_pylist(), zip(urls, times, strict=True), strict=True)) == \
        {d: full[d] for d in asked if d in full}


@given(st.one_of(
    st.integers(0, 10**6).map(lambda i: _real_digest(i)[0]),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567abz018=:_ é", min_size=0, max_size=40).map(lambda t: "sha1:" + t),
    st.text(max_size=40)))
def test_a_digest_key_is_the_same_alone_and_in_a_column(digest: str) -> None:
    import pyarrow as pa

    from crawl.digests import digest_key, digest_keys

    key = digest_key(digest)
    column = pa.array(["sha1:" + "A" * 32, digest, None, digest], pa.string())
    assert digest_keys(column).tolist() == [0, key, 0, key]
    assert digest_keys(column.slice(1, 1)).tolist() == [key]
    assert digest_keys(pa.array([digest], pa.large_string())).tolist() == [key]


@given(st.integers(0, 10**9))
def test_a_real_digest_key_is_the_top_60_bits_of_its_sha1(i: int) -> None:
    from crawl.digests import digest_key

    digest, raw = _real_digest(i)
    assert digest_key(digest) == int.from_bytes(raw, "big") >> 100 > 0


def test_a_round_with_nothing_due_carries_the_crawl_forward(tmp_path):
    """Nothing due, nothing injected: the whole round (run_round) publishes CrawlDb N as a byte copy
    of N-1, seen-sets and Bloom filters too, without merging a shard; stats say so."""
    import pyarrow as pa

    from crawl import seen
    from crawl.config import load_config
    from crawl.url import url_hash

    cfg = load_config(overrides={"root": str(tmp_path / "root"), "crawl_id": "cf", "url_shards": 2,
                                 "dask_dashboard": False}, use_env=False)
    store = Store(cfg.root, cfg.crawl_id)
    now = datetime(2026, 6, 1, tzinfo=UTC)
    urls = [f"http://a.test/{i}" for i in range(40)]
    hashes = np.array([url_hash(u) for u in urls], np.uint64)
    db = crawldb.conform(pa.table({
        "url": urls, "url_hash": pa.array(hashes),
        "host": ["a.test"] * 40, "status": ["fetched"] * 40, "priority": [1.0] * 40,
        "next_fetch_time": pa.array([now + timedelta(days=1)] * 40, pa.timestamp("ms", tz="UTC")),
    }))
    crawldb.write(store, 1, 2, db)
    for s, part in enumerate(seen.split_by_shard(hashes, 2)):
        seen.write_seen(store.url(store.seen_file(1, s, "parquet")), part)
        seen.bloom_from_seen(seen.sorted_unique(part), 0.01).save(store.url(store.seen_file(1, s, "bloom")))
    store.write_json(store.state("CURRENT.json"), {"round": 1})
    summary = rnd.run_round(cfg, None, now)
    assert store.current_round() == 2 and summary["generate"]["urls"] == 0
    assert summary["update"]["carried_forward"] and summary["update"]["known"] == 40
    assert summary["reprioritise"]["carried_forward"]
    for s in range(2):
        assert store.read_bytes(crawldb.shard_path(store, 2, s)) == store.read_bytes(crawldb.shard_path(store, 1, s))
        for ext in ("parquet", "bloom"):
            assert store.read_bytes(store.seen_file(2, s, ext)) == store.read_bytes(store.seen_file(1, s, ext))
    assert not store.exists(store.round_dir(2, "merged"))  # no shard was merged

    # re-injecting seeds the crawl knows adds no row: still a carry-forward (crawl_bench's fixed round)
    summary = rnd.run_round(cfg, ["http://a.test/3", "http://a.test/17"], now)
    assert summary["update"]["carried_forward"] and summary["update"]["known"] == 40
    assert summary["reprioritise"]["carried_forward"] and not store.exists(store.round_dir(3, "merged"))
    for s in range(2):
        assert store.read_bytes(crawldb.shard_path(store, 3, s)) == store.read_bytes(crawldb.shard_path(store, 1, s))
    # one new seed among known ones: the round has a row to add, so no carry-forward
    from crawl.update import carry_forward

    rnd.inject(cfg, ["http://a.test/3", "http://a.test/new"], now)
    assert carry_forward(cfg, store, 4) is None
