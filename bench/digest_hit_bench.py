"""A fetch task's key hit against the size of the digest table: a body another URL stored in an earlier round.

A key hit is a fetched body whose digest is already stored under another URL (a mirror, a URL variant);
the fetch task turns it into a WARC revisit record naming the first capture, which it must read from the
digest files (crawl.digests). This writes a digest table the way update and ``scale_bench``'s builder
do -- one history round of ``--n`` digests plus ``--rounds`` rounds of ``--per-round`` -- with the keys
and rounds files of :func:`crawl.digests.write_keys`, twice: in row groups of ``ROW_GROUP_ROWS`` (what
update writes now) and in pyarrow's default (before). Then, alternated, a child process on each tree
(``--baseline-rev``, main by default, on the default-row-group table) does what a fetch task does -- one
miss (reads the keys), then ``--hits`` key hits (most in the history file, some in the round files) --
and generate's semi-join (:func:`crawl.digests.first_captures` of 3,000 random stored digests); the
answers must be equal. Last, update's :func:`crawl.digests.write_keys` of one more round.

    python bench/digest_hit_bench.py --n 10000000

Ends with ``RESULT n=… hit_ms=… hit_ms_baseline=… baseline_vs_current=… lower_pairs=… semijoin_s=…
semijoin_s_baseline=… write_keys_s=…``.
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
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scale_bench import _digests, _ts  # noqa: E402 - after the path
from bench.trees import tree_at  # noqa: E402


def build(root: str, n: int, rounds: int, per_round: int, row_groups: int | None, seed: int) -> list[pa.Array]:
    """The digest table and its keys and rounds files; the digests of each round's file."""
    from crawl.digests import DIGESTS_SCHEMA, write_keys
    from crawl.store import Store

    rng = np.random.default_rng(seed)
    store = Store(root, "dh")
    t0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    out = []
    for r in range(1, rounds + 2):
        m = n if r == 1 else per_round
        d = _digests(rng, m)
        url = pa.array(np.char.add("http://h.test/", np.arange(m).astype(str)).astype(object), pa.string())
        t = pa.table({"payload_digest": d, "url": url,
                      "fetch_time": _ts(t0 + r * 86_400.0 + np.arange(m, dtype=np.float64))}).cast(DIGESTS_SCHEMA)
        store.write_table(store.digests_file(r), t.sort_by("payload_digest"),
                          row_group_size=row_groups if r == 1 else None)
        write_keys(store, r, d)
        out.append(d)
    return out


# a fetch task's lookups, in a child process on one tree: the first miss (reads the keys), then each hit
_CHILD = """
import json, sys, time
from crawl.digests import KnownDigests
from crawl.store import Store
root, version = sys.argv[1], int(sys.argv[2])
hits, want = json.load(sys.stdin)
known = KnownDigests(Store(root, "dh"), version, {})
t0 = time.perf_counter()
assert known.get("sha1:" + "A" * 32) is None
keys_s = time.perf_counter() - t0
each, answers = [], []
for d in hits:
    t1 = time.perf_counter()
    answers.append(known.get(d))
    each.append(time.perf_counter() - t1)
import pyarrow as pa
from crawl.digests import digest_files, first_captures
store = Store(root, "dh")
t0 = time.perf_counter()
n = first_captures(store, digest_files(store, version), pa.array(want, pa.string())).num_rows
semi_s = time.perf_counter() - t0
print(json.dumps({"keys_s": keys_s, "each": each, "answers": answers, "semi_s": semi_s, "semi_rows": n}))
"""


def time_hits(tree: Path, root: str, version: int, hits: list[str], want: list[str]) -> dict:
    """The child's timings and answers, on ``tree``'s ``crawl``."""
    out = subprocess.run([sys.executable, "-c", _CHILD, root, str(version)], input=json.dumps([hits, want]), text=True,
                         capture_output=True, check=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         timeout=900)
    return json.loads(out.stdout)


