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
  row from the files: the rounds file update writes beside the keys names the round file(s) that
  hold it, and that file's digest statistics the one row group (bench/RESULTS.md, "session 16,
  lead"; before, each hit scanned the digest column of every file, 0.7-0.9 s at 10 M against 4 ms now). A miss is answered in
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

from bisect import bisect_left
from collections.abc import Iterator, MutableMapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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
ROUNDS_DTYPE = np.dtype("<u4")  # a rounds file: the round of each key's digest file, in the keys' order
ROW_GROUP_ROWS = 1 << 15  # rows per row group of a digest file (a key hit reads one; bench/digest_hit_bench.py)


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


def first_captures(store: Store, rels: list[str], want: pa.Array,
                   footers: dict[str, _Footer] | None = None) -> pa.Table:
    """The first capture (DIGESTS_SCHEMA: earliest ``fetch_time``, then the smallest URL) of each digest
    of ``want`` that the digest files ``rels`` hold, one row per digest, in digest order.

    A semi-join in Arrow, a row group at a time. A row group whose digest statistics (min, max) hold no
    wanted digest is not read: update writes each digest file sorted by digest in row groups of
    :data:`ROW_GROUP_ROWS`, so a single digest reads one row group of a file. ``footers`` keeps each
    file's footer and row-group bounds for the next call (a fetch task's key hits): parsing them is most
    of a hit's cost at 10 M stored digests (bench/RESULTS.md, "session 16, lead")."""
    want = want.cast(pa.string())
    wanted = sorted(set(pc.drop_null(want).to_pylist()))
    if not wanted:
        return DIGESTS_SCHEMA.empty_table()
    footers = {} if footers is None else footers
    parts = []
    for rel in rels:
        with store.fs.open(store.abs(rel), "rb") as fh:
            if rel not in footers:
                footers[rel] = _footer(pq.ParquetFile(fh).metadata)
            meta, bounds = footers[rel]
            pf = pq.ParquetFile(fh, metadata=meta)
            for g, b in enumerate(bounds):
                if b is not None and not _holds_any(b, wanted):
                    continue
                rows = pf.read_row_group(g, columns=DIGESTS_SCHEMA.names)
                hit = pc.is_in(rows.column("payload_digest"), value_set=want)
                if pc.any(hit).as_py():
                    parts.append(rows.filter(hit).cast(DIGESTS_SCHEMA))
    if not parts:
        return DIGESTS_SCHEMA.empty_table()
    t = pa.concat_tables(parts).sort_by([("payload_digest", "ascending"), ("fetch_time", "ascending"),
                                         ("url", "ascending")])
    d = t.column("payload_digest").combine_chunks()
    first = np.ones(len(d), bool)  # a digest stored twice (files of older versions): its first row
    if len(d) > 1:
        first[1:] = pc.not_equal(d.slice(1), d.slice(0, len(d) - 1)).to_numpy(zero_copy_only=False)
    return t.filter(pa.array(first))


_Footer = tuple[pq.FileMetaData, list[tuple[str, str] | None]]  # a file's footer; each row group's digest bounds


def _footer(meta: pq.FileMetaData) -> _Footer:
    """A digest file's footer and each row group's (min, max) digest, None where not known (no statistics)."""
    col = meta.schema.to_arrow_schema().get_field_index("payload_digest")
    bounds: list[tuple[str, str] | None] = []
    for g in range(meta.num_row_groups):
        st = meta.row_group(g).column(col).statistics
        ok = st is not None and st.has_min_max and isinstance(st.min, str) and isinstance(st.max, str)
        bounds.append((st.min, st.max) if ok else None)
    return meta, bounds


def _holds_any(bounds: tuple[str, str], wanted: list[str]) -> bool:
    """Whether any of ``wanted`` (sorted) lies within a row group's (min, max) digest."""
    i = bisect_left(wanted, bounds[0])
    return i < len(wanted) and wanted[i] <= bounds[1]


def _file_keys(store: Store, rel: str) -> Iterator[np.ndarray]:
    """The keys of a digest file's rows, in file order, a column batch at a time."""
    with store.fs.open(store.abs(rel), "rb") as fh:
        for batch in pq.ParquetFile(fh).iter_batches(batch_size=1 << 20, columns=["payload_digest"]):
            yield digest_keys(batch.column(0))


def keys_from_files(store: Store, rels: list[str]) -> np.ndarray:
    """The sorted keys of every digest the files ``rels`` hold."""
    parts = [k for rel in rels for k in _file_keys(store, rel)]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)


def _index_from_files(store: Store, rels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`keys_from_files` and the round of each key's file (the rounds file's contents)."""
    keys, rounds = [], []
    for rel in rels:
        for k in _file_keys(store, rel):
            keys.append(k)
            rounds.append(np.full(k.size, _file_version(rel) or 0, ROUNDS_DTYPE))
    if not keys:
        return np.zeros(0, np.uint64), np.zeros(0, ROUNDS_DTYPE)
    k = np.concatenate(keys)
    order = np.argsort(k, kind="stable")
    return k[order], np.concatenate(rounds)[order]


def _read_keys(store: Store, version: int) -> np.ndarray | None:
    """Version ``version``'s keys file, or None (not written, or removed)."""
    rel = store.digest_keys_file(version)
    return np.frombuffer(store.read_bytes(rel), KEYS_DTYPE) if version > 0 and store.exists(rel) else None


