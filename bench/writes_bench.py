"""CPU per page of writing a fetch+parse task's output, against a same-run baseline: the WARC writer
and the parse task's Parquet files.

Why a focused bench: on the shared box a whole round's CPU per page (``worker_cpu_profile.py``) swung
by 10 % between runs of the same code, more than the changes measured here. Both parts below run on
the simulated web's own pages (``crawl.simweb``, ~20 KB HTML), in child processes importing ``crawl``
from this work tree ("current") or ``git archive`` of ``--baseline-rev`` ("baseline"), alternated.

- **warc**: request + response records of every HTML page, as the fetcher's writer thread writes
  them (payload digest first, then ``write_request``/``write_response`` with it), ``time.thread_time``.
- **parse**: ``crawl.tasks.parse_task`` of one partition (the pages read back from its WARC file,
  parsed, pages + raw links + text and images files written), process CPU; ``write_table`` CPU is
  the Parquet writes' part of it.
- **digests**: a recrawl's fetch task asks its known digests (``crawl.digests``, on the writer
  thread) about every new or changed page; CPU of the first miss (it loads the stored keys of
  ``--digests`` captures) and per later miss.

    python bench/writes_bench.py --hosts 60 --reps 3 --baseline-rev main

Ends with ``RESULT warc_ms_per_page=… baseline=… ratio=… parse_task_ms_per_page=… baseline=… ratio=…
parquet_ms_per_page=… … digest_miss_us=… … digest_first_lookup_s=… …`` (medians; ratio = baseline / current, > 1 means less CPU now).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("WRITES_TREE", str(REPO)))

from trees import tree_at  # noqa: E402  (imports nothing of crawl)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REQ_HEADERS = [("Host", "x.sim.test"), ("User-Agent", "RecrawlBot/0.1 (+https://example.org/bot)"),
               ("Accept", "*/*"), ("Accept-Encoding", "gzip, deflate")]


def _pages(hosts: int) -> list[tuple[str, bytes, str]]:
    """(URL, body, content type) of every HTML page of a ``hosts``-host simulated web."""
    from crawl.simweb import model as M
    from crawl.simweb.render import Renderer

    m = M.build(M.SimParams(seed=3, hosts=hosts, pages_per_host=20))
    r = Renderer(m)
    out = []
    for p in range(m.n_pages):
        rend = r.get(p, 0, m.params.epoch0)
        if rend.content_type.startswith("text/html"):
            out.append((m.url(p), rend.body(1, m.params.epoch0 + 10), rend.content_type))
    return out


def _response_headers(ct: str, n: int) -> list[tuple[str, str]]:
    return [("Content-Type", ct), ("Content-Length", str(n)), ("Date", "Tue, 01 Dec 2026 10:00:00 GMT"),
            ("Server", "Python/3.11 aiohttp/3.10"), ("Last-Modified", "Tue, 01 Dec 2026 09:00:00 GMT"),
            ("ETag", '"abc123"'), ("Cache-Control", "max-age=60")]


def warc_cpu(work: Path, pages: list[tuple[str, bytes, str]]) -> float:
    """Writer-thread CPU seconds for the request + response records of ``pages``."""
    from crawl.fingerprint import payload_digest
    from crawl.warc import WarcFile

    c = time.thread_time()
    with WarcFile.open(str(work), "bench.warc.gz") as w:
        for url, body, ct in pages:
            digest = payload_digest(body)
            req = w.write_request(url, T0, "GET", REQ_HEADERS, ip="127.0.0.1")
            w.write_response(url, T0, 200, "OK", _response_headers(ct, len(body)), body, "127.0.0.1", None,
                             concurrent_to=req.record_id, digest=digest)
    return time.thread_time() - c


def prepare_partition(root: Path, pages: list[tuple[str, bytes, str]]) -> None:
    """Round 1, partition 0 of crawl ``bench`` as the fetch leaves it: a fetched file and its WARC
    file in the round's staging folder (the current tree writes both; every child reads them)."""
    import pyarrow as pa

    from crawl.fingerprint import payload_digest
    from crawl.records import FETCH_SCHEMA
    from crawl.store import Store
    from crawl.url import url_hash
    from crawl.warc import WarcFile

    store = Store(str(root), "bench")
    rel = "warc/bench-part-000.warc.gz"
    rows = []
    with WarcFile.open(str(root), store.staged(1, rel)) as w:
        for url, body, ct in pages:
            ref = w.write_response(url, T0, 200, "OK", _response_headers(ct, len(body)), body, "127.0.0.1", None)
            row = {f.name: None for f in FETCH_SCHEMA}
            row.update(url=url, url_hash=url_hash(url), host=url.split("/")[2], depth=1, fetch_time=T0,
                       status="fetched", http_status=200, content_type=ct, content_length=len(body),
                       payload_digest=payload_digest(body), subset="warc", warc_filename=rel,
                       warc_record_offset=ref.offset, warc_record_length=ref.length, warc_type="response")
            rows.append(row)
    store.write_table(store.part_file(1, "fetched", 0), pa.Table.from_pylist(rows, schema=FETCH_SCHEMA))


