"""Parsing inside the fetch task (crawl.tasks.fetch_parse_task): bodies kept in memory must parse to
exactly the tables the two-task path gives by reading the WARC files back.

Oracles outside the code under test: the WARC files read back by FastWARC (``warc_bodies``, the
two-task path's source) and the pages/rawlinks tables the separate ``parse_task`` writes from them, on
the real simulated web (hostile hosts included: gzip bomb, truncated and reset bodies, wrong types).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fetch import cfg_for, fetchlist, host_urls
from test_ftp import HOST, _start

from crawl.checkpoint import PartitionCheckpoints, fetchlist_key
from crawl.errors import FetchStopped
from crawl.fetch import fetch_partition
from crawl.index import TEXT_SCHEMA
from crawl.parse import held_bodies, warc_bodies
from crawl.records import FETCH_SCHEMA, LINK_SCHEMA, PAGE_PART_SCHEMA
from crawl.store import Store
from crawl.tasks import fetch_parse_task, fetch_task, parse_task
from crawl.warc import WarcFile, iter_records, stored_response_headers

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
HOSTS = ("news-001.sim.test", "docs-001.sim.test", "archive-001.sim.test")
FAULTS = ("gzip-bomb", "wrong-type-html", "wrong-type-image", "reset", "endless", "huge", "404",
          "redirect-cross")


def _urls(sw, per_host: int = 1000) -> list[str]:
    """Pages of every normal host (HTML in its charsets, malformed and noisy pages, PDFs, images,
    binaries), up to ``per_host`` each, plus the mixed hostile host's body faults."""
    t = sw.truth().to_pylist()
    hostile = next(h for h in sw.model.hosts if h.kind == "hostile" and h.mode == "mixed")
    count: dict[str, int] = {}
    urls = []
    for r in t:
        if r["kind"] in ("hostile", "trap") or r["fault"] or r["trap"] or r["crawl_delay"] \
                or r["host_robots"] in ("timeout", "5xx"):
            continue
        count[r["host"]] = count.get(r["host"], 0) + 1
        if count[r["host"]] <= per_host or r["content_type"] != "text/html":
            urls.append(r["url"])
    sw.request(f"{hostile.base}/fault/gzip-bomb", timeout=120)  # the server builds the bomb on first use
    return urls + [f"{hostile.base}/fault/{f}" for f in FAULTS]


def _cfg(sw, root: Path, **kw):
    return cfg_for(sw, root=str(root), allow_private_networks=True, max_body_bytes=150_000, sitemaps=False,
                   total_timeout_s=10.0, **kw)


def test_stored_headers_are_what_the_warc_read_back_gives(tmp_path: Path) -> None:
    """For headers it vouches for, stored_response_headers equals the FastWARC read-back (wire
    encodings renamed, Content-Length of the stored payload); headers the round trip changes
    (non-ASCII, surrounding whitespace) give None, so their record is read back instead."""
    cases = [
        [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip"), ("Content-Length", "9")],
        [("content-type", "text/html"), ("Transfer-Encoding", "chunked"), ("X-Robots-Tag", "noindex"),
         ("X-Robots-Tag", "RecrawlBot: nofollow"), ("X-Empty", ""), ("X-Tab", "a\tb")],
        [],
        [("Content-Type", "text/html"), ("X-A", "caf\xe9")],  # warcio percent-encodes it
        [("Content-Type", "text/html"), ("X-A", "trailing ")],  # the reader strips it
        [("Content-Type", "text/html"), ("X-A", " leading")],
    ]
    with WarcFile.open(str(tmp_path), "h.warc.gz") as w:
        for i, h in enumerate(cases):
            w.write_response(f"http://x.test/{i}", T0, 200, "OK", h, b"<p>body</p>", None, None)
    back = [r.http_headers for r in iter_records(str(tmp_path), "h.warc.gz") if r.warc_type == "response"]
    ours = [stored_response_headers(h, len(b"<p>body</p>")) for h in cases]
    assert ours[:3] == back[:3]
    assert ours[3:] == [None] * 3 and all(b != h + [("Content-Length", "11")] for b, h in zip(back[3:], cases[3:],
                                                                                             strict=True))


# the rule stored_response_headers vouches by, as a regular expression (its earlier implementation)
_VERBATIM_REF = re.compile(r"[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?|")
_EDGES = st.sampled_from(["a", "Z", "~", "!", " ", "\t", "\n", "\r", "\x00", "\x1f", "\x7f", "\x80", "\xe9", "\u2028",
                          "\U0001f600"])


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.tuples(st.text(_EDGES, max_size=5) | st.text(max_size=5),
                          st.text(_EDGES, max_size=6) | st.text(max_size=6)), max_size=4))