def _has_rounds(store: Store, version: int, n_keys: int) -> bool:
    """Whether version ``version`` has a rounds file that goes with its keys file of ``n_keys`` keys (one
    round a key): a crawl from before the rounds files, or a lost file, has none."""
    rel = store.digest_rounds_file(version)
    return store.exists(rel) and store.fs.size(store.abs(rel)) == n_keys * ROUNDS_DTYPE.itemsize


def _stored_index(store: Store, version: int) -> tuple[np.ndarray, np.ndarray]:
    """Version ``version``'s keys and rounds, from its files when both go together, else derived."""
    keys = _read_keys(store, version)
    if keys is not None and _has_rounds(store, version, keys.size):
        return keys, np.frombuffer(store.read_bytes(store.digest_rounds_file(version)), ROUNDS_DTYPE)
    return _index_from_files(store, digest_files(store, version))


def write_keys(store: Store, round_no: int, new_digests: pa.Array | pa.ChunkedArray) -> None:
    """Version ``round_no``'s keys file and rounds file: the previous version's merged with those of the
    digests first captured this round (update's digest file of the round), then the files no step can
    read any more removed.

    Why a keys file: a fetch task's first miss needs the keys of every stored digest, and deriving them
    from the digest files (a string column of 37 bytes a digest, keyed and sorted) cost each fetch task
    ~4.3 s of CPU at 10 M stored digests, every task, every round; reading 8 bytes a digest already
    sorted is a plain read (bench/RESULTS.md, "session 15, lead"). Why a rounds file (4 bytes a digest,
    the round whose digest file holds it, in key order): a key hit -- a body another URL stored in an
    earlier round -- reads the few bytes of its keys' rounds and then one row group of that round's file,
    instead of the digest column of the crawl's whole history (0.7-0.9 s a hit at 10 M, now ~4 ms; bench/RESULTS.md,
    "session 16, lead"). The merge is a linear insert, not a sort. Only versions ``round_no - 1`` (a rerun
    of this round's fetch reads it) and ``round_no`` (the next round's) are kept: a missing or mismatched
    file is derived from the digest files again, so removing one never changes an answer."""
    old, old_rounds = _stored_index(store, round_no - 1) if round_no > 1 else \
        (np.zeros(0, np.uint64), np.zeros(0, ROUNDS_DTYPE))
    new = np.sort(digest_keys(_flat(new_digests)))  # every row's key, as keys_from_files gives them
    at = np.searchsorted(old, new)
    rounds = np.insert(old_rounds, at, np.full(new.size, round_no, ROUNDS_DTYPE))
    store.write_bytes(store.digest_rounds_file(round_no), rounds.astype(ROUNDS_DTYPE, copy=False).tobytes())
    keys = np.insert(old, at, new)  # written after the rounds file, which a reader takes only beside it
    store.write_bytes(store.digest_keys_file(round_no), keys.astype(KEYS_DTYPE, copy=False).tobytes())
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
        self._rounds = False  # whether the rounds file goes with the keys read
        self.file_lookups = 0  # key hits, each read from the digest files (diagnostics, tests)
        self.files_read = 0  # digest files those reads opened
        self._footers: dict[str, _Footer] = {}  # footers and row-group bounds of the files read

    def _load_keys(self) -> np.ndarray:
        """The sorted keys of every stored digest, read once: the keys file, else derived from the files."""
        if self._keys is None:
            keys = _read_keys(self._store, self._version) if self._rels else None
            self._rounds = keys is not None and _has_rounds(self._store, self._version, keys.size)
            self._keys = keys if keys is not None else keys_from_files(self._store, self._rels)
        return self._keys

    def _files_of(self, lo: int, hi: int) -> list[str]:
        """The digest files that hold the digests of keys ``lo``..``hi``: those the rounds file names
        (a ranged read of 4 bytes a key), else every file of the table."""
        if not self._rounds:
            return self._rels
        raw = self._store.read_bytes(self._store.digest_rounds_file(self._version),
                                     lo * ROUNDS_DTYPE.itemsize, hi * ROUNDS_DTYPE.itemsize)
        names = {self._store.digests_file(int(r)) for r in np.frombuffer(raw, ROUNDS_DTYPE)}
        return [rel for rel in self._rels if rel in names]

    def _from_file(self, digest: str) -> Capture | None:
        if not self._rels:
            return None
        keys = self._load_keys()
        key = np.uint64(digest_key(digest))
        lo = int(np.searchsorted(keys, key))
        if lo >= keys.size or keys[lo] != key:
            return None
        self.file_lookups += 1
        rels = self._files_of(lo, int(np.searchsorted(keys, key, side="right")))
        self.files_read += len(rels)
        found = _captures(first_captures(self._store, rels, pa.array([digest], pa.string()), self._footers))
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
           "first_captures", "keys_from_files", "load_known_digests", "read_round_captures",
           "write_keys", "write_round_captures"]