def main() -> None:
    from crawl.digests import ROW_GROUP_ROWS, write_keys
    from crawl.store import Store

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="digests of the history round")
    ap.add_argument("--rounds", type=int, default=20, help="rounds after it")
    ap.add_argument("--per-round", type=int, default=3000)
    ap.add_argument("--hits", type=int, default=12)
    ap.add_argument("--reps", type=int, default=3, help="alternated current/baseline pairs")
    ap.add_argument("--dir", default="", help="build here (kept); default a temporary folder")
    ap.add_argument("--baseline-rev", default="main", help="the other side's crawl/ (git revision)")
    args = ap.parse_args()

    base = Path(args.dir or tempfile.mkdtemp(prefix="digest-hit-"))
    small, default = str(base / "small"), str(base / "default")
    store = Store(small, "dh")
    version = args.rounds + 1
    t0 = time.perf_counter()
    if args.dir and Store(default, "dh").exists(Store(default, "dh").digest_keys_file(version)):
        per_round = [store.read_table(store.digests_file(r), columns=["payload_digest"]).column(0).combine_chunks()
                     for r in range(1, version + 1)]
        print(f"reusing the tables under {base}", flush=True)
    else:
        per_round = build(small, args.n, args.rounds, args.per_round, ROW_GROUP_ROWS, seed=3)
        build(default, args.n, args.rounds, args.per_round, None, seed=3)
        print(f"built 2 x {args.n + args.rounds * args.per_round:,} digests in {time.perf_counter() - t0:.1f} s "
              f"under {base}", flush=True)
    rng = np.random.default_rng(5)
    hist = per_round[0]
    hits = [hist[int(i)].as_py() for i in rng.integers(0, len(hist), args.hits - args.hits // 4)]
    hits += [per_round[int(r)][0].as_py() for r in rng.integers(1, len(per_round), args.hits // 4)]
    want = [hist[int(i)].as_py() for i in rng.integers(0, len(hist), 3000)]
    roots = {"current": small, "baseline": default}  # each side on the digest files its update writes
    trees = {"current": REPO, "baseline": tree_at(args.baseline_rev, base / "baseline-tree")}
    rows: dict[str, list[dict]] = {"current": [], "baseline": []}
    for rep in range(args.reps):
        for side in ("current", "baseline") if rep % 2 == 0 else ("baseline", "current"):
            got = time_hits(trees[side], roots[side], version, hits, want)
            assert all(a is not None for a in got["answers"]), side
            rows[side].append(got)
            print(f"  {side:8s} first miss {got['keys_s'] * 1000:7.1f} ms  hit median "
                  f"{np.median(got['each']) * 1000:8.1f} ms  (first hit {got['each'][0] * 1000:.1f} ms)  "
                  f"generate's semi-join {got['semi_s']:.2f} s", flush=True)
    assert all(r["answers"] == rows["current"][0]["answers"] for side in rows for r in rows[side]), "answers differ"
    assert len({r["semi_rows"] for side in rows for r in rows[side]}) == 1
    hit_i = float(np.median([np.median(r["each"]) for r in rows["current"]]))
    hit_s = float(np.median([np.median(r["each"]) for r in rows["baseline"]]))
    lower = sum(np.median(a["each"]) < np.median(b["each"]) for a, b in zip(rows["current"], rows["baseline"], strict=True))

    t1 = time.perf_counter()
    write_keys(store, version + 1, _digests(np.random.default_rng(9), args.per_round))
    t_write = time.perf_counter() - t1
    semi_s = float(np.median([r["semi_s"] for r in rows["current"]]))
    semi_d = float(np.median([r["semi_s"] for r in rows["baseline"]]))
    print(f"  update's write_keys of one more round (keys + rounds files): {t_write:.2f} s")
    print(f"RESULT n={args.n + args.rounds * args.per_round} hit_ms={hit_i * 1000:.1f} "
          f"hit_ms_baseline={hit_s * 1000:.1f} baseline_vs_current={hit_s / hit_i:.0f} lower_pairs={lower}/{args.reps} "
          f"semijoin_s={semi_s:.2f} semijoin_s_baseline={semi_d:.2f} write_keys_s={t_write:.2f}")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    else:
        shutil.rmtree(base / "baseline-tree", ignore_errors=True)
        store.remove(store.digest_keys_file(version + 1))  # the reuse finds the table as built
        store.remove(store.digest_rounds_file(version + 1))


if __name__ == "__main__":
    main()
