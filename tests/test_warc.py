"""WARC writer/reader: real files written with warcio, read back sequentially and by byte range."""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fsspec
import pytest

from crawl.fingerprint import payload_digest
from crawl.warc import REVISIT_PROFILE, WarcFile, iter_records, read_record, warc_date

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
