"""The crawl root on fsspec: deterministic paths, atomic writes, the published-round pointer.

Why this shape: every step of a round writes immutable files at paths that are a pure function of
(crawl, round, step, partition), so a rerun overwrites instead of appending twice. Nothing a step
writes is visible as *published* state until :func:`Store.publish` flips ``CURRENT.json`` to the new
round; a crashed round leaves the previous pointer, and its rerun overwrites the same files.

Layout under the root (a local folder or any fsspec URL such as ``s3://bucket/prefix``)::

    index/crawl=ID/subset=SUB/round=NNNNN-part=KKK.parquet   page index (Common Crawl columns)
    text/crawl=ID/round=NNNNN/part=KKK.parquet                extracted text (WET-like)
    links/crawl=ID/round=NNNNN/part=KKK.parquet               link graph (from/to URL hashes)
    images/crawl=ID/round=NNNNN/part=KKK.parquet              parsed images (format, size, EXIF)
    warc/crawl=ID/round=NNNNN/ID-NNNNN-KKK-SSSS-SUB.warc.gz   WARC files (SSSS: fetch segment, crawl.checkpoint)
    state/crawl=ID/CURRENT.json                               {"round": N} -- the only commit
    state/crawl=ID/crawldb/v=NNNNN/shard=SS.parquet           CrawlDb version N (base file; may be a link)
    state/crawl=ID/crawldb/v=NNNNN/overlay/shard=SS.parquet   rows that replace the base's (incremental rounds)
    state/crawl=ID/seen/v=NNNNN/shard=SS.{parquet,bloom}      seen-set and Bloom filter
    state/crawl=ID/digests/v=NNNNN.parquet                    digests first captured in round N (table N: v ≤ N)
    state/crawl=ID/digest_keys/v=NNNNN.u64                    sorted 64-bit keys of table N's digests (crawl.digests)
    state/crawl=ID/digest_keys/v=NNNNN.rounds.u32             the round of each key's digest file, in key order
    state/crawl=ID/robots/v=NNNNN.parquet                     robots.txt cache (TTL)
    state/crawl=ID/rounds/NNNNN/...                           per-round working files + manifest.json
    state/crawl=ID/rounds/NNNNN/staged/<any path above>       a round's outputs until it is published
    state/crawl=ID/rounds/NNNNN/checkpoints/part=KKK/...      a fetch task's progress until its partition is done

Published means visible, unpublished means invisible -- to any reader, not only ``crawl query``. A
round writes its index, text, links, images and WARC files under its ``staged/`` folder, at the same
relative paths they will have (the page index records the *final* WARC path). :meth:`Store.publish`
writes the manifest, flips ``CURRENT.json`` (the commit), then moves every staged file to its final
path (:meth:`Store.finish_publish`; a rename on local disk, copy + delete on object stores). A crash
in the move leaves a committed round whose remaining files are still staged: the move is a
roll-forward, finished by a rerun of publish or by the next round's first step, and never undone. So
``read_parquet('index/**/*.parquet')`` never sees a round before its commit; it may, only between a
crash mid-move and the roll-forward, see part of a committed one.

Temp files of dead attempts (``*.tmp-<uuid>`` from :func:`atomic_write`, ``.<name>.*.tmp`` from WARC
writers) are removed by :meth:`Store.clean_temp`, which the fetch step calls under the crawl's lease
once a dead attempt's writers are known to have stopped; those in ``reports/``, written outside the
lease, by the next report writer that finds no other writing (:meth:`Store.write_outside_lease`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

# Columns whose values are (nearly) all distinct in a file: a Parquet dictionary of them holds every
# value once more until the writer gives up on it (past its 1 MiB dictionary page), and trying cost
# 8-15 % of writing a file (bench/parquet_opts_bench.py; crawl.crawldb.DICTIONARY_COLUMNS for shards).
UNIQUE_COLUMNS = frozenset({
    "url", "url_hash", "loc", "text", "payload_digest", "content_digest", "text_digest",
    "simhash", "canonical_url", "redirect_location", "warc_record_offset", "warc_record_length",
})


def parquet_options(table: pa.Table, scratch: bool = False) -> dict[str, Any]:
    """``pq.write_table`` options of a file of ``table``: no dictionary for :data:`UNIQUE_COLUMNS`;
    outputs users query (page index, text, links, ...) zstd with column statistics; ``scratch``
    files (a round's working files, each read whole once or twice by a later step: a partition's
    fetch list and its fetched/pages/raw links/robots/sitemaps files, update's shard files, the
    CrawlDb delta, fetch checkpoints) Snappy without statistics -- nobody prunes row groups of a file
    read whole, and Snappy wrote them in ~55 % of zstd's CPU and read them in ~75 %, for ~1.3x the
    bytes (bench/RESULTS.md, "Output writes (session 7, helper writers)"). The values read back are
    the same either way."""
    opts: dict[str, Any] = {"compression": "snappy" if scratch else "zstd",
                            "use_dictionary": [c for c in table.column_names if c not in UNIQUE_COLUMNS]}
    if scratch:
        opts["write_statistics"] = False
    return opts


def part_number(rel: str) -> int:
    """The partition number in a part file's name (:meth:`Store.part_file`: ``.../part=NNN.ext``)."""
    return int(rel.rsplit("part=", 1)[1].split(".", 1)[0])


