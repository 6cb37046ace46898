"""Where the fetch loop's CPU per page goes beyond a bare aiohttp loop: request loops that differ
by one thing each, on the same pages of the same simulated web, event-loop thread CPU per page.

Why: ``crawl_bench.py``'s ceiling A (a bare aiohttp loop, 64 connections to one address with Host
headers) fetches a page for ~0.09 ms of loop-thread CPU, ``fetch_partition`` for ~0.2 ms. The
steps below add our differences one at a time, so each one's cost is a difference of two lines:

- ``A bare``: ceiling A's loop (``crawl_bench.plain_loop``);
- ``B per-host``: one connection per host (the real URLs through our ``GuardedConnector``: every
  host is its own server on the real web), one request in flight per host, 300 host workers;
- ``C session``: + the session options the fetcher used with aiohttp (sock_read/connect timeouts,
  User-Agent, ``DummyCookieJar``, field size), with aiohttp's per-request ``total`` (``C total``)
  or without it (what ``_TotalBounds`` replaces it with, ``C no total``);
- ``D handling``: + what ``_HttpCalls._request`` did with an aiohttp answer (headers kept, capped
  body read);
- ``H1 per-host``: B's shape through the fetcher's own client (:mod:`crawl.fetch.h1`, which
  replaced aiohttp in the fetcher in session 10): connect, GET, headers, capped body, release;
- ``E fetch_partition``: the fetcher itself (sitemaps off, robots.txt from a cache, WARC written):
  scheduling, rows, WARC hand-off, GC.

Each variant runs ``--reps`` times, alternated, in this process (thread CPU of the loop thread,
``time.thread_time``); medians are printed. Ends with ``RESULT bare_ms=… fetch_ms=…``.

    python bench/http_path_bench.py --reps 5
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from crawl_bench import bench_fetchlist, bench_urls, plain_loop  # noqa: E402
from fetch_cpu_bench import fetch_config  # noqa: E402

from crawl.fetch import fetch_partition  # noqa: E402
from crawl.fetch.h1 import H1Client  # noqa: E402
from crawl.net import GuardedResolver, guarded_connector  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402


async def host_loop(cfg: Any, urls: list[str], session_opts: bool, total: float | None, handling: bool,
                    workers: int = 300) -> None:
    """Every host's URLs one after another (one in flight per host), ``workers`` hosts at once."""
    groups: dict[str, list[str]] = {}
    for u in urls:
        groups.setdefault(u.split("/")[2], []).append(u)
    todo = list(groups.values())
    resolver = GuardedResolver(cfg.resolve, allow_private_networks=cfg.allow_private_networks)
    conn = guarded_connector(resolver, limit=cfg.max_concurrent_hosts, limit_per_host=1)
    kw: dict[str, Any] = {}
    if session_opts:
        kw = {"timeout": aiohttp.ClientTimeout(total=total, sock_connect=cfg.connect_timeout_s,
                                               connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s),
              "headers": {"User-Agent": cfg.user_agent}, "cookie_jar": aiohttp.DummyCookieJar(),
              "max_field_size": 16_384, "read_bufsize": 65_536}
    cap = cfg.max_body_bytes

    async def worker(session: aiohttp.ClientSession) -> None:
        while todo:
            for url in todo.pop():
                if not handling:
                    async with session.get(url) as r:
                        await r.read()
                    continue
                async with session.get(url, headers={}, allow_redirects=False) as r:
                    [(k.decode("latin-1"), v.decode("latin-1")) for k, v in r.raw_headers]
                    list(r.request_info.headers.items())
                    r.headers.get("Location"), r.headers.get("Retry-After")
                    c = r.connection
                    c.transport.get_extra_info("peername") if c and c.transport else None
                    parts, size, content = [], 0, r.content
                    while size < cap:
                        chunk = await content.read(cap - size)
                        if not chunk:
                            break
                        parts.append(chunk)
                        size += len(chunk)
                        if content.at_eof():
                            break
                    b"".join(parts)

    async with aiohttp.ClientSession(connector=conn, **kw) as session:
        await asyncio.gather(*(worker(session) for _ in range(workers)))
    await resolver.close()