def test_stored_headers_vouch_exactly_by_the_verbatim_rule(headers: list[tuple[str, str]]) -> None:
    """The str-method check gives the headers back exactly when every name and value matches the
    reference expression (printable ASCII and inner tabs, no space or tab at either end), else None."""
    ours = stored_response_headers(headers, 11)
    out = [(("X-Crawler-" + k) if k.lower() in ("content-encoding", "transfer-encoding", "content-length")
            else k, v) for k, v in headers] + [("Content-Length", "11")]
    ok = all(_VERBATIM_REF.fullmatch(k) and _VERBATIM_REF.fullmatch(v) for k, v in out)
    assert ours == (out if ok else None)


def test_held_bodies_equal_the_warc_read_back_also_after_a_resume(simweb, tmp_path: Path) -> None:
    """A stopped attempt leaves checkpointed segments; the rerun holds only its own bodies (keyed by
    rows after the resumed ones): held + read-back must yield, row for row, what warc_bodies yields."""
    urls = _urls(simweb, 12)
    fl = fetchlist(urls)
    cfg = _cfg(simweb, tmp_path, politeness_delay_s=0.2, fetch_checkpoint_every=5, fetch_checkpoint_s=0.0,
               crawl_id="hb")
    store = Store(cfg.root, cfg.crawl_id)
    prefix = store.staged(1, store.warc_prefix(1, 0))
    ck = PartitionCheckpoints(store, 1, 0, fetchlist_key(fl))
    stop_at = time.monotonic() + 1.5
    with pytest.raises(FetchStopped):
        fetch_partition(cfg, fl, root=cfg.root, warc_prefix=prefix, now=datetime.now(UTC),
                        should_continue=lambda: time.monotonic() < stop_at, checkpoint=ck.save,
                        resume=ck.load(prefix), hold_bytes=1 << 30)
    resume = ck.load(prefix)
    assert resume.fetches.num_rows > 0
    out = fetch_partition(cfg, fl, root=cfg.root, warc_prefix=prefix, now=datetime.now(UTC),
                          checkpoint=ck.save, resume=resume, hold_bytes=1 << 30)
    fetches = out.fetches
    from_warc = list(warc_bodies(cfg.root, fetches))
    assert len(from_warc) > 40
    assert out.bodies and min(out.bodies) >= resume.fetches.num_rows  # resumed rows are read back
    held_rows = {r for r, _, _ in from_warc} & set(out.bodies)
    assert held_rows == set(out.bodies)  # only stored documents are held (no revisits, no failures)
    for row, headers, payload in from_warc:
        if row in out.bodies:
            assert out.bodies[row] == (headers, payload), fetches.column("url")[row]
    assert list(held_bodies(cfg.root, fetches, out.bodies)) == from_warc
    truncated = fetches.filter(pa.compute.is_valid(fetches.column("truncated"))).column("url").to_pylist()
    assert any("gzip-bomb" in u for u in truncated) and any("endless" in u for u in truncated)


def store_json(cfg, step: str) -> dict:
    store = Store(cfg.root, cfg.crawl_id)
    return store.read_json(store.round_dir(1, f"{step}.json"))


def _seed_partition(cfg, urls: list[str]) -> Store:
    store = Store(cfg.root, cfg.crawl_id)
    store.write_table(store.part_file(1, "fetchlist", 0), fetchlist(urls))
    return store


