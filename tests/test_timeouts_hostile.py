"""The crawler's request timeouts against slow-drip hosts and a SYN blackhole, as a user meets them
(``python -m crawl round`` as a real process), judged from outside: the simulated web's access log
(when the client went away), /proc/net/tcp (connect attempts to the blackhole,
crawl.simweb.blackhole), the wall time the test measures, and the files read back (fetch rows and
the CrawlDb with pyarrow, WARC records with warcio).

- slow drip (crawl/simweb/drip.py): every drop well inside the read timeout, so only the total
  per-request deadline (``total_timeout_s``) stops the request; what came by then is not the page.
- SYN blackhole: the connect timeout (``connect_timeout_s``, its default here) ends each attempt,
  the round ends in bounded time and the host's URLs stay in the CrawlDb to be retried.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl.config import CrawlConfig
from crawl.simweb.blackhole import SynBlackhole
from crawl.simweb.drip import DRIP_ETAG, DRIP_LENGTH, DRIP_PAGES, SECRET
from tests.conftest import start_simweb
from tests.crawldb_view import fetch_rows
from tests.simlog import OUR_UA, our_requests

CRAWL = [sys.executable, "-m", "crawl"]
UA = OUR_UA
TOTAL_S = 3.0  # total_timeout_s of the drip rounds (the default, 30 s, only makes the test slower)
READ_S = 1.5  # read_timeout_s of the drip rounds: far above the 0.2 s between drops
DELAY_S = 0.2


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    sw = start_simweb(tmp_path_factory.mktemp("simweb-drip"), extra_args=("--drip-hosts",))
    try:
        yield sw
    finally:
        sw.stop()


def crawl_round(root: Path, resolve: list[str], seeds: list[str] | None, *args: str) -> tuple[float, float]:
    """One ``crawl round`` (one worker, one partition: every host in the same fetch task); its
    (start, end) in Unix time as this test measures it."""
    t0 = time.time()
    cmd = [*CRAWL, "round", "--root", str(root), "--crawl-id", "t", *(a for r in resolve for a in ("--resolve", r)),
           "--no-dashboard", "--workers", "1", "--partitions", "1", "--delay", str(DELAY_S),
           "--round-duration-s", "60", "--set", "sitemaps=false", *args, *(["--seeds", *seeds] if seeds else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return t0, time.time()


def crawldb(root: Path, where: str) -> list[dict]:
    out = subprocess.run([*CRAWL, "query", "--root", str(root), "--crawl-id", "t", "--json",
                          "SELECT url, status, etag, last_modified, payload_digest, last_success_time, retry_count, "
                          f"epoch(next_fetch_time) AS next_s FROM crawldb WHERE {where} ORDER BY url"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_a_dripping_answer_is_cut_at_the_total_deadline_and_not_stored_as_the_page(web, tmp_path: Path) -> None:
    """drip-body answers 200 with ETag and Content-Length at once, then 8 bytes every 0.2 s; drip-head
    drips its header lines. No read ever waits READ_S, so only total_timeout_s (TOTAL_S) stops them:
    the server sees each client leave at about that deadline, the hosts' other pages are fetched one
    at a time and DELAY_S apart, and what is stored for the cut URLs is honest. Before, the cut body
    of drip-body was a fetched page in the CrawlDb with the server's ETag and Last-Modified (a later
    conditional GET gets 304 and the partial body stands for the page), its digest and a normal
    recrawl interval; now it is a transient failure (retry, error timeout, no validators), its WARC
    record (crawldiagnostics) says WARC-Truncated: time, and it is retried per retry_schedule_s."""
    hosts = ("drip-body.sim.test", "drip-head.sim.test")
    # three good hosts too: with only the two drip hosts, every host of the round failed and the round
    # is degraded (crawl.health), whose failures do not count towards gone (retry_count stays 0)
    seeds = [f"http://{h}{p}" for h in hosts for p in ("/", *DRIP_PAGES)] + web.model.seed_urls(3)
    a, b = crawl_round(tmp_path, [web.resolve_rule], seeds, "--set", f"total_timeout_s={TOTAL_S}",
                       "--set", f"read_timeout_s={READ_S}")
    for host in hosts:
        log = our_requests(web, host, a)
        drip = [r for r in log if r["path"] == "/drip.html"]
        assert len(drip) == 1, log  # asked once this round: a timeout is not retried within it
        took = drip[0]["end"] - drip[0]["start"]
        assert TOTAL_S - 0.1 <= took <= TOTAL_S + 1.0, took  # cut at the deadline, not by the read timeout
        if host == "drip-body.sim.test":
            assert drip[0]["status"] == 200 and 0 < drip[0]["bytes"] < DRIP_LENGTH
        else:
            assert drip[0]["status"] == 499  # the client left before the header block ended
        pages = [r for r in log if r["path"] != "/robots.txt"]
        assert {r["path"] for r in pages} == {"/", *DRIP_PAGES}, [r["path"] for r in pages]
        assert all(r["status"] == 200 for r in pages if r["path"] != "/drip.html")
        assert max(r["in_flight"] for r in log) == 1
        gaps = [y["start"] - x["end"] for x, y in zip(log, log[1:], strict=False)]
        assert min(gaps) >= DELAY_S - 0.01, gaps
    assert b - a < 60, b - a

    rows = {r["url"]: r for r in fetch_rows(tmp_path, 1)}
    body, head = (rows[f"http://{h}/drip.html"] for h in hosts)
    assert head["status"] == "retry" and head["error"] == "timeout" and head["warc_filename"] is None
    assert body["status"] == "retry" and body["error"] == "timeout" and body["truncated"] == "time", body
    assert body["subset"] == "crawldiagnostics" and body["warc_filename"], body
    with open(tmp_path / body["warc_filename"], "rb") as f:
        f.seek(body["warc_record_offset"])
        rec = next(iter(ArchiveIterator(f)))
        assert rec.rec_type == "response" and rec.rec_headers.get_header("WARC-Target-URI") == body["url"]
        assert rec.rec_headers.get_header("WARC-Truncated") == "time"
        payload = rec.content_stream().read()
    assert 0 < len(payload) < DRIP_LENGTH and rec.http_headers.get_header("ETag") == DRIP_ETAG
    # the CrawlDb: the cut URL is kept, due again after the first retry wait, with no validator that
    # would let a 304 vouch for a body the crawler never had
    db = {r["url"]: r for r in crawldb(tmp_path, "host LIKE 'drip-%'")}
    for host in hosts:
        cut = db[f"http://{host}/drip.html"]
        assert cut["status"] == "retry" and cut["retry_count"] == 1, cut
        assert cut["etag"] is None and cut["last_modified"] is None and cut["payload_digest"] is None, cut
        assert cut["last_success_time"] is None, cut
        first_wait = CrawlConfig().retry_schedule_s[0]
        assert a + first_wait - 60 <= cut["next_s"] <= b + first_wait + 60, (cut["next_s"] - a, first_wait)
        assert all(db[f"http://{host}{p}"]["status"] == "fetched" for p in DRIP_PAGES[1:])


def test_a_robots_txt_cut_by_the_deadline_is_unavailable_not_the_rules(web, tmp_path: Path) -> None:
    """drip-robots' robots.txt drips its comments and ends ``Disallow: /private/``, which no total
    deadline lets arrive: the cut file is not the host's rules (before, it parsed as "allow all" and
    /private/secret.html was fetched), it is an unreachable robots.txt (RFC 9309 §2.3.1.4): the host
    is deferred, nothing but robots.txt is asked, and its URLs stay in the CrawlDb."""
    host = "drip-robots.sim.test"
    a, _ = crawl_round(tmp_path, [web.resolve_rule], [f"http://{host}/", f"http://{host}{SECRET}"],
                       "--set", f"total_timeout_s={TOTAL_S}", "--set", f"read_timeout_s={READ_S}")
    log = our_requests(web, host, a)
    assert [r["path"] for r in log] == ["/robots.txt"], [r["path"] for r in log]
    assert TOTAL_S - 0.1 <= log[0]["end"] - log[0]["start"] <= TOTAL_S + 1.0
    rows = fetch_rows(tmp_path, 1)
    robots = [r for r in rows if r["url"].endswith("/robots.txt")]
    assert [(r["status"], r["error"], r["truncated"]) for r in robots] == [("retry", "timeout", "time")], robots
    pages = [r for r in rows if not r["url"].endswith("/robots.txt")]
    assert {(r["status"], r["error"]) for r in pages} == {("deferred", "robots_unavailable")}, pages
    db = crawldb(tmp_path, f"host = '{host}'")
    assert sorted(r["url"] for r in db) == sorted([f"http://{host}/", f"http://{host}{SECRET}"])
    assert {r["status"] for r in db} == {"deferred"}


def _good_pages(web, n: int) -> tuple[str, list[str]]:
    """A good host of the simulated web whose robots.txt allows all, and n of its page URLs."""
    host = next(h for h in web.model.good_hosts() if h.robots == "allow-all")
    return host.name, [web.model.url(p) for p in range(host.first, host.first + min(n, host.count))]


def test_a_syn_blackhole_costs_the_connect_timeout_and_holds_up_no_other_host(web, tmp_path: Path) -> None:
    """blackhole.sim.test resolves to a loopback port whose connects hang (crawl.simweb.blackhole).
    With the default connect_timeout_s the robots.txt attempt is given up after it (/proc/net/tcp
    shows the SYN_SENT socket that long, and none left), the host is deferred with its URLs kept, and
    a good host in the same fetch task is crawled meanwhile, not after the hanging connect."""
    connect_s = CrawlConfig().connect_timeout_s
    good, good_urls = _good_pages(web, 4)
    hole = "blackhole.sim.test"
    with SynBlackhole("127.0.0.2") as bh:
        rules = [f"{hole}=127.0.0.2:{bh.port}", web.resolve_rule]
        a, b = crawl_round(tmp_path, rules, [f"http://{hole}/", f"http://{hole}/a.html", *good_urls])
        time.sleep(0.1)
        attempts, hanging = bh.attempts(), bh.hanging()
    assert len(attempts) == 1 and hanging == 0, attempts
    start, end = attempts[0]
    assert connect_s - 0.2 <= end - start <= connect_s + 0.5, end - start
    log = our_requests(web, good, a)
    assert {r["path"] for r in log} >= {u.split(good, 1)[1] for u in good_urls}
    assert log[0]["start"] < start + 1.0 and any(r["start"] > start + 0.5 for r in log)  # alongside
    assert max(y["start"] - x["end"] for x, y in zip(log, log[1:], strict=False)) < 1.0
    assert b - a < 60, b - a
    rows = [r for r in fetch_rows(tmp_path, 1) if r["host"] == hole]
    assert [(r["status"], r["error"]) for r in rows if r["url"].endswith("/robots.txt")] == \
        [("retry", "connect_timeout")]
    assert {(r["status"], r["error"]) for r in rows if not r["url"].endswith("/robots.txt")} == \
        {("deferred", "robots_unavailable")}
    db = crawldb(tmp_path, f"host = '{hole}'")
    assert [r["url"] for r in db] == [f"http://{hole}/", f"http://{hole}/a.html"]
    assert {r["status"] for r in db} == {"deferred"}


def test_a_host_that_goes_black_after_its_robots_txt_is_cached(web, tmp_path: Path) -> None:
    """Round 1 reaches blackhole.sim.test (the simulated web answers it) and caches its robots.txt;
    in round 2 the host's address is the blackhole: each page request costs one connect timeout (the
    default), one attempt at a time and DELAY_S apart, each URL is a retry in the CrawlDb, and the
    round ends once they are done."""
    connect_s = CrawlConfig().connect_timeout_s
    hole = "blackhole.sim.test"
    crawl_round(tmp_path, [web.resolve_rule], [f"http://{hole}/"], "--max-depth", "0")
    urls = [f"http://{hole}/c.html", f"http://{hole}/d.html"]
    good, good_urls = _good_pages(web, 3)
    with SynBlackhole("127.0.0.2") as bh:
        a, b = crawl_round(tmp_path, [f"{hole}=127.0.0.2:{bh.port}", web.resolve_rule], [*urls, *good_urls],
                           "--max-depth", "0")
        time.sleep(0.1)
        attempts, hanging = bh.attempts(), bh.hanging()
    rows = [r for r in fetch_rows(tmp_path, 2) if r["host"] == hole]
    assert not [r for r in rows if r["url"].endswith("/robots.txt")]  # cached in round 1
    asked = sorted(r["url"] for r in rows)  # the seeds, and the home page if the schedule had it due
    assert set(urls) <= set(asked) and {(r["status"], r["error"]) for r in rows} == {("retry", "connect_timeout")}
    assert len(attempts) == len(asked) and hanging == 0, attempts  # one connect attempt a request
    assert all(connect_s - 0.2 <= e - s <= connect_s + 0.5 for s, e in attempts), attempts
    assert all(y[0] - x[1] >= DELAY_S - 0.05 for x, y in zip(attempts, attempts[1:], strict=False)), attempts
    assert b - a < len(asked) * (connect_s + DELAY_S) + 45, b - a
    log = our_requests(web, good, a)
    assert log and log[0]["start"] < attempts[0][0] + 1.0
    db = {r["url"]: r for r in crawldb(tmp_path, f"host = '{hole}'")}
    assert all(db[u]["status"] == "retry" and db[u]["retry_count"] == 1 for u in asked), db
