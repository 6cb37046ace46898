"""``python -m crawl.simweb serve|truth``: run the simulated web, or write its ground truth."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from crawl.simweb import model as M
from crawl.simweb.clock import VirtualClock


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, default=200, help="number of virtual hosts (default 200)")
    p.add_argument("--seed", type=int, default=1, help="seed; same seed, same web (default 1)")
    p.add_argument("--pages-per-host", type=int, default=50,
                   help="mean pages per host; sizes are heavy-tailed around it (default 50)")
    p.add_argument("--epoch", type=float, default=M.EPOCH0,
                   help="virtual time (epoch s) at which every page is at version 0 (default 2026-01-01)")


def _params(a: argparse.Namespace) -> M.SimParams:
    return M.SimParams(seed=a.seed, hosts=a.hosts, pages_per_host=a.pages_per_host, epoch0=a.epoch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m crawl.simweb", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve the simulated web on 127.0.0.1")
    _common(s)
    s.add_argument("--port", type=int, default=8800, help="TCP port, 0 = pick a free one (default 8800)")
    s.add_argument("--bind", default="127.0.0.1",
                   help="address(es) to listen on, comma-separated, one port (default 127.0.0.1)")
    s.add_argument("--access-log", default=None, help="append one JSON line per request to this file")
    s.add_argument("--time", type=float, default=None, help="start the virtual clock at this epoch time")
    s.add_argument("--speed", type=float, default=1.0, help="virtual seconds per real second (default 1)")
    s.add_argument("--stall-seconds", type=float, default=120.0,
                   help="bound of slowloris / endless / huge bodies (default 120)")
    s.add_argument("--robots-timeout-seconds", type=float, default=60.0,
                   help="how long the timeout robots.txt host waits before answering (default 60)")
    s.add_argument("--canary-port", type=int, default=None,
                   help="serve the SSRF bait hosts (ssrf*.sim.test), their links aimed at this port")
    s.add_argument("--spa-hosts", type=int, default=0,
                   help="serve N script-built hosts spa-NNN.sim.test, linked from good hosts' home pages "
                        "(crawl/simweb/spa.py; default 0)")
    s.add_argument("--render-cache-mb", type=int, default=256,
                   help="memory for rendered page bodies (LRU, default 256); a benchmark whose pages do not fit "
                        "re-renders every page it asks for and measures the server's rendering, not the crawler")
    s.add_argument("--origin-bait", action="store_true",
                   help="serve the politeness/robots-scope bait hosts (spellings.sim.test, robots-429, "
                        "robots-hop-N); with --bind 127.0.0.1,::1 also [::1]")
    s.add_argument("--drip-hosts", action="store_true",
                   help="serve the slow-drip hosts (drip-body, drip-head, drip-robots .sim.test; crawl/simweb/drip.py)")
    s.add_argument("--log-conditional", action="store_true",
                   help="add the request's If-None-Match and If-Modified-Since to each access-log line "
                        "(inm, ims; null when absent)")
    t = sub.add_parser("truth", help="write the ground truth as Parquet")
    _common(t)
    t.add_argument("--out", required=True, help="output .parquet file")
    t.add_argument("--at", type=float, default=None, help="virtual time for version columns (default now)")
    t.add_argument("--spa-hosts", type=int, default=0, help="also write the truth of N spa hosts (--spa-out)")
    t.add_argument("--spa-out", default=None, help="Parquet file for the spa hosts' truth (crawl/simweb/spa.py)")
    a = ap.parse_args(argv)
    t0 = time.time()
    model = M.build(_params(a))
    if a.cmd == "truth":
        from crawl.simweb.truth import write_truth
        table = write_truth(model, a.out, a.at)
        print(f"wrote {table.num_rows} pages to {a.out} in {time.time() - t0:.1f} s", file=sys.stderr)
        if a.spa_hosts > 0 and a.spa_out:
            import pyarrow.parquet as pq

            from crawl.simweb.spa import SpaSite
            spa = SpaSite(model, a.spa_hosts).truth_table()
            pq.write_table(spa, a.spa_out)
            print(f"wrote {spa.num_rows} spa pages to {a.spa_out}", file=sys.stderr)
        return 0
    from crawl.simweb.server import run
    clock = VirtualClock(speed=a.speed)
    if a.time is not None:
        clock.set(t=a.time)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        ready: asyncio.Future = loop.create_future()
        task = asyncio.create_task(run(model, a.port, a.access_log, a.bind, clock, stop, ready,
                                       stall_s=a.stall_seconds, robots_timeout_s=a.robots_timeout_seconds,
                                       canary_port=a.canary_port, origin_bait=a.origin_bait,
                                       spa_hosts=a.spa_hosts, render_cache_mb=a.render_cache_mb,
                                       drip_hosts=a.drip_hosts, log_conditional=a.log_conditional))
        done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if ready in done:
            port, _srv = ready.result()
            print(f"SIMWEB READY http://127.0.0.1:{port}", flush=True)
            print(f"{len(model.hosts)} hosts, {model.n_pages} pages, built in {time.time() - t0:.1f} s; "
                  f"resolve *.sim.test=127.0.0.1:{port}", file=sys.stderr, flush=True)
        await task

    asyncio.run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main())
