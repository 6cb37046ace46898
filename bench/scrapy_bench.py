"""Whole-process throughput of ``crawl run`` against Scrapy on the same simulated web, back to back.

Both start from the home page of every good host of one simulated web and stay on those hosts (the
hostile hosts' tarpits and timeouts would make both runs measure timeouts, not throughput; our
``allowed_hosts``; Scrapy's spider follows a link only when its host is in the seeds' host set, and a
downloader middleware drops redirects out of it -- cheaper for Scrapy than ``allowed_domains``' one
regex of every host), politeness delay 0, one request in flight per host,
robots.txt obeyed, 30 s request timeout on both sides and fetch the same number
of pages: ``crawl run`` runs ``--rounds`` rounds of ``--max-pages`` first (its own process: Dask cluster
start, every round step, reports); its fetched-page count becomes Scrapy's budget (the spider closes
itself at that many pages; robots.txt not counted on either side). Scrapy runs from a virtual
environment this script creates under ``bench/out/scrapy-venv`` (``scrapy==SCRAPY_VERSION`` from
PyPI), so the project's environment never gets Scrapy's dependencies. Scrapy reaches the simulated web
through a downloader middleware that sends each request to the server's loopback address and port
with the original Host header (and restores the URL on the response; the download slot stays the
host, so per-host concurrency is per host as in ours), and an HTTP/1.1 handler whose connection pool
keeps as many persistent connections as requests in flight.

Concurrency, like for like: one request in flight per host on both sides
(``max_in_flight_per_host`` = ``CONCURRENT_REQUESTS_PER_DOMAIN`` = 1) and the same global cap
(``CONCURRENT_REQUESTS`` = our ``max_concurrent_hosts``, 512 by default, above the 170 seed hosts, so
neither global cap binds: Scrapy's default of 16, or the 64 this script used before, capped Scrapy
below the hosts available). Scrapy gets its broad-crawl scheduler (``DownloaderAwarePriorityQueue``,
the default since 2.7, named here so a version change cannot silently drop it).

Pages are counted at the server, outside both crawlers: requests in each process's time window that
are neither robots.txt nor sitemaps (any status: our revalidations answered 304 count, as Scrapy's
non-2xx answers do). The same access log gives each side's timeline: seconds from process start to
the first request, from the last answer to process exit, and the idle gaps (no request in progress
for longer than half a second, e.g. between rounds); each side's CPU seconds (the process and the
workers it waits for: user + system) tell a CPU-bound crawler from one waiting. Whole-process wall
times, then

    RESULT vs_scrapy=<ours pages/s / Scrapy pages/s> ours_pages_s=... scrapy_pages_s=... pages=...

Before anything is timed, every page of the seeds' hosts is requested once (``warm_server``), so the
simulated web -- one process on this machine's cores, rendering each page on its first request -- is
warm for all contenders alike; ``--cold`` skips that (then ``crawl run``, always first, shared the
cores with the server's first renders and the later contenders did not).

``--floor`` adds a third contender right after Scrapy, with Scrapy's budget: ``bench/floor_crawl.py``,
a bare aiohttp + selectolax breadth-first loop over the same seeds and scope, one request in flight per
host, that stores, dedups and checks robots.txt for nothing -- so ``floor_vs_scrapy`` is the most a
crawler written in Python on these libraries gets over Scrapy on this machine, whole process:

    RESULT vs_scrapy=... floor_vs_scrapy=<floor pages/s / Scrapy pages/s> floor_pages_s=... ours_vs_floor=...

    python bench/scrapy_bench.py [--hosts 200] [--rounds 3] [--max-pages 2000] [--runs 1] [--floor] [--cold]
    python bench/scrapy_bench.py --hosts 1000 --max-pages 10000 --floor   # a crawl of ~20,000 pages
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crawl.config import CrawlConfig  # noqa: E402
from crawl.simweb.accesslog import read_log  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.simweb.model import SimParams, build  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from trees import compile_tree  # noqa: E402

SCRAPY_VERSION = "2.19.0"
VENV = REPO / "bench" / "out" / "scrapy-venv"

SPIDER = r'''
"""Scrapy side of bench/scrapy_bench.py: argv = port, seeds file, page budget, concurrency, per host, out."""
import json, sys, time
from urllib.parse import urlsplit, urlunsplit

import scrapy
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import CloseSpider, IgnoreRequest
from w3lib.html import strip_html5_whitespace

LOG_LEVEL = "INFO" if len(sys.argv) > 7 else "WARNING"
PORT, SEEDS, BUDGET, CONC, PER_HOST, OUT = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                            int(sys.argv[5]), sys.argv[6])


class Loopback:
    """Send *.sim.test requests to 127.0.0.1:PORT with the original Host; restore the URL on the way back."""

    def process_request(self, request):
        parts = urlsplit(request.url)
        if not (parts.hostname or "").endswith(".sim.test") or "sim_url" in request.meta:
            return None
        if parts.hostname not in Sim.scope:  # a redirect out of scope (links are filtered in parse)
            raise IgnoreRequest("out of scope")
        request.meta["sim_url"] = request.url
        request.meta["download_slot"] = parts.hostname  # per-host concurrency stays per host
        request.headers["Host"] = parts.netloc
        request._set_url(urlunsplit((parts.scheme, f"127.0.0.1:{PORT}", parts.path, parts.query, "")))
        return None

    def process_response(self, request, response):
        url = request.meta.pop("sim_url", None)
        if url is None:
            return response
        request._set_url(url)
        return response.replace(url=url)

    def process_exception(self, request, exception):
        url = request.meta.pop("sim_url", None)
        if url is not None:
            request._set_url(url)
        return None


class PooledHandler(HTTP11DownloadHandler):
    """Every connection to the one loopback address may stay open (Scrapy sizes the pool per host:port)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pool.maxPersistentPerHost = CONC


