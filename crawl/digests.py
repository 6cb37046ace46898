"""Known payload digests for one fetch task: the first capture (URL, date) of a digest, asked per page.

The digest table of version N is every ``state/crawl=ID/digests/v=RRRRR.parquet`` with R ≤ N: update
writes, per round, only the digests first captured in that round (rewriting the whole table every
round cost 35 s at 10 M stored digests). Together they hold the first capture of every payload
digest the crawl has stored; a fetched body whose digest is in it becomes a
WARC revisit record instead of a second copy. Loading it whole into every fetch task made the task's
time and memory grow with the crawl's history (a Python dict of 1 M entries is ~0.5 GB and seconds
per task). :class:`KnownDigests` instead holds

- the first captures of the fetch list's own previous digests, which generate found once for the
  whole round by a semi-join over the Parquet files (:func:`write_round_captures`; an unchanged page
  -- the common revisit -- is answered from memory), and
- a sorted array of 64-bit keys (:func:`digest_keys`: the first 60 bits of each SHA-1, read on the
  first miss from the keys file update writes beside the table, :func:`write_keys`): 8 bytes per
  stored digest; only a key hit (another URL's earlier capture of the same body) reads the matching
  row from the files -- a scan of their digest column, O(stored digests) per hit, left as it was
  (bench/RESULTS.md, "session 15, lead"). A miss is answered in
  Python (:func:`digest_key`, ~1 µs): it used to ask DuckDB for the digest's ``hash``, a query of
  ~0.45 ms CPU on the WARC writer thread for every new or changed page of a recrawl round.

So a revisit of another URL's capture from an earlier round is still a revisit, as before.

The semi-join and the key hit's read are Arrow's (:func:`first_captures`: the digest column a row group at a time, the URL and time
only of row groups with a match), not DuckDB's: a fetch task's only DuckDB work was this semi-join, and
importing DuckDB and opening a database cost each worker ~0.1-0.15 s of CPU before the first request of
its first recrawl round, for a query that reads a few kilobytes at that size and, at any size, one column
the task's first miss reads whole anyway (bench/RESULTS.md, "session 15, helper small15").
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.fingerprint import B32_ALPHABET
from crawl.store import Store

DIGESTS_SCHEMA = pa.schema([
    ("payload_digest", pa.string()),
    ("url", pa.string()),
    ("fetch_time", pa.timestamp("ms", tz="UTC")),
])

Capture = tuple[str, str]  # (URL, ISO date) of a digest's first capture

# A digest's key: ``sha1:`` and 32 base32 characters, of which the first 12 are 60 bits of the SHA-1;
# any other string has key 0 (so it always goes to the file, where it is compared in full).
_DIGEST_LEN, _KEY_FROM, _KEY_TO = 37, 5, 17
_ALPHABET = B32_ALPHABET.encode("ascii")
# bytes -> Python's base-32 digits (0-9A-V); any other byte -> "!", which int(…, 32) refuses
_TO_INT_DIGITS = bytes(b"0123456789ABCDEFGHIJKLMNOPQRSTUV"[_ALPHABET.index(c)] if c in _ALPHABET else 33
                       for c in range(256))
_VALUE = np.zeros(256, np.uint64)
_VALUE[np.frombuffer(_ALPHABET, np.uint8)] = np.arange(32, dtype=np.uint64)
_NOT_B32 = np.ones(256, bool)
_NOT_B32[np.frombuffer(_ALPHABET, np.uint8)] = False
_PREFIX = np.frombuffer(b"sha1:", np.uint8)


KEYS_DTYPE = np.dtype("<u8")  # a keys file: the sorted keys, little-endian, nothing else


def digest_key(digest: str) -> int:
    """The 64-bit key of one payload digest (what :func:`digest_keys` gives for it in a column)."""
    b = digest.encode("utf-8")
    if len(b) != _DIGEST_LEN or not b.startswith(b"sha1:"):
        return 0
    try:
        return int(b[_KEY_FROM:_KEY_TO].translate(_TO_INT_DIGITS), 32)
    except ValueError:
        return 0


def digest_keys(digests: pa.Array) -> np.ndarray:
    """:func:`digest_key` of every value of a string column (null: 0), vectorised over its buffers."""
    if digests.type not in (pa.string(), pa.large_string()):
        digests = digests.cast(pa.string())
    n = len(digests)
    if n == 0:
        return np.zeros(0, np.uint64)
    bufs = digests.buffers()
    width = np.int64 if digests.type == pa.large_string() else np.int32
    offs = np.frombuffer(bufs[1], width)[digests.offset: digests.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    whole = np.diff(offs) == _DIGEST_LEN
    if digests.null_count:
        whole &= digests.is_valid().to_numpy(zero_copy_only=False)
    rows = None
    if whole.all():  # every value 37 bytes: the data is an n x 37 matrix
        m = data[offs[0]: offs[-1]].reshape(n, _DIGEST_LEN)[:, :_KEY_TO]
    else:
        rows = np.flatnonzero(whole)
        m = data[offs[rows][:, None] + np.arange(_KEY_TO)]
    good = (m[:, :_KEY_FROM] == _PREFIX).all(1) & ~_NOT_B32[m[:, _KEY_FROM:]].any(1)
    key = np.zeros(len(m), np.uint64)
    for j in range(_KEY_FROM, _KEY_TO):
        key <<= np.uint64(5)
        key |= _VALUE[m[:, j]]
    key[~good] = 0
    if rows is None:
        return key
    out = np.zeros(n, np.uint64)
    out[rows] = key
    return out


def _captures(t: pa.Table) -> dict[str, Capture]:
    times = [ts.isoformat() if ts else "" for ts in t.column("fetch_time").to_pylist()]
    return dict(zip(t.column("payload_digest").to_pylist(), zip(t.column("url").to_pylist(), times, strict=True),
                    strict=True))


def _file_version(rel: str) -> int | None:
    """The version in a versioned file's name (``.../v=NNNNN.ext``), or None for any other name."""
    v = rel.rsplit("v=", 1)[-1].split(".", 1)[0]
    return int(v) if v.isdigit() else None


