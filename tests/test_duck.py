"""crawl.duck: connections on one shared in-memory DuckDB database keep each user's names apart."""

from __future__ import annotations

import multiprocessing
import threading

import pyarrow as pa

from crawl import duck


def _use(tag: int, rounds: int, out: list[tuple[int, int, int]]) -> None:
    for i in range(rounds):
        con = duck.connect()
        con.register("f", pa.table({"x": pa.array([tag] * (tag + i + 1), pa.int64())}))
        con.execute("CREATE TEMP TABLE t AS SELECT x, count(*) OVER () AS n FROM f")
        got = con.execute("SELECT min(x), max(x), max(n) FROM t").fetchone()
        out.append((tag, i, *got))
        con.close()


def test_same_names_in_threads_do_not_collide() -> None:
    """What update does on two threads at once (prepare's and the side thread's queries register and
    create the same kind of names): every connection sees only its own table, and a name can be reused
    after its connection is gone."""
    results: list[list[tuple[int, int, int]]] = [[] for _ in range(4)]
    threads = [threading.Thread(target=_use, args=(tag + 1, 40, results[tag])) for tag in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tag, res in enumerate(results, start=1):
        assert len(res) == 40
        for _, i, lo, hi, n in res:
            assert (lo, hi, n) == (tag, tag, tag + i + 1)


def test_shared_database_and_own_database() -> None:
    """Connections share one database (a non-TEMP object would be seen by all: the engine makes none);
    ``own=True`` and a remote store's connection are databases of their own."""
    a, b = duck.connect(), duck.connect()
    a.execute("CREATE TEMP TABLE only_a AS SELECT 1 AS v")
    assert b.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'only_a'").fetchone()[0] == 0
    assert a.execute("SELECT current_database()").fetchone() == b.execute("SELECT current_database()").fetchone()
    own = duck.connect(own=True)
    own.execute("CREATE TABLE mine AS SELECT 1 AS v")
    assert a.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'mine'").fetchone()[0] == 0

    class Remote:
        class fs:  # noqa: N801 -- stands for an fsspec filesystem class that is not LocalFileSystem
            pass

    remote = duck.for_store(Remote())
    remote.execute("CREATE TABLE r AS SELECT 1 AS v")
    assert a.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'r'").fetchone()[0] == 0


def _child_query(q: multiprocessing.Queue) -> None:
    con = duck.connect()
    con.register("t", pa.table({"x": [1, 2, 3]}))
    inherited = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'parent_mark'").fetchone()[0]
    q.put((con.execute("SELECT sum(x) FROM t").fetchone()[0], inherited))


def test_a_forked_child_gets_a_database_of_its_own() -> None:
    """A process forked after the parent used the shared database (an Airflow task runner, a forked
    worker) queries on a new database of its own; the parent's is left alone, never closed there."""
    import multiprocessing

    parent = duck.connect()
    parent.execute("CREATE TABLE parent_mark AS SELECT 1 AS v")  # in the shared database (the engine makes none)
    try:
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_child_query, args=(q,))
        p.start()
        got = q.get(timeout=300)  # a deadlock guard, not a speed limit
        p.join(timeout=300)
        assert (got, p.exitcode) == ((6, 0), 0)  # the child's database does not hold the parent's table
        assert duck.connect().execute("SELECT count(*) FROM parent_mark").fetchone()[0] == 1
    finally:
        parent.execute("DROP TABLE parent_mark")