@dataclass(frozen=True)
class Store:
    root: str
    crawl_id: str

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return _fs_for(self.root)[0]

    @property
    def base(self) -> str:
        return _fs_for(self.root)[1]

    # ---- paths (all relative to the root) -------------------------------------------------
    def state(self, *parts: str) -> str:
        return "/".join((f"state/crawl={self.crawl_id}", *parts))

    def round_dir(self, round_no: int, *parts: str) -> str:
        return self.state("rounds", f"{round_no:05d}", *parts)

    def part_file(self, round_no: int, step: str, part: int, ext: str = "parquet") -> str:
        return self.round_dir(round_no, step, f"part={part:03d}.{ext}")

    def part_files(self, round_no: int, step: str) -> list[str]:
        """The Parquet part files a step of the round has written (:meth:`part_file`), sorted."""
        return [p for p in self.ls(self.round_dir(round_no, step)) if p.endswith(".parquet")]

    def crawldb_dir(self, version: int) -> str:
        return self.state("crawldb", f"v={version:05d}")

    def seen_file(self, version: int, shard: int, ext: str) -> str:
        return self.state("seen", f"v={version:05d}", f"shard={shard:02d}.{ext}")

    def digests_file(self, version: int) -> str:
        return self.state("digests", f"v={version:05d}.parquet")

    def digest_keys_file(self, version: int) -> str:
        return self.state("digest_keys", f"v={version:05d}.u64")

    def digest_rounds_file(self, version: int) -> str:
        return self.state("digest_keys", f"v={version:05d}.rounds.u32")

    def robots_file(self, version: int) -> str:
        return self.state("robots", f"v={version:05d}.parquet")

    def warc_prefix(self, round_no: int, part: int) -> str:
        return f"warc/crawl={self.crawl_id}/round={round_no:05d}/{self.crawl_id}-{round_no:05d}-{part:03d}"

    def index_file(self, subset: str, round_no: int, part: int) -> str:
        return f"index/crawl={self.crawl_id}/subset={subset}/round={round_no:05d}-part={part:03d}.parquet"

    def text_file(self, round_no: int, part: int) -> str:
        return f"text/crawl={self.crawl_id}/round={round_no:05d}/part={part:03d}.parquet"

    def links_file(self, round_no: int, part: int) -> str:
        return f"links/crawl={self.crawl_id}/round={round_no:05d}/part={part:03d}.parquet"

    def images_file(self, round_no: int, part: int) -> str:
        return f"images/crawl={self.crawl_id}/round={round_no:05d}/part={part:03d}.parquet"

    # ---- I/O --------------------------------------------------------------------------------
    def abs(self, rel: str) -> str:
        return f"{self.base.rstrip('/')}/{rel}" if self.base else rel

    def url(self, rel: str) -> str:
        """An fsspec URL other libraries (warc.py) can open."""
        return join_url(self.root, rel)

    def location(self, rel: str) -> str:
        """Where a user finds ``rel``: an absolute local path, or an fsspec URL for remote roots."""
        return self.abs(rel) if self.fs.__class__.__name__ == "LocalFileSystem" else self.url(rel)

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.abs(rel))

    def ls(self, rel: str) -> list[str]:
        """Relative paths of the files directly under ``rel`` (sorted; empty when missing)."""
        path = self.abs(rel)
        if not self.fs.exists(path):
            return []
        base = self.base.rstrip("/") + "/" if self.base else ""
        out = []
        for p in self.fs.ls(path, detail=False):
            p = p if isinstance(p, str) else p["name"]
            out.append(p[len(base):] if base and p.startswith(base) else p)
        return sorted(out)

    def write_bytes(self, rel: str, data: bytes) -> None:
        atomic_write(self.fs, self.abs(rel), data)

    def write_outside_lease(self, rel: str, data: bytes) -> int:
        """:meth:`write_bytes` for a folder written outside the crawl's lease (the HTML reports), which
        first removes the temp files dead writers left in that folder; returns how many.

        Why: a writer killed before its rename leaves ``X.tmp-<hex>`` for good, and :meth:`clean_temp`
        (run under the lease) may not look there: the DAG's report task writes after publish released
        the lease, so a temp file there may be a live writer's (bench/crash_sweep.py, kill point
        "report"). How a live writer is told from a dead one: every writer holds a shared ``flock`` on
        the folder's ``.writers.lock`` from before it creates its temp file until after it is placed,
        and a process's locks end with it (SIGKILL included). A writer that gets the lock exclusively
        (without waiting) knows no other writer is between those points, so every temp file in the folder
        is a dead one's: it removes them, then writes under the shared lock like the others. No age bound,
        no process ids (which another container, or a reused id, would make wrong). A writer that
        finds the lock held just writes (the next one sweeps). Where ``flock`` does not work (an error
        other than "held"), nothing is removed. Object stores write in one PUT: no temp file, no lock.
        """
        if self.fs.__class__.__name__ != "LocalFileSystem":
            self.write_bytes(rel, data)
            return 0
        path = self.abs(rel)
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        removed = 0
        fd = os.open(os.path.join(folder, WRITERS_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                for entry in os.scandir(folder):
                    if _is_temp(entry.name):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
                            removed += 1
                fcntl.flock(fd, fcntl.LOCK_SH)  # before this writer's own temp file exists
            except BlockingIOError:  # another writer is writing: its temp file is not ours to judge
                fcntl.flock(fd, fcntl.LOCK_SH)
            except OSError:  # no locks here (ENOLCK...): write, remove nothing
                pass
            place_local(path, data)
        finally:
            os.close(fd)  # the lock ends with the descriptor
        return removed

    def copy(self, src: str, dst: str) -> None:
        """``dst`` as a copy of the immutable file ``src``: a hard link on local disk (no bytes moved),
        else a byte copy; atomic either way (``dst`` is replaced, never written in place)."""
        if self.fs.__class__.__name__ == "LocalFileSystem":
            path = self.abs(dst)
            self.fs.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
            os.link(self.abs(src), tmp)
            os.replace(tmp, path)
            return
        self.write_bytes(dst, self.read_bytes(src))

    def read_bytes(self, rel: str, start: int | None = None, end: int | None = None) -> bytes:
        """The file's bytes, or bytes ``start``..``end`` of it (one ranged read on an object store)."""
        return self.fs.cat_file(self.abs(rel), start=start, end=end)

    def write_json(self, rel: str, obj: Any) -> None:
        self.write_bytes(rel, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())

    def read_json(self, rel: str, default: Any = None) -> Any:
        if not self.exists(rel):
            return default
        return json.loads(self.read_bytes(rel))

    def write_table(self, rel: str, table: pa.Table, scratch: bool = False,
                    row_group_size: int | None = None) -> None:
        """``table`` as a Parquet file at ``rel`` (atomically). ``scratch``: a working file a later step
        of the round reads whole (:func:`parquet_options`), not an output users query.
        ``row_group_size``: rows per row group (pyarrow's default when None)."""
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, row_group_size=row_group_size, **parquet_options(table, scratch))
        self.write_bytes(rel, sink.getvalue().to_pybytes())

    def write_tables(self, items: Sequence[tuple[str, pa.Table | None]], threads: int = 4,
                     scratch: bool = False) -> None:
        """:meth:`write_table` of each (rel, table), ``threads`` at a time; a None table removes ``rel``.

        Why: a step that writes a file per shard or partition spent most of it in Parquet encoding and
        the fsync of each file (``place_local``), both without the GIL, one after the other."""
        from concurrent.futures import ThreadPoolExecutor

        def one(rel: str, table: pa.Table | None) -> None:
            if table is None:
                self.remove(rel)
            else:
                self.write_table(rel, table, scratch)

        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(items)))) as pool:
            for job in [pool.submit(one, rel, table) for rel, table in items]:
                job.result()

    def read_table(self, rel: str, schema: pa.Schema | None = None,
                   columns: Sequence[str] | None = None) -> pa.Table:
        """A Parquet file (only ``columns``, in that order, when given), cast to ``schema`` (its fields of
        ``columns`` then)."""
        if columns is not None and schema is not None:
            schema = pa.schema([schema.field(c) for c in columns])
        with self.fs.open(self.abs(rel), "rb") as fh:
            table = pq.read_table(fh, columns=list(columns) if columns is not None else None)
        return table.cast(schema) if schema is not None and table.schema != schema else table

    def read_tables(self, rels: list[str], schema: pa.Schema, columns: Sequence[str] | None = None) -> pa.Table:
        """Concatenate Parquet files (missing list = empty table of ``schema``); only ``columns`` if given."""
        tables = [self.read_table(r, schema, columns) for r in rels]
        if tables:
            return pa.concat_tables(tables)
        return (pa.schema([schema.field(c) for c in columns]) if columns is not None else schema).empty_table()

    def duckdb_paths(self, con: Any, rels: list[str]) -> list[str]:
        """Paths DuckDB can ``read_parquet`` directly (a remote filesystem is registered with ``con``)."""
        if self.fs.__class__.__name__ == "LocalFileSystem":
            return [self.abs(r) for r in rels]
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        if not con.filesystem_is_registered(protocol):
            con.register_filesystem(self.fs)
        return [join_url(self.root, r) for r in rels]

    def remove(self, rel: str) -> None:
        path = self.abs(rel)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    # ---- the published pointer ----------------------------------------------------------------
    def current_round(self) -> int:
        """The last published round (0 = nothing published yet)."""
        return int(self.read_json(self.state("CURRENT.json"), {"round": 0})["round"])

    def publish(self, round_no: int, summary: dict[str, Any]) -> None:
        """Write the round manifest, flip CURRENT -- the single atomic commit of a round -- then move
        the round's staged outputs to their final paths."""
        self.write_json(self.round_dir(round_no, "manifest.json"), summary)
        self.write_json(self.state("CURRENT.json"), {"round": round_no})
        self.finish_publish(round_no)

    # ---- staging: a round's outputs stay invisible until its publish ------------------------------
    def staged(self, round_no: int, rel: str) -> str:
        """Where ``rel`` (a final output path of round ``round_no``) is written before publish."""
        return self.round_dir(round_no, "staged", rel)

    def unstaged(self, round_no: int, rel: str) -> str:
        """The final path of a staged path (``rel`` itself when it is not staged)."""
        prefix = self.round_dir(round_no, "staged") + "/"
        return rel[len(prefix):] if rel.startswith(prefix) else rel

    def finish_publish(self, round_no: int) -> int:
        """Move round ``round_no``'s staged files to their final paths; returns how many were moved.

        Only for a committed round (``CURRENT`` >= ``round_no``); safe to run any number of times and
        after a crash mid-move (a file is either still staged or already moved).
        """
        if round_no <= 0 or self.current_round() < round_no:
            return 0
        staged = self.abs(self.round_dir(round_no, "staged"))
        fs = self.fs
        if not fs.exists(staged):
            return 0
        local = fs.__class__.__name__ == "LocalFileSystem"
        moved = 0
        for src in sorted(fs.find(staged)):
            name = src.rsplit("/", 1)[-1]
            if _is_temp(name):
                fs.rm(src)
                continue
            rel = src[len(staged.rstrip("/")) + 1:] if src.startswith(staged) else src.split("/staged/", 1)[1]
            dst = self.abs(rel)
            if local:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.replace(src, dst)
            else:
                fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
                fs.mv(src, dst)
            moved += 1
        with contextlib.suppress(Exception):
            fs.rm(staged, recursive=True)
        return moved

    def clean_temp(self) -> int:
        """Remove temp files that killed or failed attempts left anywhere under this crawl."""
        fs = self.fs
        removed = 0
        for top in (f"index/crawl={self.crawl_id}", f"text/crawl={self.crawl_id}", f"links/crawl={self.crawl_id}",
                    f"images/crawl={self.crawl_id}", f"warc/crawl={self.crawl_id}", self.state()):
            path = self.abs(top)
            if not fs.exists(path):
                continue
            lease_dir = self.abs(self.state("lease"))
            for f in fs.find(path):
                if _is_temp(f.rsplit("/", 1)[-1]) and not f.startswith(lease_dir):  # lease: live writers
                    with contextlib.suppress(FileNotFoundError):
                        fs.rm(f)
                        removed += 1
        return removed

    def is_done(self, round_no: int, step: str, part: int) -> bool:
        return self.exists(self.part_file(round_no, step, part, "done"))

    def mark_done(self, round_no: int, step: str, part: int, info: dict[str, Any] | None = None) -> None:
        self.write_json(self.part_file(round_no, step, part, "done"), info or {})


