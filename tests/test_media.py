"""Media parsers (PDF, images) and parser plugins, scored against the simulated web's truth.

The end-to-end test crawls every PDF, PNG, JPEG and binary file of a small simulated web (seeded
directly, one round on a real embedded Dask cluster, the virtual clock stopped so versions hold still)
with a parser plugin loaded through config, then reads the published ``text``, ``links`` and
``images`` tables back with DuckDB and compares them with the truth (``crawl.simweb.truth``) and, for
the plugin, with the bytes the server sends.
"""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import start_simweb
from media_plugin_example import octets_text

from crawl import query
from crawl import round as rnd
from crawl.cluster import dask_client
from crawl.config import ConfigError, load_config
from crawl.media import MediaLimits, media_limits
from crawl.parse import ParserLoadError, install_parsers, load_parser, parse_document, parser_for
from crawl.simweb import model as M
from crawl.simweb.render import Renderer
from crawl.store import Store
from crawl.url import canonicalize

PLUGIN = "media_plugin_example:parse_octets"
MEDIA_TYPES = ("pdf", "png", "jpeg", "bin")


@pytest.fixture(scope="module")
def media_web(tmp_path_factory):
    sw = start_simweb(tmp_path_factory.mktemp("simweb-media"), hosts=60, seed=2, pages_per_host=20)
    try:
        sw.set_clock(speed=0)  # versions hold still between the crawl and the truth
        yield sw
    finally:
        sw.stop()


def _media_seeds(truth: pa.Table) -> pa.Table:
    """Media files the crawler may fetch at once: robots allow them, their host answers robots.txt
    without delay, and it is an ordinary host (not hostile or a trap)."""
    rows = [r for r in truth.to_pylist()
            if r["page_type"] in MEDIA_TYPES and r["robots_allowed"] and r["crawl_delay"] is None
            and r["host_robots"] not in ("timeout", "5xx") and r["kind"] not in ("hostile", "trap")]
    return pa.Table.from_pylist(rows, schema=truth.schema)


@pytest.fixture(scope="module")
def media_crawl(media_web, tmp_path_factory):
    truth = media_web.truth()
    seeds = _media_seeds(truth)
    root = tmp_path_factory.mktemp("crawl-media")
    cfg = load_config(overrides={
        "root": str(root), "crawl_id": "media", "resolve": [media_web.resolve_rule], "politeness_delay_s": 0.05,
        "max_pages": 1000, "partitions": 2, "url_shards": 2, "round_duration_s": 60.0, "connect_timeout_s": 2.0,
        "read_timeout_s": 2.0, "total_timeout_s": 4.0, "max_crawl_delay_s": 5.0, "dask_workers": 2,
        "parsers": [PLUGIN], "dask_dashboard": False,
    }, use_env=False)
    with dask_client(cfg) as client:
        summary = rnd.run_round(cfg, seeds.column("url").to_pylist(), client=client)
    con = query.connect(cfg.root, cfg.crawl_id)
    con.register("truth", seeds)
    return cfg, con, seeds, summary


def test_crawl_parses_pdfs_like_the_truth(media_crawl) -> None:
    cfg, con, seeds, _ = media_crawl
    n_pdf = sum(t == "pdf" for t in seeds.column("page_type").to_pylist())
    rows = con.sql("""
        SELECT t.url, t.pdf_title, x.title, t.pdf_pages, x.page_count, t.pdf_text, x.text, t.pdf_links,
               (SELECT list(l.to_url) FROM links l WHERE l.from_hash = x.url_hash AND l.kind = 'pdf') AS got_links
        FROM truth t JOIN text x USING (url) WHERE t.page_type = 'pdf'
    """).fetchall()
    assert n_pdf >= 8 and len(rows) == n_pdf  # every PDF fetched and in the text table
    right = 0
    for url, want_title, title, want_pages, pages, want_text, text, want_links, got_links in rows:
        assert (title, pages) == (want_title, want_pages), url
        assert text == want_text, url
        assert sorted(got_links or []) == sorted({canonicalize(u) for u in want_links}), url
        right += 1
    assert right == n_pdf


