"""Update: merge a round's fetches, parses and links into the next CrawlDb version.

Two phases, both vectorised over Arrow/DuckDB/NumPy:

**prepare** (one pass over the round's small files, global):
1. the round's fetch rows (last attempt per canonical URL) with their parse results;
2. content dedup: WARC revisits of another URL are exact duplicates; same-round identical digests
   across partitions too; a SimHash within ``simhash_max_distance`` of an earlier original marks a
   near-duplicate (block-permutation join in :mod:`crawl.neardup`, never all-pairs);
3. links: nofollow dropped, canonicalised, trap/scope filters applied, then each URL-hash shard's
   Bloom filter answers "seen?" and its "maybe"s are confirmed against the shard's Parquet seen-set,
   so a false positive never loses a URL; new URLs are capped per host (total known per host);
   sitemap entries fetched this round join as candidates too (source 'sitemap', depth 1), and their
   ``lastmod``/``changefreq`` become change evidence on the CrawlDb row;
4. the results are written per URL-hash shard under ``rounds/N/update/``, and handed in memory to
   the shard merges, which start while those files are written (:class:`PrepareHooks`).

**merge** (one task per URL-hash shard: Dask tasks on an external cluster, else threads of this process): take the rows of CrawlDb N-1 the round
touched (saved by generate, ``rounds/N/selected.parquet``), apply the fetch results (status, times,
counts, change detection — a real change is a SimHash distance beyond the near-dup threshold, so
per-request noise is not a change; a 304 is "unchanged"), add the new URLs, write them as the
shard's delta ``rounds/N/merged`` (reprioritise splices it into CrawlDb N; the untouched rows are
never read here) and the shard's next seen-set and Bloom filter. Every output path is
deterministic: rerunning overwrites.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl import crawldb, duck, health, index, seen
from crawl.config import CrawlConfig
from crawl.linkparts import EarlyLinks, _canonical_links, _prepare_links, _start_link_parts
from crawl.records import FETCH_SCHEMA, LINK_SCHEMA, PAGE_PART_SCHEMA, SITEMAP_SCHEMA
from crawl.store import Store, part_number
from crawl.tasks import CONTROL_SUBSETS, DIGESTS_SCHEMA, ROBOTS_CACHE_SCHEMA, load_robots_cache
from crawl.url import canonicalize_many, filter_reasons, politeness_key, url_columns, url_hashes

# what prepare hands to each shard merge for a URL fetched this round
FETCH_UPDATE_SCHEMA = pa.schema([
    ("url", pa.string()), ("url_hash", pa.uint64()), ("host", pa.string()), ("depth", pa.int32()),
    ("status", pa.string()), ("fetch_status", pa.string()), ("http_status", pa.int32()),
    ("fetch_time", pa.timestamp("ms", tz="UTC")), ("payload_digest", pa.string()), ("text_digest", pa.string()),
    ("simhash", pa.int64()), ("etag", pa.string()), ("last_modified", pa.string()),
    ("duplicate_of", pa.string()), ("redirect_to", pa.string()),
])
SITEMAP_EVIDENCE_SCHEMA = pa.schema([
    ("url_hash", pa.uint64()), ("lastmod", pa.timestamp("ms", tz="UTC")), ("changefreq", pa.string()),
])
DUP_INFO_SCHEMA = pa.schema([
    ("url_hash", pa.uint64()), ("duplicate_of", pa.string()), ("depth", pa.int32()), ("changed", pa.bool_()),
    ("status", pa.string()),
])


def _shard_rel(store: Store, round_no: int, kind: str, shard: int) -> str:
    return store.round_dir(round_no, "update", kind, f"shard={shard:02d}.parquet")


def pkeys(cfg: CrawlConfig, hosts: pa.Array) -> pa.Array:
    """Politeness key per URL; it depends on the host only, so it is computed once per distinct host."""
    if cfg.politeness_key == "host":
        return hosts
    enc = pc.dictionary_encode(hosts)
    keys = [politeness_key(f"http://{h}/", cfg.politeness_key) if h else None for h in enc.dictionary.to_pylist()]
    return pa.array(keys, pa.string()).take(enc.indices)


def _read_with_part(store: Store, rels: list[str]) -> pa.Table:
    """Fetch rows of all partitions, with the partition number as a ``part`` column."""
    tables = []
    for rel in rels:
        t = store.read_table(rel, FETCH_SCHEMA)
        tables.append(t.append_column("part", pa.array(np.full(t.num_rows, part_number(rel), np.int32))))
    if not tables:
        return FETCH_SCHEMA.empty_table().append_column("part", pa.array([], pa.int32()))
    return pa.concat_tables(tables)


def read_pages(store: Store, round_no: int) -> pa.Table:
    """The round's parse results as update reads them: without the text and title (the parse tasks
    wrote the text files, :func:`crawl.index.write_part_texts`)."""
    # the columns named: a part file of a round parsed before PAGE_PART_SCHEMA still holds them
    return store.read_tables(store.part_files(round_no, "pages"), PAGE_PART_SCHEMA, columns=index.INDEX_PAGE_COLUMNS)


def _prev_db_source(con: duckdb.DuckDBPyConnection, store: Store, cfg: CrawlConfig, prev: int) -> str | None:
    if prev <= 0:
        return None
    return crawldb.source_sql(store, con, prev, cfg.url_shards)


def reached_hosts(store: Store, version: int) -> pa.Array | None:
    """Hosts a server answered for up to round ``version``: those whose robots.txt got an HTTP answer
    (the robots cache keeps no row for a host that never answered). The health gate judges only them."""
    cache = load_robots_cache(store, version)
    if cache is None:
        return None
    return pc.unique(cache.filter(pc.is_valid(cache.column("status"))).column("host"))


# ---- the whole step ---------------------------------------------------------------------------------
def update(cfg: CrawlConfig, round_no: int, now: datetime, client: Any = None,
           early_links: EarlyLinks | None = None) -> dict[str, Any]:
    """``early_links``: the link parts the round's fetch+parse started (:class:`EarlyLinks`), if any."""
    store = Store(cfg.root, cfg.crawl_id)
    carried = carry_forward(cfg, store, round_no)
    if carried is not None:
        return carried
    # each partition's links are read and canonicalised on the workers (or a thread pool) while this
    # process reads the fetch rows and runs the dedup: the largest per-URL cost of update, in parallel
    links_of = _start_link_parts(cfg, store, round_no, client, early_links)
    fetch_parts = store.part_files(round_no, "fetched")
    fetched_all = _read_with_part(store, fetch_parts)
    # without the text and title: the parse tasks wrote them to the text files (crawl.index.write_part_texts)
    pages = read_pages(store, round_no)
    # what needs nothing from prepare or the merges runs in a side thread while this thread runs prepare
    # and the workers the shard merges: the index rows (URL splitting, SURTs; all but four columns,
    # crawl.index.with_merge_columns), the digest table and the robots cache, then the links files
    parts = index.parts_of(fetch_parts)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="update-side") as side:
        idx_rows = side.submit(index.index_rows, fetched_all, pages, round_no)
        side_writes = [side.submit(_write_digests, store, round_no, fetched_all),
                       side.submit(_write_robots, store, round_no)]
        started: list[Callable[[], list[dict[str, Any]]]] = []
        hooks = PrepareHooks(
            # the links files need only the link graph: queued as soon as prepare has it, not after prepare
            link_graph=lambda graph: side_writes.append(side.submit(index.write_links, store, round_no, parts, graph)),
            shard_inputs=lambda inputs: started.append(_start_merges(cfg, round_no, client, inputs)))
        stats, _, round_health = _health_and_prepare(cfg, store, round_no, fetched_all, pages, links_of, hooks)
        shard_stats = _merge_shards(cfg, round_no, client, started[0] if started else None)
        # the merges hand back their dup_info (also written as their scratch files): not read back here
        dup_info = pa.concat_tables([st.pop("dup_info") for st in shard_stats])
        index.write_index(store, round_no, parts, index.with_merge_columns(idx_rows.result(), dup_info))
        for job in side_writes:
            job.result()

    status_counts: dict[str, int] = {}
    for st in shard_stats:
        for k, v in st["status"].items():
            status_counts[k] = status_counts.get(k, 0) + v
    return {
        "round": round_no,
        **stats,
        "attempted": sum(status_counts.values()),
        "status": status_counts,
        "duplicates": status_counts.get("duplicate", 0),
        "near_duplicates": status_counts.get("near_duplicate", 0),
        "changed": sum(st["changed"] for st in shard_stats),
        "known": sum(st["known"] for st in shard_stats),
        "health": round_health,
    }


