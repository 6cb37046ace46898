"""External limits and robots.txt rules as a user meets them (``python -m crawl run`` as a real process
against the simulated web), judged by the server's access log, not by the crawler's own records.

What tests/test_fetch.py already judges from the log at the fetch task (robots variants, Crawl-delay,
redirect chains, timeouts, body caps, 429/503 inside a task) is not repeated here; this file holds what
only shows across rounds or at the edges of a limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawl.simweb.origins import BACKOFF_503S
from crawl.simweb.server import page_of_request
from tests.conftest import start_simweb
from tests.crawldb_view import fetch_rows
from tests.simlog import OUR_UA, our_requests

CRAWL = [sys.executable, "-m", "crawl"]
UA = OUR_UA


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """The simulated web with its politeness and robots bait hosts (crawl.simweb.origins)."""
    sw = start_simweb(tmp_path_factory.mktemp("simweb-limits"), extra_args=("--origin-bait",))
    try:
        yield sw
    finally:
        sw.stop()


def crawl_run(simweb, root: Path, seeds: list[str], *args: str, timeout: float = 300) -> None:
    """``crawl run`` as a user types it (fast politeness so the rounds are short)."""
    cmd = [*CRAWL, "run", "--root", str(root), "--crawl-id", "t", "--resolve", simweb.resolve_rule,
           "--no-dashboard", "--workers", "1", "--partitions", "1", *args, "--seeds", *seeds]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]


def crawl_round(simweb, root: Path, *args: str, seeds: list[str] | None = None) -> tuple[float, float]:
    """One ``crawl round`` as a user types it; returns its (start, end) in Unix time."""
    t0 = time.time()
    cmd = [*CRAWL, "round", "--root", str(root), "--crawl-id", "t", "--resolve", simweb.resolve_rule,
           "--no-dashboard", "--workers", "1", "--partitions", "2", "--delay", "0.05", "--set", "sitemaps=false",
           *args, *(["--seeds", *seeds] if seeds else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return t0, time.time()


def test_a_retry_after_longer_than_the_round_holds_in_the_next_round(web, tmp_path: Path) -> None:
    """A 429 on a page whose Retry-After (30 s, an HTTP-date) outlasts the round, and a robots.txt
    answering 503 with Retry-After 30: the next rounds, run back to back by ``crawl run``, ask those
    hosts nothing until it has passed (they had their URLs to fetch: the seeds deferred behind the
    answer and the links round 1 found). Before, round 2 asked both again ~1 s later."""
    page_host, robots_host = "hostile-001.sim.test", "robots-503.sim.test"
    base = f"http://{page_host}"
    since = time.time()
    crawl_run(web, tmp_path, [f"{base}/fault/429-date", f"{base}/", f"{base}/blog/shiulta-fenvo-1",
                              f"http://{robots_host}/"],
              "--rounds", "3", "--round-duration-s", "4", "--delay", "0.2", "--set", "sitemaps=false")
    for host, status, path in ((page_host, 429, "/fault/429-date"), (robots_host, 503, "/robots.txt")):
        log = our_requests(web, host, since)
        told = [r for r in log if r["status"] == status]
        assert len(told) == 1 and told[0]["path"] == path, log
        # an HTTP-date has whole seconds: the wait it names is at least 29 s from the answer
        early = [r for r in log if told[0]["end"] < r["start"] < told[0]["end"] + 29]
        assert not early, [(round(r["start"] - told[0]["end"], 2), r["path"]) for r in early]
        # not vacuous: the later rounds had URLs of the host and deferred them for the host's wait
        for n in (2, 3):
            mine = [r for r in fetch_rows(tmp_path, n) if r["host"] == host]
            assert mine and all(r["status"] == "deferred" and r["error"] == "host_backoff" for r in mine), mine
            assert all(0 < r["retry_after_s"] <= 30 for r in mine)
        markers = [json.loads(p.read_text()) for p in
                   (tmp_path / "state" / "crawl=t" / "rounds" / "00003" / "fetched").glob("*.done")]
        assert any(host in m.get("host_backoff_until", {}) for m in markers)


def test_robots_txt_cut_at_500_kib_and_redirect_chains(web, tmp_path: Path) -> None:
    """RFC 9309 at its edges, two rounds of ``crawl run`` (round 2 takes the policies from the robots
    cache): a robots.txt over 500 KiB is read up to the limit and the line the limit cuts is no rule
    (before, ``Allow: /private/public.html`` cut to ``Allow: /private/`` let ``/private/secret.html``
    through); a robots.txt behind five redirects is found and obeyed, with every hop asked once; behind
    six, the crawler asks five hops and no more, and then takes the file as unavailable (allow all, as
    crawl/robots.py documents). Sitemap files named by robots.txt or by an index keep the URL length
    limit like every URL requested (before, a 2,100-character sitemap path was asked for)."""
    hosts = {"robots-cut.sim.test": "cut", "robots-chain-5.sim.test": 5, "robots-chain-6.sim.test": 6,
             "sitemap-long.sim.test": "sitemap"}
    since = time.time()
    crawl_run(web, tmp_path, [f"http://{h}/" for h in hosts], "--rounds", "2", "--delay", "0.1",
              "--round-duration-s", "10")
    for host, kind in hosts.items():
        log = our_requests(web, host, since)
        paths = [r["path"] for r in log]
        assert "/ok.html" in paths, (host, paths)  # the crawl got as far as the pages the home links
        robots = [p for p in paths if p.startswith("/robots")]
        if kind == "sitemap":
            assert {"/sitemap.xml", "/sitemap-1.xml"} <= set(paths), paths  # its short sitemaps were read
            assert max(len(f"http://{host}{p}") for p in paths) <= 2048, [p[:40] for p in paths]
        elif kind == "cut":
            assert robots == ["/robots.txt"]
            assert "/private/secret.html" not in paths and "/private/public.html" not in paths, paths
        elif kind == 5:
            assert robots == ["/robots.txt"] + [f"/robots-{k}.txt" for k in range(1, 6)], robots
            assert "/private/secret.html" not in paths and "/private/public.html" not in paths, paths
        else:
            assert robots == ["/robots.txt"] + [f"/robots-{k}.txt" for k in range(1, 5 + 1)], robots
            assert "/robots-6.txt" not in paths
            assert "/private/secret.html" in paths, paths


def test_503_without_retry_after_backs_off_exponentially(web, tmp_path: Path) -> None:
    """503s without Retry-After: the host's next request waits backoff_base_s, then twice, then four
    times that (jitter 10 %), as the server's request starts show; then its URLs are fetched."""
    host = "backoff-503.sim.test"
    since = time.time()
    crawl_run(web, tmp_path, [f"http://{host}/", f"http://{host}/ok.html", f"http://{host}/private/public.html"],
              "--rounds", "1", "--delay", "0.1", "--set", "backoff_base_s=1", "--set", "backoff_jitter=0.1",
              "--set", "sitemaps=false")
    log = [r for r in our_requests(web, host, since) if r["path"] != "/robots.txt"]
    assert [r["status"] for r in log[:BACKOFF_503S]] == [503] * BACKOFF_503S
    assert {r["status"] for r in log[BACKOFF_503S:]} == {200} and len(log) == BACKOFF_503S + 3, log
    gaps = [b["start"] - a["start"] for a, b in zip(log, log[1:BACKOFF_503S + 1], strict=False)]
    assert all(g >= 0.9 * 2 ** k for k, g in enumerate(gaps)), gaps
    assert gaps[-1] < 4 * 1.1 + 2, gaps  # the backoff, not something else, held it


