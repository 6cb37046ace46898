"""Update's link parts: a partition's raw links as canonical, hashed, filtered targets
(:func:`link_part`, a task on a Dask worker or a thread of update), started during the fetch as each
partition is parsed (:class:`EarlyLinks`) or by update (:func:`_start_link_parts`), then given their
depth and source partition (:func:`_prepare_links`).

A module of its own so that a worker running a link part imports only this (pyarrow and the URL
kernels), not :mod:`crawl.update` with DuckDB and the CrawlDb, seen-set and health modules, which the
workers never use (session 13 saw each worker import it on its event loop, unpickling its first link part).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl.config import CrawlConfig
from crawl.records import LINK_SCHEMA
from crawl.store import Store, part_number
from crawl.url import canonicalize_many, filter_reasons, url_hashes

CANON_LINK_SCHEMA = pa.schema([("from_hash", pa.uint64()), ("to_url", pa.string()), ("kind", pa.string()),
                               ("to_hash", pa.uint64()), ("url_ok", pa.bool_())])


def _canonical_links(cfg: CrawlConfig, raw_links: pa.Table) -> pa.Table:
    """Followed links (nofollow dropped) as (from_hash, canonical to_url or null, kind, to_hash, url_ok).
    Row by row, so the links of several partitions give, concatenated, what their concatenation gives.

    ``to_hash`` is the target's URL hash (0 for null) and ``url_ok`` whether the target passes every URL
    filter but the depth one (:func:`crawl.url.filter_reasons` at depth 0: only ``too_deep`` reads the
    depth, which needs the round's fetch rows; :func:`_prepare_links` applies it). Both are per-URL
    work on ~250 k links a 10 k-page round: here they run on the workers, beside the driver's dedup,
    instead of on the driver after it."""
    follow = pc.invert(pc.fill_null(raw_links.column("nofollow"), False))
    raw_links = raw_links.filter(follow)
    if raw_links.num_rows == 0:
        return CANON_LINK_SCHEMA.empty_table()
    # the source is a fetched page: its URL is canonical already (fetch lists hold canonical URLs)
    to_url = canonicalize_many(raw_links.column("to_url"), cfg.tracking_params, cfg.allowed_schemes)
    # a page's targets repeat across pages (~2x in a partition): hash and filter each distinct one once
    enc = pc.dictionary_encode(to_url)
    code = enc.indices.fill_null(0).to_numpy(zero_copy_only=False)
    valid = enc.indices.is_valid().to_numpy(zero_copy_only=False)
    distinct = enc.dictionary
    to_hash = np.where(valid, url_hashes(distinct)[code], 0) if len(distinct) else np.zeros(len(code), np.uint64)
    ok = pc.is_null(filter_reasons(distinct, np.zeros(len(distinct), np.int32), cfg)).to_numpy(zero_copy_only=False)
    return pa.table({
        "from_hash": pa.array(url_hashes(raw_links.column("from_url")), pa.uint64()),
        "to_url": to_url,
        "kind": raw_links.column("kind"),
        "to_hash": pa.array(to_hash.astype(np.uint64), pa.uint64()),
        "url_ok": pa.array(valid & ok[code] if len(distinct) else np.zeros(len(code), bool)),
    }, schema=CANON_LINK_SCHEMA)


def link_part(cfg: CrawlConfig, rel: str) -> pa.Table:
    """:func:`_canonical_links` of one partition's raw links file (a task on a Dask worker)."""
    return _canonical_links(cfg, Store(cfg.root, cfg.crawl_id).read_table(rel, LINK_SCHEMA))


class EarlyLinks:
    """:func:`link_part` of each partition started on the workers as soon as the partition is parsed,
    during the round's fetch+parse (``crawl.round.run_round``): a worker whose partitions are done runs
    them while the other still fetches, and update takes the results instead of starting them then.

    Why: at 20,000 pages update waited ~0.3–0.4 s for its four link parts (two a worker, ~0.15 s of CPU
    each) after its dedup queries. Nothing is stored: a raw links file does not change once its
    partition is parsed (a parsed partition is never parsed again), so the result is what update would
    compute; without these futures (another process, a rerun) update starts the tasks itself. The tasks
    have a lower priority than any fetch task (a retried partition is submitted after them)."""

    def __init__(self, client: Any, cfg: CrawlConfig, round_no: int) -> None:
        self.client, self.cfg, self.round_no = client, cfg, round_no
        self.futures: dict[int, Any] = {}
        self._tag = uuid.uuid4().hex[:8]  # a key no other attempt holds (crawl.round._run_parts' reason)

    def start(self, part: int) -> None:
        """Start the link part of ``part`` (called once its parsed marker is written)."""
        store = Store(self.cfg.root, self.cfg.crawl_id)
        rel = store.part_file(self.round_no, "rawlinks", part)
        if part in self.futures or not store.exists(rel):
            return
        self.futures[part] = self.client.submit(
            link_part, self.cfg, rel, pure=False, priority=-1,
            key=f"links-{self.cfg.crawl_id}-{self.round_no}-{part}-{self._tag}")

    def take(self, part: int) -> Any:
        """The future of ``part``'s link part, or None; handed over once."""
        return self.futures.pop(part, None)

    def release(self) -> None:
        """Drop what update did not take (the round failed before it): the workers free the tables."""
        for fut in self.futures.values():
            fut.release()
        self.futures.clear()


def _start_link_parts(cfg: CrawlConfig, store: Store, round_no: int, client: Any,
                      early: EarlyLinks | None = None) -> Callable[[], pa.Table]:
    """Start :func:`link_part` for every partition of the round (Dask tasks with a client, else two
    threads: Parquet reads and the column kernels release the GIL), or take those ``early`` started
    during the fetch; the returned function waits for them and concatenates their tables in
    partition order."""
    rels = store.part_files(round_no, "rawlinks")
    if not rels:
        return CANON_LINK_SCHEMA.empty_table
    if client is not None:
        have = {r: early.take(part_number(r)) for r in rels} if early is not None and early.round_no == round_no \
            else {}
        todo = [r for r in rels if have.get(r) is None]
        started = dict(zip(todo, client.map(link_part, [cfg] * len(todo), todo, pure=False,
                                            key=[f"links-{cfg.crawl_id}-{round_no}-{part_number(r)}" for r in todo]),
                           strict=True)) if todo else {}
        futures = [have[r] if have.get(r) is not None else started[r] for r in rels]

        def gather() -> pa.Table:
            from crawl.cluster import wait_all

            wait_all(client, futures, cfg, f"round {round_no} update links")
            return pa.concat_tables([f.result() for f in futures])

        return gather
    pool = ThreadPoolExecutor(max_workers=2)
    jobs = [pool.submit(link_part, cfg, r) for r in rels]
    pool.shutdown(wait=False)
    return lambda: pa.concat_tables([j.result() for j in jobs])


def _prepare_links(cfg: CrawlConfig, fetches: pa.Table, t: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Canonical, filtered links with the depth of their target; plus the link graph rows. ``t``:
    the round's :func:`_canonical_links`, in partition order (kept); ``fetches``: the round's page
    fetch rows with canonical URL hashes and their partition (``part``)."""
    if t.num_rows == 0:
        empty_links = pa.table({"to_url": pa.array([], pa.string()), "to_hash": pa.array([], pa.uint64()),
                                "depth": pa.array([], pa.int32()), "source": pa.array([], pa.string())})
        graph = pa.table({"from_hash": pa.array([], pa.uint64()), "to_hash": pa.array([], pa.uint64()),
                          "to_url": pa.array([], pa.string()), "kind": pa.array([], pa.string()),
                          "part": pa.array([], pa.int32())})
        return empty_links, graph
    # depth and partition of each link's source page, from the round's fetch rows (min per URL hash), by
    # a sorted lookup; a source without a fetch row takes 0 for both (as NULL did in SQL's coalesce)
    f_hash = fetches.column("url_hash").to_numpy()
    order = np.argsort(f_hash, kind="stable")
    f_sorted = f_hash[order]
    first = np.flatnonzero(np.r_[True, f_sorted[1:] != f_sorted[:-1]]) if f_sorted.size else np.zeros(0, np.int64)
    none = np.iinfo(np.int64).max  # a null depth is left out of the minimum, as SQL's min() does
    f_depth = pc.fill_null(fetches.column("depth").cast(pa.int64()), none).to_numpy()[order]
    f_part = fetches.column("part").cast(pa.int64()).to_numpy()[order]
    u_hash = f_sorted[first]
    u_depth = np.minimum.reduceat(f_depth, first) if first.size else f_depth
    u_depth = np.where(u_depth == none, 0, u_depth)
    u_part = np.minimum.reduceat(f_part, first) if first.size else f_part
    src_hash = t.column("from_hash").to_numpy()
    at = np.searchsorted(u_hash, src_hash).clip(0, max(u_hash.size - 1, 0))
    found = (u_hash[at] == src_hash) if u_hash.size else np.zeros(src_hash.size, bool)
    redirect = pc.fill_null(pc.equal(t.column("kind"), "redirect"), False).to_numpy(zero_copy_only=False)
    depth = np.where(found, u_depth[at] if u_hash.size else 0, 0) + np.where(redirect, 0, 1)
    part = np.where(found, u_part[at] if u_hash.size else 0, 0)
    # the links kept: a target (not null), through the URL filters (url_ok) and not too deep
    keep = pc.fill_null(t.column("url_ok"), False).to_numpy(zero_copy_only=False) & (depth <= cfg.max_depth)
    keep &= t.column("to_url").is_valid().to_numpy(zero_copy_only=False)
    if not keep.all():  # (a copy of every link otherwise: ~0.03 s at 0.5 M links)
        t = t.take(pa.array(np.flatnonzero(keep)))
        depth, part = depth[keep], part[keep]
    t = t.append_column("depth", pa.array(depth.astype(np.int32))).append_column("part", pa.array(part.astype(np.int32)))
    to_hash = t.column("to_hash")
    graph = pa.table({"from_hash": t.column("from_hash"), "to_hash": to_hash, "to_url": t.column("to_url"),
                      "kind": t.column("kind"), "part": t.column("part")})
    source = pc.if_else(pc.equal(t.column("kind"), "redirect"), "redirect",
                        pc.if_else(pc.equal(t.column("kind"), "sitemap"), "sitemap", "link"))
    links = pa.table({"to_url": t.column("to_url"), "to_hash": to_hash, "depth": t.column("depth"),
                      "source": source})
    return links, graph