def _health_and_prepare(cfg: CrawlConfig, store: Store, round_no: int, fetched_all: pa.Table, pages: pa.Table,
                        links_of: Callable[[], pa.Table], hooks: PrepareHooks | None = None,
                        ) -> tuple[dict[str, Any], pa.Table, dict[str, Any]]:
    """The health gate, then :func:`prepare`: (prepare's stats, the link graph, the round's health)."""
    # the health gate first: merge_shard reads it (a degraded round's failures do not count towards gone)
    planned = int((store.read_json(store.round_dir(round_no, "generate.json")) or {}).get("urls", 0))
    round_health = health.assess(cfg, planned, fetched_all, reached_hosts(store, round_no - 1))
    store.write_json(store.round_dir(round_no, "health.json"), round_health)
    stats, link_graph = prepare(cfg, store, round_no, fetched_all, pages, links_of, hooks)
    return stats, link_graph, round_health


ShardInputs = tuple[pa.Table, pa.Table, pa.Table]  # a shard's fetch updates, new URLs, sitemap evidence


@dataclass(frozen=True)
class PrepareHooks:
    """What :func:`prepare` hands over as soon as it has it, before it returns.

    ``link_graph``: the round's link graph, once the links are prepared (update queues the links
    files' write then, beside the new-URL queries). ``shard_inputs``: each shard's
    :data:`ShardInputs`, in shard order, just before prepare writes them as the shard files (update
    starts the merges with them then, while the files are written)."""

    link_graph: Callable[[pa.Table], None] | None = None
    shard_inputs: Callable[[list[ShardInputs]], None] | None = None


def _start_merges(cfg: CrawlConfig, round_no: int, client: Any,
                  inputs: list[ShardInputs] | None = None) -> Callable[[], list[dict[str, Any]]]:
    """Start :func:`merge_shard` of every shard (Dask tasks with a client of a scheduler at
    ``dask_address``, else two threads of this process); the returned function waits for them and gives
    their stats in shard order. ``inputs``: each shard's tables in memory, as prepare hands them over;
    None: each merge reads prepare's shard files.

    Why in memory: the merges read nothing prepare wrote, so they need not wait for its shard files
    (Parquet encoding and an fsync each, ~0.1–0.3 s at 20 k pages) nor read them back. The files are
    still written, by prepare, while the merges run: a rerun of update rewrites both, as before.

    Why threads with the embedded cluster: its workers share this machine's cores, so a merge there
    only adds Dask's costs (the tables pickled into the task, the scheduler's round trip, the stats
    and ``dup_info`` sent back): a round of ``crawl run`` at 2 k pages spent ~0.24 s more worker CPU
    on its four merges than the same merges took in threads, and update's wall was 0.05–0.25 s a round
    longer in whole runs (0.5 s in a replay on a loaded box; bench/RESULTS.md, "Between rounds (session 13,
    helper gaps13)"). Workers of an external scheduler
    are other machines' cores: there the merges stay Dask tasks."""
    args = [(cfg, round_no, s, inputs[s] if inputs is not None else None) for s in range(cfg.url_shards)]
    if client is not None and cfg.dask_address:
        # the inputs travel in each task's arguments, so the scheduler still holds them if a worker is lost
        futures = [client.submit(merge_shard, *a, pure=False, key=f"update-{cfg.crawl_id}-{round_no}-{a[2]}")
                   for a in args]

        def wait() -> list[dict[str, Any]]:
            from crawl.cluster import wait_all

            wait_all(client, futures, cfg, f"round {round_no} update")  # fails naming the scheduler, never hangs
            return [f.result() for f in futures]

        return wait
    pool = ThreadPoolExecutor(max_workers=2)
    jobs = [pool.submit(merge_shard, *a) for a in args]
    pool.shutdown(wait=False)
    return lambda: [j.result() for j in jobs]


