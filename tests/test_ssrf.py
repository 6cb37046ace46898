"""SSRF: a crawl of the simulated web's hostile-links page never connects to a private address.

The oracle is a canary listener on 127.0.0.1 and ::1 (the port every bait URL carries), not the
crawler's records: its log must stay empty. Paired with positive counts from the simulated web's
access log (the hostile-links page, its legitimate links, its redirects, the bait hosts' robots.txt
and sitemaps were all asked for), and a control crawl with ``allow_private_networks`` that shows the
same bait does reach the canary when the guard is off, so the empty log means something.
"""

from __future__ import annotations

import time

import pytest

from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.simweb.accesslog import read_log
from crawl.simweb.canary import Canary
from crawl.simweb.ssrf import OK_PAGES, ssrf_forms
from tests.conftest import start_simweb

ROUNDS = 3
SEED = "http://ssrf.sim.test/"


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    with Canary(tmp_path_factory.mktemp("canary") / "canary.jsonl") as c:
        yield c


@pytest.fixture(scope="module")
def bait_web(canary, tmp_path_factory):
    sw = start_simweb(tmp_path_factory.mktemp("simweb-ssrf"), hosts=30, pages_per_host=6,
                      extra_args=("--canary-port", str(canary.port)))
    try:
        yield sw
    finally:
        sw.stop()


def _cfg(root, sw, **over):
    base = {"root": str(root), "crawl_id": "ssrf", "resolve": [sw.resolve_rule], "politeness_delay_s": 0.02,
            "max_pages": 1000, "partitions": 2, "url_shards": 1, "round_duration_s": 30.0,
            "connect_timeout_s": 1.0, "read_timeout_s": 2.0, "total_timeout_s": 4.0, "dask_workers": 2,
            "max_crawl_delay_s": 5.0}
    base.update(over)
    return load_config(overrides=base, use_env=False)


@pytest.fixture(scope="module")
def crawled(bait_web, canary, tmp_path_factory):
    cfg = _cfg(tmp_path_factory.mktemp("crawl"), bait_web)
    t = time.monotonic()
    with dask_client(cfg) as client:
        for i in range(ROUNDS):
            rnd.run_round(cfg, [SEED] if i == 0 else None, client=client)
    time.sleep(0.5)  # a connection accepted at the very end is logged by the canary thread
    bait_web.flush_log()  # and the simulated web's access log is complete up to now
    return cfg, time.monotonic() - t


def test_canary_never_reached_while_the_bait_was_crawled(crawled, bait_web, canary):
    _, seconds = crawled
    forms = ssrf_forms(canary.port)
    assert len(forms) >= 20
    # the oracle: nothing connected to the private port, on either loopback family
    assert canary.hits == [], canary.hits
    # ... while the crawl really went through the bait (the simulated web's own access log)
    log = read_log(bait_web.access_log).to_pylist()
    asked = {(r["host"], r["path"]) for r in log if r["user_agent"].startswith("RecrawlBot")}
    assert ("ssrf.sim.test", "/") in asked
    assert {("ssrf.sim.test", f"/ok/{k}") for k in range(OK_PAGES)} <= asked
    assert {("ssrf.sim.test", f"/r/{i}") for i in range(len(forms))} <= asked  # every redirect followed
    robots = {i for i in range(len(forms)) if (f"ssrf-robots-{i}.sim.test", "/robots.txt") in asked}
    sitemaps = {i for i in range(len(forms)) if (f"ssrf-sitemap-{i}.sim.test", "/sitemap.xml") in asked}
    assert robots == set(range(len(forms))) and sitemaps == set(range(len(forms)))
    good = [r for r in log if r["host"].endswith(".sim.test") and not r["host"].startswith("ssrf")
            and r["path"] == "/" and r["status"] == 200]
    assert good, "the legitimate links of the hostile page were fetched"
    print(f"\n{len(forms)} forms x (link, link+path, redirect, robots redirect, sitemap redirect); "
          f"{len(asked)} distinct requests to the simulated web; canary hits: {len(canary.hits)}; "
          f"{ROUNDS} rounds in {seconds:.1f}s")


def test_control_without_the_guard_the_canary_is_reached(bait_web, canary, tmp_path):
    """The same bait with ``allow_private_networks``: the canary logs connections (the oracle works)."""
    cfg = _cfg(tmp_path, bait_web, crawl_id="ssrf-control", allow_private_networks=True)
    before = len(canary.hits)
    try:
        with dask_client(cfg) as client:
            for i in range(2):
                rnd.run_round(cfg, [SEED] if i == 0 else None, client=client)
        time.sleep(0.5)
        hits = canary.hits[before:]
        families = {h["local"] for h in hits}
        assert len(hits) >= 10 and families == {"127.0.0.1", "::1"}, hits
        print(f"\ncontrol: {len(hits)} canary connections without the guard")
    finally:
        del canary.hits[before:]  # keep the guarded test's oracle clean whatever the order


def test_bait_fetch_rows_are_refused_by_the_guard(crawled, canary):
    """Secondary (crawler-side) view: bait URLs are in the CrawlDb, refused, none fetched."""
    from crawl import query
    cfg, _ = crawled
    rows = query.connect(cfg.root, cfg.crawl_id).execute(
        "SELECT url, status FROM crawldb WHERE url LIKE ?", [f"%:{canary.port}/%"]).fetchall()
    statuses = {s for _, s in rows}
    print(f"\n{len(rows)} bait URLs in the CrawlDb, statuses {sorted(statuses)}")
    assert len(rows) >= 20 and "fetched" not in statuses
