"""Update canonicalises each partition's links apart (Dask tasks or threads) while it dedups the fetches:
the round's link graph, discovered URLs and per-shard update files must be byte for byte those of the
single pass over every partition's raw links at once (compared as row sets: DuckDB's
row order in prepare's outputs varies from run to run anyway) (the path before, still taken when no parallel
links are given).

Real rounds on the simulated web: round 1, then round 2 fetched and parsed in 3 partitions; the update
of round 2 is prepared three times on copies of the same crawl root.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from crawl import linkparts
from crawl import round as rnd
from crawl import update as upd
from crawl.config import load_config
from crawl.store import Store


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    with Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as c:
        yield c


def _cfg(root, simweb):
    return load_config(overrides={
        "root": str(root), "crawl_id": "links", "resolve": [simweb.resolve_rule], "politeness_delay_s": 0.0,
        "partitions": 3, "url_shards": 2, "max_depth": 3, "max_pages": 120, "round_duration_s": 30.0,
    }, use_env=False)


@pytest.fixture(scope="module")
def fetched_round(simweb, client, tmp_path_factory):
    """A crawl root with round 1 published and round 2 fetched and parsed (update not run)."""
    base = tmp_path_factory.mktemp("links")
    cfg = _cfg(base / "root", simweb)
    now = datetime.now(UTC).replace(microsecond=0)
    rnd.run_round(cfg, simweb.seed_urls(6), now, client=client)
    now2 = now + timedelta(days=30)
    n = rnd.generate(cfg, now2)["round"]
    rnd.fetch_parse(cfg, n, now2, client=client)
    return base, cfg, n, now2


def _prepare(fetched_round, name: str, how: str, client) -> tuple[dict, object, dict[str, bytes]]:
    base, cfg0, n, _ = fetched_round
    root = base / name
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(base / "root", root)
    cfg = load_config(overrides={**cfg0.to_dict(), "root": str(root)}, use_env=False)
    store = Store(cfg.root, cfg.crawl_id)
    links_of = None if how == "whole" else linkparts._start_link_parts(cfg, store, n, client if how == "dask" else None)
    fetched_all = upd._read_with_part(store, store.part_files(n, "fetched"))
    pages = upd.read_pages(store, n)
    stats, graph = upd.prepare(cfg, store, n, fetched_all, pages, links_of)
    written = {}
    for kind in ("fetch", "new", "sitemap"):
        for s in range(cfg.url_shards):
            t = pq.read_table(store.location(upd._shard_rel(store, n, kind, s)))
            written[f"{kind}/{s}"] = t.sort_by("url_hash")  # one row per URL; DuckDB's row order varies
    return stats, graph.sort_by([(c, "ascending") for c in graph.column_names]), written


def test_links_per_partition_equal_the_single_pass(fetched_round, client):
    _, cfg, n, _ = fetched_round
    store = Store(cfg.root, cfg.crawl_id)
    assert len(store.part_files(n, "rawlinks")) >= 2  # several partitions, or there is nothing to compare
    stats0, graph0, files0 = _prepare(fetched_round, "whole", "whole", client)
    assert graph0.num_rows > 100 and stats0["discovered"] > 0  # links followed and URLs discovered
    for how in ("threads", "dask"):
        stats, graph, files = _prepare(fetched_round, how, how, client)
        assert stats == stats0, how
        assert graph.equals(graph0), how  # the same rows, as many times each
        assert files.keys() == files0.keys()
        for k in files0:
            assert files[k].equals(files0[k]), (how, k)


def test_link_parts_carry_the_target_hash_and_its_url_filters(fetched_round):
    """Each partition's canonical links come with the target's URL hash and whether it passes every URL
    filter but the depth one (computed on the workers, beside the driver's dedup)."""
    import numpy as np
    import pyarrow.compute as pc

    from crawl.url import filter_reasons, url_hashes

    _, cfg0, n, _ = fetched_round
    cfg = load_config(overrides={**cfg0.to_dict(), "max_path_segments": 1}, use_env=False)  # some filtered
    store = Store(cfg.root, cfg.crawl_id)
    for rel in store.part_files(n, "rawlinks"):
        t = linkparts.link_part(cfg, rel)
        assert t.num_rows > 0
        to_url = t.column("to_url")
        assert t.column("to_hash").to_numpy().tolist() == url_hashes(to_url).tolist()
        reasons = filter_reasons(to_url, np.zeros(t.num_rows, np.int32), cfg)
        assert t.column("url_ok").to_pylist() == pc.is_null(reasons).to_pylist()
        assert 0 < pc.sum(t.column("url_ok")).as_py() < t.num_rows


@pytest.mark.parametrize("max_depth", [3, 1])
def test_prepared_links_equal_the_former_sql_join_and_filter(fetched_round, max_depth):
    """The link graph and the discovery candidates hold the rows the former driver-side pass gave (a
    DuckDB join of the links with the round's fetch rows for the source's depth and partition, then
    every filter at the link's depth, then the target's hash), in the links' own order."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc

    from crawl.url import filter_reasons, url_hashes

    base, cfg0, n, _ = fetched_round
    cfg = load_config(overrides={**cfg0.to_dict(), "max_depth": max_depth}, use_env=False)
    store = Store(cfg.root, cfg.crawl_id)
    fetches = upd.page_fetches(cfg, upd._read_with_part(store, store.part_files(n, "fetched")))
    canon = pa.concat_tables([linkparts.link_part(cfg, rel) for rel in store.part_files(n, "rawlinks")])
    links, graph = linkparts._prepare_links(cfg, fetches, canon)

    con = duckdb.connect()
    con.register("lraw", canon.select(["from_hash", "to_url", "kind"]))
    con.register("f_all", fetches)
    t = con.sql("""
        SELECT l.from_hash, l.to_url, l.kind,
               CAST(coalesce(f.depth, 0) + CASE WHEN l.kind = 'redirect' THEN 0 ELSE 1 END AS INTEGER) AS depth,
               CAST(coalesce(f.part, 0) AS INTEGER) AS part
        FROM lraw l LEFT JOIN (
            SELECT url_hash, min(depth) AS depth, min(part) AS part FROM f_all GROUP BY 1
        ) f ON f.url_hash = l.from_hash
        WHERE l.to_url IS NOT NULL
    """).to_arrow_table()
    t = t.filter(pc.is_null(filter_reasons(t.column("to_url"), t.column("depth").to_numpy(), cfg)))
    to_hash = pa.array(url_hashes(t.column("to_url")), pa.uint64())
    want_graph = pa.table({"from_hash": t.column("from_hash"), "to_hash": to_hash, "to_url": t.column("to_url"),
                           "kind": t.column("kind"), "part": t.column("part")})
    # the same rows, as many times each (DuckDB's join gave them in an order of its threads' making)
    assert graph.num_rows > 50 and graph.sort_by([(c, "ascending") for c in graph.column_names]).equals(
        want_graph.sort_by([(c, "ascending") for c in want_graph.column_names]))
    got_links = pa.table({"to_hash": links.column("to_hash"), "depth": links.column("depth")})
    want_links = pa.table({"to_hash": to_hash, "depth": t.column("depth")})
    assert got_links.sort_by([("to_hash", "ascending"), ("depth", "ascending")]).equals(
        want_links.sort_by([("to_hash", "ascending"), ("depth", "ascending")]))
    # and in the links' own order: partition by partition, each file's rows as they come
    def rows(tab):
        return list(zip(*(tab.column(c).to_pylist() for c in ("from_hash", "to_url", "kind")), strict=True))

    kept = set(rows(graph))
    assert rows(graph) == [r for r in rows(canon) if r in kept]
    if max_depth == 1:  # the depth filter took links the URL filters kept
        assert graph.num_rows < pc.sum(canon.column("url_ok")).as_py()


def test_merges_take_prepares_tables_in_memory(fetched_round, client):
    """Update starts each shard's merge with the tables prepare hands over (``PrepareHooks``) instead of
    after prepare's shard files are written and read back: the tables handed over are the files'
    rows, and a merge given them (the files removed) writes what a merge reading the files writes,
    and hands back the ``dup_info`` it writes."""
    import pyarrow as pa

    base, cfg0, n, _ = fetched_round
    root = base / "inmemory"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(base / "root", root)
    cfg = load_config(overrides={**cfg0.to_dict(), "root": str(root)}, use_env=False)
    store = Store(cfg.root, cfg.crawl_id)
    store.write_json(store.round_dir(n, "health.json"), {"degraded": False})  # what update's health gate writes
    got: dict = {}
    hooks = upd.PrepareHooks(link_graph=lambda g: got.setdefault("graph", g),
                             shard_inputs=lambda i: got.setdefault("inputs", i))
    fetched_all = upd._read_with_part(store, store.part_files(n, "fetched"))
    _, graph = upd.prepare(cfg, store, n, fetched_all, upd.read_pages(store, n), None, hooks)
    assert got["graph"] is graph
    inputs = got["inputs"]
    assert len(inputs) == cfg.url_shards and sum(t.num_rows for t in inputs[0] + inputs[1]) > 0
    outputs = [upd.delta_path(store, n, 0), store.seen_file(n, 0, "parquet"), store.seen_file(n, 0, "bloom")]

    def merged(shard: int, tables) -> tuple[dict, list[bytes], pa.Table]:
        stats = upd.merge_shard(cfg, n, shard, tables)
        dup = pq.read_table(store.location(upd._shard_rel(store, n, "dupinfo", shard))).sort_by("url_hash")
        assert stats.pop("dup_info").sort_by("url_hash").equals(dup)
        return stats, [store.read_bytes(r.replace("shard=00", f"shard={shard:02d}")) for r in outputs], dup

    for s in range(cfg.url_shards):
        for i, kind in enumerate(("fetch", "new", "sitemap")):
            file_rows = pq.read_table(store.location(upd._shard_rel(store, n, kind, s)))
            assert inputs[s][i].sort_by("url_hash").equals(file_rows.sort_by("url_hash")), (s, kind)
        from_files = merged(s, None)
        for kind in ("fetch", "new", "sitemap"):
            store.remove(upd._shard_rel(store, n, kind, s))
        assert merged(s, inputs[s]) == from_files, s


def test_merges_run_in_this_process_with_the_embedded_cluster(fetched_round, client):
    """With a client of the embedded cluster (no ``dask_address``: its workers share this machine's cores)
    the shard merges run in update's own threads, not as Dask tasks; with a scheduler at ``dask_address``
    they are Dask tasks. Both write the same delta, seen-set and Bloom bytes and the same stats."""
    from distributed import get_task_stream

    base, cfg0, n, now = fetched_round
    prefix = f"update-{cfg0.crawl_id}-{n}-"
    out = {}
    for name, address in (("embedded", ""), ("external", client.scheduler.address)):
        root = base / f"merges-{name}"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base / "root", root)
        cfg = load_config(overrides={**cfg0.to_dict(), "root": str(root), "dask_address": address}, use_env=False)
        with get_task_stream(client) as ts:
            stats = upd.update(cfg, n, now, client)
        merges = {t["key"] for t in ts.data if str(t["key"]).startswith(prefix)}
        assert merges == (set() if name == "embedded" else {f"{prefix}{s}" for s in range(cfg.url_shards)}), name
        store = Store(cfg.root, cfg.crawl_id)
        files = [store.read_bytes(r) for s in range(cfg.url_shards)
                 for r in (upd.delta_path(store, n, s), store.seen_file(n, s, "parquet"), store.seen_file(n, s, "bloom"))]
        out[name] = ({k: v for k, v in stats.items() if k != "health"}, files)
    assert out["embedded"] == out["external"]