def test_depth_per_host_cap_and_crawl_delay_over_rounds(web, tmp_path: Path) -> None:
    """Three ``crawl round`` runs back to back with max depth 1 and 3 pages per host and round, judged
    by the access log and the simulated web's true link graph: no page more than one link from a seed
    was requested, no host got more than 3 distinct pages in a round, a Crawl-delay of 0.5 s held
    across the round boundaries, and a host whose Crawl-delay is above max_crawl_delay_s had its
    robots.txt asked once (cached) and nothing else."""
    m = web.model
    seeds = [*m.seed_urls(3), "http://news-004.sim.test/", "http://blog-004.sim.test/"]
    delays = {h.name: h.crawl_delay for h in m.hosts if h.crawl_delay}
    assert delays["news-004.sim.test"] == 0.5 and delays["blog-004.sim.test"] == 5.0
    near = set()  # seeds and the pages they link to: depth <= 1
    for u in seeds:
        pid = m.page_at(m.host_of(u.split("/")[2]), "/")
        near |= {pid, *m.link_dst[m.links(pid)].tolist()}
    windows = [crawl_round(web, tmp_path, "--max-depth", "1", "--max-pages-per-host-per-round", "3",
                           "--round-duration-s", "8", "--set", "max_crawl_delay_s=1", seeds=seeds if i == 0 else None)
               for i in range(3)]
    log = [r for r in web.log().to_pylist() if r["user_agent"].startswith(UA) and r["start"] >= windows[0][0]]
    pages = [r for r in log if not r["path"].startswith(("/robots.txt", "/robots-moved.txt"))]
    deep = []
    for r in pages:
        pid = page_of_request(m, r["host"], r["path"])
        if pid is None or pid not in near:
            deep.append(r["host"] + r["path"])
    assert len(pages) > 20 and not deep, deep[:5]
    most = 0
    for a, b in windows:
        per_host: dict[str, set[str]] = {}
        for r in pages:
            if a <= r["start"] <= b:
                per_host.setdefault(r["host"], set()).add(r["path"])
        most = max(most, *map(len, per_host.values()))
        assert most <= 3, {h: sorted(p) for h, p in per_host.items() if len(p) > 3}
    assert most == 3  # the cap was reached, so it was what held
    slow = sorted(r["start"] for r in log if r["host"] == "news-004.sim.test")
    assert len(slow) >= 4 and min(b - a for a, b in zip(slow, slow[1:], strict=False)) >= 0.5, slow
    assert [r["path"] for r in log if r["host"] == "blog-004.sim.test"] == ["/robots.txt"]


