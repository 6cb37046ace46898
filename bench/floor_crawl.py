"""The floor contender of bench/scrapy_bench.py: the least a breadth-first crawler can do per page.

A bare aiohttp + selectolax loop (the "plain aiohttp + selectolax" of issue 11, as
``bench/crawl_bench.py``'s ``plain_loop``) that crawls like the other two contenders -- the same
seeds and scope (the seeds' hosts), one request in flight per host, a global cap on requests in
flight, breadth-first over the links it extracts (each host's queue in discovery order) until the page
budget -- and does nothing else: no robots.txt, no storing, no content dedup, no politeness
bookkeeping beyond one request per host, no retries. It parses every HTML answer (links and the
body's text, as plain_loop does) and follows redirects as links. Run as its own process (interpreter
start and imports included, as for ``crawl run`` and Scrapy), so its wall time and CPU are a
lower bound on what any crawler of this web pays on this machine:

    python bench/floor_crawl.py PORT SEEDS_FILE BUDGET CONCURRENCY OUT_JSON

Requests go to 127.0.0.1:PORT with the original Host header (the simulated web's virtual hosts).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import deque
from urllib.parse import urldefrag, urljoin, urlsplit

import aiohttp
from selectolax.lexbor import LexborHTMLParser

TIMEOUT_S = 30.0  # as both other contenders


class Floor:
    """Per-host FIFO queues, one worker coroutine per host with queued URLs, a global semaphore."""

    def __init__(self, port: int, seeds: list[str], budget: int, concurrency: int) -> None:
        self.port, self.budget, self.concurrency = port, budget, concurrency
        self.scope = {urlsplit(u).hostname for u in seeds}
        self.queues: dict[str, deque[str]] = {}
        self.seen: set[str] = set()
        self.active: set[str] = set()
        self.tasks: set[asyncio.Task] = set()
        self.started = self.pages = self.errors = 0
        self.slots = asyncio.Semaphore(concurrency)
        self.session: aiohttp.ClientSession | None = None
        for u in seeds:
            self.add(u)

    def add(self, url: str) -> None:
        url = urldefrag(url)[0]
        parts = urlsplit(url)
        host = parts.hostname
        if parts.scheme != "http" or host not in self.scope or url in self.seen:
            return
        self.seen.add(url)
        self.queues.setdefault(host, deque()).append(url)
        if host not in self.active and self.session is not None:
            self.active.add(host)
            task = asyncio.get_running_loop().create_task(self.host_worker(host))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def host_worker(self, host: str) -> None:
        queue = self.queues[host]
        try:
            while queue and self.started < self.budget:
                url = queue.popleft()
                self.started += 1
                async with self.slots:
                    await self.fetch(url)
        finally:
            self.active.discard(host)

    async def fetch(self, url: str) -> None:
        parts = urlsplit(url)
        target = f"http://127.0.0.1:{self.port}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")
        try:
            async with self.session.get(target, headers={"Host": parts.netloc}, allow_redirects=False) as r:
                body = await r.read()
                status, ctype, location = r.status, r.headers.get("Content-Type", ""), r.headers.get("Location")
        except (TimeoutError, aiohttp.ClientError, ValueError):
            self.errors += 1
            return
        self.pages += 1
        if location and 300 <= status < 400:
            self.add(urljoin(url, location))
        if "html" not in ctype or not body:
            return
        tree = LexborHTMLParser(body)
        for a in tree.css("a[href]"):
            href = a.attributes.get("href")
            if href:
                try:
                    self.add(urljoin(url, href))
                except ValueError:  # not a URL
                    continue
        if tree.body is not None:
            tree.body.text(separator=" ")

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as self.session:
            for host in list(self.queues):
                self.active.add(host)
                task = asyncio.get_running_loop().create_task(self.host_worker(host))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            while self.tasks:
                await asyncio.gather(*list(self.tasks))


def main() -> None:
    port, seeds_file, budget, concurrency, out = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                                  int(sys.argv[4]), sys.argv[5])
    seeds = open(seeds_file, encoding="utf-8").read().split()
    t0 = time.perf_counter()
    floor = Floor(port, seeds, budget, concurrency)
    asyncio.run(floor.run())
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"pages": floor.pages, "errors": floor.errors, "crawl_s": time.perf_counter() - t0}, f)


if __name__ == "__main__":
    main()