def parse_cpu(root: Path) -> tuple[float, float, int]:
    """(process CPU s of parse_task, CPU s inside Store.write_table, pages) for the prepared partition."""
    from crawl.config import load_config
    from crawl.store import Store
    from crawl.tasks import parse_task

    store = Store(str(root), "bench")
    store.remove(store.part_file(1, "parsed", 0, "done"))
    spent = [0.0]
    plain = Store.write_table

    def timed(self: Store, rel: str, table: object, *args: object, **kw: object) -> None:
        c = time.process_time()
        plain(self, rel, table, *args, **kw)
        spent[0] += time.process_time() - c

    Store.write_table = timed  # type: ignore[method-assign]
    cfg = load_config(overrides={"root": str(root), "crawl_id": "bench"}, use_env=False)
    c = time.process_time()
    stats = parse_task(cfg, 1, 0)
    return time.process_time() - c, spent[0], int(stats["pages"])


def prepare_digests(root: Path, n: int) -> None:
    """A digest table of ``n`` stored captures (round 1's file), as update leaves it."""
    import hashlib

    import pyarrow as pa

    from crawl.digests import DIGESTS_SCHEMA
    from crawl.fingerprint import payload_digest
    from crawl.store import Store

    store = Store(str(root), "bench")
    digests = [payload_digest(hashlib.sha1(i.to_bytes(8, "big")).digest()) for i in range(n)]
    store.write_table(store.digests_file(1), pa.table({
        "payload_digest": digests, "url": [f"http://h{i % 300}.sim.test/p{i}" for i in range(n)],
        "fetch_time": pa.array([T0] * n, pa.timestamp("ms", tz="UTC"))}).cast(DIGESTS_SCHEMA))


def digests_cpu(root: Path, misses: int = 2000) -> tuple[float, float]:
    """(CPU s of the first lookup, which reads the stored keys; CPU µs per later miss) of a fetch
    task's known digests (round 2 over round 1's table), for digests of new pages."""
    import pyarrow as pa

    from crawl.digests import load_known_digests
    from crawl.fingerprint import payload_digest
    from crawl.store import Store

    known = load_known_digests(Store(str(root), "bench"), 1, pa.array([None], pa.string()))
    new = [payload_digest(b"new page %d" % i) for i in range(misses + 1)]
    c = time.thread_time()
    known.get(new[0])
    first = time.thread_time() - c
    c = time.thread_time()
    for d in new[1:]:
        known.get(d)
    return first, 1e6 * (time.thread_time() - c) / misses


def child(args: argparse.Namespace) -> None:
    pages = _pages(args.hosts)
    work = Path(args.work)
    warc_cpu(work, pages[:50])  # warm-up (imports, first file)
    warc = min(warc_cpu(work, pages) for _ in range(2))
    parse_cpu(Path(args.root))  # warm-up: parser imports and caches
    parse, writes, n = min(parse_cpu(Path(args.root)) for _ in range(2))
    first, miss = min(digests_cpu(Path(args.root)) for _ in range(2))
    print("CHILD " + json.dumps({"warc_ms": 1000 * warc / len(pages), "parse_ms": 1000 * parse / n,
                                 "parquet_ms": 1000 * writes / n, "pages": n, "digest_load_s": first,
                                 "digest_miss_us": miss}), flush=True)


def spawn(tree: Path, args: argparse.Namespace, work: Path, root: Path) -> dict:
    env = {**os.environ, "WRITES_TREE": str(tree), "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--hosts", str(args.hosts),
                        "--work", str(work), "--root", str(root)], env=env, capture_output=True, text=True,
                       timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("CHILD "):
            return json.loads(line[6:])
    raise RuntimeError(f"child on {tree} failed: {p.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=60, help="simulated hosts (~20 pages each, HTML kept)")
    ap.add_argument("--reps", type=int, default=3, help="runs per side (alternated with --baseline-rev)")
    ap.add_argument("--baseline-rev", default="", help="also run crawl/ of this git revision, alternated")
    ap.add_argument("--digests", type=int, default=200_000, help="stored payload digests (the table a recrawl reads)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", default="", help=argparse.SUPPRESS)
    ap.add_argument("--root", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="writes-bench-"))
    try:
        sides = [("current", REPO)]
        if args.baseline_rev:
            sides.insert(0, ("baseline", tree_at(args.baseline_rev, tmp / "baseline-tree")))
        root = tmp / "root"
        prepare_partition(root, _pages(args.hosts))
        prepare_digests(root, args.digests)
        got: dict[str, list[dict]] = {name: [] for name, _ in sides}
        for rep in range(args.reps):
            for name, tree in sides:
                r = spawn(tree, args, tmp / f"w-{name}", root)
                got[name].append(r)
                print(f"rep {rep + 1} {name:8s} warc {r['warc_ms']:.4f} ms/page  parse_task {r['parse_ms']:.4f} "
                      f"(Parquet writes {r['parquet_ms']:.4f}) ms/page  {r['pages']} pages  digests: first "
                      f"lookup {r['digest_load_s']:.3f} s, then {r['digest_miss_us']:.1f} µs a miss  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)

        def med(name: str, key: str) -> float:
            return statistics.median(r[key] for r in got[name])

        line = "RESULT"
        for key, label in (("warc_ms", "warc_ms_per_page"), ("parse_ms", "parse_task_ms_per_page"),
                           ("parquet_ms", "parquet_ms_per_page"), ("digest_miss_us", "digest_miss_us"),
                           ("digest_load_s", "digest_first_lookup_s")):
            line += f" {label}={med('current', key):.4f}"
            if args.baseline_rev:
                line += f" baseline={med('baseline', key):.4f} ratio={med('baseline', key) / med('current', key):.2f}"
        print(line)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
