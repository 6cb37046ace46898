"""WARC writer/reader: real files written by crawl.warc, read back sequentially and by byte range (FastWARC
and warcio), and each record compared byte for byte with what warcio's own writer makes of it."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fsspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawl.fingerprint import b32_sha1, payload_digest
from crawl.warc import (
    REVISIT_NOT_MODIFIED,
    REVISIT_PROFILE,
    SOFTWARE,
    WarcFile,
    _uuid4_urn,
    iter_records,
    iter_records_warcio,
    read_record,
    warc_date,
)

T0 = datetime(2026, 11, 30, 6, 0, 0, 123000, tzinfo=UTC)


def _write_sample(root: str, rel: str) -> dict:
    bodies = {
        "http://a.test/": b"<html><title>A</title><a href='/x'>x</a></html>",
        "http://a.test/bin": bytes(range(256)) * 40,  # binary, with CR/LF bytes inside
        "http://b.test/empty": b"",
    }
    refs: dict = {"req": [], "resp": [], "rev": None}
    with WarcFile.open(root, rel, user_agent="RecrawlBot/0.1 (+http://x)") as w:
        for i, (url, body) in enumerate(bodies.items()):
            t = T0 + timedelta(seconds=i)
            rq = w.write_request(url, t, "GET", [("Host", url.split("/")[2]), ("User-Agent", "RB")], ip="127.0.0.1")
            rs = w.write_response(
                url, t, 200, "OK",
                [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip"),
                 ("Transfer-Encoding", "chunked"), ("Content-Length", "17"), ("ETag", '"e1"')],
                body, "127.0.0.1", "length" if i == 1 else None, concurrent_to=rq.record_id,
            )
            refs["req"].append((url, rq))
            refs["resp"].append((url, rs, body))
        rv = w.write_revisit(
            "http://c.test/copy", T0 + timedelta(seconds=9), 200, "OK", [("Content-Type", "text/html")],
            refs["resp"][0][1].digest, "http://a.test/", T0,
        )
        refs["rev"] = rv
    return refs


def test_roundtrip_sequential_and_by_range(tmp_path: Path) -> None:
    root = str(tmp_path)
    refs = _write_sample(root, "warc/seg-00000.warc.gz")
    final = tmp_path / "warc" / "seg-00000.warc.gz"
    assert final.exists()

    recs = list(iter_records(root, "warc/seg-00000.warc.gz"))
    assert [r.warc_type for r in recs] == ["warcinfo"] + ["request", "response"] * 3 + ["revisit"]
    assert b"RecrawlBot/0.1" in recs[0].payload
    assert recs[0].warc_headers["WARC-Filename"] == "seg-00000.warc.gz"
    # members tile the file exactly
    assert recs[0].offset == 0
    for a, b in zip(recs, recs[1:], strict=False):
        assert a.offset + a.length == b.offset
    assert recs[-1].offset + recs[-1].length == final.stat().st_size

    by_offset = {r.offset: r for r in recs}
    for url, ref, body in refs["resp"]:
        seq = by_offset[ref.offset]
        assert seq.length == ref.length
        rng = read_record(root, "warc/seg-00000.warc.gz", ref.offset, ref.length)
        for r in (seq, rng):
            assert r.warc_type == "response" and r.url == url
            assert r.http_status == 200 and r.http_reason == "OK"
            assert r.payload == body
            assert r.warc_headers["WARC-Payload-Digest"] == ref.digest == payload_digest(body)
            assert r.warc_headers["WARC-IP-Address"] == "127.0.0.1"
            assert r.warc_headers["WARC-Date"] == warc_date(T0 + timedelta(seconds=refs["resp"].index((url, ref, body))))
            h = dict(r.http_headers)
            # stored payload is decoded: wire-encoding headers are renamed, Content-Length is the stored size
            assert "Content-Encoding" not in h and "Transfer-Encoding" not in h
            assert h["X-Crawler-Content-Encoding"] == "gzip"
            assert h["X-Crawler-Transfer-Encoding"] == "chunked"
            assert h["X-Crawler-Content-Length"] == "17"
            assert h["Content-Length"] == str(len(body))
            assert h["ETag"] == '"e1"'
    # truncated flag and concurrency link
    assert read_record(root, "warc/seg-00000.warc.gz", refs["resp"][1][1].offset, refs["resp"][1][1].length
                       ).warc_headers["WARC-Truncated"] == "length"
    assert "WARC-Truncated" not in by_offset[refs["resp"][0][1].offset].warc_headers
    for (_, rq), (_, rs, _) in zip(refs["req"], refs["resp"], strict=True):
        req = read_record(root, "warc/seg-00000.warc.gz", rq.offset, rq.length)
        assert req.warc_type == "request" and req.warc_headers["WARC-Record-ID"] == rq.record_id
        assert ("User-Agent", "RB") in req.http_headers
        resp = by_offset[rs.offset]
        assert resp.warc_headers["WARC-Concurrent-To"] == rq.record_id
        assert resp.warc_headers["WARC-Record-ID"] == rs.record_id

    rv = read_record(root, "warc/seg-00000.warc.gz", refs["rev"].offset, refs["rev"].length)
    assert rv.warc_type == "revisit" and rv.payload == b""
    assert rv.warc_headers["WARC-Profile"] == REVISIT_PROFILE
    assert rv.warc_headers["WARC-Refers-To-Target-URI"] == "http://a.test/"
    # Refers-To-Date equals the original response's WARC-Date (millisecond precision both sides)
    assert rv.warc_headers["WARC-Refers-To-Date"] == by_offset[refs["resp"][0][1].offset].warc_headers["WARC-Date"]
    assert rv.warc_headers["WARC-Payload-Digest"] == payload_digest(refs["resp"][0][2])


def test_each_record_is_its_own_gzip_member(tmp_path: Path) -> None:
    refs = _write_sample(str(tmp_path), "x.warc.gz")
    raw = (tmp_path / "x.warc.gz").read_bytes()
    _, ref, body = refs["resp"][1]
    member = gzip.decompress(raw[ref.offset: ref.offset + ref.length])
    assert member.startswith(b"WARC/1.1\r\n")
    assert member.endswith(body + b"\r\n\r\n")


def test_warcio_check_validates_digests(tmp_path: Path) -> None:
    _write_sample(str(tmp_path), "x.warc.gz")
    warcio_bin = Path(sys.executable).parent / "warcio"
    out = subprocess.run([str(warcio_bin), "check", "-v", str(tmp_path / "x.warc.gz")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "digest pass" in out.stdout


def test_digest_is_sha1_base32() -> None:
    data = b"hello world"
    assert payload_digest(data) == "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()
    assert payload_digest(data) == "sha1:FKXGYNOJJ7H3IFO35FPUBC445EPOQRXN"
    assert payload_digest(b"") == "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"


@given(st.binary(min_size=20, max_size=20))
@example(bytes(20))
@example(b"\xff" * 20)
def test_b32_of_a_digest_is_base64s(digest: bytes) -> None:
    """The writer's base32 (crawl.fingerprint.b32_sha1) against the standard library's."""
    assert b32_sha1(digest) == base64.b32encode(digest).decode("ascii")


def test_b32_of_every_single_bit_is_base64s() -> None:
    """Each of the 160 bits lands in its own digit's place (b32_sha1 spreads the bits with masks: a
    wrong mask or shift moves some bit to another digit)."""
    for bit in range(160):
        digest = (1 << bit).to_bytes(20, "big")
        assert b32_sha1(digest) == base64.b32encode(digest).decode("ascii"), bit
        digest = ((1 << 160) - 1 - (1 << bit)).to_bytes(20, "big")
        assert b32_sha1(digest) == base64.b32encode(digest).decode("ascii"), bit


_HEADER_NAMES = st.sampled_from(["Content-Type", "content-length", "Content-Length", "CONTENT-ENCODING",
                                 "Content-Encoding", "transfer-Encoding", "Transfer-Encoding", "ETag", "Date",
                                 "X-Content-Length", "Content-Lengths", "Set-Cookie", "Server"])
_HEADER_VALUES = st.one_of(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30),
                           st.text(max_size=8))


@given(st.lists(st.tuples(_HEADER_NAMES, _HEADER_VALUES), max_size=12), st.integers(0, 10**9),
       st.sampled_from(["OK", "Not Found", ""]))
def test_response_block_is_warcios_block_of_the_renamed_headers(headers: list[tuple[str, str]], n: int,
                                                                 reason: str) -> None:
    """The response record's HTTP block (crawl.warc._response_block, one pass with remembered name
    prefixes) equals warcio's encoding of the stored headers: the wire encoding headers renamed to
    ``X-Crawler-<Name>`` whatever their case, every other header as received, then the stored payload's
    Content-Length; asked twice (the second time from the remembered prefixes) and with the memory full."""
    from warcio.statusandheaders import StatusAndHeaders

    from crawl import warc as W

    status = f"HTTP/1.1 {f'200 {reason}'.rstrip()}"
    stored = [("X-Crawler-" + k if k.lower() in ("content-encoding", "transfer-encoding", "content-length")
               else k, v) for k, v in headers] + [("Content-Length", str(n))]
    want = StatusAndHeaders(status, stored).to_ascii_bytes()
    assert W._response_block(status, headers, n) == want
    assert W._response_block(status, headers, n) == want
    saved = dict(W._STORED_NAMES)
    try:
        W._STORED_NAMES.clear()
        W._STORED_NAMES.update({f"X-Filler-{i}": f"X-Filler-{i}: " for i in range(W._STORED_NAMES_MAX)})
        assert W._response_block(status, headers, n) == want
        assert len(W._STORED_NAMES) == W._STORED_NAMES_MAX
    finally:
        W._STORED_NAMES.clear()
        W._STORED_NAMES.update(saved)


@given(st.binary(min_size=16, max_size=16))
def test_record_ids_are_uuid4_as_the_uuid_module_spells_them(raw: bytes) -> None:
    assert _uuid4_urn(raw) == f"<urn:uuid:{uuid.UUID(bytes=raw, version=4)}>"


_URL_PARTS = st.one_of(st.text(alphabet="aZ09-._~!$&'()*+,;=:@/%?#\\ \"<>`{}|^e2E\u00e9", max_size=24),
                       st.text(alphabet="aZ09-._~!$&'()*+,;=:@/%e2E", max_size=24).map(lambda t: "/" + t))


@given(st.sampled_from(["http", "https", "HTTP", "ftp"]),
       st.sampled_from(["a.test", "www.ex-ample.co.uk", "A.Test", "xn--caf-dma.test", "1.2.3.4", "a.test:8080",
                        "a.test:80", "u:p@a.test", "a..test", "a.test.", "a.b1", "x.0x1f", "a_b.test", "999.1.1.1"]),
       _URL_PARTS, st.one_of(st.none(), _URL_PARTS))
@example("http", "a.test", "/it's", "a'b")
@example("http", "a.test", "/a/%2E./b", None)
@example("https", "a.test", "", "")
@example("http", "a.test", "/a/..", "x")
@settings(max_examples=400)
def test_request_target_equals_the_parsers(scheme: str, host: str, path: str, query: str | None) -> None:
    """The request line's target (sliced from plain URLs) is what crawl.url.parse_url gives."""
    from crawl.url import InvalidURL, parse_url
    from crawl.warc import _request_target

    url = f"{scheme}://{host}{path}" + ("" if query is None else f"?{query}")
    try:
        u = parse_url(url)
    except InvalidURL:
        with pytest.raises(InvalidURL):
            _request_target(url)
        return
    assert _request_target(url) == (f"{u.path}?{u.query}" if u.query else u.path)