# the lock file of a folder written outside the lease (Store.write_outside_lease)
WRITERS_LOCK = ".writers.lock"


def _is_temp(name: str) -> bool:
    """A temp file of :func:`atomic_write` (``X.tmp-<hex>``) or of a WARC writer (``.X.<rand>.tmp``)."""
    return ".tmp-" in name or (name.startswith(".") and name.endswith(".tmp"))


def join_url(root: str, rel: str) -> str:
    return f"{root.rstrip('/')}/{rel}"


_FS_CACHE: dict[str, tuple[fsspec.AbstractFileSystem, str]] = {}


def _fs_for(root: str) -> tuple[fsspec.AbstractFileSystem, str]:
    hit = _FS_CACHE.get(root)
    if hit is None:
        fs, base = fsspec.core.url_to_fs(root)
        if getattr(fs, "protocol", None) in ("file", ("file", "local")) or fs.__class__.__name__ == "LocalFileSystem":
            base = os.path.abspath(base)
        hit = _FS_CACHE[root] = (fs, base)
    return hit


def place_local(path: str, data: bytes, place: Callable[[str, str], None] = os.replace) -> None:
    """Write ``data`` to a temp file beside ``path`` (fsynced), then ``place(tmp, path)``: ``os.replace``
    (atomic overwrite) or ``os.link`` (atomic create-only, raises FileExistsError). The temp file never
    outlives the call, also on failure (e.g. disk full)."""
    os.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        place(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def atomic_write(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write then rename (local) or single PUT (object stores), so readers never see a torn file."""
    parent = path.rsplit("/", 1)[0]
    if fs.__class__.__name__ == "LocalFileSystem":
        place_local(path, data)
        return
    fs.makedirs(parent, exist_ok=True)
    fs.pipe_file(path, data)