def _outputs(store: Store) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The partition's pages, raw links and (staged) text file: the page text is in the text file only."""
    text = store.read_table(store.staged(1, store.text_file(1, 0)), TEXT_SCHEMA)
    return (store.read_table(store.part_file(1, "pages", 0), PAGE_PART_SCHEMA),
            store.read_table(store.part_file(1, "rawlinks", 0), LINK_SCHEMA), text)


def _same(a: tuple[pa.Table, ...], b: tuple[pa.Table, ...]) -> bool:
    return len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("overlap", [40, 0], ids=["parse-ahead", "parse-after"])
@pytest.mark.parametrize("budget", [256 << 20, 120_000], ids=["all-in-memory", "over-budget"])
def test_fetch_task_parse_equals_the_separate_parse_task(simweb, tmp_path: Path, budget: int, overlap: int) -> None:
    """One partition parsed in the fetch task, then parsed again by parse_task from the WARC files
    (its marker removed): equal pages and rawlinks tables. Over a small budget, the bodies past it are
    read back, with the same result. With ``parse_overlap_docs`` the held documents are parsed on a
    side thread while the fetch goes on (crawl.parse_ahead), 40 a chunk: several chunks, then the rest."""
    cfg = _cfg(simweb, tmp_path, politeness_delay_s=0.0, crawl_id="pf", parse_in_fetch_max_bytes=budget,
               parse_overlap_docs=overlap)
    store = _seed_partition(cfg, _urls(simweb))
    both = fetch_parse_task(cfg, 1, 0, datetime.now(UTC))
    assert store.is_done(1, "fetched", 0) and store.is_done(1, "parsed", 0)
    out = _outputs(store)
    pages, links, text = out
    assert pages.schema.equals(PAGE_PART_SCHEMA) and "text" not in pages.column_names
    # every document with text has it in the text file (HTML and PDF; images have none)
    assert text.num_rows >= pages.num_rows - 40 and sum(map(len, text.column("text").to_pylist())) > 100_000
    in_memory = both["parse"]["bodies_from_memory"]
    assert both["parse"]["pages"] == pages.num_rows > 60 and links.num_rows > 500
    if budget > 1 << 20:
        assert in_memory == pages.num_rows
    else:
        assert 0 < in_memory < pages.num_rows
    # parsed ahead: the documents the paced side thread got to before the fetch ended (crawl.parse_ahead)
    assert both["parse"]["parsed_ahead"] <= in_memory and (overlap or both["parse"]["parsed_ahead"] == 0)
    assert fetch_parse_task(cfg, 1, 0, datetime.now(UTC)) == both  # a rerun: both markers, nothing redone

    store.remove(store.part_file(1, "parsed", 0, "done"))
    again = parse_task(cfg, 1, 0)
    assert again["bodies_from_memory"] == 0 and again["pages"] == pages.num_rows
    assert _same(_outputs(store), out)  # pages, links and the text file
    fetched = store.read_table(store.part_file(1, "fetched", 0), FETCH_SCHEMA)
    mimes = set(pages.column("content_mime_detected").to_pylist())
    assert {"text/html", "image/png"} <= mimes and fetched.num_rows >= len(_urls(simweb))


