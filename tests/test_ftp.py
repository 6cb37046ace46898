"""The ftp protocol handler (crawl/ftp.py) and the fetcher's ftp path, against a real pyftpdlib server.

The oracle is the FTP server's own log (tests/ftpserver.py: every command, every transfer, session
open/close stamped by the server), the WARC files read back with warcio and the fetch rows with
DuckDB, never the handler's own account of what it did.
"""

from __future__ import annotations

import asyncio
import mimetypes
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from crawl.ftp import LISTING_MIME, FtpLimits, fetch_ftp, listing_links
from crawl.net import GuardedResolver, PrivateAddressError
from crawl.simweb.launch import stop as stop_process
from tests.ftpserver import BIG_SIZE, make_tree, read_log

CAP = 100_000
HOST = "files.ftp.test"


@dataclass
class FtpServer:
    proc: subprocess.Popen
    port: int
    root: Path
    log: Path
    files: dict[str, bytes]

    @property
    def rule(self) -> str:
        return f"*.ftp.test=127.0.0.1:{self.port}"

    def sessions(self, wait_s: float = 10.0):
        """The server's sessions, once every one it opened has been logged closed (the client's
        QUIT returns before the server writes its 'session closed' line)."""
        deadline = time.monotonic() + wait_s
        while True:
            got = read_log(self.log, self.root)
            if all(s.closed is not None for s in got) or time.monotonic() > deadline:
                return got
            time.sleep(0.05)


def _start(tmp_path: Path, *extra: str):
    root = tmp_path / "ftproot"
    root.mkdir()
    files = make_tree(root)
    log = tmp_path / "ftpd.log"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("ftpserver.py")), str(root), str(log),
                             *extra],
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "ftpd.err", "wb"), text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), f"ftp server did not start: {line!r} {(tmp_path / 'ftpd.err').read_text()}"
        yield FtpServer(proc, int(line.split()[1]), root, log, files)
    finally:
        stop_process(proc)


@pytest.fixture
def ftpd(tmp_path: Path):
    yield from _start(tmp_path)


@pytest.fixture
def ftpd_bounce(tmp_path: Path):
    """A server whose PASV replies name another address (10.9.8.7) and that has no EPSV."""
    yield from _start(tmp_path, "--pasv-address", "10.9.8.7")


@pytest.fixture
def ftpd_busy(tmp_path: Path):
    """A server that answers the first RETR of readme.txt with 421 (and closes the session)."""
    yield from _start(tmp_path, "--busy-once", "readme.txt")


def _fetch(url: str, rules: list[str], cap: int = CAP):
    async def run():
        resolver = GuardedResolver(rules)
        try:
            return await fetch_ftp(url, FtpLimits(5.0, 5.0, 20.0, cap), resolver)
        finally:
            await resolver.close()
    return asyncio.run(run())


# --- handler level ----------------------------------------------------------------------------------

def test_file_binary_listing_and_missing(ftpd: FtpServer) -> None:
    r = _fetch(f"ftp://{HOST}/readme.txt", [ftpd.rule])
    assert (r.status, r.body, r.content_type, r.truncated) == (200, ftpd.files["readme.txt"], "text/plain", None)
    assert r.ip == "127.0.0.1"
    b = _fetch(f"ftp://{HOST}/bin/blob.bin", [ftpd.rule])
    assert b.status == 200 and b.body == ftpd.files["bin/blob.bin"] and b.truncated is None
    sp = _fetch(f"ftp://{HOST}/pub/with%20space.txt", [ftpd.rule])
    assert sp.status == 200 and sp.body == ftpd.files["pub/with space.txt"]
    d = _fetch(f"ftp://{HOST}/pub/", [ftpd.rule])
    assert d.status == 200 and d.is_listing and d.content_type.startswith(LISTING_MIME)
    assert sorted(listing_links(f"ftp://{HOST}/pub/", d.body, "mlsd")) == [
        f"ftp://{HOST}/pub/deep/", f"ftp://{HOST}/pub/index.html", f"ftp://{HOST}/pub/notes.md",
        f"ftp://{HOST}/pub/with%20space.txt"]
    assert _fetch(f"ftp://{HOST}/nope.txt", [ftpd.rule]).status == 404
    redirect = _fetch(f"ftp://{HOST}/pub", [ftpd.rule])
    assert (redirect.status, redirect.location) == (301, f"ftp://{HOST}/pub/")

    sessions = ftpd.sessions()
    assert len(sessions) == 6  # one session per fetch, each closed (QUIT) before the next opened
    assert all(s.closed is not None for s in sessions)
    # one at a time: a session's QUIT came before the next session opened
    assert all(a.commands[-1][1] == "QUIT" and a.commands[-1][0] <= b.opened
               for a, b in zip(sessions, sessions[1:], strict=False))
    done = [t for s in sessions for t in s.transfers]
    assert ("/readme.txt", True, len(ftpd.files["readme.txt"])) in done
    assert ("/bin/blob.bin", True, 5000) in done
    assert any(c.startswith("USER anonymous") for _, c in sessions[0].commands)