def test_robots_cache_is_used_for_24_hours_then_asked_again(web, tmp_path: Path) -> None:
    """RFC 9309 §2.4: a cached robots.txt serves for at most 24 hours (robots_ttl_s). Three rounds at
    the round times (``--now``) 0 h, 1 h and 25 h: the server is asked for robots.txt in the first and
    the third, not the second, while each round fetched pages of the host."""
    host = "docs-001.sim.test"
    rounds = [crawl_round(web, tmp_path, "--max-pages-per-host-per-round", "2", "--round-duration-s", "8",
                          "--now", now, seeds=[f"http://{host}/"] if i == 0 else None)
              for i, now in enumerate(("2026-06-01T00:00:00Z", "2026-06-01T01:00:00Z", "2026-06-02T01:00:00Z"))]
    log = our_requests(web, host, rounds[0][0])
    robots = [sum(a <= r["start"] <= b for r in log if r["path"] == "/robots.txt") for a, b in rounds]
    pages = [sum(a <= r["start"] <= b for r in log if r["path"] != "/robots.txt") for a, b in rounds]
    assert robots == [1, 0, 1] and all(pages), (robots, pages)


def test_pages_per_host_in_total(web, tmp_path: Path) -> None:
    """max_pages_per_host (URLs kept per host over the whole crawl): three rounds of 3 pages per host
    would ask 7 of a seeded host; with a total of 5, the server sees at most 5 distinct pages of any
    host over the crawl, and 5 of the seeded ones."""
    seeds = web.model.seed_urls(2)
    since = time.time()
    crawl_run(web, tmp_path, seeds, "--rounds", "3", "--max-pages-per-host-per-round", "3", "--delay", "0.05",
              "--round-duration-s", "8", "--set", "max_pages_per_host=5", "--set", "sitemaps=false")
    per_host: dict[str, set[str]] = {}
    for r in web.log().to_pylist():
        if r["user_agent"].startswith(UA) and r["start"] >= since and r["path"] != "/robots.txt":
            per_host.setdefault(r["host"], set()).add(r["path"])
    assert max(map(len, per_host.values())) <= 5, {h: len(p) for h, p in per_host.items()}
    assert [len(per_host[s.split("/")[2]]) for s in seeds] == [5, 5], {h: len(p) for h, p in per_host.items()}
    # the seeds are seeds in the CrawlDb (they were fetched in the round that injected them: before,
    # such a row was labelled a redirect target)
    out = subprocess.run([*CRAWL, "query", "--root", str(tmp_path), "--crawl-id", "t", "--json",
                          "SELECT url, source FROM crawldb WHERE source = 'seed' ORDER BY url"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [{"url": u, "source": "seed"} for u in sorted(seeds)]


def test_a_retry_after_of_a_century_is_capped(web, tmp_path: Path) -> None:
    """Retry-After 4000000000 s (127 years): the host is held back for backoff_cap_s (3 s here), not
    for good. Short back-to-back rounds defer it meanwhile; once the cap has passed it is asked again
    (before, the wait was carried from round to round and the host never asked again)."""
    host = "retry-after-huge.sim.test"
    since = time.time()
    crawl_run(web, tmp_path, [f"http://{host}/", f"http://{host}/ok.html"], "--rounds", "6", "--delay", "0.1",
              "--round-duration-s", "2", "--set", "backoff_cap_s=3", "--set", "sitemaps=false")
    asked = [r for r in our_requests(web, host, since) if r["path"] != "/robots.txt"]
    assert len(asked) >= 2 and {r["status"] for r in asked} == {429}, asked
    gaps = [b["start"] - a["start"] for a, b in zip(asked, asked[1:], strict=False)]
    assert all(g >= 3 for g in gaps), gaps


def test_a_wait_told_before_a_crash_holds_in_the_rerun(web, tmp_path: Path) -> None:
    """A host answers 429 with a (capped, 10 s) Retry-After; the fetching process (``crawl step
    fetch_parse`` with its Dask workers) is killed with SIGKILL a moment later, while the task waits it
    out; the step is run again at once, as an Airflow retry would (same run id, so the lease passes on
    without expiring). The rerun asks the host nothing, robots.txt included, until the wait has passed
    (the server's access log). Before, the wait lived only in the task's memory until its end: the rerun
    asked the host again about 3 s after the 429 (a quiet period after the dead attempt)."""
    import os
    import signal

    host, cap = "retry-after-huge.sim.test", 10.0
    root = tmp_path / "root"
    common = ["--root", str(root), "--crawl-id", "t", "--resolve", web.resolve_rule, "--delay", "0.1",
              "--partitions", "1", "--workers", "1", "--no-dashboard", "--round-duration-s", "15",
              "--set", f"backoff_cap_s={cap}", "--set", "max_crawl_delay_s=1", "--set", "sitemaps=false"]
    for step in (["inject", "--seeds", f"http://{host}/", f"http://{host}/ok.html"], ["generate"]):
        out = subprocess.run([*CRAWL, "step", *step, *common], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
    fetch = [*CRAWL, "step", "fetch_parse", "--round", "1", "--run-id", "run-1", *common]
    since = time.time()
    with open(tmp_path / "killed.stderr", "w") as err:
        proc = subprocess.Popen(fetch, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and \
                not any(r["status"] == 429 for r in our_requests(web, host, since)):
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "killed.stderr").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and the Dask workers it started
        proc.wait(10)
    told = [r for r in our_requests(web, host, since) if r["status"] == 429]
    assert len(told) == 1, our_requests(web, host, since)
    until = told[0]["end"] + cap
    assert time.time() < until - 3, "killed too late to tell"  # the wait was still running at the kill
    out = subprocess.run(fetch, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    after = [r for r in our_requests(web, host, since) if r["start"] > told[0]["end"]]
    assert after, "the rerun never asked the host"  # not vacuous: it had the host's URLs to fetch
    early = [(round(r["start"] - told[0]["end"], 2), r["path"]) for r in after if r["start"] < until]
    assert not early, f"asked within the {cap} s wait told before the crash: {early}"
    print(f"rerun's first request to the host {after[0]['start'] - told[0]['end']:.2f} s after the 429 ({cap} s wait)")
    # the partition is done: its saved waits went with its marker, so a rerun of the step is as before
    fetched = root / "state" / "crawl=t" / "rounds" / "00001" / "fetched"
    assert (fetched / "part=000.done").exists() and not list(fetched.glob("*.waits.json"))


def test_saved_waits_are_written_off_the_caller_and_read_back_capped(tmp_path: Path) -> None:
    """:class:`crawl.tasks.PendingWaits` as a rerun meets its file: every wait set (here 300, as when
    many hosts answer 503 at once) is in the file once ``close`` returns, each the latest of its key;
    read back by the next attempt, a wait is capped at ``backoff_cap_s`` from now and an ended one is
    dropped; ``remove`` leaves no file."""
    from crawl.store import Store
    from crawl.tasks import PendingWaits, pending_waits_path

    store = Store(str(tmp_path), "t")
    rel = pending_waits_path(store, 1, 0)
    now = time.time()
    told = PendingWaits(store, 1, 0, cap_s=60)
    for i in range(300):
        told.add(f"h{i}.sim.test:80", now + 30 + i % 7)
    told.add("h0.sim.test:80", now + 50)  # later for the same key: the later end is kept
    told.add("long.sim.test:80", now + 10_000)  # past the cap (the fetcher caps it; a file may not)
    told.add("ended.sim.test:80", now + 0.5)
    told.close()
    saved = store.read_json(rel)["waits"]
    assert len(saved) == 302 and saved["h0.sim.test:80"] == now + 50 and saved["h6.sim.test:80"] == now + 36
    time.sleep(0.6)
    again = PendingWaits(store, 1, 0, cap_s=60)
    assert "ended.sim.test:80" not in again.waits and len(again.waits) == 301
    assert now + 59 < again.waits["long.sim.test:80"] <= time.time() + 60
    assert again.waits["h1.sim.test:80"] == now + 31
    again.remove()
    assert not store.exists(rel)


def test_a_backoff_count_told_before_a_crash_holds_in_the_rerun(tmp_path: Path) -> None:
    """A host answers 503 without Retry-After (backoff_base_s 1: waits of 1, 2, 4 s); the fetching process
    (``crawl step fetch_parse``) is killed with SIGKILL during the second wait and the step is run again
    at once (same run id). The rerun's third 503 is followed by the series' third length (4 s), not by
    ``backoff_base_s`` again, as the server's request starts show. Before, the rerun knew the wait but
    not the count, so the host's backoff began again at 1 s after every crash."""
    import os
    import signal

    web = start_simweb(tmp_path / "web", extra_args=("--origin-bait",))  # its own: the 503 count is the server's
    try:
        host = "backoff-503.sim.test"
        root = tmp_path / "root"
        common = ["--root", str(root), "--crawl-id", "t", "--resolve", web.resolve_rule, "--delay", "0.1",
                  "--partitions", "1", "--workers", "1", "--no-dashboard", "--round-duration-s", "30",
                  "--set", "backoff_base_s=1", "--set", "backoff_jitter=0.1", "--set", "sitemaps=false",
                  "--set", "max_crawl_delay_s=1"]
        for step in (["inject", "--seeds", f"http://{host}/", f"http://{host}/ok.html"], ["generate"]):
            out = subprocess.run([*CRAWL, "step", *step, *common], capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr[-3000:]
        fetch = [*CRAWL, "step", "fetch_parse", "--round", "1", "--run-id", "run-1", *common]
        since = time.time()

        def pages() -> list[dict]:
            return [r for r in our_requests(web, host, since) if r["path"] != "/robots.txt"]

        with open(tmp_path / "killed.stderr", "w") as err:
            proc = subprocess.Popen(fetch, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and \
                    sum(r["status"] == 503 for r in pages()) < 2:
                time.sleep(0.1)
            assert proc.poll() is None, (tmp_path / "killed.stderr").read_text()[-3000:]
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI and the Dask workers it started
            proc.wait(10)
        before = pages()
        assert [r["status"] for r in before] == [503, 503], before
        assert time.time() < before[1]["end"] + 0.9 * 2, "killed after the second wait ended"
        out = subprocess.run(fetch, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-3000:]
        log = pages()
        assert [r["status"] for r in log[:BACKOFF_503S]] == [503] * BACKOFF_503S, log
        assert {r["status"] for r in log[BACKOFF_503S:]} == {200}, log
        gaps = [b["start"] - a["start"] for a, b in zip(log, log[1:BACKOFF_503S + 1], strict=False)]
        print(f"gaps after each 503 across the crash: {[round(g, 2) for g in gaps]}")
        # the series goes on over the crash: 1, 2, then 4 s (the rerun's first request waits out the 2 s)
        assert all(g >= 0.9 * 2 ** k for k, g in enumerate(gaps)), gaps
    finally:
        web.stop()
