"""How fast the simulated web serves pages: pages/s to a plain aiohttp client.

Starts ``python -m crawl.simweb serve`` as a subprocess (one process, so one core for the server), then
runs ``--concurrency`` client workers for ``--seconds`` (capped at 20) over the HTML pages of normal
hosts, first a cold pass (every page rendered for the first time) then a warm pass over the same pages.
Prints one JSON line with pages/s and MB/s per pass.

    .venv/bin/python bench/simweb_bench.py --hosts 200 --seconds 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crawl.simweb import model as M  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402


async def run_pass(port: int, targets: list[tuple[str, str]], seconds: float, concurrency: int,
                   once: bool = False) -> dict:
    """Fetch targets round-robin until ``seconds`` pass (``once``: stop after one sweep)."""
    done = 0
    nbytes = 0
    errors = 0
    stop_at = time.monotonic() + seconds
    it = iter(range(10**9))
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn, auto_decompress=False) as session:
        async def worker() -> None:
            nonlocal done, nbytes, errors
            while time.monotonic() < stop_at:
                i = next(it)
                if once and i >= len(targets):
                    return
                host, path = targets[i % len(targets)]
                try:
                    async with session.get(f"http://127.0.0.1:{port}{path}",
                                           headers={"Host": host, "User-Agent": "simweb-bench"}) as r:
                        body = await r.read()
                        if r.status == 200:
                            done += 1
                            nbytes += len(body)
                        else:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - t0
    return {"pages": done, "errors": errors, "seconds": round(elapsed, 2),
            "pages_per_s": round(done / elapsed, 1), "mb_per_s": round(nbytes / elapsed / 1e6, 2),
            "avg_kb": round(nbytes / max(done, 1) / 1e3, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pages-per-host", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=8.0, help="per pass, capped at 20")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--access-log", action="store_true", help="serve with the access log on (to a temp file)")
    a = ap.parse_args()
    seconds = min(a.seconds, 20.0)
    model = M.build(M.SimParams(seed=a.seed, hosts=a.hosts, pages_per_host=a.pages_per_host))
    targets = [(model.hosts[model.page_host[p]].name, model.paths[p]) for p in range(model.n_pages)
               if model.page_type[p] in (M.HOME, M.ARTICLE) and model.hosts[model.page_host[p]].kind in M.NORMAL_KINDS]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    tmp = tempfile.TemporaryDirectory()
    log_args = ["--access-log", str(Path(tmp.name) / "access.jsonl")] if a.access_log else []
    proc = subprocess.Popen([sys.executable, "-m", "crawl.simweb", "serve", "--hosts", str(a.hosts), "--seed",
                             str(a.seed), "--pages-per-host", str(a.pages_per_host), "--port", "0", *log_args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    try:
        line = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not line.startswith(b"SIMWEB READY"):
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline()
        port = int(line.decode().rsplit(":", 1)[1])
        cold = asyncio.run(run_pass(port, targets, seconds, a.concurrency, once=True))
        # warm: only pages the cold pass rendered (bodies cached; the version cache is always warm)
        warm = asyncio.run(run_pass(port, targets[: cold["pages"]], seconds, a.concurrency))
    finally:
        stop_process(proc)
        tmp.cleanup()
    print(json.dumps({
        "bench": "simweb_serve", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "access_log": a.access_log, "hosts": a.hosts, "pages": model.n_pages, "html_targets": len(targets), "concurrency": a.concurrency,
        "cold": cold, "warm": warm}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