def _merge_shards(cfg: CrawlConfig, round_no: int, client: Any,
                  started: Callable[[], list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """The stats of every shard's :func:`merge_shard`, in shard order. ``started``: the wait of merges
    :func:`_start_merges` started with prepare's tables; else they start here from the files."""
    return (started or _start_merges(cfg, round_no, client))()


def _injects_only_known(cfg: CrawlConfig, store: Store, round_no: int) -> bool:
    """Whether every seed injected for ``round_no`` is a URL CrawlDb ``round_no - 1`` knows already (true
    when nothing was injected). Such seeds add no row (:func:`_new_urls` drops known URLs), so they do
    not stop a carry-forward: re-injecting a crawl's seeds each round must not cost a full merge."""
    injected = crawldb.read_injected(store, round_no, ["url_hash"])
    if injected is None:
        return True
    hashes = injected.column("url_hash").to_numpy()
    shard = seen.shard_of(hashes, cfg.url_shards)
    for s in np.unique(shard):
        sub = hashes[shard == s]
        bloom_rel = store.seen_file(round_no - 1, int(s), "bloom")
        if store.exists(bloom_rel) and not seen.BloomFilter.load(store.url(bloom_rel)).contains(sub).all():
            return False  # a Bloom "no" is certain: a new seed
        seen_rel = store.seen_file(round_no - 1, int(s), "parquet")
        if not store.exists(seen_rel) or not seen.confirm(sub, seen.read_seen(store.url(seen_rel))).all():
            return False
    return True


def carry_forward(cfg: CrawlConfig, store: Store, round_no: int) -> dict[str, Any] | None:
    """A round that fetched nothing and injected no new URL changes no row: its seen-sets, Bloom
    filters, digest table and robots cache are the previous version's, copied byte for byte instead
    of re-merging every shard (a crawl of 1 M URLs with nothing due paid a full merge for nothing).
    None when the round has anything to merge. Reprioritise then carries the CrawlDb forward the same
    way."""
    if round_no <= 1 or store.part_files(round_no, "fetched"):
        return None
    prev = round_no - 1
    if not all(store.exists(crawldb.shard_path(store, prev, s)) for s in range(cfg.url_shards)):
        return None
    if not _injects_only_known(cfg, store, round_no):
        return None
    rels = [(store.seen_file(prev, s, ext), store.seen_file(round_no, s, ext))
            for s in range(cfg.url_shards) for ext in ("parquet", "bloom")]
    rels += [(store.robots_file(prev), store.robots_file(round_no))]  # the digest table gained no file
    for src, dst in rels:
        if store.exists(src):
            store.write_bytes(dst, store.read_bytes(src))
    return {"round": round_no, "carried_forward": True, "links": 0, "new_urls": 0, "discovered": 0,
            "sitemap_entries": 0, "attempted": 0, "status": {}, "duplicates": 0, "near_duplicates": 0,
            "changed": 0, "known": crawldb.count(store, prev, cfg.url_shards)}


# ---- prepare ----------------------------------------------------------------------------------------
def page_fetches(cfg: CrawlConfig, fetched_all: pa.Table) -> pa.Table:
    """The round's page fetch rows (robots.txt and sitemap fetches are crawler-control files, not
    CrawlDb URLs), with canonical URLs and their hashes: a redirect hop's row carries the hop URL."""
    fetches = fetched_all.filter(pc.invert(pc.is_in(fetched_all.column("subset"), pa.array(CONTROL_SUBSETS))))
    raw_urls = fetches.column("url").combine_chunks()
    canon = pc.coalesce(canonicalize_many(raw_urls, cfg.tracking_params, cfg.allowed_schemes), raw_urls)
    fetches = fetches.set_column(fetches.schema.get_field_index("url"), "url", canon)
    return fetches.set_column(fetches.schema.get_field_index("url_hash"), "url_hash",
                              pa.array(url_hashes(canon), pa.uint64()))


def prepare(cfg: CrawlConfig, store: Store, round_no: int, fetched_all: pa.Table,
            pages: pa.Table, links_of: Callable[[], pa.Table] | None = None,
            hooks: PrepareHooks | None = None) -> tuple[dict[str, Any], pa.Table]:
    """``links_of`` gives the round's followed links, canonical (:func:`link_part` of every partition,
    in partition order); None computes them here. ``hooks``: what to hand over early (:class:`PrepareHooks`)."""
    hooks = hooks or PrepareHooks()
    prev = round_no - 1
    con = duck.for_store(store)
    db_src = _prev_db_source(con, store, cfg, prev)
    k = cfg.simhash_max_distance

    fetches = page_fetches(cfg, fetched_all)
    con.register("f_all", fetches)
    con.register("pages", pages)
    con.execute("""
        CREATE TEMP TABLE f AS SELECT * FROM f_all
        QUALIFY row_number() OVER (PARTITION BY url_hash ORDER BY fetch_time DESC, status) = 1
    """)
    con.execute("""
        CREATE TEMP TABLE exact AS
        WITH resp AS (
            SELECT url_hash, url, payload_digest, fetch_time FROM f
            WHERE status = 'fetched' AND warc_type = 'response' AND payload_digest IS NOT NULL
        ), firsts AS (
            SELECT payload_digest, arg_min(url, (fetch_time, url_hash)) AS orig_url FROM resp GROUP BY 1
        )
        SELECT resp.url_hash, firsts.orig_url AS duplicate_of FROM resp JOIN firsts USING (payload_digest)
        WHERE resp.url <> firsts.orig_url
        UNION ALL
        SELECT url_hash, revisit_of_url FROM f
        WHERE status = 'fetched' AND warc_type = 'revisit' AND revisit_of_url IS NOT NULL AND revisit_of_url <> url
    """)
    _near_duplicates(con, db_src, k)

    fupd = con.sql("""
        SELECT f.url, f.url_hash, f.host, f.depth,
               CASE WHEN e.url_hash IS NOT NULL THEN 'duplicate'
                    WHEN n.url_hash IS NOT NULL THEN 'near_duplicate'
                    ELSE f.status END AS status,
               f.status AS fetch_status, f.http_status, f.fetch_time, f.payload_digest,
               p.text_digest, p.simhash, f.etag, f.last_modified,
               coalesce(e.duplicate_of, n.duplicate_of) AS duplicate_of,
               CASE WHEN f.status = 'redirect' THEN f.redirect_location END AS redirect_to
        FROM f LEFT JOIN pages p USING (url_hash) LEFT JOIN exact e USING (url_hash) LEFT JOIN near n USING (url_hash)
        -- one row per URL: a page near-duplicate of several originals (or parsed twice) must not fork the
        -- CrawlDb row (duplicate rows multiply in every later merge)
        QUALIFY row_number() OVER (PARTITION BY f.url_hash ORDER BY e.duplicate_of, n.duplicate_of) = 1
    """).to_arrow_table().cast(FETCH_UPDATE_SCHEMA)

    canon_links = links_of() if links_of is not None else \
        _canonical_links(cfg, store.read_tables(store.part_files(round_no, "rawlinks"), LINK_SCHEMA))
    links, link_graph = _prepare_links(cfg, fetches, canon_links)
    if hooks.link_graph is not None:
        hooks.link_graph(link_graph)
    injected = crawldb.read_injected(store, round_no)
    if injected is None:
        injected = crawldb.CRAWLDB_SCHEMA.empty_table()
    sm_links, sm_evidence = _sitemap_entries(cfg, store, con, round_no)
    if sm_links.num_rows:
        links = pa.concat_tables([links, sm_links])
    new_rows, seen_stats = _new_urls(cfg, store, con, db_src, round_no, links, fupd, injected)

    f_shard = crawldb.shard_of(fupd.column("url_hash"), cfg.url_shards)
    n_shard = crawldb.shard_of(new_rows.column("url_hash"), cfg.url_shards)
    e_shard = crawldb.shard_of(sm_evidence.column("url_hash"), cfg.url_shards)
    inputs = [tuple(t.filter(pa.array(where == s)) for t, where in ((fupd, f_shard), (new_rows, n_shard),
                                                                      (sm_evidence, e_shard)))
              for s in range(cfg.url_shards)]
    if hooks.shard_inputs is not None:
        hooks.shard_inputs(inputs)  # type: ignore[arg-type]
    store.write_tables([(_shard_rel(store, round_no, kind, s), inputs[s][i]) for s in range(cfg.url_shards)
                        for i, kind in enumerate(("fetch", "new", "sitemap"))], scratch=True)
    return {"links": link_graph.num_rows, "new_urls": int(pc.sum(pc.equal(new_rows.column("source"), "link")
                                                                   ).as_py() or 0) if new_rows.num_rows else 0,
            "discovered": new_rows.num_rows, "sitemap_entries": sm_evidence.num_rows, **seen_stats}, link_graph


def _sitemap_entries(cfg: CrawlConfig, store: Store, con: duckdb.DuckDBPyConnection,
                     round_no: int) -> tuple[pa.Table, pa.Table]:
    """The round's sitemap entries as discovery candidates (depth 1, source 'sitemap', through the same
    filters as links) and as change evidence (url_hash, lastmod, changefreq; newest per URL)."""
    sm = store.read_tables(store.part_files(round_no, "sitemaps"), SITEMAP_SCHEMA)
    canon = canonicalize_many(sm.column("loc"), cfg.tracking_params) if sm.num_rows else pa.array([], pa.string())
    depth = np.ones(len(canon), np.int32)
    keep = pc.and_(pc.is_valid(canon), pc.is_null(filter_reasons(canon, depth, cfg))) if len(canon) else \
        pa.array([], pa.bool_())
    sm, canon = sm.filter(keep), canon.filter(keep)
    hashes = pa.array(url_hashes(canon), pa.uint64())
    links = pa.table({"to_url": canon, "to_hash": hashes, "depth": pa.array(np.ones(len(canon), np.int32)),
                      "source": pa.array(["sitemap"] * len(canon), pa.string())})
    con.register("sm", pa.table({"url_hash": hashes, "lastmod": sm.column("lastmod"),
                                 "changefreq": sm.column("changefreq"), "fetch_time": sm.column("fetch_time")}))
    evidence = con.sql("""
        SELECT url_hash, max(lastmod) AS lastmod, arg_max(changefreq, fetch_time) AS changefreq
        FROM sm GROUP BY 1 ORDER BY 1
    """).to_arrow_table().cast(SITEMAP_EVIDENCE_SCHEMA)
    return links, evidence


# statuses of a row whose stored copy (and fingerprint) stands: re-checked unchanged, or not reached for now
_STORED_COPY = "('fetched', 'not_modified', 'retry', 'deferred')"


def _near_duplicates(con: duckdb.DuckDBPyConnection, db_src: str | None, k: int) -> None:
    """TEMP TABLE near(url_hash, duplicate_of) for pages fetched this round."""
    from crawl.neardup import candidates, near_duplicate_pairs

    new_fp = con.sql("""
        SELECT p.url_hash, p.simhash FROM pages p JOIN f USING (url_hash)
        WHERE p.simhash IS NOT NULL AND p.simhash <> 0 AND f.url_hash NOT IN (SELECT url_hash FROM exact)
    """).to_arrow_table()
    old_fp = None
    if db_src and new_fp.num_rows:
        # stored copies' fingerprints, but those this round replaces (a new one, an exact duplicate) or
        # ends (gone, a redirect, ...). A copy re-checked this round with a 304 or an identical payload
        # (a revisit), or whose re-check failed for now (retry, deferred), has no new fingerprint and
        # is still the stored original: every URL of the round was left out, and a row whose last
        # attempt was a retry too, so a near copy first fetched then was stored as new.
        con.register("new_fp", new_fp)
        old_fp = con.sql(f"""
            SELECT url_hash, simhash FROM {db_src}
            WHERE simhash IS NOT NULL AND simhash <> 0 AND status IN {_STORED_COPY}
              AND duplicate_of IS NULL AND url_hash NOT IN (SELECT url_hash FROM new_fp)
              AND url_hash NOT IN (SELECT url_hash FROM exact)
              AND url_hash NOT IN (SELECT url_hash FROM f WHERE status NOT IN {_STORED_COPY})
        """).to_arrow_table()
        # only stored fingerprints sharing a block with a new one can pair: the join sees those alone
        old_fp = old_fp.filter(pa.array(candidates(old_fp.column("simhash").to_numpy(),
                                                   new_fp.column("simhash").to_numpy(), k)))
    pairs = near_duplicate_pairs(new_fp, old_fp, k) if new_fp.num_rows else None
    if pairs is None or pairs.num_rows == 0:
        pairs = pa.table({"url_hash": pa.array([], pa.uint64()), "dup_of_hash": pa.array([], pa.uint64())})
    con.register("pairs", pairs.select(["url_hash", "dup_of_hash"]))
    old_urls = f"UNION ALL SELECT url_hash, url FROM {db_src} WHERE url_hash IN (SELECT dup_of_hash FROM pairs)" \
        if db_src else ""
    con.execute(f"""
        CREATE TEMP TABLE near AS
        SELECT pairs.url_hash, u.url AS duplicate_of
        FROM pairs JOIN (SELECT url_hash, url FROM f {old_urls}) u ON u.url_hash = pairs.dup_of_hash
    """)


def _new_urls(cfg: CrawlConfig, store: Store, con: duckdb.DuckDBPyConnection, db_src: str | None, round_no: int,
              links: pa.Table, fupd: pa.Table, injected: pa.Table) -> tuple[pa.Table, dict[str, Any]]:
    """CrawlDb rows for URLs never seen before: injected seeds and discovered links.

    Each shard's Bloom filter screens the candidates; its "maybe"s are confirmed against the shard's
    sorted seen-set, so the answer is exact. URLs fetched this round (redirect hops) are known too.
    """
    con.register("links", links)
    con.register("inj", injected.select(["url", "url_hash", "depth", "source"]))
    cand = con.sql("""
        SELECT url_hash, any_value(url) AS url, min(depth) AS depth, sum(inlinks) AS inlinks,
               min(source) AS source
        FROM (
            SELECT to_hash AS url_hash, to_url AS url, depth, 1 AS inlinks, source FROM links
            UNION ALL
            SELECT url_hash, url, depth, 0, 'seed' FROM inj
        ) GROUP BY 1 ORDER BY 1
    """).to_arrow_table()
    hashes = cand.column("url_hash").to_numpy()
    is_new = ~seen.confirm(hashes, np.sort(fupd.column("url_hash").to_numpy()))
    prev = round_no - 1
    maybe_total = fp_total = 0
    shard = seen.shard_of(hashes, cfg.url_shards)
    for s in range(cfg.url_shards):
        idx = np.nonzero((shard == s) & is_new)[0]
        if idx.size == 0 or prev <= 0:
            continue
        seen_sorted = seen.read_seen(store.url(store.seen_file(prev, s, "parquet")))
        bloom_rel = store.seen_file(prev, s, "bloom")
        bloom = seen.BloomFilter.load(store.url(bloom_rel)) if store.exists(bloom_rel) else None
        sub = hashes[idx]
        if bloom is not None:
            maybe = bloom.contains(sub)
            maybe_total += int(maybe.sum())
            fp_total += int((maybe & ~seen.confirm(sub, seen_sorted)).sum())
        is_new[idx] = seen.dedup_new(sub, bloom, seen_sorted)
    cand = cand.filter(pa.array(is_new))
    stats = {"bloom_maybe": maybe_total, "bloom_false_positives": fp_total}
    if cand.num_rows == 0:
        return crawldb.CRAWLDB_SCHEMA.empty_table(), stats
    cand = cand.append_column("host", url_columns(cand.column("url"), ("host",), cfg.allowed_schemes)["host"])
    # per-host total cap: URLs already known for the host + new ones, seeds and shallow ones first.
    # Known: the previous CrawlDb's rows and the URLs fetched this round that it does not hold (seeds
    # fetched in the round that injected them, redirect hops followed in the fetch), which join the
    # CrawlDb with this update too; without them a seeded host kept max_pages_per_host + 1 URLs.
    # "Not in the CrawlDb" probes its url_hash column with a hash of this round's fetches (the small side).
    con.register("cand", cand)
    con.register("fetched_now", fupd.select(["host", "url_hash"]))
    if db_src:
        known = f"""SELECT host, sum(n) AS n FROM (
            SELECT host, count(*) AS n FROM {db_src} GROUP BY 1
            UNION ALL
            SELECT host, count(*) FROM fetched_now WHERE url_hash NOT IN (
                SELECT url_hash FROM {db_src} WHERE url_hash IN (SELECT url_hash FROM fetched_now))
            GROUP BY 1) GROUP BY 1"""
    else:
        known = "SELECT host, count(*) AS n FROM fetched_now GROUP BY 1"
    cand = con.sql(f"""
        WITH k AS ({known})
        SELECT c.* EXCLUDE (rk) FROM (
            SELECT cand.*, row_number() OVER (
                PARTITION BY host ORDER BY source = 'seed' DESC, depth, inlinks DESC, url_hash) AS rk
            FROM cand
        ) c LEFT JOIN k USING (host)
        WHERE c.rk + coalesce(k.n, 0) <= {cfg.max_pages_per_host} OR c.source = 'seed'
    """).to_arrow_table()
    n = cand.num_rows
    depth = cand.column("depth").to_numpy().astype(np.float64)
    inl = pc.fill_null(cand.column("inlinks"), 0).to_numpy().astype(np.float64)
    hosts = cand.column("host").combine_chunks()
    rows = crawldb.conform(pa.table({
        "url": cand.column("url"),
        "url_hash": cand.column("url_hash"),
        "host": hosts,
        "pkey": pkeys(cfg, hosts),
        "depth": cand.column("depth").cast(pa.int32()),
        "discovered_round": pa.array(np.full(n, round_no, np.int32)),
        "source": cand.column("source"),
        "status": pa.array(np.full(n, "unfetched", dtype=object), pa.string()),
        "fetch_count": pa.array(np.zeros(n, np.int32)),
        "check_count": pa.array(np.zeros(n, np.int32)),
        "change_count": pa.array(np.zeros(n, np.int32)),
        "retry_count": pa.array(np.zeros(n, np.int32)),
        "inlinks": pa.array(inl.astype(np.int32)),
        "priority": pa.array(np.log1p(inl) / (1.0 + depth)),
        "round": pa.array(np.full(n, round_no, np.int32)),
    }))
    return rows, stats


# ---- merge one shard ----------------------------------------------------------------------------------
def delta_path(store: Store, round_no: int, shard: int) -> str:
    """Where update leaves a shard's changed and new rows (reprioritise splices them into CrawlDb N)."""
    return store.round_dir(round_no, "merged", f"shard={shard:02d}.parquet")


def merge_shard(cfg: CrawlConfig, round_no: int, shard: int, inputs: ShardInputs | None = None) -> dict[str, Any]:
    """CrawlDb N-1 shard + this round's fetch results and new URLs -> the shard's delta (rows fetched,
    given sitemap evidence or new this round, sorted by url_hash), seen-set and Bloom filter.

    ``inputs``: the shard's (fetch updates, new URLs, sitemap evidence) as prepare made them; None reads
    prepare's shard files. Returns the shard's stats and its ``dup_info`` table (also written).

    Only the rows the round touched are read from CrawlDb N-1 (a DuckDB scan filtered by their
    hashes) and written: the untouched millions are carried into CrawlDb N by reprioritise's splice,
    so this step follows the round's work, not the crawl's size."""
    store = Store(cfg.root, cfg.crawl_id)
    prev = round_no - 1
    if inputs is None:
        inputs = (store.read_table(_shard_rel(store, round_no, "fetch", shard), FETCH_UPDATE_SCHEMA),
                  store.read_table(_shard_rel(store, round_no, "new", shard), crawldb.CRAWLDB_SCHEMA),
                  store.read_table(_shard_rel(store, round_no, "sitemap", shard), SITEMAP_EVIDENCE_SCHEMA))
    fupd, new, evidence = inputs
    touched_all = np.concatenate([fupd.column("url_hash").to_numpy(), evidence.column("url_hash").to_numpy()])
    db = _touched_rows(cfg, store, round_no, shard, touched_all)
    k = cfg.simhash_max_distance
    # a degraded round (crawl.health) says more about our reach than about the URL: no retry step
    retry_step = 0 if (store.read_json(store.round_dir(round_no, "health.json")) or {}).get("degraded") else 1
    con = duck.connect()
    con.register("db", db)
    con.register("u", fupd)
    # a fetched URL CrawlDb N-1 does not hold is a redirect hop, or a seed injected this round
    injected = crawldb.read_injected(store, round_no, ["url_hash"])
    con.register("inj", crawldb.CRAWLDB_SCHEMA.empty_table().select(["url_hash"]) if injected is None else injected)
    upd = con.sql(f"""
        SELECT
          u.url, u.url_hash, coalesce(d.host, u.host) AS host, d.pkey,
          coalesce(d.depth, u.depth) AS depth,
          coalesce(d.discovered_round, {round_no}) AS discovered_round,
          coalesce(d.source, CASE WHEN u.url_hash IN (SELECT url_hash FROM inj) THEN 'seed' ELSE 'redirect' END)
            AS source,
          u.status, u.http_status,
          CASE WHEN u.fetch_status IN ('deferred', 'filtered') THEN d.fetch_time ELSE u.fetch_time END AS fetch_time,
          CASE WHEN ok THEN u.fetch_time ELSE d.last_success_time END AS last_success_time,
          CASE WHEN ok THEN coalesce(d.first_fetch_time, u.fetch_time) ELSE d.first_fetch_time END
            AS first_fetch_time,
          coalesce(d.fetch_count, 0) + CASE WHEN u.fetch_status IN ('deferred', 'filtered') THEN 0 ELSE 1 END
            AS fetch_count,
          coalesce(d.check_count, 0) + CASE WHEN ok AND d.last_success_time IS NOT NULL THEN 1 ELSE 0 END
            AS check_count,
          coalesce(d.change_count, 0) + CASE WHEN changed THEN 1 ELSE 0 END AS change_count,
          CASE WHEN changed THEN u.fetch_time ELSE d.last_change_time END AS last_change_time,
          CASE WHEN u.fetch_status = 'retry' THEN coalesce(d.retry_count, 0) + {retry_step}
               WHEN u.fetch_status IN ('deferred', 'filtered') THEN coalesce(d.retry_count, 0)
               ELSE 0 END AS retry_count,
          d.next_fetch_time, d.priority,
          -- only a 200 brings a payload of the page: a 304's empty body or an error page must not
          -- replace the digest of the content we hold (revisit and change decisions use it)
          CASE WHEN u.fetch_status = 'fetched' THEN coalesce(u.payload_digest, d.payload_digest)
               ELSE d.payload_digest END AS payload_digest,
          coalesce(u.text_digest, d.text_digest) AS text_digest,
          coalesce(u.simhash, d.simhash) AS simhash,
          CASE WHEN u.fetch_status = 'fetched' THEN u.etag ELSE d.etag END AS etag,
          CASE WHEN u.fetch_status = 'fetched' THEN u.last_modified ELSE d.last_modified END AS last_modified,
          u.duplicate_of, u.redirect_to,
          d.inlinks, d.importance, d.change_rate, d.sitemap_lastmod, d.sitemap_changefreq,
          {round_no} AS round,
          coalesce(d.unchanged_time_s, 0) + CASE WHEN changed = false AND ok AND d.last_success_time IS NOT NULL
            THEN greatest(epoch_ms(u.fetch_time) - epoch_ms(d.last_success_time), 0) / 1000.0 ELSE 0 END
            AS unchanged_time_s,
          coalesce(d.changed_time_s, 0) + CASE WHEN changed AND d.last_success_time IS NOT NULL
            THEN greatest(epoch_ms(u.fetch_time) - epoch_ms(d.last_success_time), 0) / 1000.0 ELSE 0 END
            AS changed_time_s,
          d.fetch_interval_s,
          changed
        FROM (
            SELECT u.*, d.url_hash IS NOT NULL AS known,
                   u.fetch_status IN ('fetched', 'not_modified') AS ok,
                   CASE WHEN u.fetch_status = 'not_modified' THEN false
                        WHEN u.fetch_status <> 'fetched' OR d.last_success_time IS NULL THEN NULL
                        -- the same main text is no change, whatever the SimHash: equal texts have equal
                        -- SimHashes under one definition, but a row stored before it changed (session 19:
                        -- short sentences left out) holds the older value
                        WHEN u.text_digest IS NOT NULL AND u.text_digest = d.text_digest THEN false
                        WHEN u.simhash IS NOT NULL AND u.simhash <> 0 AND d.simhash IS NOT NULL AND d.simhash <> 0
                          THEN bit_count(xor(u.simhash, d.simhash)) > {k}
                        ELSE u.payload_digest IS DISTINCT FROM d.payload_digest END AS changed
            FROM u LEFT JOIN db d USING (url_hash)
        ) u LEFT JOIN db d USING (url_hash)
    """).to_arrow_table()
    changed = upd.column("changed")
    dup_info = pa.table({"url_hash": upd.column("url_hash"), "duplicate_of": upd.column("duplicate_of"),
                         "depth": upd.column("depth"), "changed": changed, "status": upd.column("status")}
                        ).cast(DUP_INFO_SCHEMA)
    store.write_table(_shard_rel(store, round_no, "dupinfo", shard), dup_info, scratch=True)
    upd = upd.drop_columns(["changed"])
    missing = pc.is_null(upd.column("pkey"))
    if upd.num_rows and pc.any(missing).as_py():
        keys = pkeys(cfg, upd.column("host").combine_chunks())
        upd = upd.set_column(upd.schema.get_field_index("pkey"), "pkey", pc.if_else(missing, keys, upd.column("pkey")))

    touched = fupd.column("url_hash").to_numpy()
    # rows of CrawlDb N-1 the round changes only through sitemap evidence join the delta as they are
    keep = ~seen.confirm(db.column("url_hash").to_numpy(), seen.sorted_unique(touched))
    merged = pa.concat_tables([db.filter(pa.array(keep)), crawldb.conform(upd), new])
    if evidence.num_rows:  # sitemap lastmod/changefreq: evidence for the change-rate model
        con.register("merged", merged)
        con.register("ev", evidence)
        merged = crawldb.conform(con.sql("""
            SELECT m.* REPLACE (coalesce(ev.lastmod, m.sitemap_lastmod) AS sitemap_lastmod,
                                coalesce(ev.changefreq, m.sitemap_changefreq) AS sitemap_changefreq)
            FROM merged m LEFT JOIN ev USING (url_hash)
        """).to_arrow_table())
    merged = merged.take(pc.sort_indices(merged, sort_keys=[("url_hash", "ascending")]))
    store.write_table(delta_path(store, round_no, shard), merged, scratch=True)
    # rows of CrawlDb N: N-1's (from the footers) + URLs it did not know (new, and fetched redirect hops)
    known = crawldb.count_shard(store, prev, shard) + new.num_rows + \
        int((~seen.confirm(touched, seen.sorted_unique(db.column("url_hash").to_numpy()))).sum())

    # next seen-set and Bloom filter of this shard: previous + URLs that became known this round
    added = np.concatenate([touched, new.column("url_hash").to_numpy()])
    prev_seen = seen.read_seen(store.url(store.seen_file(prev, shard, "parquet"))) if prev > 0 else \
        np.empty(0, np.uint64)
    next_seen = seen.merge_seen(prev_seen, added)
    seen.write_seen(store.url(store.seen_file(round_no, shard, "parquet")), next_seen)
    bloom_prev = store.seen_file(prev, shard, "bloom")
    bloom = seen.BloomFilter.load(store.url(bloom_prev)) if prev > 0 and store.exists(bloom_prev) else None
    if bloom is None or bloom.needs_resize() or bloom.count + added.size > bloom.capacity:
        expected = max(cfg.bloom_expected_urls // cfg.url_shards, 2 * next_seen.size, 1024)
        bloom = seen.BloomFilter.create(expected, cfg.bloom_fp_rate)
        bloom.add(next_seen)
    else:
        added = seen.sorted_unique(added)
        bloom.add(added[~seen.confirm(added, prev_seen)])
    bloom.save(store.url(store.seen_file(round_no, shard, "bloom")))

    vc = pc.value_counts(upd.column("status")).to_pylist() if upd.num_rows else []
    return {"shard": shard, "known": known, "status": {d["values"]: int(d["counts"]) for d in vc},
            "changed": int(pc.sum(pc.fill_null(changed.cast(pa.int64()), 0)).as_py() or 0), "dup_info": dup_info}


def _touched_rows(cfg: CrawlConfig, store: Store, round_no: int, shard: int, hashes: np.ndarray) -> pa.Table:
    """The rows of CrawlDb N-1's ``shard`` whose url_hash is in ``hashes``.

    Most are rows generate selected, which it saved whole (``rounds/N/selected.parquet``); the rest
    (redirect hops, sitemap evidence) are looked up in the shard only when its seen-set knows them."""
    prev = round_no - 1
    if prev <= 0 or hashes.size == 0:
        return crawldb.CRAWLDB_SCHEMA.empty_table()
    want = seen.sorted_unique(hashes)
    sel_rel = store.round_dir(round_no, "selected.parquet")
    got = crawldb.CRAWLDB_SCHEMA.empty_table()
    if store.exists(sel_rel):
        sel = store.read_table(sel_rel, crawldb.CRAWLDB_SCHEMA)
        got = sel.filter(pa.array(seen.confirm(sel.column("url_hash").to_numpy(), want)))
        want = want[~seen.confirm(want, seen.sorted_unique(got.column("url_hash").to_numpy()))]
    if want.size:
        seen_rel = store.seen_file(prev, shard, "parquet")
        if store.exists(seen_rel):
            want = want[seen.confirm(want, seen.read_seen(store.url(seen_rel)))]
        if want.size:
            got = pa.concat_tables([got, _rows_of(store, prev, shard, want)])
    return got


def _rows_of(store: Store, version: int, shard: int, hashes: np.ndarray) -> pa.Table:
    """The rows of a CrawlDb shard whose url_hash is in ``hashes``, by a DuckDB scan with the hash list
    as a filter (no Arrow copy of the whole shard: a shard of 2.5 M rows was ~1.5 GiB per merge)."""
    if version <= 0 or hashes.size == 0:
        return crawldb.CRAWLDB_SCHEMA.empty_table()
    con = duck.for_store(store)
    con.register("want", pa.table({"url_hash": pa.array(np.unique(hashes), pa.uint64())}))
    src = crawldb.source_sql(store, con, version, 1 + shard, shard)
    t = con.sql(f"SELECT * FROM {src} WHERE url_hash IN (SELECT url_hash FROM want) ORDER BY url_hash").to_arrow_table()
    con.close()
    return crawldb.conform(t)


# ---- digest table and robots cache --------------------------------------------------------------------
def _write_digests(store: Store, round_no: int, fetched: pa.Table) -> None:
    """The digests first captured this round (crawl.digests: version N's table is the files of rounds
    1..N), found by a semi-join of the round's digests against the earlier files' digest column, and
    version N's keys file (:func:`crawl.digests.write_keys`)."""
    from crawl.digests import ROW_GROUP_ROWS, digest_files, write_keys

    con = duck.for_store(store)
    con.register("f", fetched)
    con.execute("""
        CREATE TEMP TABLE cur AS
        SELECT payload_digest, arg_min(url, (fetch_time, url)) AS url, min(fetch_time) AS fetch_time FROM f
        WHERE status = 'fetched' AND warc_type = 'response' AND subset = 'warc' AND payload_digest IS NOT NULL
        GROUP BY 1
    """)
    rels = digest_files(store, round_no - 1)
    old = "SELECT NULL::VARCHAR AS payload_digest WHERE false" if not rels else \
        "SELECT payload_digest FROM read_parquet([" + ", ".join(f"'{p}'" for p in store.duckdb_paths(con, rels)) + \
        "]) WHERE payload_digest IN (SELECT payload_digest FROM cur)"
    t = con.sql(f"SELECT * FROM cur WHERE payload_digest NOT IN ({old}) ORDER BY 1").to_arrow_table()
    con.close()
    store.write_table(store.digests_file(round_no), t.cast(DIGESTS_SCHEMA), row_group_size=ROW_GROUP_ROWS)
    write_keys(store, round_no, t.column("payload_digest"))  # after the table it is derived from


def _write_robots(store: Store, round_no: int) -> None:
    prev = round_no - 1
    old = load_robots_cache(store, prev)
    if old is None:
        old = ROBOTS_CACHE_SCHEMA.empty_table()
    new = store.read_tables(store.part_files(round_no, "robots"), ROBOTS_CACHE_SCHEMA)
    con = duck.connect()
    con.register("old", old)
    con.register("new", new)
    t = con.sql("""
        SELECT * FROM (SELECT * FROM old UNION ALL SELECT * FROM new)
        QUALIFY row_number() OVER (PARTITION BY origin ORDER BY fetched_at DESC) = 1
        ORDER BY origin
    """).to_arrow_table()
    store.write_table(store.robots_file(round_no), t.cast(ROBOTS_CACHE_SCHEMA))
