"""A fetch task's progress in small checkpoints, so a retry or rerun fetches only what is missing.

Why: a fetch task that dies (disk full, a killed worker or CLI, a lost lease) used to leave nothing
usable, and its rerun asked every URL of the partition again -- hundreds of repeated requests to the
same sites. The fetcher (:mod:`crawl.fetch`) cuts its output into *segments*: every
``fetch_checkpoint_every`` rows or ``fetch_checkpoint_s`` seconds its WARC writer thread closes the
segment's WARC files (placed atomically, deterministic names with the segment number) and then hands
the segment's rows here, which writes them as a checkpoint. A rerun reads the committed checkpoints
first and fetches only the rest.

What a checkpoint holds (one per segment, under the round's working folder, never published)::

    state/crawl=ID/rounds/NNNNN/checkpoints/part=KKK/seg=SSSS.fetched.parquet   fetch rows + unit
    state/crawl=ID/rounds/NNNNN/checkpoints/part=KKK/seg=SSSS.robots.parquet    robots cache rows
    state/crawl=ID/rounds/NNNNN/checkpoints/part=KKK/seg=SSSS.sitemaps.parquet  sitemap entries + unit
    state/crawl=ID/rounds/NNNNN/checkpoints/part=KKK/seg=SSSS.json              the commit, written last

Units: every row belongs to a *unit of work* -- an input URL with its redirect hops and 429/503
re-tries, a host's robots.txt with its redirects, or a host's sitemap files. A unit still running at a
cut (in flight, or with a hop or re-try queued) is listed as ``open`` in that cut's commit. On resume,
for each attempt (a run of segments one task wrote), rows of the units open at its last commit are
dropped -- that unit is fetched again from its start -- and every other unit with rows is done. So an
input URL is never half-applied, and the rerun repeats at most the rows of one segment plus the
units in flight.

A checkpoint is keyed to its fetch list (:func:`fetchlist_key`): checkpoints of another fetch list
(one generate wrote again differently) are discarded with their WARC segments, never applied.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from crawl.records import FETCH_SCHEMA, ROBOTS_CACHE_SCHEMA, SITEMAP_SCHEMA

if TYPE_CHECKING:
    from crawl.store import Store

UNIT = pa.field("unit", pa.string())  # the unit of work a row belongs to (see the module docstring)
CKPT_FETCH_SCHEMA = FETCH_SCHEMA.append(UNIT)
CKPT_SITEMAP_SCHEMA = SITEMAP_SCHEMA.append(UNIT)
log = logging.getLogger(__name__)
_SEG_RE = re.compile(r"seg=(\d+)\.json$")


@dataclass
class Segment:
    """What the fetcher hands over at a cut: the rows since the previous cut (WARC references
    resolved against the segment's files, which are already placed) and the units still running."""

    number: int
    attempt: int  # the first segment number of the task attempt that wrote it
    fetches: pa.Table  # CKPT_FETCH_SCHEMA
    robots: pa.Table  # ROBOTS_CACHE_SCHEMA
    sitemaps: pa.Table  # CKPT_SITEMAP_SCHEMA
    open_units: list[str]
    warc_files: list[str]


@dataclass
class Resume:
    """What earlier attempts of a partition left that a new attempt keeps: rows of done units."""

    fetches: pa.Table = field(default_factory=FETCH_SCHEMA.empty_table)
    robots_rows: pa.Table = field(default_factory=ROBOTS_CACHE_SCHEMA.empty_table)
    sitemap_rows: pa.Table = field(default_factory=SITEMAP_SCHEMA.empty_table)
    done: frozenset[str] = frozenset()
    next_segment: int = 0
    warc_files: list[str] = field(default_factory=list)


def fetchlist_key(fetchlist: pa.Table) -> str:
    """A digest of the fetch list's URLs in order: checkpoints apply only to the list they came from."""
    h = hashlib.sha256()
    for url in fetchlist.column("url").to_pylist():
        h.update(url.encode() + b"\n")
    return h.hexdigest()[:32]


def page_unit(url: str) -> str:
    return url


def robots_unit(origin: str) -> str:
    return "robots " + origin


def sitemaps_unit(origin: str) -> str:
    return "sitemaps " + origin


class PartitionCheckpoints:
    """The checkpoints of one fetch partition of one round (see the module docstring)."""

    def __init__(self, store: Store, round_no: int, part: int, key: str) -> None:
        self.store = store
        self.round_no = round_no
        self.part = part
        self.key = key
        self.dir = store.round_dir(round_no, "checkpoints", f"part={part:03d}")

    def _rel(self, seg: int, kind: str) -> str:
        return f"{self.dir}/seg={seg:04d}.{kind}"

    def save(self, seg: Segment) -> None:
        """Write one checkpoint: its tables first, the commit (JSON) last, each atomically."""
        s = self.store
        s.write_table(self._rel(seg.number, "fetched.parquet"), seg.fetches, scratch=True)
        if seg.robots.num_rows:
            s.write_table(self._rel(seg.number, "robots.parquet"), seg.robots, scratch=True)
        if seg.sitemaps.num_rows:
            s.write_table(self._rel(seg.number, "sitemaps.parquet"), seg.sitemaps, scratch=True)
        s.write_json(self._rel(seg.number, "json"), {
            "key": self.key, "segment": seg.number, "attempt": seg.attempt, "open": sorted(seg.open_units),
            "rows": seg.fetches.num_rows, "robots": seg.robots.num_rows, "sitemaps": seg.sitemaps.num_rows,
            "warc_files": seg.warc_files})

    def commits(self) -> list[dict]:
        """The committed checkpoints, in segment order, up to the first gap."""
        metas = []
        for rel in self.store.ls(self.dir):
            m = _SEG_RE.search(rel)
            if m:
                metas.append(self.store.read_json(rel))
        metas.sort(key=lambda m: m["segment"])
        out = []
        for i, m in enumerate(metas):
            if m.get("segment") != i:
                break
            out.append(m)
        return out

    def load(self, warc_prefix: str) -> Resume:
        """The rows earlier attempts finished (empty when there are none or they belong to another
        fetch list). WARC segment files no commit names (an attempt that died while closing a segment)
        are removed, so they are neither published nor mistaken for the rerun's own. Checkpoints that
        cannot be read (a file lost or damaged outside the crawler) are dropped, not trusted: the
        partition is fetched from its start rather than failing every rerun."""
        try:
            resume = self._read()
        except (FileNotFoundError, KeyError, ValueError, pa.ArrowException) as exc:
            log.warning("fetch checkpoints of %s unreadable (%r): fetching the partition from its start",
                        self.dir, exc)
            self.remove()
            resume = Resume()
        self._prune_warcs(warc_prefix, resume.next_segment)
        return resume

    def _read(self) -> Resume:
        metas = self.commits()
        if any(m.get("key") != self.key for m in metas):
            self.remove()
            metas = []
        resume = Resume(next_segment=len(metas))
        if metas:
            fetches, robots, sitemaps = [], [], []
            by_attempt: dict[int, list[dict]] = {}
            for m in metas:
                by_attempt.setdefault(int(m.get("attempt", 0)), []).append(m)
            for group in by_attempt.values():
                void = pa.array(group[-1].get("open", []), pa.string())
                for m in group:
                    seg = m["segment"]
                    t = self.store.read_table(self._rel(seg, "fetched.parquet"), CKPT_FETCH_SCHEMA)
                    fetches.append(t.filter(pc.invert(pc.is_in(t.column("unit"), void))))
                    if m.get("robots"):
                        robots.append(self.store.read_table(self._rel(seg, "robots.parquet"), ROBOTS_CACHE_SCHEMA))
                    if m.get("sitemaps"):
                        t = self.store.read_table(self._rel(seg, "sitemaps.parquet"), CKPT_SITEMAP_SCHEMA)
                        sitemaps.append(t.filter(pc.invert(pc.is_in(t.column("unit"), void))))
                    resume.warc_files.extend(m.get("warc_files", []))
            kept = pa.concat_tables(fetches)
            resume.done = frozenset(pc.unique(kept.column("unit")).to_pylist())
            resume.fetches = kept.select(FETCH_SCHEMA.names)
            if robots:
                resume.robots_rows = pa.concat_tables(robots)
            if sitemaps:
                resume.sitemap_rows = pa.concat_tables(sitemaps).select(SITEMAP_SCHEMA.names)
        return resume

    def _prune_warcs(self, warc_prefix: str, first: int) -> None:
        """Remove this partition's WARC segment files numbered ``first`` or later."""
        folder, _, base = warc_prefix.rpartition("/")
        seg_re = re.compile(re.escape(base) + r"-(\d{4})-[a-z]+\.warc\.gz$")
        for rel in self.store.ls(folder):
            m = seg_re.search(rel.rsplit("/", 1)[-1])
            if m and int(m.group(1)) >= first:
                self.store.remove(rel)

    def remove(self) -> None:
        """Drop every checkpoint of the partition (its fetch is done, or they are foreign)."""
        self.store.remove(self.dir)
