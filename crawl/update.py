"""Update: merge a round's fetches, parses and links into the next CrawlDb version.

Order of work (all vectorised over Arrow/DuckDB/NumPy):
1. the round's fetch rows (last attempt per URL) become CrawlDb updates: status, times, counts;
2. content dedup: WARC revisits of another URL are exact duplicates; same-round identical digests
   across partitions too; SimHash within ``simhash_max_distance`` of an earlier original marks a
   near-duplicate (block-permutation join in :mod:`crawl.neardup`, never all-pairs);
3. change detection for re-fetches: a real change is a SimHash distance beyond the near-dup
   threshold (so per-request noise is not a change); a 304 is "unchanged";
4. links: nofollow dropped, canonicalised, trap/scope filters applied, then the Bloom filter of each
   URL-hash shard answers "seen?" and its "maybe"s are confirmed against the Parquet seen-set, so a
   false positive never loses a URL; new URLs join with depth, discovery round and a priority hint;
5. per-host total cap, then everything is written as ``rounds/N/merged`` (reprioritise turns it into
   CrawlDb version N) together with the seen-set, Bloom filters, digest table and robots cache.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl import crawldb, index, seen
from crawl.config import CrawlConfig
from crawl.records import FETCH_SCHEMA, LINK_SCHEMA, PAGE_SCHEMA
from crawl.store import Store
from crawl.tasks import DIGESTS_SCHEMA, ROBOTS_CACHE_SCHEMA
from crawl.urls import canonicalize_many, filter_reasons, politeness_key, url_hashes

SUCCESS = ("fetched", "not_modified")


def _parts(store: Store, round_no: int, step: str) -> list[str]:
    return [p for p in store.ls(store.round_dir(round_no, step)) if p.endswith(".parquet")]


def _part_no(rel: str) -> int:
    return int(rel.rsplit("part=", 1)[1].split(".", 1)[0])


def pkeys(cfg: CrawlConfig, urls: pa.Array, hosts: pa.Array) -> pa.Array:
    if cfg.politeness_key == "host":
        return hosts
    return pa.array([politeness_key(u, cfg.politeness_key) for u in urls.to_pylist()], pa.string())


def update(cfg: CrawlConfig, round_no: int, now: datetime) -> dict[str, Any]:
    store = Store(cfg.root, cfg.crawl_id)
    prev = round_no - 1
    db = crawldb.read(store, prev, cfg.url_shards)
    fetch_parts = _parts(store, round_no, "fetched")
    fetched_all = _read_with_part(store, fetch_parts)
    pages = store.read_tables(_parts(store, round_no, "pages"), PAGE_SCHEMA)
    raw_links = store.read_tables(_parts(store, round_no, "rawlinks"), LINK_SCHEMA)
    inject_rel = store.round_dir(round_no, "inject.parquet")
    injected = store.read_table(inject_rel, crawldb.CRAWLDB_SCHEMA) if store.exists(inject_rel) else None

    con = duckdb.connect()
    con.register("db", db)
    fetches = fetched_all.filter(pc.not_equal(fetched_all.column("subset"), "robotstxt"))
    # fetch rows for redirect hops carry the hop URL: re-derive canonical URL and hash for all rows
    canon = canonicalize_many(fetches.column("url").combine_chunks(), cfg.tracking_params)
    canon = pc.coalesce(canon, fetches.column("url").combine_chunks())
    fetches = fetches.set_column(fetches.schema.get_field_index("url"), "url", canon)
    fetches = fetches.set_column(fetches.schema.get_field_index("url_hash"), "url_hash",
                                 pa.array(url_hashes(canon), pa.uint64()))
    con.register("f_all", fetches)
    con.register("pages", pages)
    k = cfg.simhash_max_distance

    # 1. last attempt per URL, with exact-duplicate resolution
    con.execute("""
        CREATE TEMP TABLE f AS
        SELECT * FROM f_all
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

    # 2. near-duplicates of pages fetched this round against earlier originals and each other
    from crawl.neardup import near_duplicate_pairs

    new_fp = con.sql("""
        SELECT p.url_hash, p.simhash FROM pages p JOIN f USING (url_hash)
        WHERE p.simhash IS NOT NULL AND p.simhash <> 0
          AND f.url_hash NOT IN (SELECT url_hash FROM exact)
    """).to_arrow_table()
    old_fp = con.sql("""
        SELECT url_hash, simhash FROM db
        WHERE simhash IS NOT NULL AND simhash <> 0 AND status IN ('fetched', 'not_modified')
          AND duplicate_of IS NULL AND url_hash NOT IN (SELECT url_hash FROM f)
    """).to_arrow_table()
    pairs = near_duplicate_pairs(new_fp, old_fp, k) if new_fp.num_rows else None
    if pairs is None or pairs.num_rows == 0:
        pairs = pa.table({"url_hash": pa.array([], pa.uint64()), "dup_of_hash": pa.array([], pa.uint64())})
    con.register("pairs", pairs.select(["url_hash", "dup_of_hash"]))
    con.execute("""
        CREATE TEMP TABLE near AS
        SELECT pairs.url_hash, coalesce(a.url, b.url) AS duplicate_of
        FROM pairs LEFT JOIN (SELECT url_hash, url FROM db) a ON a.url_hash = pairs.dup_of_hash
                   LEFT JOIN (SELECT url_hash, url FROM f) b ON b.url_hash = pairs.dup_of_hash
    """)

    # 3. the updated rows for every URL attempted this round
    upd = con.sql(f"""
        SELECT
          f.url, f.url_hash, coalesce(d.host, f.host) AS host, d.pkey AS pkey,
          coalesce(d.depth, f.depth) AS depth,
          coalesce(d.discovered_round, {round_no}) AS discovered_round,
          coalesce(d.source, 'redirect') AS source,
          CASE WHEN e.url_hash IS NOT NULL THEN 'duplicate'
               WHEN n.url_hash IS NOT NULL THEN 'near_duplicate'
               ELSE f.status END AS status,
          f.http_status,
          CASE WHEN f.status IN ('deferred', 'filtered') THEN d.fetch_time ELSE f.fetch_time END AS fetch_time,
          CASE WHEN f.status IN ('fetched', 'not_modified') THEN f.fetch_time ELSE d.last_success_time END
            AS last_success_time,
          CASE WHEN f.status IN ('fetched', 'not_modified') THEN coalesce(d.first_fetch_time, f.fetch_time)
               ELSE d.first_fetch_time END AS first_fetch_time,
          coalesce(d.fetch_count, 0) + CASE WHEN f.status IN ('deferred', 'filtered') THEN 0 ELSE 1 END
            AS fetch_count,
          coalesce(d.check_count, 0)
            + CASE WHEN f.status IN ('fetched', 'not_modified') AND d.last_success_time IS NOT NULL
                   THEN 1 ELSE 0 END AS check_count,
          coalesce(d.change_count, 0) + CASE WHEN chg.changed THEN 1 ELSE 0 END AS change_count,
          CASE WHEN chg.changed THEN f.fetch_time ELSE d.last_change_time END AS last_change_time,
          CASE WHEN f.status = 'retry' THEN coalesce(d.retry_count, 0) + 1
               WHEN f.status IN ('deferred', 'filtered') THEN coalesce(d.retry_count, 0)
               ELSE 0 END AS retry_count,
          d.next_fetch_time, d.priority,
          coalesce(f.payload_digest, d.payload_digest) AS payload_digest,
          coalesce(p.text_digest, d.text_digest) AS text_digest,
          coalesce(p.simhash, d.simhash) AS simhash,
          CASE WHEN f.status = 'fetched' THEN f.etag ELSE d.etag END AS etag,
          CASE WHEN f.status = 'fetched' THEN f.last_modified ELSE d.last_modified END AS last_modified,
          coalesce(e.duplicate_of, n.duplicate_of) AS duplicate_of,
          CASE WHEN f.status = 'redirect' THEN f.redirect_location ELSE NULL END AS redirect_to,
          d.inlinks, d.importance, d.change_rate, d.sitemap_lastmod, d.sitemap_changefreq,
          {round_no} AS round,
          chg.changed AS changed
        FROM f
        LEFT JOIN db d USING (url_hash)
        LEFT JOIN pages p USING (url_hash)
        LEFT JOIN exact e USING (url_hash)
        LEFT JOIN near n USING (url_hash)
        LEFT JOIN (
            SELECT f.url_hash,
              CASE WHEN f.status = 'not_modified' THEN false
                   WHEN f.status <> 'fetched' OR d.last_success_time IS NULL THEN NULL
                   WHEN p.simhash IS NOT NULL AND p.simhash <> 0 AND d.simhash IS NOT NULL AND d.simhash <> 0
                     THEN bit_count(xor(p.simhash, d.simhash)) > {k}
                   ELSE f.payload_digest IS DISTINCT FROM d.payload_digest END AS changed
            FROM f LEFT JOIN db d USING (url_hash) LEFT JOIN pages p USING (url_hash)
        ) chg USING (url_hash)
    """).to_arrow_table()
    changed = upd.column("changed")
    upd = upd.drop_columns(["changed"])
    if upd.num_rows:
        missing = pc.is_null(upd.column("pkey"))
        if pc.any(missing).as_py():
            keys = pkeys(cfg, upd.column("url").combine_chunks(), upd.column("host").combine_chunks())
            upd = upd.set_column(upd.schema.get_field_index("pkey"), "pkey",
                                 pc.if_else(missing, keys, upd.column("pkey")))

    # 4. links: follow-able, canonical, filtered, deduplicated against the seen-set
    links, link_graph = _prepare_links(cfg, con, raw_links)
    known_hashes = np.union1d(db.column("url_hash").to_numpy(), upd.column("url_hash").to_numpy())
    if injected is not None and injected.num_rows:
        known_before_inject = known_hashes
        inj_new = injected.filter(pa.array(~seen.confirm(injected.column("url_hash").to_numpy(),
                                                         known_before_inject)))
    else:
        inj_new = crawldb.CRAWLDB_SCHEMA.empty_table()
    new_rows, seen_stats = _new_urls(cfg, store, round_no, links, known_hashes, db, inj_new)

    # 5. merge: untouched rows + updated + injected + discovered
    con.register("upd", upd)
    untouched = con.sql("SELECT * FROM db WHERE url_hash NOT IN (SELECT url_hash FROM upd)").to_arrow_table()
    merged = pa.concat_tables([
        crawldb.conform(untouched), crawldb.conform(upd), crawldb.conform(inj_new), crawldb.conform(new_rows),
    ])
    shards = cfg.url_shards
    for s, part in enumerate(_split_shards(merged, shards)):
        store.write_table(store.round_dir(round_no, "merged", f"shard={s:02d}.parquet"), part)
    _write_seen(cfg, store, round_no, merged)
    _write_digests(store, round_no, fetches)
    _write_robots(store, round_no, fetched_all)

    # outputs users query: page index, text, link graph (per fetch partition, deterministic paths)
    dup_info = upd.select(["url_hash", "duplicate_of", "depth"]).append_column("changed", changed)
    index.write_outputs(cfg, store, round_no, fetch_parts, fetched_all, pages, link_graph, dup_info)

    status_counts = dict(zip(*[c.to_pylist() for c in pc.value_counts(upd.column("status")).flatten()],
                             strict=True)) if upd.num_rows else {}
    return {
        "round": round_no,
        "attempted": upd.num_rows,
        "status": status_counts,
        "duplicates": int(status_counts.get("duplicate", 0)),
        "near_duplicates": int(status_counts.get("near_duplicate", 0)),
        "changed": int(pc.sum(pc.fill_null(changed.cast(pa.int64()), 0)).as_py() or 0),
        "links": link_graph.num_rows,
        "new_urls": new_rows.num_rows,
        "injected": inj_new.num_rows,
        "known": merged.num_rows,
        **seen_stats,
    }