def test_body_cap_aborts_the_transfer(ftpd: FtpServer) -> None:
    r = _fetch(f"ftp://{HOST}/big.iso", [ftpd.rule], cap=CAP)
    assert r.status == 200 and r.truncated == "length"
    assert r.body == ftpd.files["big.iso"][:CAP]
    (s,) = ftpd.sessions()
    (path, completed, sent), = s.transfers
    assert path == "/big.iso" and not completed and sent < BIG_SIZE  # the server saw the transfer cut


def test_guard_refuses_loopback_without_a_rule(ftpd: FtpServer) -> None:
    with pytest.raises(PrivateAddressError):
        _fetch(f"ftp://127.0.0.1:{ftpd.port}/readme.txt", [])
    with pytest.raises(PrivateAddressError):  # a name that resolves to loopback, no rule
        _fetch(f"ftp://localhost:{ftpd.port}/readme.txt", [])
    # a rule for another port does not open this one
    with pytest.raises(PrivateAddressError):
        _fetch(f"ftp://127.0.0.1:{ftpd.port}/readme.txt", [f"other.test=127.0.0.1:{ftpd.port}"])
    assert ftpd.sessions() == []  # the server never saw a connection


def test_pasv_address_is_ignored(ftpd_bounce: FtpServer) -> None:
    """The data connection goes to the control connection's address, never where PASV points."""
    r = _fetch(f"ftp://{HOST}/readme.txt", [ftpd_bounce.rule])
    assert (r.status, r.body) == (200, ftpd_bounce.files["readme.txt"])
    (s,) = ftpd_bounce.sessions()
    cmds = [c for _, c in s.commands]
    assert "EPSV" in cmds and "PASV" in cmds  # EPSV refused, PASV answered with 10.9.8.7
    assert s.transfers == [("/readme.txt", True, len(ftpd_bounce.files["readme.txt"]))]
    assert "10,9,8,7" in ftpd_bounce.log.read_text()


# --- a crawl of the FTP tree: rounds on an embedded Dask cluster ------------------------------------

DELAY = 0.3