def test_written_record_ids_are_distinct_version_4_uuids(tmp_path: Path) -> None:
    _write_sample(str(tmp_path), "ids.warc.gz")
    ids = [r.warc_headers["WARC-Record-ID"] for r in iter_records_warcio(str(tmp_path), "ids.warc.gz")]
    assert len(ids) > 5 and len(set(ids)) == len(ids)
    for rid in ids:
        assert rid.startswith("<urn:uuid:") and rid.endswith(">")
        u = uuid.UUID(rid[10:-1])
        assert u.version == 4 and u.variant == uuid.RFC_4122 and f"<urn:uuid:{u}>" == rid


def test_atomic_publish_and_rerun_replaces(tmp_path: Path) -> None:
    root = str(tmp_path)
    final = tmp_path / "seg" / "f.warc.gz"
    w = WarcFile.open(root, "seg/f.warc.gz")
    w.write_response("http://a.test/", T0, 200, "OK", [], b"first", None, None)
    assert not final.exists()  # nothing published before close
    assert not list((tmp_path / "seg").glob("*.warc.gz"))  # temp file is not picked up by globs
    w.close()
    assert final.exists()
    first_size = final.stat().st_size

    with WarcFile.open(root, "seg/f.warc.gz") as w2:
        w2.write_response("http://a.test/", T0, 200, "OK", [], b"second, longer body", None, None)
        assert final.stat().st_size == first_size  # old file untouched while the rerun writes
    bodies = [r.payload for r in iter_records(root, "seg/f.warc.gz") if r.warc_type == "response"]
    assert bodies == [b"second, longer body"]
    assert sorted(os.listdir(tmp_path / "seg")) == ["f.warc.gz"]  # no temp files left behind


