"""The server-side access log, and the politeness report computed from it.

Politeness is measured where it matters, at the server: every request is one JSON line with the host,
path, real start and end times, status, bytes and ``in_flight`` (requests to that host in progress when
this one started, including itself). Lines are buffered in memory and written by a background flush at
least once a second, on shutdown, and on request (``POST /_sim/flush``: a reader that must see every
request answered so far, e.g. a "never requested" check, asks for it instead of sleeping), so logging
costs microseconds per request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pyarrow as pa


class AccessLog:
    """Buffered JSON-lines writer; ``flush()`` is cheap and safe to call often."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = Path(path) if path else None
        self._buf: list[str] = []
        self.lines = 0  # lines written to the file so far
        self._fh = open(self.path, "a", encoding="utf-8") if self.path else None  # noqa: SIM115

    def write(self, record: dict) -> None:
        if self._fh is not None:
            self._buf.append(json.dumps(record, separators=(",", ":")))

    def flush(self) -> None:
        if self._fh is not None and self._buf:
            lines, self._buf = self._buf, []
            self._fh.write("\n".join(lines) + "\n")
            self._fh.flush()
            self.lines += len(lines)

    def close(self) -> None:
        self.flush()
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_log(path: str | os.PathLike[str]) -> pa.Table:
    """The access log as an Arrow table (empty table with the columns when the file is empty); ``inm``
    and ``ims`` (the request's If-None-Match / If-Modified-Since) are null unless the server ran with
    ``--log-conditional``."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return pa.table({"host": pa.array([], pa.string()), "authority": pa.array([], pa.string()),
                         "path": pa.array([], pa.string()), "addr": pa.array([], pa.string()),
                         "start": pa.array([], pa.float64()), "end": pa.array([], pa.float64()),
                         "status": pa.array([], pa.int64()), "bytes": pa.array([], pa.int64()),
                         "in_flight": pa.array([], pa.int64()), "method": pa.array([], pa.string()),
                         "user_agent": pa.array([], pa.string()), "inm": pa.array([], pa.string()),
                         "ims": pa.array([], pa.string())})
    con = duckdb.connect()
    try:
        return con.sql(
            "SELECT * FROM read_json(?, format='newline_delimited', columns={host:'VARCHAR', "
            "authority:'VARCHAR', path:'VARCHAR', addr:'VARCHAR', start:'DOUBLE', \"end\":'DOUBLE', status:'BIGINT', bytes:'BIGINT', "
            "in_flight:'BIGINT', method:'VARCHAR', user_agent:'VARCHAR', inm:'VARCHAR', ims:'VARCHAR'})",
            params=[str(p)]
        ).to_arrow_table()
    finally:
        con.close()


def politeness_report(path: str | os.PathLike[str], exclude_paths: tuple[str, ...] = (),
                      user_agent_like: str | None = None) -> pa.Table:
    """Per host: ``requests``, ``min_gap_s`` (smallest gap between consecutive request starts, NULL
    with one request), ``max_in_flight`` (most concurrent requests seen), ``first_start``, ``last_start``.

    ``exclude_paths`` drops exact paths (e.g. ``("/robots.txt",)``) when a policy does not count them;
    ``user_agent_like`` (SQL LIKE pattern, e.g. ``'RecrawlBot%'``) keeps only one client's requests.
    Sorted by host. Tests assert e.g. ``min(min_gap_s) >= delay`` and ``max(max_in_flight) <= 1``.
    """
    log = read_log(path)
    con = duckdb.connect()
    try:
        con.register("log", log)
        where = ["1=1"]
        params: list = []
        if exclude_paths:
            where.append("path NOT IN (" + ",".join("?" * len(exclude_paths)) + ")")
            params += list(exclude_paths)
        if user_agent_like is not None:
            where.append("user_agent LIKE ?")
            params.append(user_agent_like)
        sql = f"""
            WITH r AS (SELECT host, start, in_flight FROM log WHERE {' AND '.join(where)}),
            g AS (SELECT host, start, in_flight,
                         start - lag(start) OVER (PARTITION BY host ORDER BY start) AS gap FROM r)
            SELECT host, count(*) AS requests, min(gap) AS min_gap_s,
                   max(in_flight) AS max_in_flight, min(start) AS first_start, max(start) AS last_start
            FROM g GROUP BY host ORDER BY host"""
        return con.sql(sql, params=params).to_arrow_table()
    finally:
        con.close()