async def h1_loop(cfg: Any, urls: list[str], workers: int = 300) -> None:
    """B's shape (one connection per host, one request in flight) through :class:`H1Client`."""
    groups: dict[str, list[str]] = {}
    for u in urls:
        groups.setdefault(u.split("/")[2], []).append(u)
    todo = list(groups.values())
    resolver = GuardedResolver(cfg.resolve, allow_private_networks=cfg.allow_private_networks)
    client = H1Client(resolver, user_agent=cfg.user_agent, connect_timeout=cfg.connect_timeout_s,
                      read_timeout=cfg.read_timeout_s, max_idle=workers)
    cap = cfg.max_body_bytes

    async def worker() -> None:
        while todo:
            for url in todo.pop():
                r = await client.get(url, {}, cap)
                try:
                    await r.read()
                finally:
                    r.release()

    try:
        await asyncio.gather(*(worker() for _ in range(workers)))
    finally:
        client.close()
    await resolver.close()


def on_uvloop(make: Callable[[], Coroutine[Any, Any, Any]]) -> Callable[[], None]:
    """A variant run on uvloop, as the fetcher's loop (crawl.fetch.core.event_loop_factory)."""
    def run() -> None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
            r.run(make())
    return run


def loop_ms(run: Callable[[], None], pages: int) -> float:
    """This thread's CPU per page of one run (the event loop's thread; WARC writing is another)."""
    c0 = time.thread_time()
    run()
    return 1000 * (time.thread_time() - c0) / pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="http-path-bench-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        urls = bench_urls(args.hosts, args.seed, args.pages)
        fl = bench_fetchlist(urls)
        cfg = fetch_config(work, port, len(urls))
        asyncio.run(plain_loop(port, urls, False))  # the server's render cache warm for every variant
        nosm = cfg.replace(sitemaps=False)
        robots = fetch_partition(cfg, fl.slice(0, args.hosts), root=str(work / "robots"), warc_prefix="r/0",
                                 now=datetime.now(UTC)).robots_rows
        n_runs = [0]

        def fetcher() -> None:  # its own event loop (uvloop when installed), WARC writer thread
            n_runs[0] += 1
            fetch_partition(nosm, fl, root=str(work / f"f{n_runs[0]}"), warc_prefix=f"f/{n_runs[0]}",
                            now=datetime.now(UTC), robots_cache=robots)
            shutil.rmtree(work / f"f{n_runs[0]}", ignore_errors=True)

        variants: dict[str, Callable[[], None]] = {
            "A bare (ceiling A)": on_uvloop(lambda: plain_loop(port, urls, False)),
            "B per-host connections": on_uvloop(lambda: host_loop(cfg, urls, False, None, False)),
            "C session, aiohttp total": on_uvloop(lambda: host_loop(cfg, urls, True, cfg.total_timeout_s, False)),
            "C session, no total": on_uvloop(lambda: host_loop(cfg, urls, True, None, False)),
            "D + answer handling, no total": on_uvloop(lambda: host_loop(cfg, urls, True, None, True)),
            "H1 per-host (crawl.fetch.h1)": on_uvloop(lambda: h1_loop(cfg, urls)),
            "E fetch_partition": fetcher,
        }
        got: dict[str, list[float]] = {k: [] for k in variants}
        for rep in range(args.reps):
            for name, run in (variants.items() if rep % 2 == 0 else reversed(variants.items())):
                got[name].append(loop_ms(run, len(urls)))
        print(f"{len(urls)} pages on {len({u.split('/')[2] for u in urls})} hosts; loop-thread CPU ms/page, "
              f"median of {args.reps}")
        for name, v in got.items():
            print(f"  {name:32s} {statistics.median(v):.3f}   {[round(x, 3) for x in v]}")
        print(f"RESULT bare_ms={statistics.median(got['A bare (ceiling A)']):.3f} "
              f"fetch_ms={statistics.median(got['E fetch_partition']):.3f}")
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
