"""What a JavaScript render costs per page against a plain fetch + parse, same pages, same run.

Starts the simulated web with ``--spa-hosts N`` and takes every page of its script-built hosts (shells,
inline-script pages and server-rendered decoys). Plain: ``fetch_partition`` + ``parse_partition`` of
those URLs. Rendered: the same fetched partition, then ``render_partition`` (one Chromium through
Playwright, every browser request through the crawler's session) and the parse of the rendered DOM.
Politeness delay 0 so both sides measure work, not waiting; the browser launch is counted (a render task
pays it once). ``render_concurrency`` as configured (default 2). Needs chromium (``make chromium``).

Run: ``.venv/bin/python bench/render_bench.py [--spa-hosts 8]``. Ends with::

    RESULT render_cost_factor=… plain_ms_per_page=… rendered_ms_per_page=… pages=…
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

from crawl.config import load_config  # noqa: E402
from crawl.fetch import fetch_partition  # noqa: E402
from crawl.parse import parse_partition  # noqa: E402
from crawl.records import FETCHLIST_SCHEMA  # noqa: E402
from crawl.render import apply_rendered, render_partition, robots_policies  # noqa: E402
from crawl.simweb import model as M  # noqa: E402
from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.simweb.spa import SpaSite  # noqa: E402
from crawl.tasks import CONTROL_SUBSETS  # noqa: E402
from crawl.url import url_hash  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spa-hosts", type=int, default=8)
    ap.add_argument("--hosts", type=int, default=30)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="render-bench-"))
    proc, port = launch(a.hosts, 1, work / "access.jsonl", 20, ("--spa-hosts", str(a.spa_hosts)),
                        work / "simweb.stderr")
    try:
        site = SpaSite(M.build(M.SimParams(seed=1, hosts=a.hosts, pages_per_host=20)), a.spa_hosts)
        urls = site.truth_table().column("url").to_pylist()
        hosts = [u.split("/")[2] for u in urls]
        fl = pa.table({"url": urls, "url_hash": pa.array([url_hash(u) for u in urls], pa.uint64()), "host": hosts,
                       "depth": pa.array([0] * len(urls), pa.int32()), "priority": [1.0] * len(urls),
                       "etag": pa.nulls(len(urls), pa.string()), "last_modified": pa.nulls(len(urls), pa.string()),
                       "prev_digest": pa.nulls(len(urls), pa.string()), "pkey": hosts}, schema=FETCHLIST_SCHEMA)
        cfg = load_config(overrides={"root": str(work / "crawl"), "resolve": [f"*.sim.test=127.0.0.1:{port}"],
                                     "politeness_delay_s": 0.0, "render_hosts": "spa-*.sim.test", "sitemaps": False},
                          use_env=False)
        t0 = time.perf_counter()
        out = fetch_partition(cfg, fl, root=cfg.root, warc_prefix="warc/bench-000", now=datetime.now(UTC))
        t_fetch = time.perf_counter() - t0
        docs = out.fetches.filter(pa.compute.invert(pa.compute.is_in(out.fetches.column("subset"),
                                                                       pa.array(CONTROL_SUBSETS))))
        t0 = time.perf_counter()
        pages, _ = parse_partition(cfg.root, docs, cfg.max_outlinks_per_page)
        t_parse = time.perf_counter() - t0
        t0 = time.perf_counter()
        rendered, stats = render_partition(cfg, out.fetches, cfg.root, "warc/bench-000-rendered.warc.gz",
                                           robots_policies(cfg, [out.robots_rows]))
        t_render = time.perf_counter() - t0
        t0 = time.perf_counter()
        rpages, _ = parse_partition(cfg.root, apply_rendered(docs, rendered), cfg.max_outlinks_per_page)
        t_rparse = time.perf_counter() - t0
    finally:
        stop_process(proc)
    n = pages.num_rows
    plain = (t_fetch + t_parse) / n
    rend = (t_fetch + t_render + t_rparse) / n
    words_plain = sum(len((t or "").split()) for t in pages.column("text").to_pylist())
    words_rend = sum(len((t or "").split()) for t in rpages.column("text").to_pylist())
    print(f"pages={n} fetch={t_fetch:.2f}s parse={t_parse:.3f}s render={t_render:.2f}s "
          f"(rendered {stats.get('rendered')}, browser requests {stats.get('browser_requests')}, "
          f"blocked {stats.get('browser_blocked')}: {stats.get('blocked_by')}) parse_rendered={t_rparse:.3f}s "
          f"words plain={words_plain} rendered={words_rend}")
    print(f"RESULT render_cost_factor={rend / plain:.1f} plain_ms_per_page={plain * 1000:.1f} "
          f"rendered_ms_per_page={rend * 1000:.1f} pages={n}")


if __name__ == "__main__":
    main()