def test_exception_aborts_without_publishing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with WarcFile.open(str(tmp_path), "crash.warc.gz") as w:
            w.write_response("http://a.test/", T0, 200, "OK", [], b"partial", None, None)
            raise RuntimeError("worker died")
    assert os.listdir(tmp_path) == []


def test_memory_root() -> None:
    root = f"memory://warc-test-{uuid.uuid4().hex}"
    refs = _write_sample(root, "sub/m.warc.gz")
    fs = fsspec.filesystem("memory")
    assert fs.exists(root.replace("memory://", "/") + "/sub/m.warc.gz")
    _, ref, body = refs["resp"][0]
    assert read_record(root, "sub/m.warc.gz", ref.offset, ref.length).payload == body
    assert len(list(iter_records(root, "sub/m.warc.gz"))) == 8


def test_rejects_bad_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        WarcFile.open(str(tmp_path), "x.warc")


def _members(path: Path) -> list[bytes]:
    """Every gzip member of a file, decompressed (one per record)."""
    import zlib

    data, out = path.read_bytes(), []
    while data:
        d = zlib.decompressobj(31)
        out.append(d.decompress(data))
        data = d.unused_data
    return out


def _fields(member: bytes) -> dict[str, str]:
    head = member.split(b"\r\n\r\n", 1)[0].decode("utf-8").split("\r\n")[1:]
    return dict(line.split(": ", 1) for line in head)