def test_crawl_parses_images_like_the_truth(media_crawl) -> None:
    cfg, con, seeds, _ = media_crawl
    want = {r["url"]: r for r in seeds.to_pylist() if r["page_type"] in ("png", "jpeg")}
    got = {r[0]: r for r in con.sql("""
        SELECT url, format, width, height, exif_datetime, camera_make, camera_model, content_mime_detected, mode
        FROM images""").fetchall()}
    assert len(want) >= 8 and set(got) == set(want)
    kinds = set()
    for url, t in want.items():
        _, fmt, w, h, when, make, model, mime, mode = got[url]
        assert (fmt, w, h, when, make, model) == (t["image_format"], t["image_width"], t["image_height"],
                                                  t["exif_datetime"], t["camera_make"], t["camera_model"]), url
        assert mime == t["content_type"] and mode == "RGB"
        kinds.add((fmt, when is not None, make is not None))
    assert {("PNG", False, False), ("JPEG", True, False), ("JPEG", True, True)} <= kinds  # seed 2's mix
    # images have no text and no links; the pages index knows them by detected MIME type
    assert con.sql("SELECT count(*) FROM text WHERE url IN (SELECT url FROM images) AND text <> ''").fetchall() == [(0,)]


def test_plugin_from_config_parses_binary_files(media_crawl, media_web) -> None:
    cfg, con, seeds, _ = media_crawl
    bins = [r["url"] for r in seeds.to_pylist() if r["page_type"] == "bin"]
    got = dict(con.sql("SELECT url, text FROM text WHERE title = 'binary file'").fetchall())
    assert len(bins) >= 4 and set(got) == set(bins)
    for url in bins:
        status, _, body = media_web.request(url)  # the oracle: the bytes the server sends
        assert status == 200 and got[url] == octets_text(body)


