"""Known payload digests for one fetch task: the first capture (URL, date) of a digest, asked per page.

The digest table of version N is every ``state/crawl=ID/digests/v=RRRRR.parquet`` with R ≤ N: update
writes, per round, only the digests first captured in that round (rewriting the whole table every
round cost 35 s at 10 M stored digests). Together they hold the first capture of every payload
digest the crawl has stored; a fetched body whose digest is in it becomes a
WARC revisit record instead of a second copy. Loading it whole into every fetch task made the task's
time and memory grow with the crawl's history (a Python dict of 1 M entries is ~0.5 GB and seconds
per task). :class:`KnownDigests` instead holds

- the first captures of the fetch list's own previous digests, read by a semi-join in DuckDB over
  the Parquet file (an unchanged page -- the common revisit -- is answered from memory), and
- a sorted array of 64-bit keys (DuckDB's ``hash`` of each digest, computed in DuckDB on the first
  miss): 8 bytes per stored digest; only a key hit (another URL's earlier capture of the same body,
  rare) reads the matching row from the file.

So a revisit of another URL's capture from an earlier round is still a revisit, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.store import Store

DIGESTS_SCHEMA = pa.schema([
    ("payload_digest", pa.string()),
    ("url", pa.string()),
    ("fetch_time", pa.timestamp("ms", tz="UTC")),
])

Capture = tuple[str, str]  # (URL, ISO date) of a digest's first capture


def _captures(t: pa.Table) -> dict[str, Capture]:
    times = [ts.isoformat() if ts else "" for ts in t.column("fetch_time").to_pylist()]
    return dict(zip(t.column("payload_digest").to_pylist(), zip(t.column("url").to_pylist(), times, strict=True),
                    strict=True))


def digest_files(store: Store, version: int) -> list[str]:
    """The files that make up the digest table of ``version`` (those of rounds 1..version)."""
    if version <= 0:
        return []
    rels = store.ls(store.state("digests"))
    return [r for r in rels if r.endswith(".parquet") and r.rsplit("v=", 1)[-1].split(".", 1)[0].isdigit()
            and int(r.rsplit("v=", 1)[-1].split(".", 1)[0]) <= version]


def _source(store: Store, con: Any, rels: list[str]) -> str:
    return "read_parquet([" + ", ".join(f"'{p}'" for p in store.duckdb_paths(con, rels)) + "])"


class KnownDigests(MutableMapping[str, Capture]):
    """digest -> first capture, for one fetch task; digests it stores are added with ``d[k] = v``.

    Iteration and ``len`` cover what is in memory (preloaded, looked up or added), not the file.
    """

    def __init__(self, store: Store, version: int, preload: dict[str, Capture]) -> None:
        self._local: dict[str, Capture] = dict(preload)
        self._store = store
        self._rels = digest_files(store, version)
        self._con: Any = None
        self._src = ""
        self._keys: np.ndarray | None = None
        self.file_lookups = 0  # rows read from the file after a key hit (diagnostics, tests)

    def _open(self) -> Any:
        if self._con is None:
            import duckdb

            con = duckdb.connect()
            con.execute("SET TimeZone = 'UTC'")
            self._src = _source(self._store, con, self._rels)
            keys = con.sql(f"SELECT hash(payload_digest) AS k FROM {self._src}").fetchnumpy()["k"]
            self._keys = np.sort(np.asarray(keys, np.uint64))
            self._con = con
        return self._con

    def _from_file(self, digest: str) -> Capture | None:
        if not self._rels:
            return None
        con = self._open()
        key = np.uint64(con.execute("SELECT hash(?::VARCHAR)", [digest]).fetchone()[0])
        keys = self._keys
        i = int(np.searchsorted(keys, key))
        if i >= keys.size or keys[i] != key:
            return None
        self.file_lookups += 1
        row = con.execute(f"SELECT url, fetch_time FROM {self._src} WHERE payload_digest = ? "
                          "ORDER BY fetch_time LIMIT 1",
                          [digest]).fetchone()
        if row is None:  # a 64-bit key collision
            return None
        return row[0], row[1].isoformat() if row[1] else ""

    def __getitem__(self, digest: str) -> Capture:
        hit = self._local.get(digest)
        if hit is None:
            hit = self._from_file(digest)
            if hit is None:
                raise KeyError(digest)
            self._local[digest] = hit
        return hit

    def __setitem__(self, digest: str, capture: Capture) -> None:
        self._local[digest] = capture

    def __delitem__(self, digest: str) -> None:
        del self._local[digest]

    def __iter__(self) -> Iterator[str]:
        return iter(self._local)

    def __len__(self) -> int:
        return len(self._local)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def load_known_digests(store: Store, version: int,
                       digests: pa.Array | pa.ChunkedArray | None = None) -> dict[str, Capture] | KnownDigests:
    """The first captures a fetch task needs for its revisit decisions.

    Without ``digests``: the whole table as a dict. With a fetch list's ``prev_digest`` column: a
    :class:`KnownDigests` preloaded with those digests' first captures (a DuckDB semi-join over the
    file) that looks any other digest up by key.
    """
    rels = digest_files(store, version)
    if not rels:
        return {}
    if digests is None:
        return _captures(store.read_tables(rels, DIGESTS_SCHEMA).sort_by([("fetch_time", "descending")]))
    want = pc.unique(pc.drop_null(digests.combine_chunks() if isinstance(digests, pa.ChunkedArray) else digests))
    preload: dict[str, Capture] = {}
    if len(want):
        import duckdb

        con = duckdb.connect()
        con.register("want", pa.table({"payload_digest": want.cast(pa.string())}))
        t = con.sql(f"""
            SELECT payload_digest, arg_min(url, fetch_time) AS url, min(fetch_time) AS fetch_time
            FROM {_source(store, con, rels)}
            WHERE payload_digest IN (SELECT payload_digest FROM want) GROUP BY 1
        """).to_arrow_table().cast(DIGESTS_SCHEMA)
        con.close()
        preload = _captures(t)
    return KnownDigests(store, version, preload)


__all__ = ["DIGESTS_SCHEMA", "KnownDigests", "digest_files", "load_known_digests"]
