"""Selective JavaScript rendering (crawl.render) against the simulated web's script-built hosts.

Oracles outside the code under test: the simulated web's truth (which text and links exist only after
a script ran), its access log (every request the browser's rules let out, with times), a canary
listener (nothing may reach 127.0.0.1 / ::1 on its port) and warcio reading the WARC files back.
Needs Debian's chromium (``make chromium``).
"""

from __future__ import annotations

import gzip
import io
import os

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl import query
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import load_config
from crawl.records import FETCH_SCHEMA, LINK_SCHEMA
from crawl.render import RENDER_SCHEMA, page_signals
from crawl.simweb.canary import Canary
from crawl.simweb.spa import SSRF_HOST, TRACKER, SpaSite
from crawl.store import Store

CHROMIUM = "/usr/bin/chromium"
SPA_HOSTS = 4
DELAY = 0.2
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs chromium: make chromium")


@pytest.fixture(scope="module")
def canary():
    with Canary() as c:
        yield c


@pytest.fixture(scope="module")
def spaweb(tmp_path_factory, canary):
    from tests.conftest import start_simweb

    sw = start_simweb(tmp_path_factory.mktemp("spaweb"), 30, 1, 20,
                      ("--spa-hosts", str(SPA_HOSTS), "--canary-port", str(canary.port)))
    sw.spa = SpaSite(sw.model, SPA_HOSTS, canary.port)
    try:
        yield sw
    finally:
        sw.stop()