def test_pdf_limits_bound_the_parse() -> None:
    m = M.build(M.SimParams(seed=2, hosts=30, pages_per_host=20))
    r = Renderer(m)
    from crawl.simweb import media

    pid = next(p for p in range(m.n_pages) if m.page_type[p] == M.PDF
               and media.pdf_page_count(m.params.seed, int(m.content[p])) >= 2)
    body, url = r.get(pid, 0, m.params.epoch0).a, m.url(pid)
    pages = media.pdf_page_count(m.params.seed, int(m.content[pid]))
    ct = {"Content-Type": "application/pdf"}
    full = parse_document(url, body, ct, 100)
    assert full.page_count == pages and full.text == " ".join(r.pdf_words(pid, 0))
    with media_limits(MediaLimits(pdf_max_bytes=10**9, pdf_max_pages=1, pdf_max_seconds=60)):
        one = parse_document(url, body, ct, 100)
    first_page = media.pdf_lines(r.pdf_words(pid, 0), pages)[0]
    assert one.page_count == pages and one.text == " ".join(first_page) and len(one.text) < len(full.text)
    assert {lk.url for lk in one.links} < {lk.url for lk in full.links}  # page 1's annotations only
    with media_limits(MediaLimits(pdf_max_bytes=len(body) - 1, pdf_max_pages=100, pdf_max_seconds=60)):
        big = parse_document(url, body, ct, 100)
    assert big.text == "" and big.links == [] and big.page_count is None and big.mime_detected == "application/pdf"
    with media_limits(MediaLimits(pdf_max_bytes=10**9, pdf_max_pages=100, pdf_max_seconds=0)):
        timed = parse_document(url, body, ct, 100)
    assert timed.text == "" and timed.page_count == pages  # past the deadline before the first page
    # a truncated or garbage PDF is a page without text, not a failed partition
    assert parse_document(url, body[: len(body) // 2], ct, 100).mime_detected == "application/pdf"
    junk = parse_document(url, b"%PDF-1.4\n" + bytes(200), ct, 100)
    assert (junk.mime_detected, junk.text, junk.links, junk.page_count) == ("application/pdf", "", [], None)


def test_config_names_a_parser_that_cannot_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="parsers: expected 'module:function'"):
        load_config(overrides={"parsers": ["no-colon"]}, use_env=False)
    with pytest.raises(ParserLoadError, match="no MIME types"):
        load_parser("media_plugin_example:not_a_parser")
    with pytest.raises(ParserLoadError, match="cannot load it: ModuleNotFoundError"):
        load_parser("no_such_module_xyz:parse")
    # the round refuses before anything is fetched
    cfg = load_config(overrides={"root": str(tmp_path), "crawl_id": "bad", "parsers": ["no_such_module_xyz:f"],
                                 "allow_private_networks": True}, use_env=False)
    rnd.inject(cfg, ["http://a.test/"])
    n = rnd.generate(cfg)["round"]
    with pytest.raises(ConfigError, match="parsers: parser 'no_such_module_xyz:f': cannot load it"):
        rnd.fetch_parse(cfg, n)
    store = Store(cfg.root, cfg.crawl_id)
    assert store.ls(store.round_dir(n, "fetched")) == [] and store.ls("warc") == []


def test_entry_point_plugin_is_found(tmp_path: Path, monkeypatch) -> None:
    """An installed package's ``recrawl.parsers`` entry point (a dist-info on sys.path, as pip leaves it)
    registers its parser: the entry point's name is the MIME type, the function needs no decorator."""
    (tmp_path / "recrawl_ep_demo.py").write_text(textwrap.dedent("""
        from crawl.parse import ParsedDoc

        def parse_demo(url, payload, headers):
            return ParsedDoc(title="demo", text=payload.decode())
    """))
    dist = tmp_path / "recrawl_ep_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: recrawl-ep-demo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[recrawl.parsers]\ntext/x-recrawl-demo = recrawl_ep_demo:parse_demo\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert parser_for("text/x-recrawl-demo") is None
    done = install_parsers()
    assert done["text/x-recrawl-demo"] == "entry point text/x-recrawl-demo"
    doc = parse_document("http://a.test/x", b"hello demo", {"Content-Type": "text/x-recrawl-demo"}, 10)
    assert (doc.title, doc.text, doc.mime_detected) == ("demo", "hello demo", "text/x-recrawl-demo")
    sys.modules.pop("recrawl_ep_demo", None)


def test_entry_points_are_read_again_only_when_a_package_is_installed(tmp_path: Path, monkeypatch) -> None:
    """The installed entry points are read once (importlib.metadata parses every distribution's
    entry_points.txt, ~11 ms a call, and every parse task and round asked), and again once a directory
    on sys.path changes: a package installed there after the first read is found by the next call."""
    import importlib.metadata
    import os

    from crawl.parse import find_parsers

    (tmp_path / "recrawl_ep_later.py").write_text(textwrap.dedent("""
        from crawl.parse import ParsedDoc

        def parse_later(url, payload, headers):
            return ParsedDoc(title="later", text=payload.decode())
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    reads = []
    real = importlib.metadata.entry_points

    def counted(**kw):  # the stdlib call, counted
        reads.append(kw)
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", counted)
    install_parsers()
    install_parsers()
    find_parsers()
    assert len(reads) == 1
    assert parser_for("text/x-recrawl-later") is None

    def later(path: Path) -> None:  # the kernel's coarse clock may not have ticked since the last change
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    (tmp_path / "scratch.txt").write_text("not a package")  # a change that installs nothing (a Dask
    later(tmp_path)  # worker's sys.path holds scratch directories other workers write to)
    install_parsers()
    assert len(reads) == 1
    dist = tmp_path / "recrawl_ep_later-1.0.dist-info"  # pip installs into a directory already on sys.path
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: recrawl-ep-later\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[recrawl.parsers]\ntext/x-recrawl-later = recrawl_ep_later:parse_later\n")
    later(tmp_path)
    done = install_parsers()
    assert len(reads) == 2
    assert done["text/x-recrawl-later"] == "entry point text/x-recrawl-later"
    install_parsers()
    assert len(reads) == 2
    doc = parse_document("http://a.test/x", b"hi", {"Content-Type": "text/x-recrawl-later"}, 10)
    assert (doc.title, doc.text) == ("later", "hi")
    sys.modules.pop("recrawl_ep_later", None)


def test_image_parser_reads_headers_only() -> None:
    """EXIF from a JPEG written by Pillow; a huge declared PNG is read from its header without decoding."""
    import struct
    import zlib

    from PIL import Image

    buf = io.BytesIO()
    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = "Make\x00", " Model X "
    exif.get_ifd(0x8769)[0x9003] = "0000:00:00 00:00:00"  # a placeholder is no date
    exif[0x0132] = "2024:02:29 23:59:59"
    Image.new("L", (7, 5)).save(buf, "JPEG", exif=exif.tobytes())
    doc = parse_document("http://a.test/i", buf.getvalue(), {"Content-Type": "image/jpeg"}, 10)
    img = doc.image
    assert (img.format, img.width, img.height, img.mode) == ("JPEG", 7, 5, "L")
    assert (img.camera_make, img.camera_model, str(img.exif_datetime)) == ("Make", "Model X", "2024-02-29 23:59:59")

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    w, h = 10_000, 8_000  # 80 M pixels declared, 3 bytes of IDAT: decoding would fail or take seconds
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\x00")) + chunk(b"IEND", b""))
    doc = parse_document("http://a.test/big.png", png, {"Content-Type": "image/png"}, 10)
    assert (doc.image.format, doc.image.width, doc.image.height) == ("PNG", w, h)