def _flat(digests: pa.Array | pa.ChunkedArray) -> pa.Array:
    return digests.combine_chunks() if isinstance(digests, pa.ChunkedArray) else digests


def _distinct(digests: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The distinct non-null digests of a column (a fetch list's ``prev_digest``)."""
    return pc.unique(pc.drop_null(_flat(digests))).cast(pa.string())


def digest_files(store: Store, version: int) -> list[str]:
    """The files that make up the digest table of ``version`` (those of rounds 1..version)."""
    if version <= 0:
        return []
    return [r for r in store.ls(store.state("digests"))
            if r.endswith(".parquet") and (v := _file_version(r)) is not None and v <= version]


def first_captures(store: Store, rels: list[str], want: pa.Array) -> pa.Table:
    """The first capture (DIGESTS_SCHEMA: earliest ``fetch_time``, then the smallest URL) of each digest
    of ``want`` that the digest files ``rels`` hold, one row per digest, in digest order.

    A semi-join in Arrow: each row group's digest column is read and matched against ``want``; the URL
    and time columns are read only for row groups with a match."""
    import pyarrow.parquet as pq

    want = want.cast(pa.string())
    parts = []
    for rel in rels:
        with store.fs.open(store.abs(rel), "rb") as fh:
            pf = pq.ParquetFile(fh)
            for g in range(pf.num_row_groups):
                hit = pc.is_in(pf.read_row_group(g, columns=["payload_digest"]).column(0), value_set=want)
                if pc.any(hit).as_py():
                    rows = pf.read_row_group(g, columns=DIGESTS_SCHEMA.names).filter(hit)
                    parts.append(rows.cast(DIGESTS_SCHEMA))
    if not parts:
        return DIGESTS_SCHEMA.empty_table()
    t = pa.concat_tables(parts).sort_by([("payload_digest", "ascending"), ("fetch_time", "ascending"),
                                         ("url", "ascending")])
    d = t.column("payload_digest").combine_chunks()
    first = np.ones(len(d), bool)  # a digest stored twice (files of older versions): its first row
    if len(d) > 1:
        first[1:] = pc.not_equal(d.slice(1), d.slice(0, len(d) - 1)).to_numpy(zero_copy_only=False)
    return t.filter(pa.array(first))


def keys_from_files(store: Store, rels: list[str]) -> np.ndarray:
    """The sorted keys of every digest the files ``rels`` hold, a column batch at a time."""
    import pyarrow.parquet as pq

    parts = []
    for rel in rels:
        with store.fs.open(store.abs(rel), "rb") as fh:
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=1 << 20, columns=["payload_digest"]):
                parts.append(digest_keys(batch.column(0)))
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)


def stored_keys(store: Store, version: int, rels: list[str] | None = None) -> np.ndarray:
    """The sorted keys of table ``version``'s digests: its keys file (:func:`write_keys`) when update wrote
    one, else derived from the digest files (a crawl from before the keys files, or a lost file)."""
    if version <= 0:
        return np.zeros(0, np.uint64)
    rel = store.digest_keys_file(version)
    if store.exists(rel):
        return np.frombuffer(store.read_bytes(rel), KEYS_DTYPE)
    return keys_from_files(store, digest_files(store, version) if rels is None else rels)


