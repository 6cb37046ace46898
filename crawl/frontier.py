"""Generate: choose this round's URLs and cut them into host-whole fetch-list partitions.

Selection runs in DuckDB over the Arrow CrawlDb (no Python loop per URL):
1. candidates are URLs due now (``next_fetch_time <= now``) plus seeds injected for this round;
2. each host keeps at most its per-round cap, best priority first -- the cap comes from politeness:
   a host with delay d can take at most ``round_duration_s / d`` fetches in a round;
3. a ``coverage_share`` of the budget is reserved for never-fetched URLs (discovery never starves),
   the rest goes to re-fetches by priority; whatever one pool leaves unused flows to the other;
4. partitions hold whole politeness keys, so a host is never split and its politeness is owned by
   exactly one task; keys are dealt out largest first to the partition with the fewest URLs so far
   (:func:`balanced_partition_of`), so the tasks carry equal work and the workers finish together. With ``politeness_key=ip`` the key is the host's address,
   resolved here once per host and round (:func:`with_ip_keys`), so hosts sharing an address share one
   queue in one task.
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from crawl import duck
from crawl.config import CrawlConfig
from crawl.records import FETCHLIST_SCHEMA


def host_cap(cfg: CrawlConfig, delay_s: float | None = None) -> int:
    """Per-host fetches allowed in one round."""
    if cfg.max_pages_per_host_per_round > 0:
        return cfg.max_pages_per_host_per_round
    delay = max(cfg.politeness_delay_s, delay_s or 0.0)
    if delay <= 0:
        return cfg.max_pages
    return max(1, math.floor(cfg.round_duration_s / delay))


def select(cfg: CrawlConfig, candidates: pa.Table, now: datetime, host_delays: pa.Table | None = None) -> pa.Table:
    """Pick this round's fetch list from ``candidates`` (CrawlDb-shaped rows, due or injected).

    ``host_delays`` (host, delay_s) lets known robots Crawl-delays lower a host's cap.
    """
    con = duck.connect()
    con.register("cand", candidates)
    default_cap = host_cap(cfg)
    if host_delays is not None and host_delays.num_rows:
        caps = pa.array([host_cap(cfg, x) for x in host_delays.column("delay_s").to_pylist()], pa.int64())
        con.register("delays", host_delays.select(["host"]).append_column("cap", caps))
        cap_expr = "COALESCE(d.cap, $default_cap)"
        join = "LEFT JOIN delays d USING (host)"
    else:
        cap_expr, join = "$default_cap", ""
    budget = cfg.max_pages
    cov_budget = round(cfg.coverage_share * budget)
    sql = f"""
    WITH c AS (
        SELECT cand.*, (COALESCE(fetch_count, 0) = 0) AS fresh, {cap_expr} AS cap
        FROM cand {join}
        WHERE next_fetch_time IS NULL OR next_fetch_time <= $now
    ),
    capped AS (
        SELECT * FROM (
            SELECT *, row_number() OVER (PARTITION BY host ORDER BY priority DESC NULLS LAST, url_hash) AS host_rank
            FROM c
        ) WHERE host_rank <= cap
    ),
    pools AS (
        SELECT *, row_number() OVER (PARTITION BY fresh ORDER BY priority DESC NULLS LAST, url_hash) AS pool_rank
        FROM capped
    ),
    counts AS (
        SELECT count(*) FILTER (WHERE fresh) AS n_fresh, count(*) FILTER (WHERE NOT fresh) AS n_old FROM pools
    ),
    quota AS (
        SELECT
          least(n_fresh, $cov + greatest(0, ($budget - $cov) - n_old)) AS q_fresh,
          least(n_old, ($budget - $cov) + greatest(0, $cov - n_fresh)) AS q_old
        FROM counts
    )
    SELECT url, url_hash, host, pkey, depth, priority, etag, last_modified, payload_digest AS prev_digest, fresh
    FROM pools, quota
    WHERE (fresh AND pool_rank <= q_fresh) OR (NOT fresh AND pool_rank <= q_old)
    ORDER BY host, priority DESC NULLS LAST, url_hash
    """
    params = {"now": now, "default_cap": default_cap, "budget": budget, "cov": cov_budget}
    return con.sql(sql, params=params).to_arrow_table()


def co_locate(selected: pa.Table, robots_keys: dict[str, str]) -> pa.Table:
    """Queue a host whose robots.txt is answered by another key's host under that key.

    A robots.txt redirect (``http://a.example/robots.txt`` -> ``http://b.example/robots.txt``) is a
    request to b's server; only the task that owns b's queue can make it at b's pace. So the host's
    ``pkey`` becomes b's key (followed through chains, at most 5 steps): same partition, same queue.
    """
    if not robots_keys or selected.num_rows == 0 or "pkey" not in selected.column_names:
        return selected

    def final(key: str) -> str:
        for _ in range(5):
            nxt = robots_keys.get(key)
            if nxt is None or nxt == key:
                break
            key = nxt
        return key

    enc = pc.dictionary_encode(selected.column("host").combine_chunks())
    mapped = pa.array([final(h) if h in robots_keys else None for h in enc.dictionary.to_pylist()],
                      pa.string()).take(enc.indices)
    pkey = pc.coalesce(mapped, selected.column("pkey"))
    return selected.set_column(selected.schema.get_field_index("pkey"), "pkey", pkey)


def with_ip_keys(cfg: CrawlConfig, selected: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """``selected`` with each ``pkey`` replaced by its host's IP address (``politeness_key=ip``).

    Keys, not hosts, are resolved, so a host :func:`co_locate` queued under another host (its
    robots.txt answers there) follows that host to its address. Each distinct key is resolved once,
    through the fetcher's guarded resolver (resolve rules first, then DNS behind the private-address
    guard: a refused or unresolvable name stays the key, polite on its own). Returns the table and
    counts (hosts, addresses, unresolved).
    """
    from crawl.net import is_ip_key, resolve_politeness_ips

    if selected.num_rows == 0:
        return selected, {"hosts": 0, "addresses": 0, "unresolved": 0}
    col = "pkey" if "pkey" in selected.column_names else "host"
    enc = pc.dictionary_encode(pc.fill_null(selected.column(col).combine_chunks(), ""))
    names = enc.dictionary.to_pylist()
    ips = resolve_politeness_ips([k for k in names if k], cfg.resolve, cfg.allow_private_networks,
                                 cfg.connect_timeout_s)
    keys = pa.array([ips.get(k, k) or None for k in names], pa.string()).take(enc.indices)
    i = selected.schema.get_field_index("pkey")
    table = selected.set_column(i, "pkey", keys) if i >= 0 else selected.append_column("pkey", keys)
    hosts = pc.count_distinct(selected.column("host")).as_py()
    unresolved = sum(1 for k in names if k and ips.get(k, k) == k and not is_ip_key(k))
    return table, {"hosts": hosts, "addresses": len({v for v in ips.values()}), "unresolved": unresolved}


def cap_keys(cfg: CrawlConfig, selected: pa.Table, host_delays: pa.Table | None = None) -> pa.Table:
    """Keep at most one round's worth of fetches per politeness key (best priority first).

    :func:`select` caps each host at ``round_duration_s / delay``; when several hosts share a key (an
    IP address) their one queue runs at the largest of their delays, so the key gets that cap, not
    the sum of its hosts'. An explicit ``max_pages_per_host_per_round`` stays a per-host cap.
    """
    if cfg.max_pages_per_host_per_round > 0 or selected.num_rows == 0 or "pkey" not in selected.column_names:
        return selected
    con = duck.connect()
    con.register("sel", selected)
    if host_delays is not None and host_delays.num_rows:
        con.register("delays", host_delays.select(["host", "delay_s"]))
    else:
        con.register("delays", pa.table({"host": pa.array([], pa.string()), "delay_s": pa.array([], pa.float64())}))
    per_key = con.sql("""SELECT s.pkey, max(coalesce(d.delay_s, 0)) AS delay_s
                         FROM (SELECT DISTINCT pkey, host FROM sel) s LEFT JOIN delays d USING (host)
                         GROUP BY 1""").to_arrow_table()
    con.register("caps", pa.table({"pkey": per_key.column("pkey"), "cap": pa.array(
        [host_cap(cfg, d) for d in per_key.column("delay_s").to_pylist()], pa.int64())}))
    return con.sql("""
        SELECT * EXCLUDE (key_rank, cap) FROM (
            SELECT sel.*, row_number() OVER (PARTITION BY sel.pkey ORDER BY priority DESC NULLS LAST, url_hash)
                   AS key_rank, caps.cap
            FROM sel JOIN caps USING (pkey)
        ) WHERE key_rank <= cap
        ORDER BY host, priority DESC NULLS LAST, url_hash
    """).to_arrow_table()


def balanced_partition_of(keys: pa.Array | pa.ChunkedArray, partitions: int) -> np.ndarray:
    """Partition number per row, whole keys per partition, URLs spread evenly: keys in order of their
    URL count (largest first; ties by a stable hash of the key), each to the partition with the fewest
    URLs so far (the LPT rule: the largest partition is at most 4/3 of the optimum).

    Why not a hash of the key: it left partitions apart in URLs (crawl_bench's 20,000 pages on 895
    hosts: 4,838 / 5,211 / 5,018 / 4,933 in 4 partitions, 2,248-2,786 in 8; its 5,000 pages in 8:
    485-738), and a worker that finished its partitions waited idle for the other's. Balanced:
    4,998-5,001 and 2,498-2,501. Deterministic for a given selection, which is
    all a round needs (generate writes its fetch lists once; a resumed round reuses them)."""
    import heapq

    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if len(arr) == 0:
        return np.empty(0, np.int32)
    enc = pc.dictionary_encode(pc.fill_null(arr, ""))
    idx = enc.indices.to_numpy(zero_copy_only=False)
    counts = np.bincount(idx, minlength=len(enc.dictionary))
    ties = np.array([xxhash.xxh3_64_intdigest(k.encode()) for k in enc.dictionary.to_pylist()], np.uint64)
    order = np.lexsort((ties, -counts))
    loads = [(0, k) for k in range(partitions)]
    per_key = np.empty(len(counts), np.int32)
    for key in order.tolist():
        load, part = heapq.heappop(loads)
        per_key[key] = part
        heapq.heappush(loads, (load + int(counts[key]), part))
    return per_key[idx]


def split(cfg: CrawlConfig, selected: pa.Table) -> list[pa.Table]:
    """Cut the selection into ``cfg.partitions`` fetch lists, whole hosts (politeness keys) per partition,
    of near-equal URL counts (:func:`balanced_partition_of`)."""
    keys = selected.column("pkey") if "pkey" in selected.column_names else selected.column("host")
    parts = balanced_partition_of(keys, cfg.partitions)
    out = []
    for k in range(cfg.partitions):
        t = selected.filter(pa.array(parts == k))
        out.append(pa.Table.from_arrays(
            [t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
             for f in FETCHLIST_SCHEMA],
            schema=FETCHLIST_SCHEMA,
        ))
    return out


def fresh_count(selected: pa.Table) -> int:
    return int(pc.sum(selected.column("fresh").cast(pa.int64())).as_py() or 0) if selected.num_rows else 0