def test_crawl_of_an_ftp_tree(ftpd: FtpServer, tmp_path: Path) -> None:
    import duckdb

    from crawl import round as rnd
    from crawl.cluster import dask_client
    from crawl.config import load_config
    from crawl.warc import iter_records

    cfg = load_config(overrides={
        "root": str(tmp_path / "crawl"), "crawl_id": "ftp", "resolve": [ftpd.rule],
        "allowed_schemes": ["http", "https", "ftp"], "politeness_delay_s": DELAY, "max_body_bytes": CAP,
        "schedule_policy": "nutch",  # re-fetch intervals of at least a minute: each URL once in this test
        "partitions": 2, "url_shards": 2, "round_duration_s": 60.0, "connect_timeout_s": 2.0,
        "read_timeout_s": 4.0, "total_timeout_s": 8.0, "dask_workers": 1, "dask_dashboard": False,
    }, use_env=False)
    with dask_client(cfg) as client:
        for i in range(5):  # /, then bin/ pub/, then pub/deep/, then nothing new is due
            rnd.run_round(cfg, seeds=[f"ftp://{HOST}/"] if i == 0 else None, client=client)

    sessions = ftpd.sessions()
    # every file retrieved exactly once, completely, except the one over the cap (cut short)
    retrieved = [t for s in sessions for t in s.transfers]
    by_path: dict[str, list] = {}
    for path, completed, sent in retrieved:
        by_path.setdefault(path, []).append((completed, sent))
    assert sorted(by_path) == sorted("/" + p for p in ftpd.files)
    for rel, data in ftpd.files.items():
        (completed, sent), = by_path["/" + rel]
        if len(data) > CAP:
            assert not completed and sent < len(data), rel
        else:
            assert completed and sent == len(data), rel
    listed = [c.split(" ", 1)[1] for s in sessions for _, c in s.commands if c.startswith(("MLSD", "LIST"))]
    assert sorted(listed) == ["/", "/bin/", "/pub/", "/pub/deep/"]  # every directory listed once
    # one session at a time, and at least the delay between one session's end and the next's start
    for a, b in zip(sessions, sessions[1:], strict=False):
        assert a.closed is not None and a.commands[-1][0] <= b.opened, (a.peer, b.peer)
        assert b.opened - a.commands[-1][0] >= DELAY, (a.peer, b.peer, b.opened - a.commands[-1][0])

    # the page index (DuckDB over the published Parquet) has one resource row per capture
    con = duckdb.connect()
    # an HTML file on the server is parsed like a web page: relative links resolve to ftp:// URLs
    html_links = con.sql(f"""
        SELECT to_url, kind FROM read_parquet('{cfg.root}/links/*/*/*.parquet') l
        JOIN read_parquet('{cfg.root}/index/*/*/*.parquet', hive_partitioning=true) i ON i.url_hash = l.from_hash
        WHERE i.url = 'ftp://{HOST}/pub/index.html' ORDER BY 1
    """).fetchall()
    assert html_links == [(f"ftp://{HOST}/pub/deep/", "a"), (f"ftp://{HOST}/readme.txt", "a")]
    rows = con.sql(f"""
        SELECT url, url_protocol, url_host_name, fetch_status, content_mime_type, content_truncated, warc_type,
               warc_filename, warc_record_offset, warc_record_length, content_digest
        FROM read_parquet('{cfg.root}/index/*/*/*.parquet', hive_partitioning=true)
        WHERE subset = 'warc' ORDER BY url
    """).fetchall()
    base = f"ftp://{HOST}/"
    want_urls = sorted([base, base + "bin/", base + "pub/", base + "pub/deep/"]
                       + [base + "/".join(quote(p) for p in rel.split("/")) for rel in ftpd.files])
    assert [r[0] for r in rows] == want_urls
    assert {(r[1], r[2], r[3], r[6]) for r in rows} == {("ftp", HOST, 200, "resource")}
    truncated = {r[0]: r[5] for r in rows}
    assert truncated[base + "big.iso"] == "length" and sum(v is not None for v in truncated.values()) == 1
    assert {r[0]: r[4] for r in rows}[base + "bin/blob.bin"] == "application/octet-stream"

    # each index row points at a resource record (warcio) holding the file's bytes (the cap's worth)
    records = {}
    for fname in {r[7] for r in rows}:
        for rec in iter_records(cfg.root, fname):
            records[(fname, rec.offset)] = rec
    for url, *_, fname, off, length, digest in rows:
        rec = records[(fname, off)]
        assert rec.warc_type == "resource" and rec.url == url and rec.length == length
        assert rec.warc_headers["WARC-Payload-Digest"].endswith(digest)
        if not url.endswith("/"):
            rel = unquote(url[len(base):])
            assert rec.payload == ftpd.files[rel][:CAP]
            assert rec.warc_headers["Content-Type"] == (mimetypes.guess_type(rel)[0] or "application/octet-stream")
        else:
            assert rec.warc_headers["Content-Type"].startswith(LISTING_MIME)

    # the read side finds ftp captures too: the page API's lookup and its stored body
    from crawl import api
    cap = api.lookup(cfg.root, cfg.crawl_id, base + "pub/with space.txt")
    assert cap["url"] == base + "pub/with%20space.txt" and cap["warc_type"] == "resource"
    assert api.read_body(cfg.root, cap) == ftpd.files["pub/with space.txt"]


