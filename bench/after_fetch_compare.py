"""Compare two crawl roots left by ``after_fetch_bench.py --keep`` (the same saved round replayed by two
trees): every file of one must be in the other with the same content.

Parquet files are compared by DuckDB (column names and types, then the rows as multisets both ways with
``EXCEPT ALL``, then the row order); JSON files as parsed values without the wall-clock stamps; any
other file byte for byte. Why: the steps after the fetch may get faster, never different — the CrawlDb
rows, page index, links, priorities and every published file stay identical.

    python bench/after_fetch_compare.py /tmp/out-old /tmp/out-new

Prints one line per file that is not byte-identical and a summary; exit status 1 when any file's
content differs (a different row order alone is reported, and is not a difference for files whose
order DuckDB does not fix, e.g. prepare's per-shard update files).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import duckdb

# what differs between any two runs: wall-clock stamps, the lease holder, the replay's temporary root
CLOCK_KEYS = {"published_at", "started", "finished", "started_at", "finished_at", "elapsed_s", "seconds",
              "acquired_at", "heartbeat", "expires_at", "owner", "run", "root"}


def _strip(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip(x) for k, x in v.items() if k not in CLOCK_KEYS and not k.endswith("_wall_s")}
    if isinstance(v, list):
        return [_strip(x) for x in v]
    return v


def _unstamped(html: str) -> str:
    """A report without the wall-clock minute it was written (crawl.reporthtml.write_report)."""
    return re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", "", html)


def compare_parquet(con: duckdb.DuckDBPyConnection, a: Path, b: Path) -> str:
    """'same', 'order' (same rows, another order) or a description of the difference."""
    da = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{a}')").fetchall()
    db = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{b}')").fetchall()
    if [r[:2] for r in da] != [r[:2] for r in db]:
        return f"schema {[r[:2] for r in da]} != {[r[:2] for r in db]}"
    only_a = con.execute(f"SELECT count(*) FROM (SELECT * FROM read_parquet('{a}') EXCEPT ALL "
                         f"SELECT * FROM read_parquet('{b}'))").fetchone()[0]
    only_b = con.execute(f"SELECT count(*) FROM (SELECT * FROM read_parquet('{b}') EXCEPT ALL "
                         f"SELECT * FROM read_parquet('{a}'))").fetchone()[0]
    if only_a or only_b:
        return f"rows: {only_a} only in the first, {only_b} only in the second"
    cols = ", ".join(f'"{r[0]}"' for r in da)
    moved = con.execute(f"""
        SELECT count(*) FROM (SELECT {cols}, file_row_number FROM read_parquet('{a}', file_row_number = true)) x
        FULL JOIN (SELECT {cols}, file_row_number FROM read_parquet('{b}', file_row_number = true)) y
        USING (file_row_number)
        WHERE ({', '.join(f'x.{c}' for c in cols.split(', '))}) IS DISTINCT FROM
              ({', '.join(f'y.{c}' for c in cols.split(', '))})
    """).fetchone()[0]
    return "same" if moved == 0 else "order"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    args = ap.parse_args()
    files_a = {p.relative_to(args.first) for p in args.first.rglob("*") if p.is_file()}
    files_b = {p.relative_to(args.second) for p in args.second.rglob("*") if p.is_file()}
    bad = 0
    for rel in sorted(files_a ^ files_b):
        print(f"ONLY IN {'first' if rel in files_a else 'second'}: {rel}")
        bad += 1
    con = duckdb.connect()
    counts = {"bytes": 0, "same": 0, "order": 0}
    for rel in sorted(files_a & files_b):
        a, b = args.first / rel, args.second / rel
        if a.read_bytes() == b.read_bytes():
            counts["bytes"] += 1
            continue
        if rel.suffix == ".parquet":
            res = compare_parquet(con, a, b)
            if res in counts:
                counts[res] += 1
                if res == "order":
                    print(f"same rows, another order: {rel}")
                continue
            print(f"DIFFERENT {rel}: {res}")
        elif rel.suffix == ".html":  # a round's report: the same but for its "written" wall-clock stamp
            if _unstamped(a.read_text()) == _unstamped(b.read_text()):
                counts["same"] += 1
                continue
            print(f"DIFFERENT {rel}: HTML")
        elif rel.suffix == ".json":
            if _strip(json.loads(a.read_text())) == _strip(json.loads(b.read_text())):
                counts["same"] += 1
                continue
            print(f"DIFFERENT {rel}: JSON values")
        else:
            print(f"DIFFERENT {rel}: bytes")
        bad += 1
    print(f"{len(files_a & files_b)} files in both: {counts['bytes']} byte-identical, {counts['same']} same "
          f"content, {counts['order']} same rows in another order; {bad} different or missing")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
