"""Politeness and robots.txt scope, judged from the simulated web's access log.

The bait (``python -m crawl.simweb serve --origin-bait --bind 127.0.0.1,::1``) links the pages of a
server under every spelling of its name (``user@host``, ``a:b@HOST:80``, ``host.``, ``Host:80``,
another port, its IPv6 literal with and without userinfo), hosts whose robots.txt redirects to that
server's robots.txt, and a host whose robots.txt answers 429. The server normalises the host it
logs, so a crawler that keys politeness on the spelling shows up as overlapping requests or short
gaps on one server; ``authority`` (the Host header as sent) shows which origins asked robots.txt.

Two fetch partitions, three rounds: a robots.txt redirect to another host is followed by the task
that owns that host's queue, at its pace; a task that does not own it defers the host once, and the
next round's frontier queues the host under the target's key (frontier.co_locate).
"""

from __future__ import annotations

import pytest

from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.simweb.accesslog import politeness_report, read_log
from crawl.simweb.origins import HOPS, OTHER_PORT
from tests.conftest import start_simweb

DELAY = 0.25
ROUNDS = 3
SEED = "http://spellings.sim.test/"
UA = "RecrawlBot%"


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    sw = start_simweb(tmp_path_factory.mktemp("simweb-origins"), hosts=30, pages_per_host=6,
                      extra_args=("--origin-bait", "--bind", "127.0.0.1,::1"))
    try:
        yield sw
    finally:
        sw.stop()


@pytest.fixture(scope="module")
def crawled(web, tmp_path_factory):
    import time
    cfg = load_config(overrides={
        "root": str(tmp_path_factory.mktemp("crawl")), "crawl_id": "origins",
        "resolve": [web.resolve_rule, f"::1=[::1]:{web.port}"], "politeness_delay_s": DELAY,
        "max_pages": 400, "partitions": 2, "url_shards": 1, "round_duration_s": 30.0,
        "connect_timeout_s": 1.0, "read_timeout_s": 2.0, "total_timeout_s": 4.0, "dask_workers": 2,
        "max_crawl_delay_s": 5.0, "sitemaps": False}, use_env=False)
    t = time.monotonic()
    with dask_client(cfg) as client:
        for i in range(ROUNDS):
            rnd.run_round(cfg, [SEED] if i == 0 else None, client=client)
    web.flush_log()  # every request answered so far is in the file (no sleep-and-hope)
    return cfg, time.monotonic() - t


def test_one_queue_per_server_whatever_the_spelling(crawled, web):
    _, seconds = crawled
    rep = politeness_report(web.access_log, user_agent_like=UA).to_pylist()
    good = web.model.good_hosts()[0].name
    by_host = {r["host"]: r for r in rep}
    assert by_host[good]["requests"] >= 8, by_host[good]  # the spelled links were fetched ...
    assert by_host["[::1]"]["requests"] >= 3, by_host.get("[::1]")  # ... and the IPv6 literal ones
    violations = [r for r in rep if r["max_in_flight"] > 1 or (r["min_gap_s"] is not None
                                                              and r["min_gap_s"] < DELAY)]
    gaps = [r["min_gap_s"] for r in rep if r["min_gap_s"] is not None]
    print(f"\n{len(rep)} servers, {sum(r['requests'] for r in rep)} requests, {len(violations)} violations, "
          f"min gap {min(gaps):.3f}s (delay {DELAY}s), {ROUNDS} rounds in {seconds:.1f}s")
    assert violations == []


def test_robots_txt_asked_per_origin(crawled, web):
    log = [r for r in read_log(web.access_log).to_pylist() if r["user_agent"].startswith("RecrawlBot")]
    good = web.model.good_hosts()[0].name
    first_robots: dict[str, float] = {}
    first_page: dict[str, float] = {}
    for r in log:
        d = first_robots if r["path"] == "/robots.txt" else first_page
        d.setdefault(r["authority"], r["start"])
    other = f"{good}:{OTHER_PORT}"
    assert other in first_page, sorted(first_page)  # the other origin of the same host was crawled
    # every origin that served a page had its own robots.txt asked first
    for authority, t in first_page.items():
        assert authority in first_robots and first_robots[authority] < t, authority
    assert f"[::1]:{web.port}" in first_robots


def test_robots_429_defers_the_host(crawled, web):
    paths = [r["path"] for r in read_log(web.access_log).to_pylist() if r["host"] == "robots-429.sim.test"]
    assert paths and set(paths) == {"/robots.txt"}, paths


def test_robots_redirect_to_another_host_takes_its_answer_once(crawled, web):
    """The HOPS hosts whose robots.txt redirects to the good host's are crawled under its rules, and that
    file is asked once per origin in the three rounds (its TTL is a day): a hop reuses the answer the
    task already has, asked by itself or fresh in the cache. It was asked again for every hop (HOPS + 1
    requests of one file, two of them in one task a few hundred ms apart)."""
    from collections import Counter

    log = read_log(web.access_log).to_pylist()
    good = web.model.good_hosts()[0].name
    hops = {r["host"] for r in log if r["host"].startswith("robots-hop-") and r["path"] == "/robots.txt"}
    assert len(hops) == HOPS
    asked = Counter(r["authority"] for r in log if r["host"] == good and r["path"] == "/robots.txt")
    assert asked and set(asked.values()) == {1}, asked  # its two origins (port 80 and OTHER_PORT), once each
    # every hop host was crawled in the end: in its first round by the task owning the target's queue,
    # or one round later, moved into that queue (its pace: the politeness report above)
    assert {r["host"] for r in log if r["host"].startswith("robots-hop-") and r["path"] == "/"} == hops


def test_robots_redirect_to_a_host_of_another_partition_is_left_to_its_owner(crawled, web, tmp_path):
    """A fetch task whose fetch list lacks the redirect target's key does not ask that host (another
    task may be fetching it): the host is deferred and the cache row names the key, which the
    frontier then uses to queue the host with its robots.txt server (frontier.co_locate)."""
    import time
    from datetime import UTC, datetime

    import pyarrow as pa

    from crawl import url as U
    from crawl.fetch import fetch_partition
    from crawl.records import FETCHLIST_SCHEMA

    good = web.model.good_hosts()[0].name
    urls = ["http://robots-hop-0.sim.test/", "http://robots-hop-0.sim.test/x"]
    n = len(urls)
    fl = pa.table({"url": urls, "url_hash": pa.array([U.url_hash(u) for u in urls], pa.uint64()),
                   "host": [U.host_of(u) for u in urls], "depth": pa.array([0] * n, pa.int32()),
                   "priority": [1.0] * n, "etag": pa.array([None] * n, pa.string()),
                   "last_modified": pa.array([None] * n, pa.string()),
                   "prev_digest": pa.array([None] * n, pa.string()), "pkey": [U.politeness_key(u) for u in urls]},
                  schema=FETCHLIST_SCHEMA)
    cfg, _ = crawled
    since = time.time()
    out = fetch_partition(cfg.replace(root=str(tmp_path)), fl, root=str(tmp_path), warc_prefix="x/p0",
                          now=datetime.now(UTC))
    seen = [(r["host"], r["path"]) for r in web.log().to_pylist()
            if r["start"] >= since and r["user_agent"].startswith("RecrawlBot")]
    assert seen == [("robots-hop-0.sim.test", "/robots.txt")], seen  # the target was not asked
    rows = {r["url"]: r for r in out.fetches.to_pylist()}
    assert all(rows[u]["status"] == "deferred" for u in urls)
    assert out.robots_rows.to_pylist()[0]["robots_key"] == good