def test_parse_ahead_waits_while_the_fetch_loop_is_busy(simweb) -> None:
    """The side thread parses only while the fetch loop is on time: while a callback chain keeps the
    loop busy (each 10 ms, so the lag probe fires late) it parses nothing; once the loop idles it
    parses everything fed. Unpaced, the thread took its GIL turns during the busy stretch."""
    import asyncio

    from crawl.media import MediaLimits
    from crawl.parse_ahead import ParseAhead
    from crawl.tasks import CrawlConfig

    urls = host_urls(simweb, "news-001.sim.test", 24)
    bodies = [(i, u, "text/html", [("Content-Type", "text/html")], simweb.request(u, timeout=30)[2])
              for i, u in enumerate(urls)]
    ahead = ParseAhead(4, 100, ("http", "https"), MediaLimits.from_config(CrawlConfig()))

    def parsed() -> int:
        return sum(len(c.rows) for c in ahead.chunks)

    async def fetch_like() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        for b in bodies:
            ahead.feed(*b)
        busy_until = time.perf_counter() + 0.4
        done = loop.create_future()

        def busy() -> None:  # 10 ms of work per callback, one after another
            end = time.perf_counter() + 0.01
            while time.perf_counter() < end:
                pass
            if time.perf_counter() < busy_until:
                loop.call_soon(busy)
            else:
                done.set_result(None)

        loop.call_soon(busy)
        await done
        during = parsed()
        deadline = time.perf_counter() + 20
        while parsed() < len(bodies) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)  # idle: the probe fires on time
        return during, parsed()

    during, after = asyncio.run(fetch_like())
    ahead.finish()
    assert during == 0 and after == len(bodies) and ahead.paced_s > 0.3


def test_a_partition_fetched_but_not_parsed_is_parsed_from_its_warc_files(simweb, tmp_path: Path) -> None:
    """Killed between the fetch marker and the parse marker: the rerun's fetch is skipped and the
    partition is parsed from its WARC files, to the same tables the separate task gives."""
    cfg = _cfg(simweb, tmp_path, politeness_delay_s=0.0, crawl_id="pk")
    urls = [u for h in HOSTS for u in host_urls(simweb, h, 10)]
    store = _seed_partition(cfg, urls)
    fetch_task(cfg, 1, 0, datetime.now(UTC))  # the fetch half only: as if killed before parsing
    assert not store.is_done(1, "parsed", 0)
    both = fetch_parse_task(cfg, 1, 0, datetime.now(UTC))
    assert both["parse"]["bodies_from_memory"] == 0 and both["parse"]["pages"] > 20
    out = _outputs(store)
    assert out[2].num_rows > 20
    store.remove(store.part_file(1, "parsed", 0, "done"))
    parse_task(cfg, 1, 0)
    assert _same(_outputs(store), out)


def test_a_round_parsed_in_the_fetch_task_equals_the_two_task_round(simweb, tmp_path: Path) -> None:
    """The same round crawled twice, once parsing in the fetch task and once with a separate parse
    task (``parse_in_fetch_max_bytes`` 0): the published page index and links, read by DuckDB, hold
    the same rows (fetch times, WARC offsets and pages with per-request noise aside)."""
    from crawl import query
    from crawl import round as rnd
    from crawl.cluster import dask_client
    from crawl.config import load_config

    simweb.set_clock(speed=0.0)  # no page changes between the two crawls
    noisy = set(simweb.truth().filter(pa.compute.field("noisy")).column("url").to_pylist())
    seeds = _urls(simweb, 12)
    base = {"resolve": [simweb.resolve_rule], "politeness_delay_s": 0.0, "max_pages": 1000, "partitions": 3,
            "url_shards": 2, "round_duration_s": 20.0, "connect_timeout_s": 2.0, "read_timeout_s": 2.0,
            "total_timeout_s": 4.0, "max_body_bytes": 300_000, "dask_workers": 2}
    got = {}
    for name, budget in (("in_fetch", 256 << 20), ("two_tasks", 0)):
        cfg = load_config(overrides={**base, "root": str(tmp_path / name), "crawl_id": "eq",
                                     "parse_in_fetch_max_bytes": budget}, use_env=False)
        with dask_client(cfg) as client:
            rnd.run_round(cfg, seeds, client=client)
        parsed = [p["parse"] for p in store_json(cfg, "fetch_parse")["per_partition"]]
        con = query.connect(cfg.root, cfg.crawl_id)
        cols = [c for c in con.sql("SELECT * FROM pages LIMIT 0").to_arrow_table().column_names
                if c not in ("fetch_time", "warc_record_offset", "warc_record_length", "round")
                and c not in ("crawl_status", "duplicate_of")]  # which mirror copy came first: timing
        dups = con.sql("SELECT count(*) FROM pages WHERE crawl_status = 'duplicate'").fetchall()[0][0]
        pages = con.sql(f"SELECT {', '.join(cols)} FROM pages ORDER BY url, subset").to_arrow_table()
        links = con.sql("SELECT * EXCLUDE (round) FROM links ORDER BY ALL").to_arrow_table()
        text = con.sql("SELECT * EXCLUDE (fetch_time, round) FROM text ORDER BY url").to_arrow_table()
        got[name] = (pages, links, parsed, dups, text)
    (p1, l1, parsed1, d1, t1), (p2, l2, parsed2, d2, t2) = got["in_fetch"], got["two_tasks"]
    assert t1.num_rows > 100 and t1.column("url").equals(t2.column("url"))
    keep = pa.array([u not in noisy for u in t1.column("url").to_pylist()])
    assert t1.filter(keep).equals(t2.filter(keep))
    assert d1 == d2
    assert all(p["bodies_from_memory"] == p["pages"] for p in parsed1)  # the lever was on...
    assert all(p["bodies_from_memory"] == 0 for p in parsed2)  # ... and off
    assert p1.num_rows > 200 and l1.num_rows > 2000, (p1.num_rows, l1.num_rows)
    assert p1.column("url").equals(p2.column("url"))
    clean = pa.array([u not in noisy for u in p1.column("url").to_pylist()])
    a, b = p1.filter(clean), p2.filter(clean)
    diff = {c: [(u, x, y) for u, x, y in zip(a.column("url").to_pylist(), a.column(c).to_pylist(),
                                             b.column(c).to_pylist(), strict=True) if x != y][:3]
            for c in a.column_names if not a.column(c).equals(b.column(c))}
    assert not diff, {c: (len(v), v[0]) for c, v in diff.items()}
    assert l1.equals(l2)