class Sim(scrapy.Spider):
    name = "sim"
    start_urls = open(SEEDS).read().split()
    # the seeds' hosts, exactly (as our allowed_hosts pattern): a set lookup per link; allowed_domains'
    # OffsiteMiddleware matched every request against one regex of all hosts, ~10 % of Scrapy's CPU a page
    # at 890 hosts (bench/RESULTS.md), and would also admit their subdomains
    scope = frozenset(u.split("/")[2] for u in start_urls)
    pages = 0

    def parse(self, response):
        Sim.pages += 1
        if Sim.pages >= BUDGET:
            raise CloseSpider("budget")
        if not isinstance(response, scrapy.http.HtmlResponse):
            return
        for href in response.css("a::attr(href)").getall():
            try:
                url = response.urljoin(strip_html5_whitespace(href))  # as response.follow does
                if urlsplit(url).hostname in Sim.scope:
                    yield scrapy.Request(url, callback=self.parse, encoding=response.encoding)
            except ValueError:  # not a URL (e.g. "http://[bad")
                continue


t0 = time.perf_counter()
proc = CrawlerProcess(settings={
    "ROBOTSTXT_OBEY": True, "DOWNLOAD_DELAY": 0, "CONCURRENT_REQUESTS": CONC,
    "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
    "CONCURRENT_REQUESTS_PER_DOMAIN": PER_HOST, "LOG_LEVEL": LOG_LEVEL, "TELNETCONSOLE_ENABLED": False,
    "USER_AGENT": "scrapy-bench (+http://localhost/)", "COOKIES_ENABLED": False, "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 30,
    "DOWNLOADER_MIDDLEWARES": {"__main__.Loopback": 950},
    "DOWNLOAD_HANDLERS": {"http": "__main__.PooledHandler", "https": "__main__.PooledHandler"},
})
proc.crawl(Sim)
proc.start()
json.dump({"pages": Sim.pages, "crawl_s": time.perf_counter() - t0}, open(OUT, "w"))
'''


def scrapy_python() -> Path:
    """The venv's python, with Scrapy installed (created on first use)."""
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    ok = subprocess.run([str(py), "-c", f"import scrapy, sys; sys.exit(scrapy.__version__ != {SCRAPY_VERSION!r})"],
                        capture_output=True).returncode == 0
    if not ok:
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"scrapy=={SCRAPY_VERSION}"], check=True)
    return py


def _digit_class(ds: list[str]) -> str:
    """``[0-35-9]``-style class of single digits (``\\d`` when all ten, the digit itself when one)."""
    if len(ds) == 10:
        return r"\d"
    if len(ds) == 1:
        return ds[0]
    nums, runs = sorted(int(d) for d in ds), []
    for n in nums:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return "[" + "".join(f"{a}" if a == b else f"{a}{b}" if b == a + 1 else f"{a}-{b}" for a, b in runs) + "]"


def _numbers_regex(nums: list[str]) -> str:
    """A pattern matching exactly ``nums`` (equal-length digit strings), as a trie over their digits."""
    if len(nums[0]) == 1:
        return _digit_class(nums)
    by_head: dict[str, list[str]] = {}
    for n in nums:
        by_head.setdefault(n[0], []).append(n[1:])
    # heads whose tails are the same set share one alternative: 0\d|1\d -> [01]\d
    by_tails: dict[tuple[str, ...], list[str]] = {}
    for head, tails in by_head.items():
        by_tails.setdefault(tuple(sorted(tails)), []).append(head)
    alts = [_digit_class(heads) + _numbers_regex(list(tails)) for tails, heads in by_tails.items()]
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


def scope_regex(seeds: list[str]) -> str:
    r"""An ``allowed_hosts`` pattern matching exactly the seeds' hosts (``kind-NNN.sim.test``), short
    enough for the setting's length limit (each kind's numbers as a digit trie):
    ``^(blog-(0[12]|10)|news-01)\.sim\.test$``."""
    by_kind: dict[str, list[str]] = {}
    for u in seeds:
        kind, _, num = u.split("/")[2].removesuffix(".sim.test").rpartition("-")
        by_kind.setdefault(kind, []).append(num)
    alts = []
    for kind, nums in by_kind.items():
        by_len: dict[int, list[str]] = {}
        for n in nums:
            by_len.setdefault(len(n), []).append(n)
        parts = [_numbers_regex(v) for v in by_len.values()]
        alts.append(f"{kind}-" + (parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"))
    return "^(" + "|".join(alts) + r")\.sim\.test$"


def warm_server(port: int, hosts: int, seed: int, seeds: list[str], concurrency: int = 64) -> tuple[int, float]:
    """(pages requested, seconds): GET every page of the seeds' hosts once, before anything is timed.

    The simulated web renders a page on its first request and keeps it (``launch`` gives it a 4 GB
    render cache), and it runs on this machine's cores. Cold, it spent ~0.5 ms of CPU a page beside
    the first contender (``crawl run``, whose two workers share the two cores with it) and ~0.14
    warm beside the later ones; warming it first gives all three the same server, as
    ``crawl_bench.py`` does for its ceilings. Scrapy (one process, CPU-bound) is not changed by it."""
    import asyncio

    import aiohttp
    import pyarrow as pa
    import pyarrow.compute as pc

    from crawl.simweb.truth import truth_table

    truth = truth_table(build(SimParams(seed=seed, hosts=hosts)))
    scope = pa.array(sorted({u.split("/")[2] for u in seeds}))
    urls = truth.filter(pc.is_in(truth.column("host"), value_set=scope)).column("url").to_pylist()

    async def run() -> None:
        queue = list(urls)
        timeout = aiohttp.ClientTimeout(total=30)

        async def worker(session: aiohttp.ClientSession) -> None:
            while queue:
                url = queue.pop()
                host, _, path = url.partition("://")[2].partition("/")
                try:
                    async with session.get(f"http://127.0.0.1:{port}/{path}", headers={"Host": host},
                                           allow_redirects=False) as r:
                        await r.read()
                except (aiohttp.ClientError, TimeoutError):
                    pass

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as s:
            await asyncio.gather(*(worker(s) for _ in range(concurrency)))

    t0 = time.perf_counter()
    asyncio.run(run())
    return len(urls), time.perf_counter() - t0


IDLE_GAP_S = 0.5  # no request in progress for longer than this: an idle gap in the timeline


def timeline(log: Path, t0: float, t1: float) -> dict[str, float | int]:
    """One process's requests as the server saw them (its window [t0, t1] of the access log): page
    requests (robots.txt and sitemaps excluded), seconds to the first request and after the last
    answer, idle gaps, mean requests in progress while busy."""
    rows = [r for r in read_log(log).to_pylist() if t0 <= r["start"] <= t1]
    if not rows:
        return {"requests": 0, "pages": 0, "first_s": t1 - t0, "tail_s": 0.0, "gaps": 0, "gap_s": 0.0,
                "in_flight": 0.0}
    pages = sum(1 for r in rows if not r["path"].startswith("/robots.txt") and "sitemap" not in r["path"])
    events = sorted([(r["start"], 1) for r in rows] + [(r["end"], -1) for r in rows])
    running, idle_since, gaps = 0, None, []
    for t, step in events:
        running += step
        if running == 0:
            idle_since = t
        elif step == 1 and running == 1 and idle_since is not None:
            if t - idle_since > IDLE_GAP_S:
                gaps.append(t - idle_since)
            idle_since = None
    first, last = events[0][0], events[-1][0]
    return {"requests": len(rows), "pages": pages, "first_s": round(first - t0, 2), "tail_s": round(t1 - last, 2),
            "gaps": len(gaps), "gap_s": round(sum(gaps), 2),
            "in_flight": round(sum(r["end"] - r["start"] for r in rows) / max(last - first, 1e-9), 2)}


def describe_timeline(name: str, wall: float, cpu: float, tl: dict[str, float | int]) -> str:
    return (f"  {name}: wall {wall:.1f} s, CPU {cpu:.1f} s ({1000 * cpu / max(int(tl['pages']), 1):.1f} ms/page), "
            f"first request at {tl['first_s']:.1f} s, {tl['gaps']} idle gap(s) {tl['gap_s']:.1f} s, after the "
            f"last answer {tl['tail_s']:.1f} s; {tl['requests']} requests, {tl['pages']} pages, "
            f"{tl['in_flight']:.2f} in progress on average")


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (and theirs: a crawl run's
    workers, which it waits for), so a difference around one child's run is that crawler's CPU."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_ours(port: int, seeds: list[str], work: Path, rounds: int, max_pages: int, per_host: int) -> tuple[int, float]:
    """(pages fetched, whole-process seconds) of ``python -m crawl run``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "crawl", "run", "--root", str(work / "root"), "--crawl-id", "bench",
           "--resolve", f"*.sim.test=127.0.0.1:{port}", "--delay", "0", "--max-pages", str(max_pages),
           "--max-pages-per-host-per-round", str(per_host), "--round-duration-s", "600", "--no-dashboard",
           "--allowed-hosts", scope_regex(seeds),
           "--rounds", str(rounds), "--seeds", *seeds]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"crawl run failed: {out.stderr[-3000:]}")
    m = re.search(r"summary: \d+ round\(s\), (\d+) fetched", out.stdout)
    if not m:
        raise RuntimeError(f"no summary line in crawl run's output: {out.stdout[-2000:]}")
    return int(m.group(1)), wall


def run_scrapy(py: Path, port: int, seeds: list[str], work: Path, budget: int, conc: int,
               per_host: int) -> tuple[int, float]:
    """(pages, whole-process seconds) of the Scrapy spider."""
    spider, seeds_file, out = work / "spider.py", work / "seeds.txt", work / "scrapy.json"
    spider.write_text(SPIDER)
    seeds_file.write_text("\n".join(seeds))
    t0 = time.perf_counter()
    res = subprocess.run([str(py), str(spider), str(port), str(seeds_file), str(budget), str(conc), str(per_host),
                          str(out)], capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - t0
    if res.returncode != 0 or not out.exists():
        raise RuntimeError(f"scrapy failed: {res.stderr[-3000:]}")
    return int(json.loads(out.read_text())["pages"]), wall


def run_floor(port: int, seeds: list[str], work: Path, budget: int, conc: int) -> tuple[int, float]:
    """(pages, whole-process seconds) of the floor contender (``bench/floor_crawl.py``, this interpreter)."""
    seeds_file, out = work / "seeds.txt", work / "floor.json"
    seeds_file.write_text("\n".join(seeds))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(REPO / "bench" / "floor_crawl.py"), str(port), str(seeds_file),
                          str(budget), str(conc), str(out)], capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - t0
    if res.returncode != 0 or not out.exists():
        raise RuntimeError(f"floor crawl failed: {res.stderr[-3000:]}")
    return int(json.loads(out.read_text())["pages"]), wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-pages", type=int, default=2000, help="crawl run's budget per round")
    ap.add_argument("--per-host", type=int, default=100, help="crawl run's max pages per host per round")
    ap.add_argument("--concurrency", type=int, default=CrawlConfig().max_concurrent_hosts,
                    help="Scrapy CONCURRENT_REQUESTS (default: our max_concurrent_hosts, the same global cap)")
    ap.add_argument("--runs", type=int, default=1, help="back-to-back pairs")
    ap.add_argument("--cold", action="store_true",
                    help="do not warm the simulated web's render cache first (the first contender, crawl run, "
                         "then shares the cores with the server's first renders; the others get warm pages)")
    ap.add_argument("--floor", action="store_true",
                    help="also run the bare aiohttp + selectolax loop (bench/floor_crawl.py) after Scrapy")
    args = ap.parse_args()
    py = scrapy_python()
    compile_tree(REPO)  # crawl/'s bytecode written, as pip wrote Scrapy's (trees.compile_tree)
    seeds = [h.base + "/" for h in build(SimParams(seed=args.seed, hosts=args.hosts)).good_hosts()]
    load = os.getloadavg()[0]
    for i in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="scrapy-bench-"))
        proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
        log = work / "access.jsonl"
        try:
            if not args.cold:
                n, secs = warm_server(port, args.hosts, args.seed, seeds)
                print(f"warmed the simulated web: {n} pages of the seeds' hosts in {secs:.1f} s (not timed)")
            t0, c0 = time.time(), children_cpu_s()
            counted, ours_s = run_ours(port, seeds, work, args.rounds, args.max_pages, args.per_host)
            t1, c1 = time.time(), children_cpu_s()
            s_counted, scrapy_s = run_scrapy(py, port, seeds, work, counted, args.concurrency, 1)
            t2, c2 = time.time(), children_cpu_s()
            if args.floor:
                f_counted, floor_s = run_floor(port, seeds, work, counted, args.concurrency)
                t3, c3 = time.time(), children_cpu_s()
        finally:
            stop_process(proc)
        try:
            ours_tl, theirs_tl = timeline(log, t0, t1), timeline(log, t1, t2)
            floor_tl = timeline(log, t2, t3) if args.floor else None
        finally:
            shutil.rmtree(work, ignore_errors=True)
        pages, s_pages = ours_tl["pages"], theirs_tl["pages"]
        ours, theirs = pages / ours_s, s_pages / scrapy_s
        print(f"run {i + 1}: {len(seeds)} seed hosts; crawl run {pages} pages in {ours_s:.1f} s = {ours:.1f} pages/s "
              f"(it counted {counted}); Scrapy {SCRAPY_VERSION} {s_pages} pages in {scrapy_s:.1f} s = "
              f"{theirs:.1f} pages/s (it counted {s_counted}); load {load:.1f}")
        print(describe_timeline("crawl run", ours_s, c1 - c0, ours_tl))
        print(describe_timeline("Scrapy", scrapy_s, c2 - c1, theirs_tl))
        floor = ""
        if floor_tl is not None:
            fl = floor_tl["pages"] / floor_s
            print(f"  floor (aiohttp + selectolax, bench/floor_crawl.py): {floor_tl['pages']} pages in {floor_s:.1f} s "
                  f"= {fl:.1f} pages/s (it counted {f_counted})")
            print(describe_timeline("floor", floor_s, c3 - c2, floor_tl))
            floor = f" floor_vs_scrapy={fl / theirs:.2f} floor_pages_s={fl:.1f} ours_vs_floor={ours / fl:.2f}"
        print(f"RESULT vs_scrapy={ours / theirs:.2f}{floor} ours_pages_s={ours:.1f} scrapy_pages_s={theirs:.1f} "
              f"pages={pages} load={load:.1f}")
        load = os.getloadavg()[0]


if __name__ == "__main__":
    main()