def test_records_match_warcio_writer(tmp_path: Path) -> None:
    """Every record kind, written by WarcFile, equals byte for byte the record warcio's writer makes
    from the same inputs (the same record id and date: the only fields either side draws itself)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    body = b"<html>caf\xc3\xa9 \r\n</html>" * 50
    hdrs = [("Content-Type", "text/html"), ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked"),
            ("Content-Length", "17"), ("X-Odd", "caf\xe9"), ("Content-Disposition", "attachment; filename=\"v\xe9\""),
            ("Set-Cookie", "a=b")]
    with WarcFile.open(str(tmp_path), "x.warc.gz", user_agent="RB/1") as w:
        rq = w.write_request("http://a.test/p?q=1", T0, "get", [("Host", "a.test"), ("User-Agent", "RB")],
                             ip="127.0.0.1")
        w.write_response("http://a.test/p?q=1", T0, 200, "OK", hdrs, body, "127.0.0.1", "length",
                         concurrent_to=rq.record_id)
        w.write_response("http://a.test/none", T0, 404, "", [], b"", None, None)
        w.write_revisit("http://a.test/c", T0, 200, "OK", hdrs, "sha1:AAAA", "http://a.test/", T0, ip="::1")
        w.write_revisit("ftp://f.test/x", T0, None, "", [], "sha1:BBBB", "ftp://f.test/y", T0)
        w.write_resource("ftp://f.test/x", T0, "text/plain", b"file\r\n", "10.0.0.1", None)
        w.write_conversion("http://a.test/p", T0, b"<html>dom</html>", rq.record_id, "text/html")
        # a request concurrent to another record (its optional line after the address)
        w.write_request("http://a.test/r", T0, "GET", [("Host", "a.test")], ip="10.0.0.2", concurrent_to=rq.record_id)
        # a 304's revisit (server-not-modified profile): its headers are the block
        w.write_revisit("http://a.test/p?q=1", T0, 304, "Not Modified", [("ETag", '"v1"'), ("Content-Length", "0")],
                        "sha1:CCCC", "http://a.test/p?q=1", T0, ip="127.0.0.1", profile=REVISIT_NOT_MODIFIED)
    ours = _members(tmp_path / "x.warc.gz")

    buf = io.BytesIO()
    ref = WARCWriter(buf, gzip=False, warc_version="1.1")

    def put(rec: object) -> bytes:
        buf.seek(0)
        buf.truncate()
        ref.write_record(rec)
        return buf.getvalue()

    def base(i: int, *keys: str) -> dict[str, str]:
        f = _fields(ours[i])
        return {k: f[k] for k in ("WARC-Record-ID", "WARC-Date", *keys) if k in f}

    resp_headers = [("X-Crawler-" + n if n.lower() in ("content-encoding", "transfer-encoding", "content-length")
                     else n, v) for n, v in hdrs]
    info = ref.create_warcinfo_record("x.warc.gz", {
        "software": SOFTWARE, "format": "WARC File Format 1.1",
        "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
        "http-header-user-agent": "RB/1"})
    info.rec_headers.replace_header("WARC-Record-ID", _fields(ours[0])["WARC-Record-ID"])
    info.rec_headers.replace_header("WARC-Date", _fields(ours[0])["WARC-Date"])
    not_modified = ref.create_revisit_record(
        "http://a.test/p?q=1", "sha1:CCCC", "http://a.test/p?q=1", warc_date(T0),
        http_headers=StatusAndHeaders("304 Not Modified", [("ETag", '"v1"'), ("X-Crawler-Content-Length", "0")],
                                      protocol="HTTP/1.1"),
        warc_headers_dict=base(9, "WARC-IP-Address"))
    not_modified.rec_headers.replace_header("WARC-Profile", "http://netpreserve.org/warc/1.1/revisit/server-not-modified")
    expected = [
        put(info),
        put(ref.create_warc_record(
            "http://a.test/p?q=1", "request", payload=io.BytesIO(b""), length=0,
            warc_headers_dict=base(1, "WARC-IP-Address"),
            http_headers=StatusAndHeaders("GET /p?q=1 HTTP/1.1", [("Host", "a.test"), ("User-Agent", "RB")],
                                          is_http_request=True))),
        put(ref.create_warc_record(
            "http://a.test/p?q=1", "response", payload=io.BytesIO(body), length=len(body),
            warc_headers_dict=base(2, "WARC-IP-Address", "WARC-Payload-Digest", "WARC-Truncated",
                                   "WARC-Concurrent-To"),
            http_headers=StatusAndHeaders("200 OK", resp_headers + [("Content-Length", str(len(body)))],
                                          protocol="HTTP/1.1"))),
        put(ref.create_warc_record(
            "http://a.test/none", "response", payload=io.BytesIO(b""), length=0,
            warc_headers_dict=base(3, "WARC-Payload-Digest"),
            http_headers=StatusAndHeaders("404", [("Content-Length", "0")], protocol="HTTP/1.1"))),
        put(ref.create_revisit_record("http://a.test/c", "sha1:AAAA", "http://a.test/", warc_date(T0),
                                      http_headers=StatusAndHeaders("200 OK", resp_headers, protocol="HTTP/1.1"),
                                      warc_headers_dict=base(4, "WARC-IP-Address"))),
        put(ref.create_revisit_record("ftp://f.test/x", "sha1:BBBB", "ftp://f.test/y", warc_date(T0),
                                      warc_headers_dict=base(5))),
        put(ref.create_warc_record(
            "ftp://f.test/x", "resource", payload=io.BytesIO(b"file\r\n"), length=6, warc_content_type="text/plain",
            warc_headers_dict=base(6, "WARC-IP-Address", "WARC-Payload-Digest", "WARC-Block-Digest"))),
        put(ref.create_warc_record(
            "http://a.test/p", "conversion", payload=io.BytesIO(b"<html>dom</html>"), length=16,
            warc_content_type="text/html", warc_headers_dict=base(7, "WARC-Refers-To", "WARC-Payload-Digest"))),
        put(ref.create_warc_record(
            "http://a.test/r", "request", payload=io.BytesIO(b""), length=0,
            warc_headers_dict=base(8, "WARC-IP-Address", "WARC-Concurrent-To"),
            http_headers=StatusAndHeaders("GET /r HTTP/1.1", [("Host", "a.test")], is_http_request=True))),
        put(not_modified),
    ]
    assert len(ours) == len(expected)
    for got, want in zip(ours, expected, strict=True):
        assert got == want
    # and both readers give the same records back
    assert [(r.warc_type, r.url, r.http_headers, r.payload, r.warc_headers) for r in
            iter_records(str(tmp_path), "x.warc.gz")] == \
        [(r.warc_type, r.url, r.http_headers, r.payload, r.warc_headers) for r in
         iter_records_warcio(str(tmp_path), "x.warc.gz")]


def test_records_of_every_size_read_back_and_compress_as_one_shot(tmp_path: Path) -> None:
    """Records laid out in the file's reused buffer (small; larger than it, so it grows; larger than
    its cap, joined instead), interleaved so a short record follows a long one in the same buffer:
    warcio and FastWARC read every payload back, and each gzip member is the one-shot ISA-L deflate
    of its record (the bytes the writer made before the buffer)."""
    from isal import isal_zlib

    from crawl import warc

    sizes = [10, 70_000, 5, 300_000, 0, warc._RECORD_BUFFER_MAX + 10, 17, 2_000_000, 1]
    bodies = [os.urandom(n // 2) + b"\r\n" * (n // 4) for n in sizes]
    with WarcFile.open(str(tmp_path), "x.warc.gz") as w:
        refs = [w.write_response(f"http://a.test/{i}", T0, 200, "OK", [("Content-Type", "x/y")], body, None, None)
                for i, body in enumerate(bodies)]
    raw = (tmp_path / "x.warc.gz").read_bytes()
    for ref, record in zip(refs, _members(tmp_path / "x.warc.gz")[1:], strict=True):
        assert raw[ref.offset:ref.offset + ref.length] == isal_zlib.compress(record, warc.GZIP_LEVEL, 31)
    for reader in (iter_records, iter_records_warcio):
        got = [r.payload for r in reader(str(tmp_path), "x.warc.gz") if r.warc_type == "response"]
        assert got == bodies
