"""Figures from the simulated web's access log that the fault-injection tests (lease, resilience)
judge a crawl by: requests, repeated requests and politeness gaps, the server's view only."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from crawl.simweb.accesslog import read_log

OUR_UA = "RecrawlBot"  # how the crawler's default user agent starts (crawl.config's user_agent)


def our_requests(web, host: str, since: float) -> list[dict]:
    """Our requests to ``host`` in the server's access log (``web.log()`` flushes it first), by start time."""
    rows = [r for r in web.log().to_pylist()
            if r["host"] == host and r["user_agent"].startswith(OUR_UA) and r["start"] >= since]
    return sorted(rows, key=lambda r: r["start"])


def log_figures(access_log: Path, delay: float, since: float = 0.0) -> dict[str, float]:
    """From the server's log: requests, repeated requests (same host+path again; robots.txt left out,
    a crawler may re-ask it within a round) and politeness (gaps between request starts per host)."""
    time.sleep(1.3)  # the server flushes its log at least once a second
    con = duckdb.connect()
    con.register("log", read_log(access_log))
    row = con.execute("""
        WITH r AS (SELECT host, path, start FROM log WHERE start >= ? AND user_agent LIKE 'RecrawlBot%'),
        g AS (SELECT start - lag(start) OVER (PARTITION BY host ORDER BY start) AS gap FROM r),
        d AS (SELECT count(*) - 1 AS extra FROM r WHERE path <> '/robots.txt' GROUP BY host, path
              HAVING count(*) > 1)
        SELECT (SELECT count(*) FROM r), (SELECT coalesce(sum(extra), 0) FROM d),
               (SELECT count(*) FROM g WHERE gap < ?), (SELECT min(gap) FROM g)
    """, [since, delay]).fetchone()
    again = con.execute("""SELECT host || path, count(*) FROM log WHERE start >= ? AND user_agent LIKE 'RecrawlBot%'
                           GROUP BY ALL HAVING count(*) > 1""", [since]).fetchall()
    con.close()
    return {"requests": row[0], "repeated": int(row[1]), "gaps_below_delay": row[2], "min_gap_s": row[3],
            "repeated_paths": again}


def first_request_after(access_log: Path, at: float) -> float | None:
    """Start time (epoch s) of the first crawler request the server logged at or after ``at``."""
    time.sleep(1.3)  # the server flushes its log at least once a second
    con = duckdb.connect()
    con.register("log", read_log(access_log))
    row = con.execute("SELECT min(start) FROM log WHERE start >= ? AND user_agent LIKE 'RecrawlBot%'", [at]).fetchone()
    con.close()
    return row[0]


def rerun_partition_waits(store, round_no: int, since: float) -> dict[int, float]:
    """part -> seconds a rerun's fetch task waited for an earlier, unfinished attempt of its partition
    (``crawl.tasks.wait_after_dead_attempt`` records it in the partition's attempt marker), for the
    attempts started at or after ``since`` that found such an earlier attempt."""
    from datetime import datetime

    out = {}
    for rel in store.ls(store.round_dir(round_no, "fetched")):
        if rel.endswith(".attempt"):
            m = store.read_json(rel)
            if m.get("earlier") and datetime.fromisoformat(m["started"]).timestamp() >= since:
                out[int(rel.rsplit("part=", 1)[1].split(".")[0])] = float(m["waited_s"])
    return out
