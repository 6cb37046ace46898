"""Do two source trees' fetchers write the same WARC records and fetch rows for the same pages?

Why: a change to the fetcher's HTTP path (session 10: aiohttp replaced by :mod:`crawl.fetch.h1`) must
not change what a crawl stores. Both trees (this one and ``git archive`` of ``--baseline-rev``) run
``crawl.fetch.fetch_partition`` in a child process over the same fetch list against one simulated
web whose clock is stopped at the same time for both: every URL of ``--hosts`` hosts (pages, media, redirects, robots.txt, sitemaps, hostile hosts)
(but hostile hosts' own pages hosts with a Crawl-delay: timing, not bytes; and
"noisy" pages, new bytes every request) plus the
deterministic ``/fault/`` pages (404/410/500, redirect chains, huge, endless, gzip bomb,
reset, wrong types), with an ETag and Last-Modified on some URLs so conditional requests and 304s
are in. Then per (record type, target URI, n-th occurrence) the records are compared:

- request records: the whole HTTP block (request line and headers, in order) and WARC-IP-Address;
- response/revisit/resource records: status line, HTTP headers in order except ``Date`` (the
  server's clock), payload digest and length, WARC-Truncated, WARC-IP-Address;
- fetch rows per (url, n-th attempt): every column but the times (``fetch_time``, and
  ``revisit_of_date``, the fetch time of the first capture) and the record offsets and lengths (the
  gzip members hold the server's Date).

Prints the differences (at most ``--show``) and ``RESULT same_records=… differing=… only_one_side=…``.

    python bench/fetch_same_outputs.py --baseline-rev main --hosts 40
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("FETCH_SAME_TREE", str(REPO)))

FAULTS = ("404", "410", "500", "redirect-chain-3", "redirect-cross", "huge", "endless", "gzip-bomb",
          "wrong-type-image", "wrong-type-html")
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SKIP_ROW = {"fetch_time", "revisit_of_date", "warc_record_offset", "warc_record_length"}


def child(fetchlist: Path, port: int, out: Path) -> None:
    import pyarrow.parquet as pq

    from crawl.config import load_config
    from crawl.fetch import fetch_partition

    fl = pq.read_table(fetchlist)
    cfg = load_config(overrides={
        "root": str(out / "root"), "crawl_id": "same", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
        "politeness_delay_s": 0.0, "max_pages": fl.num_rows, "round_duration_s": 600.0,
        "max_pages_per_host_per_round": 100_000, "total_timeout_s": 10.0, "max_host_errors": 1000,
    }, use_env=False)
    res = fetch_partition(cfg, fl, root=str(out / "warc"), warc_prefix="same/p0", now=NOW)
    pq.write_table(res.fetches, out / "rows.parquet")
    print("CHILD " + json.dumps({"rows": res.fetches.num_rows}), flush=True)


def records(warc_dir: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    from warcio.archiveiterator import ArchiveIterator

    seen: Counter[tuple[str, str]] = Counter()
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for path in sorted(warc_dir.rglob("*.warc.gz")):
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):
                kind, uri = rec.rec_type, rec.rec_headers.get_header("WARC-Target-URI")
                if kind == "warcinfo":
                    continue
                k = (kind, uri, seen[kind, uri])
                seen[kind, uri] += 1
                h = rec.rec_headers
                d: dict[str, Any] = {"file": path.name.split("-", 1)[-1], "ip": h.get_header("WARC-IP-Address"),
                                     "truncated": h.get_header("WARC-Truncated"),
                                     "payload_digest": h.get_header("WARC-Payload-Digest")}
                if rec.http_headers is not None:
                    d["line"] = rec.http_headers.protocol + " " + rec.http_headers.statusline
                    d["headers"] = [(n, v) for n, v in rec.http_headers.headers if n.lower() != "date"]
                if kind != "request":
                    d["payload_len"] = len(rec.content_stream().read())
                out[k] = d
    return out


def ignore_ip_gap(cur: dict[str, Any], base: dict[str, Any]) -> bool:
    """With ``--ip-gap`` (set in main): a baseline record without WARC-IP-Address where the current
    one has one, all else equal, is not a difference (aiohttp had often released the connection,
    peer address and all, before the fetcher asked for it: the baseline's missing addresses)."""
    if not IP_GAP or base.get("ip") is not None or cur.get("ip") is None:
        return False
    return {**cur, "ip": None} == base


IP_GAP = False


def rows(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    import pyarrow.parquet as pq

    seen: Counter[str] = Counter()
    out = {}
    for r in pq.read_table(path).to_pylist():
        out[r["url"], seen[r["url"]]] = {k: v for k, v in r.items() if k not in SKIP_ROW}
        seen[r["url"]] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-rev", default="main")
    ap.add_argument("--hosts", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=20)
    ap.add_argument("--ip-gap", action="store_true",
                    help="count a record the baseline wrote without WARC-IP-Address (and the current with one) as the same")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), int(args.child[1]), Path(args.child[2]))
        return

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    global IP_GAP
    IP_GAP = args.ip_gap

    sys.path.insert(0, str(REPO / "bench"))
    from crawl_bench import bench_fetchlist
    from trees import tree_at

    from crawl.simweb.launch import launch
    from crawl.simweb.launch import stop as stop_process
    from crawl.simweb.model import SimParams, build
    from crawl.simweb.truth import truth_table

    work = Path(tempfile.mkdtemp(prefix="fetch-same-"))
    proc, port = launch(args.hosts, args.seed, work / "access.jsonl")
    try:
        truth = truth_table(build(SimParams(seed=args.seed, hosts=args.hosts)))
        # hostile hosts' own pages stall and throttle (timing, not bytes): only their fault pages
        hostile = sorted({h for h in truth.column("host").to_pylist() if h.startswith("hostile-")})
        # and hosts with a Crawl-delay are left out (seconds between requests, the same bytes)
        slow = set(truth.filter(pc.is_valid(truth.column("crawl_delay"))).column("host").to_pylist())
        # and "noisy" pages (their bytes change with every request)
        urls = [u for u, h, noisy in zip(truth.column("url").to_pylist(), truth.column("host").to_pylist(),
                                         truth.column("noisy").to_pylist(), strict=True)
                if not h.startswith("hostile-") and h not in slow and not noisy]
        urls += [f"http://{hostile[0]}/fault/{n}" for n in FAULTS] if hostile else []
        fl = bench_fetchlist(urls)
        # conditional requests on every 7th URL (the simulated web answers some with 304)
        n = fl.num_rows
        every = pa.array([i % 7 == 3 for i in range(n)])
        fl = fl.set_column(fl.schema.get_field_index("etag"), "etag",
                           pc.if_else(every, pa.scalar('"v1"'), pa.nulls(n, pa.string())))
        fl = fl.set_column(fl.schema.get_field_index("last_modified"), "last_modified",
                           pc.if_else(every, pa.scalar("Tue, 01 Dec 2026 00:00:00 GMT"), pa.nulls(n, pa.string())))
        fl_path = work / "fetchlist.parquet"
        pq.write_table(fl, fl_path)
        sides = {"current": REPO, "baseline": tree_at(args.baseline_rev, work / "baseline-tree")}
        got = {}
        frozen = time.time()
        for name, tree in sides.items():
            # the same virtual time (clock stopped) for both sides: pages change with the server's clock
            req = urllib.request.Request(f"http://127.0.0.1:{port}/_sim/clock", method="POST",
                                         data=json.dumps({"time": frozen, "speed": 0.0}).encode(),
                                         headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=10).read()
            out = work / name
            env = {**os.environ, "FETCH_SAME_TREE": str(tree), "PYTHONPATH": str(tree)}
            p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(fl_path), str(port),
                                str(out)], env=env, capture_output=True, text=True, timeout=600)
            if "CHILD " not in p.stdout:
                raise RuntimeError(f"{name} failed: {p.stderr[-3000:]}")
            got[name] = (records(out / "warc"), rows(out / "rows.parquet"))
            print(f"{name}: {p.stdout.strip()}", flush=True)
        print(f"{len(urls)} URLs on {args.hosts} hosts (+ {len(FAULTS)} faults); records: "
              f"current {len(got['current'][0])}, baseline {len(got['baseline'][0])}")
        same = differ = only = 0
        recs = got["baseline"][0]
        print(f"baseline records without WARC-IP-Address: {sum(d['ip'] is None for d in recs.values())} of "
              f"{len(recs)}; current: {sum(d['ip'] is None for d in got['current'][0].values())}")
        shown = 0
        for what in (0, 1):
            cur, base = got["current"][what], got["baseline"][what]
            for k in sorted(set(cur) | set(base), key=str):
                if k not in cur or k not in base:
                    only += 1
                    if shown < args.show:
                        print(f"only {'current' if k in cur else 'baseline'}: {k}")
                        shown += 1
                elif cur[k] != base[k] and not ignore_ip_gap(cur[k], base[k]):
                    differ += 1
                    if shown < args.show:
                        diff = {f: (cur[k].get(f), base[k].get(f)) for f in set(cur[k]) | set(base[k])
                                if cur[k].get(f) != base[k].get(f)}
                        print(f"differs: {k}: {diff}")
                        shown += 1
                else:
                    same += 1
        print(f"RESULT same={same} differing={differ} only_one_side={only}")
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