@pytest.fixture
def ftp_server(tmp_path: Path):
    yield from _start(tmp_path)


def test_ftp_resources_parse_the_same_from_memory(ftp_server, tmp_path: Path) -> None:
    """FTP captures are ``resource`` records without HTTP headers (their type from the fetch row):
    held with no headers, they parse to what the separate task reads back (files and listings)."""
    from crawl.config import load_config
    from crawl.records import FETCHLIST_SCHEMA
    from crawl.url import url_hash

    urls = [f"ftp://{HOST}/", f"ftp://{HOST}/pub/", f"ftp://{HOST}/pub/deep/"]
    ftpd = ftp_server
    urls += [f"ftp://{HOST}/{rel}" for rel in sorted(ftpd.files)]
    cfg = load_config(overrides={"root": str(tmp_path / "crawl"), "crawl_id": "ftp", "resolve": [ftpd.rule],
                                 "allowed_schemes": ["http", "https", "ftp"], "politeness_delay_s": 0.0,
                                 "max_body_bytes": 100_000, "total_timeout_s": 8.0}, use_env=False)
    store = Store(cfg.root, cfg.crawl_id)
    n = len(urls)
    fl = pa.table({"url": urls, "url_hash": pa.array([url_hash(u) for u in urls], pa.uint64()), "host": [HOST] * n,
                   "depth": pa.array([0] * n, pa.int32()), "priority": [1.0] * n, "etag": [None] * n,
                   "last_modified": [None] * n, "prev_digest": pa.array([None] * n, pa.string()),
                   "pkey": [HOST] * n}, schema=FETCHLIST_SCHEMA)
    store.write_table(store.part_file(1, "fetchlist", 0), fl)
    both = fetch_parse_task(cfg, 1, 0, datetime.now(UTC))
    out = _outputs(store)
    pages, links, _ = out
    assert both["parse"]["bodies_from_memory"] == pages.num_rows >= len(ftpd.files)
    assert any(u.startswith("ftp://") for u in links.column("to_url").to_pylist())
    store.remove(store.part_file(1, "parsed", 0, "done"))
    assert parse_task(cfg, 1, 0)["bodies_from_memory"] == 0
    assert _same(_outputs(store), out)
