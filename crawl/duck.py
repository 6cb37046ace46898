"""DuckDB connections for the engine's own queries: a cursor on one in-memory database per process.

Why: ``duckdb.connect()`` starts a whole new database each time (catalog, buffer manager, thread pool):
~13 ms of CPU and ~20 ms of wall time on the 2-core bench box, while a cursor on a running database
costs ~0.2 ms. The steps between two rounds opened seven of them on the driver (update's prepare, its
near-duplicate join, index rows, digest table and robots cache; generate's due rows and selection) and
one per shard merge on the workers, each for a query of milliseconds (bench/RESULTS.md, "Between rounds
(session 7, helper gaps)").

A cursor is a connection of its own: the Arrow tables it registers and its TEMP tables are its own, so
two steps (or a step and its side thread) using the same names never see each other's. What is shared
is the database's catalog (a plain ``CREATE VIEW``/``CREATE TABLE`` would be seen by every cursor: the
engine's queries create TEMP objects only) and its settings (a ``SET`` would change them for everyone:
a query that needs its own settings, or a remote filesystem registered with the database, keeps a
database of its own -- :func:`connect` with ``own=True``).
"""

from __future__ import annotations

import os
import threading

import duckdb

_lock = threading.Lock()
_db: duckdb.DuckDBPyConnection | None = None
_pid: int | None = None
_inherited: list[duckdb.DuckDBPyConnection] = []


def connect(own: bool = False) -> duckdb.DuckDBPyConnection:
    """A new connection to this process's shared in-memory database (a new database with ``own``).

    A forked child starts its own database: the parent's worker threads do not exist in it."""
    global _db, _pid
    if own:
        return duckdb.connect()
    with _lock:  # cursor() on one connection object from several threads at once is not safe
        if _db is None or _pid != os.getpid():
            if _db is not None:  # a forked child: the parent's database must never be closed here (its
                _inherited.append(_db)  # destructor would wait for worker threads the child does not have)
            _db, _pid = duckdb.connect(), os.getpid()
        return _db.cursor()


def for_store(store: object) -> duckdb.DuckDBPyConnection:
    """A connection for queries that may read ``store``'s files: the shared database for a local
    filesystem, a database of its own for a remote one (:meth:`crawl.store.Store.duckdb_paths` registers
    that filesystem with the database, and two stores of one protocol may have different credentials)."""
    fs = getattr(store, "fs", None)
    return connect(own=fs is not None and fs.__class__.__name__ != "LocalFileSystem")