def test_heuristic_on_the_truth(spaweb) -> None:
    """Precision and recall of looks_script_built over SPA pages (shells, inline, SSR decoys), the
    model's JS-only link pages and a sample of ordinary HTML pages, all fetched from the server."""
    truth = spaweb.spa.truth_table().to_pylist()
    model_truth = spaweb.truth().to_pylist()
    js_only = [r["url"] for r in model_truth if r["js_only"]]
    plain = [r["url"] for r in model_truth if r["page_type"] in ("home", "article") and not r["js_only"]
             and r["kind"] not in ("hostile", "trap")][:150]
    cases = ([(r["url"], r["script_built"], "spa-" + r["variant"]) for r in truth]
             + [(u, True, "js-only") for u in js_only] + [(u, False, "plain") for u in plain])
    tp = fp = fn = 0
    found: dict[str, list[int]] = {}
    for url, built, kind in cases:
        status, _, body = spaweb.request(url)
        assert status == 200, url
        flagged = page_signals(body).script_built(60)
        tp += flagged and built
        fp += flagged and not built
        fn += built and not flagged
        found.setdefault(kind, [0, 0])[0] += flagged
        found[kind][1] += 1
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(f"heuristic: {len(cases)} pages, {tp + fn} script-built, precision={precision:.3f} recall={recall:.3f}, "
          "flagged per kind: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in sorted(found.items())))
    assert precision == 1.0 and recall == 1.0, (tp, fp, fn)


def test_crawl_renders_spa_pages(spaweb, canary, tmp_path) -> None:
    """One round: SPA pages found by the heuristic (render_auto), the SSRF bait host by render_hosts,
    JS-only link pages of good hosts by the heuristic too; SSR decoys and plain pages are not rendered."""
    truth = spaweb.spa.truth_table()
    good = {h.name for h in spaweb.model.good_hosts()}
    js_only = [r["url"] for r in spaweb.truth().to_pylist()
               if r["js_only"] and r["host"] in good and r["robots_allowed"]][:3]
    plain = [h.base + "/" for h in spaweb.model.good_hosts()[:2]]
    assert len(js_only) == 3
    seeds = truth.column("url").to_pylist() + [f"http://{SSRF_HOST}/"] + js_only + plain
    cfg = load_config(overrides={
        "root": str(tmp_path / "crawl"), "crawl_id": "spa", "resolve": [spaweb.resolve_rule],
        "render_hosts": SSRF_HOST, "render_auto": True, "render_concurrency": 2, "politeness_delay_s": DELAY,
        "partitions": 2, "url_shards": 2, "max_pages": 200, "round_duration_s": 120.0,
        "connect_timeout_s": 2.0, "read_timeout_s": 5.0, "total_timeout_s": 10.0, "dask_workers": 2,
        "dask_dashboard": False, "sitemaps": False,
    }, use_env=False)
    with dask_client(cfg) as client:
        summary = rnd.run_round(cfg, seeds, client=client)
    n = summary["round"]
    store = Store(cfg.root, cfg.crawl_id)
    gen = store.read_json(store.round_dir(n, "generate.json"))
    parts = [int(p.rsplit("part=", 1)[1].split(".")[0]) for p in gen["partitions"]]
    rendered = pa.concat_tables([store.read_table(store.part_file(n, "rendered", k), RENDER_SCHEMA) for k in parts])
    links = pa.concat_tables([store.read_table(store.part_file(n, "rawlinks", k), LINK_SCHEMA) for k in parts])
    fetched = pa.concat_tables([store.read_table(store.part_file(n, "fetched", k), FETCH_SCHEMA) for k in parts])

    # script-built SPA pages and JS-only pages by the heuristic, the bait host by config, nothing else
    reasons = dict(zip(rendered.column("url").to_pylist(), rendered.column("reason").to_pylist(), strict=True))
    built_urls = [r["url"] for r in truth.to_pylist() if r["script_built"]]
    assert reasons == {**{u: "heuristic" for u in built_urls + js_only}, f"http://{SSRF_HOST}/": "config"}
    assert set(rendered.column("status").to_pylist()) == {"rendered"}, rendered.column("error").to_pylist()

    # rendered text and links are found, as the truth says
    # the page text as users read it: the published text files through `crawl query`'s view
    text = dict(query.connect(cfg.root, cfg.crawl_id).sql("SELECT url, text FROM text").fetchall())
    out: dict[str, set[str]] = {}
    for f, t in zip(links.column("from_url").to_pylist(), links.column("to_url").to_pylist(), strict=True):
        out.setdefault(f, set()).add(t)
    built = 0
    for r in truth.to_pylist():
        if r["script_built"]:
            built += 1
            assert r["rendered_text"] in text[r["url"]], r["url"]
        want = set(r["rendered_links"] or []) | set(r["static_links"] or [])
        assert want <= out.get(r["url"], set()), (r["url"], want - out.get(r["url"], set()))
    assert built >= 2 * SPA_HOSTS
    # a JS-only page's links exist only in its script (reversed strings): the rendered DOM has them all
    model = spaweb.model
    for u in js_only:
        pid = model.url_index[u]
        want = {model.url(int(d)) for d in model.link_dst[model.links(pid)]}
        from crawl.url import canonicalize

        got = {canonicalize(x) for x in out.get(u, set())}
        assert len(want) >= 5 and want <= got, (u, len(want - got))
    assert "ssrf page rendered" in text[f"http://{SSRF_HOST}/"]
    # rendered links became CrawlDb rows in update (new URLs of the next round's generate)
    from crawl import crawldb

    db_urls = set(crawldb.read(store, n, cfg.url_shards).column("url").to_pylist())
    friends = {u for r in truth.to_pylist() for u in r["rendered_links"] if "spa-" not in u} - set(seeds)
    js_targets = {model.url(int(d)) for u in js_only for d in model.link_dst[model.links(model.url_index[u])]}
    assert friends and friends <= db_urls
    assert len(js_targets - set(seeds)) >= 10 and js_targets <= db_urls

    # the server's view: per host one request in flight and >= the delay between starts, browser requests
    # included; nothing to the tracker, nothing robots.txt forbids
    log = spaweb.log()
    ours = log.filter(pc.match_substring(log.column("user_agent"), "RecrawlBot"))
    con = duckdb.connect()
    con.register("log", ours)
    browser_paths = con.execute("SELECT count(*) FROM log WHERE path LIKE '/api/page.json%' OR path = '/static/app.js'"
                            ).fetchone()[0]
    assert browser_paths >= built  # the browser's subresource requests went out (through our session)
    violations = con.execute(f"""
        WITH g AS (SELECT host, start, "end", start - lag(start) OVER (PARTITION BY host ORDER BY start) AS gap,
                          lag("end") OVER (PARTITION BY host ORDER BY start) AS prev_end
                   FROM log WHERE host LIKE 'spa-%')
        SELECT count(*) FILTER (WHERE gap < {DELAY}) AS short_gaps,
               count(*) FILTER (WHERE prev_end > start) AS overlaps FROM g""").fetchone()
    assert violations == (0, 0), violations
    assert log.filter(pc.equal(log.column("host"), TRACKER)).num_rows == 0
    assert ours.filter(pc.match_substring(ours.column("path"), "/private-api/")).num_rows == 0
    # the page itself was never fetched twice: one GET per SPA page URL
    per_page = con.execute("SELECT max(c) FROM (SELECT host, path, count(*) c FROM log WHERE host LIKE 'spa-%' "
                       "AND path NOT LIKE '/api/%' AND path NOT IN ('/static/app.js', '/robots.txt') "
                       "GROUP BY 1, 2)").fetchone()[0]
    assert per_page == 1

    # the script aimed at 127.0.0.1, ::1 and localhost on the canary's port: nothing arrived
    assert canary.hits == []
    ssrf = rendered.filter(pc.equal(rendered.column("host"), SSRF_HOST)).to_pylist()[0]
    assert ssrf["blocked"] >= 4
    by = {}
    for k in parts:
        for why, c in store.read_json(store.part_file(n, "rendered", k, "done"))["blocked_by"].items():
            by[why] = by.get(why, 0) + c
    # 127.0.0.1 and [::1] refused by the address guard's classifier (crawl.net), not only as third parties
    assert by.get("private_address", 0) >= 2 and by.get("third_party", 0) >= 1, by

    # conversion records read back with warcio and refer to their response records
    resp_ids = {}
    for row in fetched.filter(pc.equal(fetched.column("warc_type"), "response")).to_pylist():
        with open(os.path.join(cfg.root, row["warc_filename"]), "rb") as fh:
            fh.seek(row["warc_record_offset"])
            data = fh.read(row["warc_record_length"])
        rec = next(iter(ArchiveIterator(io.BytesIO(data))))
        resp_ids[row["url"]] = rec.rec_headers.get_header("WARC-Record-ID")
    for row in rendered.to_pylist():
        with open(os.path.join(cfg.root, row["warc_filename"]), "rb") as fh:
            fh.seek(row["warc_record_offset"])
            data = fh.read(row["warc_record_length"])
        gzip.decompress(data)  # one gzip member per record
        rec = next(iter(ArchiveIterator(io.BytesIO(data))))
        assert rec.rec_type == "conversion"
        assert rec.rec_headers.get_header("WARC-Target-URI") == row["url"]
        assert rec.rec_headers.get_header("WARC-Refers-To") == resp_ids[row["url"]] == row["refers_to"]
        assert rec.rec_headers.get_header("Content-Type").startswith("text/html")
        assert b"<html" in rec.content_stream().read()


def test_partitions_without_render_hosts_parse_in_their_fetch_task(spaweb, tmp_path) -> None:
    """render_hosts without render_auto: only partitions holding such a host get fetch -> render ->
    parse tasks; the others parse from memory in their fetch task (crawl.tasks.fetch_parse_task)."""
    plain = [h.base + "/" for h in spaweb.model.good_hosts()[:4]]
    cfg = load_config(overrides={
        "root": str(tmp_path / "crawl"), "crawl_id": "rh", "resolve": [spaweb.resolve_rule],
        "render_hosts": SSRF_HOST, "render_auto": False, "politeness_delay_s": DELAY, "partitions": 3,
        "url_shards": 2, "max_pages": 50, "round_duration_s": 60.0, "connect_timeout_s": 2.0,
        "read_timeout_s": 5.0, "total_timeout_s": 10.0, "dask_workers": 2, "dask_dashboard": False,
        "sitemaps": False,
    }, use_env=False)
    with dask_client(cfg) as client:
        n = rnd.run_round(cfg, [f"http://{SSRF_HOST}/", *plain], client=client)["round"]
    store = Store(cfg.root, cfg.crawl_id)
    kinds = {}
    for rel in store.read_json(store.round_dir(n, "generate.json"))["partitions"]:
        k = int(rel.rsplit("part=", 1)[1].split(".")[0])
        hosts = set(store.read_table(rel).column("host").to_pylist())
        parsed = store.read_json(store.part_file(n, "parsed", k, "done"))
        if SSRF_HOST in hosts:
            rendered = store.read_table(store.part_file(n, "rendered", k), RENDER_SCHEMA)
            assert rendered.column("url").to_pylist() == [f"http://{SSRF_HOST}/"]
            assert parsed["bodies_from_memory"] == 0
            kinds[k] = "rendered"
        else:
            assert not store.exists(store.part_file(n, "rendered", k, "done"))
            assert parsed["pages"] > 0 and parsed["bodies_from_memory"] == parsed["pages"]
            kinds[k] = "in fetch"
    assert sorted(set(kinds.values())) == ["in fetch", "rendered"], kinds