def _prepare_links(cfg: CrawlConfig, con: duckdb.DuckDBPyConnection,
                   raw_links: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Canonical, filtered links with the depth of their target; plus the link graph rows."""
    if raw_links.num_rows == 0:
        empty_links = pa.table({"to_url": pa.array([], pa.string()), "to_hash": pa.array([], pa.uint64()),
                                "depth": pa.array([], pa.int32()), "source": pa.array([], pa.string())})
        graph = pa.table({"from_hash": pa.array([], pa.uint64()), "to_hash": pa.array([], pa.uint64()),
                          "to_url": pa.array([], pa.string()), "kind": pa.array([], pa.string()),
                          "part": pa.array([], pa.int32())})
        return empty_links, graph
    from_canon = canonicalize_many(raw_links.column("from_url").combine_chunks(), cfg.tracking_params)
    to_canon = canonicalize_many(raw_links.column("to_url").combine_chunks(), cfg.tracking_params)
    t = pa.table({
        "from_hash": pa.array(url_hashes(pc.coalesce(from_canon, raw_links.column("from_url").combine_chunks())),
                              pa.uint64()),
        "to_url": to_canon,
        "kind": raw_links.column("kind"),
        "nofollow": raw_links.column("nofollow"),
    })
    con.register("lraw", t)
    # depth of the source page: the fetch row's depth (redirect targets keep the depth of their source)
    t = con.sql("""
        SELECT l.from_hash, l.to_url, l.kind, l.nofollow,
               CAST(coalesce(f.depth, 0) + CASE WHEN l.kind = 'redirect' THEN 0 ELSE 1 END AS INTEGER) AS depth,
               CAST(coalesce(f.part, 0) AS INTEGER) AS part
        FROM lraw l LEFT JOIN (
            SELECT url_hash, min(depth) AS depth, min(part) AS part FROM f_all GROUP BY 1
        ) f ON f.url_hash = l.from_hash
        WHERE l.to_url IS NOT NULL AND NOT coalesce(l.nofollow, false)
    """).to_arrow_table()
    reasons = filter_reasons(t.column("to_url").combine_chunks(), t.column("depth").to_numpy(), cfg)
    t = t.filter(pc.is_null(reasons))
    to_hash = pa.array(url_hashes(t.column("to_url").combine_chunks()), pa.uint64())
    graph = pa.table({"from_hash": t.column("from_hash"), "to_hash": to_hash, "to_url": t.column("to_url"),
                      "kind": t.column("kind"), "part": t.column("part")})
    source = pc.if_else(pc.equal(t.column("kind"), "redirect"), "redirect",
                        pc.if_else(pc.equal(t.column("kind"), "sitemap"), "sitemap", "link"))
    links = pa.table({"to_url": t.column("to_url"), "to_hash": to_hash, "depth": t.column("depth"),
                      "source": source})
    return links, graph


def _read_with_part(store: Store, rels: list[str]) -> pa.Table:
    """Fetch rows of all partitions, with the partition number as a ``part`` column."""
    tables = []
    for rel in rels:
        t = store.read_table(rel, FETCH_SCHEMA)
        tables.append(t.append_column("part", pa.array(np.full(t.num_rows, _part_no(rel), np.int32))))
    if not tables:
        return FETCH_SCHEMA.empty_table().append_column("part", pa.array([], pa.int32()))
    return pa.concat_tables(tables)


def _new_urls(cfg: CrawlConfig, store: Store, round_no: int, links: pa.Table, known: np.ndarray,
              db: pa.Table, injected: pa.Table) -> tuple[pa.Table, dict[str, Any]]:
    """Discovered URLs not seen before (Bloom first, seen-set confirms), within per-host caps."""
    if links.num_rows == 0:
        return crawldb.CRAWLDB_SCHEMA.empty_table(), {"bloom_maybe": 0, "bloom_false_positives": 0}
    con = duckdb.connect()
    con.register("links", links)
    cand = con.sql("""
        SELECT to_hash AS url_hash, any_value(to_url) AS url, min(depth) AS depth,
               count(*) AS inlinks, min(source) AS source
        FROM links GROUP BY 1
    """).to_arrow_table()
    hashes = cand.column("url_hash").to_numpy()
    prev = round_no - 1
    is_new = np.zeros(hashes.size, dtype=bool)
    maybe_total = fp_total = 0
    shard = seen.shard_of(hashes, cfg.url_shards)
    for s in range(cfg.url_shards):
        idx = np.nonzero(shard == s)[0]
        if idx.size == 0:
            continue
        seen_sorted = seen.read_seen(store.url(store.seen_file(prev, s, "parquet"))) if prev > 0 else \
            np.empty(0, np.uint64)
        bloom_rel = store.seen_file(prev, s, "bloom")
        bloom = seen.BloomFilter.load(store.url(bloom_rel)) if prev > 0 and store.exists(bloom_rel) else None
        # URLs attempted or injected this round are already known even if not yet in the seen-set
        this_round = np.union1d(known, injected.column("url_hash").to_numpy()) if injected.num_rows else known
        sub = hashes[idx]
        if bloom is not None:
            maybe = bloom.contains(sub)
            maybe_total += int(maybe.sum())
            fp_total += int((maybe & ~seen.confirm(sub, seen_sorted)).sum())
        fresh = seen.dedup_new(sub, bloom, seen_sorted) & ~seen.confirm(sub, this_round)
        is_new[idx] = fresh
    cand = cand.filter(pa.array(is_new))
    if cand.num_rows == 0:
        return crawldb.CRAWLDB_SCHEMA.empty_table(), {"bloom_maybe": maybe_total, "bloom_false_positives": fp_total}
    hosts = index.hosts_of(cand.column("url").combine_chunks())
    cand = cand.append_column("host", hosts)
    # per-host total cap: known URLs of the host + new ones by (depth, inlinks)
    con.register("cand", cand)
    con.register("known_hosts", db.select(["host"]))
    cand = con.sql(f"""
        WITH k AS (SELECT host, count(*) AS n FROM known_hosts GROUP BY 1)
        SELECT c.* EXCLUDE (rk) FROM (
            SELECT cand.*, row_number() OVER (PARTITION BY host ORDER BY depth, inlinks DESC, url_hash) AS rk
            FROM cand
        ) c LEFT JOIN k USING (host)
        WHERE c.rk + coalesce(k.n, 0) <= {cfg.max_pages_per_host}
    """).to_arrow_table()
    n = cand.num_rows
    depth = cand.column("depth").to_numpy().astype(np.float64)
    inl = cand.column("inlinks").to_numpy().astype(np.float64)
    rows = pa.table({
        "url": cand.column("url"),
        "url_hash": cand.column("url_hash"),
        "host": cand.column("host"),
        "pkey": pkeys(cfg, cand.column("url").combine_chunks(), cand.column("host").combine_chunks()),
        "depth": cand.column("depth").cast(pa.int32()),
        "discovered_round": pa.array(np.full(n, round_no, np.int32)),
        "source": cand.column("source"),
        "status": pa.array(["unfetched"] * n, pa.string()),
        "fetch_count": pa.array(np.zeros(n, np.int32)),
        "check_count": pa.array(np.zeros(n, np.int32)),
        "change_count": pa.array(np.zeros(n, np.int32)),
        "retry_count": pa.array(np.zeros(n, np.int32)),
        "inlinks": cand.column("inlinks").cast(pa.int32()),
        "priority": pa.array(np.log1p(inl) / (1.0 + depth)),
        "round": pa.array(np.full(n, round_no, np.int32)),
    })
    return rows, {"bloom_maybe": maybe_total, "bloom_false_positives": fp_total}


def _split_shards(table: pa.Table, shards: int) -> list[pa.Table]:
    sh = crawldb.shard_of(table.column("url_hash"), shards)
    out = []
    for s in range(shards):
        part = table.filter(pa.array(sh == s))
        out.append(part.take(pc.sort_indices(part, sort_keys=[("url_hash", "ascending")])))
    return out


def _write_seen(cfg: CrawlConfig, store: Store, round_no: int, merged: pa.Table) -> None:
    hashes = merged.column("url_hash").to_numpy()
    for s, part in enumerate(seen.split_by_shard(hashes, cfg.url_shards)):
        part = np.unique(part)
        seen.write_seen(store.url(store.seen_file(round_no, s, "parquet")), part)
        expected = max(cfg.bloom_expected_urls // cfg.url_shards, 2 * part.size, 1024)
        bloom = seen.BloomFilter.create(expected, cfg.bloom_fp_rate)
        bloom.add(part)
        bloom.save(store.url(store.seen_file(round_no, s, "bloom")))


def _write_digests(store: Store, round_no: int, fetches: pa.Table) -> None:
    prev = round_no - 1
    old = store.read_table(store.digests_file(prev), DIGESTS_SCHEMA) if prev > 0 and \
        store.exists(store.digests_file(prev)) else DIGESTS_SCHEMA.empty_table()
    con = duckdb.connect()
    con.register("old", old)
    con.register("f", fetches)
    t = con.sql("""
        SELECT payload_digest, arg_min(url, (fetch_time, url)) AS url, min(fetch_time) AS fetch_time FROM (
            SELECT payload_digest, url, fetch_time FROM old
            UNION ALL
            SELECT payload_digest, url, fetch_time FROM f
            WHERE status = 'fetched' AND warc_type = 'response' AND payload_digest IS NOT NULL
              AND payload_digest NOT IN (SELECT payload_digest FROM old)
        ) GROUP BY 1 ORDER BY 1
    """).to_arrow_table()
    store.write_table(store.digests_file(round_no), t.cast(DIGESTS_SCHEMA))


def _write_robots(store: Store, round_no: int, fetched_all: pa.Table) -> None:
    prev = round_no - 1
    old = store.read_table(store.robots_file(prev), ROBOTS_CACHE_SCHEMA) if prev > 0 and \
        store.exists(store.robots_file(prev)) else ROBOTS_CACHE_SCHEMA.empty_table()
    new = store.read_tables([p for p in store.ls(store.round_dir(round_no, "robots")) if p.endswith(".parquet")],
                            ROBOTS_CACHE_SCHEMA)
    con = duckdb.connect()
    con.register("old", old)
    con.register("new", new)
    t = con.sql("""
        SELECT * FROM (SELECT * FROM old UNION ALL SELECT * FROM new)
        QUALIFY row_number() OVER (PARTITION BY host ORDER BY fetched_at DESC) = 1
        ORDER BY host
    """).to_arrow_table()
    store.write_table(store.robots_file(round_no), t.cast(ROBOTS_CACHE_SCHEMA))