def test_fetch_partition_ftp_rows_and_revisit(ftpd: FtpServer, tmp_path: Path) -> None:
    """The fetcher's ftp path on its own: a known payload digest makes a revisit record (no second
    copy of the bytes), a missing file is gone, a directory without its slash redirects, and an
    ftp URL in a crawl that did not opt in is refused without a connection."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from crawl.config import load_config
    from crawl.fetch import fetch_partition
    from crawl.fingerprint import payload_digest
    from crawl.records import FETCHLIST_SCHEMA
    from crawl.url import url_hash
    from crawl.warc import read_record

    base = f"ftp://{HOST}/"
    urls = [base + "readme.txt", base + "bin/blob.bin", base + "nope.txt", base + "pub"]
    fl = pa.Table.from_pylist([{"url": u, "url_hash": url_hash(u), "host": HOST, "depth": 1, "pkey": HOST}
                               for u in urls], schema=FETCHLIST_SCHEMA)
    overrides = {"root": str(tmp_path / "c"), "crawl_id": "f", "resolve": [ftpd.rule], "politeness_delay_s": 0.2,
                 "max_body_bytes": CAP, "allowed_schemes": ["http", "https", "ftp"]}
    cfg = load_config(overrides=overrides, use_env=False)
    known = {payload_digest(ftpd.files["readme.txt"]): ("ftp://elsewhere.ftp.test/readme.txt",
                                                        "2026-01-02T03:04:05.000+00:00")}
    out = fetch_partition(cfg, fl, root=cfg.root, warc_prefix="p0", now=datetime.now(UTC), known_digests=known)
    rows = {r["url"]: r for r in out.fetches.to_pylist()}
    assert set(rows) == {*urls, base + "pub/"}  # the redirect hop was followed in the same task
    rd = rows[base + "readme.txt"]
    assert (rd["status"], rd["warc_type"], rd["revisit_of_url"]) == ("fetched", "revisit",
                                                                    "ftp://elsewhere.ftp.test/readme.txt")
    rec = read_record(cfg.root, rd["warc_filename"], rd["warc_record_offset"], rd["warc_record_length"])
    assert rec.warc_type == "revisit" and rec.payload == b"" and rec.http_status == 0
    assert rec.warc_headers["WARC-Refers-To-Target-URI"] == "ftp://elsewhere.ftp.test/readme.txt"
    blob = rows[base + "bin/blob.bin"]
    assert (blob["status"], blob["warc_type"], blob["http_status"]) == ("fetched", "resource", 200)
    assert read_record(cfg.root, blob["warc_filename"], blob["warc_record_offset"],
                       blob["warc_record_length"]).payload == ftpd.files["bin/blob.bin"]
    assert (rows[base + "nope.txt"]["status"], rows[base + "nope.txt"]["warc_filename"]) == ("gone", None)
    assert (rows[base + "pub"]["status"], rows[base + "pub"]["redirect_location"]) == ("redirect", base + "pub/")
    assert rows[base + "pub/"]["warc_type"] == "resource"
    assert not [r for r in rows.values() if r["subset"] == "robotstxt"]  # no robots.txt in FTP
    n_sessions = len(ftpd.sessions())
    assert n_sessions == 5

    # not opted in: the fetcher refuses ftp URLs before any connection
    web_only = load_config(overrides={**overrides, "allowed_schemes": ["http", "https"]}, use_env=False)
    out = fetch_partition(web_only, fl, root=str(tmp_path / "w"), warc_prefix="p0", now=datetime.now(UTC))
    assert {r["status"] for r in out.fetches.to_pylist()} == {"filtered"}
    assert len(ftpd.sessions()) == n_sessions


def test_421_backs_the_server_off(ftpd_busy: FtpServer, tmp_path: Path) -> None:
    """421 is the FTP server's 503: the fetcher retries the file after the backoff, in the same task,
    and the server's log shows the retry no sooner than the backoff's lower bound."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from crawl.config import load_config
    from crawl.fetch import fetch_partition
    from crawl.records import FETCHLIST_SCHEMA
    from crawl.url import url_hash

    url = f"ftp://{HOST}/readme.txt"
    fl = pa.Table.from_pylist([{"url": url, "url_hash": url_hash(url), "host": HOST, "depth": 0, "pkey": HOST}],
                              schema=FETCHLIST_SCHEMA)
    cfg = load_config(overrides={"root": str(tmp_path / "c"), "crawl_id": "b", "resolve": [ftpd_busy.rule],
                                 "allowed_schemes": ["ftp"], "politeness_delay_s": 0.0, "backoff_base_s": 1.0,
                                 "backoff_jitter": 0.1}, use_env=False)
    out = fetch_partition(cfg, fl, root=cfg.root, warc_prefix="p0", now=datetime.now(UTC))
    rows = sorted(out.fetches.to_pylist(), key=lambda r: r["fetch_time"])
    assert [(r["status"], r["error"]) for r in rows] == [("retry", "http_503"), ("fetched", None)]
    assert 0.9 <= rows[0]["retry_after_s"] <= 1.1
    first, second = ftpd_busy.sessions()
    refused = [t for t, c in first.commands if c.startswith("RETR")]
    retried = [t for t, c in second.commands if c.startswith("RETR")]
    assert first.transfers == [] and second.transfers == [("/readme.txt", True, len(ftpd_busy.files["readme.txt"]))]
    assert retried[0] - refused[0] >= 0.9  # the server saw the backoff
