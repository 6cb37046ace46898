"""Politeness per IP address across the whole round (``politeness_key=ip``).

The simulated web listens on 127.0.0.1-3; six of its hosts are mapped by ``resolve`` rules to two
addresses (three hosts each on 127.0.0.2 and 127.0.0.3). One round over four fetch-list partitions
on a real embedded Dask cluster must treat each address as one queue: the server's access log,
grouped by the address a request came in on, shows one request in flight at a time and at least the
politeness delay between request starts, while the three hosts of each address are all fetched.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.records import FETCHLIST_SCHEMA
from crawl.store import Store

DELAY = 0.3
ADDRS = ("127.0.0.2", "127.0.0.3")


def test_hosts_sharing_an_address_share_one_queue(make_simweb, tmp_path) -> None:
    sw = make_simweb(hosts=30, seed=1, pages_per_host=20, extra_args=("--bind", "127.0.0.1," + ",".join(ADDRS)))
    hosts = [h.name for h in sw.model.good_hosts()[:6]]
    on = {h: ADDRS[i // 3] for i, h in enumerate(hosts)}
    rules = [f"{h}={ip}:{sw.port}" for h, ip in on.items()] + [f"*.sim.test={ADDRS[1]}:{sw.port}"]
    truth = sw.truth().to_pylist()
    seeds = []
    for h in hosts:
        pages = [r["url"] for r in truth if r["host"] == h and r["robots_allowed"] and r["page_type"] == "article"]
        seeds += [f"http://{h}/", *pages[:7]]
    cfg = load_config(overrides={
        "root": str(tmp_path / "crawl"), "crawl_id": "ip", "resolve": rules, "politeness_key": "ip",
        "politeness_delay_s": DELAY, "partitions": 4, "url_shards": 2, "max_pages": 200, "round_duration_s": 60.0,
        "connect_timeout_s": 2.0, "read_timeout_s": 4.0, "total_timeout_s": 8.0, "dask_workers": 2,
        "dask_dashboard": False,
    }, use_env=False)
    rnd.inject(cfg, seeds)
    gen = rnd.generate(cfg)
    assert gen["ip_keys"] == {"hosts": 6, "addresses": 2, "unresolved": 0, "over_cap": 0}
    store = Store(cfg.root, cfg.crawl_id)
    lists = [store.read_table(p, FETCHLIST_SCHEMA) for p in gen["partitions"]]
    assert len(lists) <= 2  # an address is never split, whatever its hosts' own hashes say
    part_of: dict[str, int] = {}
    for k, t in enumerate(lists):
        for host, key in zip(t.column("host").to_pylist(), t.column("pkey").to_pylist(), strict=True):
            assert key == on[host] and part_of.setdefault(key, k) == k
    with dask_client(cfg) as client:
        rnd.fetch_parse(cfg, gen["round"], client=client)

    log = sw.log()
    log = log.filter(pc.and_(pc.is_in(log.column("addr"), pa.array(list(ADDRS), pa.string())),
                             pc.match_substring(log.column("user_agent"), "RecrawlBot")))
    con = duckdb.connect()
    con.register("log", log)
    per_addr = con.sql(f"""
        WITH g AS (SELECT addr, host, start, "end",
                          start - lag(start) OVER (PARTITION BY addr ORDER BY start) AS gap FROM log),
        overlap AS (  -- requests to the same address that started while another was in progress
            SELECT a.addr, count(*) AS n FROM log a JOIN log b
              ON a.addr = b.addr AND b.start < a.start AND a.start < b."end"
            GROUP BY 1)
        SELECT addr, count(*) AS requests, count(DISTINCT host) AS hosts, min(gap) AS min_gap,
               coalesce(max(o.n), 0) AS overlapping, max(host) FILTER (WHERE addr <> '{ADDRS[0]}') AS any_host
        FROM g LEFT JOIN overlap o USING (addr) GROUP BY addr ORDER BY addr
    """).fetchall()
    assert [r[0] for r in per_addr] == list(ADDRS)
    for addr, requests, n_hosts, min_gap, overlapping, _ in per_addr:
        assert requests >= 20 and n_hosts == 3, (addr, requests, n_hosts)
        assert overlapping == 0, addr  # one request in flight per address
        assert min_gap >= DELAY, (addr, min_gap)  # the delay between starts, across the address's hosts
    by_host = dict(con.sql("SELECT host, any_value(addr) FROM log GROUP BY 1").fetchall())
    assert by_host == on  # each host was reached on its own address
