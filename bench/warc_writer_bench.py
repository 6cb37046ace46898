"""The fetcher's WARC writer path on its own: CPU per page and same-bytes check, against a baseline tree.

Pages are the simulated web's HTML pages (``writes_bench._pages``, ~19 KB), handed to the fetcher's own
``_WarcOutput._store`` (``crawl.fetch``'s ``_Fetcher``) exactly as the event loop does: request +
response records (payload digest and revisit decision on the writer thread), written by the
``_WarcWriter`` thread, segment cuts (checkpoints) every ``--cut-every`` pages.

- default: CPU of the writer path. The calling thread plays the event loop: per page ``--loop-us`` µs of
  Python work, the ``_store`` call, and every ``--batch`` pages a short sleep (the loop's poll), so the
  writer thread meets a GIL-holding neighbour as in a fetch (the "in-situ surcharge"). Prints the
  process CPU per page, the writer thread's and the loop thread's, alternated ``--reps`` times against
  ``--baseline-rev`` in child processes.
- ``--check``: writes every page (plus renamed / non-ASCII headers, truncated, revisits, 404s into the
  diagnostics subset) with record ids from a counter and a fixed warcinfo date, and prints the SHA-256
  of every file and the rows' offsets; run against ``--baseline-rev`` it says whether the bytes are equal.

    python bench/warc_writer_bench.py --reps 5 --baseline-rev main
    python bench/warc_writer_bench.py --check --baseline-rev main
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("WARC_BENCH_TREE", str(REPO)))
sys.path.insert(1, str(REPO / "bench"))

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REQ_HEADERS = [("Host", "x.sim.test"), ("User-Agent", "RecrawlBot/0.1 (+https://example.org/bot)"),
               ("Accept", "*/*"), ("Accept-Encoding", "gzip, deflate")]


def _headers(ct: str, n: int, i: int) -> list[tuple[str, str]]:
    h = [("Content-Type", ct), ("Content-Length", str(n)), ("Date", "Tue, 01 Dec 2026 10:00:00 GMT"),
         ("Server", "Python/3.11 aiohttp/3.10"), ("ETag", f'"e{i}"'), ("Cache-Control", "max-age=60")]
    if i % 7 == 0:
        h.append(("Content-Encoding", "gzip"))
    if i % 11 == 0:
        h.append(("Transfer-Encoding", "chunked"))
    if i % 13 == 0:
        h.append(("X-Note", "caf\u00e9 \u2603"))
    return h


def _responses(pages: list[tuple[str, bytes, str]], check: bool) -> list[tuple[str, str, Any]]:
    """(subset, URL, _Response) per page; with ``check`` also repeated bodies (revisits), truncated
    records and 404s."""
    from crawl.fetch.http import _Response

    out = []
    for i, (url, body, ct) in enumerate(pages):
        status, reason, subset = 200, "OK", "warc"
        if check and i % 17 == 0:
            body = pages[i // 2][1]  # a body seen before: a revisit
        if check and i % 29 == 0:
            status, reason, subset = 404, "Not Found", "crawldiagnostics"
        r = _Response(status=status, reason=reason, headers=_headers(ct, len(body), i) if check else
                      _headers(ct, len(body), 1), req_headers=REQ_HEADERS, body=body,
                      truncated="length" if check and i % 19 == 0 else None, ip="127.0.0.1",
                      location=None, retry_after=None)
        out.append((subset, url, r))
    return out


def _fetcher(work: Path, cut_every: int, segments: list) -> Any:
    from crawl.config import load_config
    from crawl.fetch.core import _Fetcher

    cfg = load_config(overrides={"root": str(work), "crawl_id": "bench"}, use_env=False)
    f = _Fetcher(cfg, str(work), "warc/bench", T0, None, 3600.0, segments.append if cut_every else None)
    f.t0 = time.monotonic()  # (set by the fetch's run())
    return f


def run(pages: list[tuple[str, bytes, str]], work: Path, check: bool, cut_every: int, loop_us: float,
        batch: int, python_only: bool = False) -> dict:
    """Every page through ``_store`` and the writer thread; CPU (or, with ``check``, the bytes).
    ``python_only``: deflate and SHA-1 stubbed out (a fixed member, a digest from a counter), so the
    CPU left is the writer's Python and copies."""
    import crawl.warc as W
    from crawl.fetch import warcwriter

    if python_only:
        digests = itertools.count()
        W._gzip = lambda data: b"\x1f\x8b" + bytes(98)
        W._sha1 = lambda *parts: f"sha1:{next(digests):032d}"
        warcwriter.payload_digest = lambda data: f"sha1:{next(digests):032d}"

    if check:  # record ids from a counter, a fixed warcinfo date: the same bytes for the same input
        ids = itertools.count()
        W._record_id = lambda: f"<urn:uuid:00000000-0000-4000-8000-{next(ids):012d}>"

        class _Fixed(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> datetime:
                return datetime(2026, 1, 1, 12, tzinfo=tz)

        W.datetime = _Fixed
    responses = _responses(pages, check)
    segments: list = []
    f = _fetcher(work, cut_every, segments)
    wcpu: dict = {}
    orig = warcwriter._WarcWriter._loop

    def timed(self: Any) -> None:
        c0 = time.thread_time()
        try:
            orig(self)
        finally:
            wcpu["s"] = time.thread_time() - c0

    warcwriter._WarcWriter._loop = timed
    f.writer = warcwriter._WarcWriter()  # made again with the timed loop
    rows = []
    spin = int(loop_us * 4)  # ~0.25 µs an iteration of the work below
    c0, l0 = time.process_time(), time.thread_time()
    with f.writer:
        for i, (subset, url, r) in enumerate(responses):
            acc = 0
            for k in range(spin):
                acc += k & 7
            rows.append(f._store(subset, url, T0 + timedelta(milliseconds=i), r, dedup=subset == "warc"))
            f.rows.append(rows[-1])
            if cut_every and (i + 1) % cut_every == 0:
                f.cut()
            if batch and (i + 1) % batch == 0:
                time.sleep(0.0002)
        if cut_every:
            f.cut()
    loop_s = time.thread_time() - l0
    files = f.close_files(every_subset=not cut_every)
    cpu = time.process_time() - c0
    warcwriter._WarcWriter._loop = orig
    if f.writer.error is not None:
        raise f.writer.error
    n = len(responses)
    out = {"pages": n, "cpu_ms": 1000 * cpu / n, "writer_ms": 1000 * wcpu.get("s", 0.0) / n,
           "loop_ms": 1000 * loop_s / n}
    if check:
        f.finish_rows()
        out["files"] = {p: hashlib.sha256((work / p).read_bytes()).hexdigest() for p in sorted(set(f.placed + files))}
        out["rows"] = hashlib.sha256(json.dumps(
            [[r.get(k) for k in ("warc_filename", "warc_record_offset", "warc_record_length", "payload_digest",
                                 "warc_type", "revisit_of_url")] for r in f.rows]).encode()).hexdigest()
        out["records"] = sum(1 for _ in itertools.chain.from_iterable(
            W.iter_records(str(work), p) for p in out["files"]))
        out["segments"] = len(segments)
    return out


def child(args: argparse.Namespace) -> None:
    import pandas  # noqa: F401 - imported by the first cut's Arrow tables otherwise (a worker has it loaded)
    from writes_bench import _pages

    # the same bytes in every child: the simulated web stamps each body with the time it was served
    pages = [(u, re.sub(rb"<!-- served [0-9.]+ -->", b"<!-- served -->", b), ct) for u, b, ct in _pages(args.hosts)]
    work = Path(args.work)
    gc.freeze()  # the fetch runs with the collector paused (crawl.gctune.paused_gc)
    gc.disable()
    r = run(pages, work, args.check, args.cut_every, args.loop_us, args.batch, args.python_only)
    print("CHILD " + json.dumps(r), flush=True)


def spawn(tree: Path, args: argparse.Namespace, work: Path) -> dict:
    env = {**os.environ, "WARC_BENCH_TREE": str(tree), "WRITES_TREE": str(tree), "PYTHONPATH": str(tree),
           "PYTHONHASHSEED": "0"}  # the same pages in every child
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--work", str(work), "--hosts", str(args.hosts),
           "--cut-every", str(args.cut_every), "--loop-us", str(args.loop_us), "--batch", str(args.batch)]
    cmd += ["--check"] if args.check else []
    p = subprocess.run(cmd + (["--python-only"] if args.python_only else []), env=env, capture_output=True, text=True,
                       timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("CHILD "):
            return json.loads(line[6:])
    raise RuntimeError(f"child on {tree} failed: {p.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=60, help="simulated hosts (~20 pages each, HTML kept)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline-rev", default="")
    ap.add_argument("--check", action="store_true", help="same-bytes check instead of CPU")
    ap.add_argument("--cut-every", type=int, default=500, help="segment cut every N pages (0: no checkpoints)")
    ap.add_argument("--loop-us", type=float, default=150.0, help="Python work of the 'loop' thread per page")
    ap.add_argument("--batch", type=int, default=8, help="pages between the loop's short sleeps (0: none)")
    ap.add_argument("--python-only", action="store_true", help="deflate and SHA-1 stubbed: the writer's Python alone")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    from trees import tree_at

    work = Path(tempfile.mkdtemp(prefix="warc-writer-bench-"))
    try:
        sides = [("current", REPO)]
        if args.baseline_rev:
            sides.insert(0, ("baseline", tree_at(args.baseline_rev, work / "baseline-tree")))
        res: dict[str, list[dict]] = {s: [] for s, _ in sides}
        for rep in range(1 if args.check else args.reps):
            for name, tree in (sides if rep % 2 == 0 else sides[::-1]):
                r = spawn(tree, args, work / f"{name}{rep}")
                res[name].append(r)
                if args.check:
                    print(f"{name}: {r['records']} records in {len(r['files'])} files, {r['segments']} segments, "
                          f"rows {r['rows'][:16]}")
                else:
                    print(f"rep {rep} {name:8s}: {r['cpu_ms']:.4f} ms CPU/page (writer {r['writer_ms']:.4f}, "
                          f"loop {r['loop_ms']:.4f}) load {os.getloadavg()[0]:.1f}", flush=True)
                shutil.rmtree(work / f"{name}{rep}", ignore_errors=True)
        if args.check:
            if len(sides) > 1:
                a, b = res["baseline"][0], res["current"][0]
                same = a["files"] == b["files"] and a["rows"] == b["rows"]
                print(f"RESULT same_bytes={same} records={b['records']} files={len(b['files'])}")
                if not same:
                    for p in sorted(set(a["files"]) | set(b["files"])):
                        print(p, a["files"].get(p, "-")[:12], b["files"].get(p, "-")[:12])
            return
        line = "RESULT"
        for key in ("cpu_ms", "writer_ms", "loop_ms"):
            for name, _ in sides:
                line += f" {name}_{key}={statistics.median(r[key] for r in res[name]):.4f}"
        if len(sides) > 1:
            wins = sum(c["cpu_ms"] < b["cpu_ms"] for b, c in zip(res["baseline"], res["current"], strict=True))
            line += f" current_lower_in={wins}/{args.reps}"
        print(line + f" load={os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