def write_keys(store: Store, round_no: int, new_digests: pa.Array | pa.ChunkedArray) -> None:
    """Version ``round_no``'s keys file: the previous version's keys merged with those of the digests
    first captured this round (update's digest file of the round), then the keys files no step can
    read any more removed.

    Why a file: a fetch task's first miss needs the keys of every stored digest, and deriving them from
    the digest files (a string column of 37 bytes a digest, keyed and sorted) cost each fetch task
    ~4.3 s of CPU at 10 M stored digests, every task, every round; reading 8 bytes a digest already
    sorted is a plain read (bench/RESULTS.md, "session 15, lead"). The merge is a linear insert, not a
    sort. Only versions ``round_no - 1`` (a rerun of this round's fetch reads it) and ``round_no`` (the
    next round's) are kept: a missing file is derived from the digest files again, so removing one never
    changes an answer."""
    old = stored_keys(store, round_no - 1)
    new = np.sort(digest_keys(_flat(new_digests)))  # every row's key, as keys_from_files gives them
    merged = np.insert(old, np.searchsorted(old, new), new)
    store.write_bytes(store.digest_keys_file(round_no), merged.astype(KEYS_DTYPE, copy=False).tobytes())
    for rel in store.ls(store.state("digest_keys")):
        if (v := _file_version(rel)) is not None and v < round_no - 1:
            store.remove(rel)


class KnownDigests(MutableMapping[str, Capture]):
    """digest -> first capture, for one fetch task; digests it stores are added with ``d[k] = v``.

    Iteration and ``len`` cover what is in memory (preloaded, looked up or added), not the file.
    """

    def __init__(self, store: Store, version: int, preload: dict[str, Capture]) -> None:
        self._local: dict[str, Capture] = dict(preload)
        self._store = store
        self._version = version
        self._rels = digest_files(store, version)
        self._keys: np.ndarray | None = None
        self.file_lookups = 0  # rows read from the file after a key hit (diagnostics, tests)

    def _load_keys(self) -> np.ndarray:
        """The sorted keys of every stored digest, read once (:func:`stored_keys`)."""
        if self._keys is None:
            self._keys = stored_keys(self._store, self._version, self._rels)
        return self._keys

    def _from_file(self, digest: str) -> Capture | None:
        if not self._rels:
            return None
        keys = self._load_keys()
        key = np.uint64(digest_key(digest))
        i = int(np.searchsorted(keys, key))
        if i >= keys.size or keys[i] != key:
            return None
        self.file_lookups += 1
        found = _captures(first_captures(self._store, self._rels, pa.array([digest], pa.string())))
        return found.get(digest)  # None: a 64-bit key collision

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
        """Nothing to release (kept for callers that close it)."""


def captures_file(store: Store, round_no: int) -> str:
    """Where generate writes the first captures of round ``round_no``'s fetch lists' previous digests."""
    return store.round_dir(round_no, "captures.parquet")


def write_round_captures(store: Store, round_no: int, prev_digests: pa.Array | pa.ChunkedArray) -> None:
    """Generate: the first captures (table ``round_no - 1``) of every previous digest of the round's fetch
    lists, once for the round, so that a fetch task reads its own from this small file instead of
    scanning the digest column of the crawl's whole history (:func:`first_captures`: 3.5 s of CPU for
    each fetch task at 10 M stored digests, every round; bench/RESULTS.md, "session 15, lead"). A fetch
    task without the file (fetch lists written by other means) still does that semi-join itself."""
    want = _distinct(prev_digests)
    rels = digest_files(store, round_no - 1)
    t = first_captures(store, rels, want) if len(want) and rels else DIGESTS_SCHEMA.empty_table()
    store.write_table(captures_file(store, round_no), t, scratch=True)


def read_round_captures(store: Store, round_no: int) -> pa.Table | None:
    """What :func:`write_round_captures` wrote for the round, or None (no such file)."""
    rel = captures_file(store, round_no)
    return store.read_table(rel, DIGESTS_SCHEMA) if store.exists(rel) else None


def load_known_digests(store: Store, version: int, digests: pa.Array | pa.ChunkedArray | None = None,
                       captures: pa.Table | None = None) -> dict[str, Capture] | KnownDigests:
    """The first captures a fetch task needs for its revisit decisions.

    Without ``digests``: the whole table as a dict. With a fetch list's ``prev_digest`` column: a
    :class:`KnownDigests` preloaded with those digests' first captures that looks any other digest up
    by key; the first captures are taken from ``captures`` (the round's, :func:`read_round_captures`)
    when given, else read by :func:`first_captures`.
    """
    rels = digest_files(store, version)
    if not rels:
        return {}
    if digests is None:
        return _captures(store.read_tables(rels, DIGESTS_SCHEMA).sort_by([("fetch_time", "descending")]))
    want = _distinct(digests)
    preload: dict[str, Capture] = {}
    if len(want):
        found = first_captures(store, rels, want) if captures is None else \
            captures.filter(pc.is_in(captures.column("payload_digest"), value_set=want))
        preload = _captures(found)
    return KnownDigests(store, version, preload)


__all__ = ["DIGESTS_SCHEMA", "KnownDigests", "digest_files", "digest_key", "digest_keys", "captures_file",
           "first_captures", "keys_from_files", "load_known_digests", "read_round_captures", "stored_keys",
           "write_keys", "write_round_captures"]
