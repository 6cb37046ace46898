"""A 304 to a conditional re-fetch is stored as a WARC ``revisit`` with the server-not-modified profile.

Two real ``crawl round`` processes (the CLI, embedded Dask) crawl one page of a simulated-web host that
answers conditional GETs (``host_conditional`` in its truth), the web's clock held still so the page
does not change. Judged outside the code under test: the server's access log (``--log-conditional``:
round 2 sent the validators and got 304), the WARC files read with warcio (round 2 holds a revisit
with the WARC 1.1 §6.7.2 profile whose ``WARC-Refers-To-Target-URI``/``-Date`` and payload digest are
those of round 1's response record, and no second response), warcio's own indexer (the revisit's
offset and length), the page index read with DuckDB (``warc_type`` revisit at that offset) and the
capture lookups over real HTTP from the Airflow API app with the plugin (``/crawl/pages?body=1`` and
the dashboard's body download of the 304 capture): both give round 1's body. Before, the 304 was a
``response`` record (status 304, no payload) in the crawldiagnostics WARC file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import duckdb
import pytest
from airflow_harness import REPO, configure_env
from warcio.archiveiterator import ArchiveIterator

configure_env()  # before anything imports airflow

T0 = 1_795_000_000.0
CRAWL = "nm"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"  # WARC 1.1 §6.7.2


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from conftest import start_simweb

    sw = start_simweb(tmp_path_factory.mktemp("simweb"), 30, 1, 20, ("--log-conditional",))
    yield sw
    sw.stop()


def _page(web) -> str:
    """The home page of the first host (plain robots.txt, no crawl-delay) answering conditional GETs."""
    truth = {r["url"]: r for r in web.truth(at=T0).to_pylist()}
    for url in web.seed_urls(web.hosts):
        if truth[url]["host_conditional"] and truth[url]["robots_allowed"] and not truth[url]["fault"]:
            return url
    raise AssertionError("no conditional host in this web")


def _round(cfg, now: float, seeds: list[str]) -> None:
    cmd = [sys.executable, "-m", "crawl", "round", "--now", datetime.fromtimestamp(now, UTC).isoformat(),
           "--config-json", json.dumps(cfg.to_dict()), "--seeds", *seeds]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert out.returncode == 0, out.stderr[-3000:]


def _records(root: Path, round_no: int) -> list[dict]:
    """Every record of the round's WARC files, read with warcio: file, offset, length, headers, payload."""
    out = []
    for path in sorted((root / "warc" / f"crawl={CRAWL}" / f"round={round_no:05d}").glob("*.warc.gz")):
        with open(path, "rb") as fh:
            it = ArchiveIterator(fh)
            for rec in it:
                h = rec.rec_headers
                status = rec.http_headers.get_statuscode() if rec.http_headers is not None else None
                fields = {k: h.get_header(k) for k in (
                    "WARC-Type", "WARC-Target-URI", "WARC-Date", "WARC-Profile", "WARC-Refers-To-Target-URI",
                    "WARC-Refers-To-Date", "WARC-Payload-Digest")}
                http = dict(rec.http_headers.headers) if rec.http_headers is not None else {}
                payload = rec.content_stream().read()
                out.append({"file": str(path.relative_to(root)), "offset": it.get_record_offset(),
                            "length": it.get_record_length(), "status": status, "http": http,
                            "payload": payload, **fields})
    return out


@pytest.fixture(scope="module")
def crawled(web, tmp_path_factory):
    from crawl.config import load_config

    root = tmp_path_factory.mktemp("nmroot")
    cfg = load_config(overrides={
        "root": str(root), "crawl_id": CRAWL, "resolve": [web.resolve_rule], "politeness_delay_s": 0.0,
        "max_pages": 20, "partitions": 1, "url_shards": 1, "round_duration_s": 30.0, "max_depth": 0,
        "sitemaps": False, "dask_workers": 1, "dask_dashboard": False,
    }, use_env=False)
    url = _page(web)
    web.set_clock(T0, speed=0.0)  # the page does not change between the rounds
    _round(cfg, T0, [url])
    since = web.flush_log()
    _round(cfg, T0 + 3600, [url])  # seeded again: due now, re-fetched with the stored copy's validators
    log = [r for r in web.log().to_pylist()[since:]
           if r["user_agent"] == cfg.user_agent and "http://" + r["host"] + r["path"] == url]
    return root, url, log


def test_a_304_is_a_server_not_modified_revisit_of_the_stored_response(crawled) -> None:
    root, url, log = crawled
    # the server saw one conditional request in round 2 and answered 304
    assert [(r["status"], bool(r["inm"] or r["ims"])) for r in log] == [(304, True)], log

    first = [r for r in _records(root, 1) if r["WARC-Target-URI"] == url and r["WARC-Type"] == "response"]
    assert len(first) == 1 and first[0]["status"] == "200" and first[0]["payload"], first
    original = first[0]
    mine = [r for r in _records(root, 2) if r["WARC-Target-URI"] == url]
    # request + revisit, nothing stored twice: no response record for the page in round 2
    assert sorted(r["WARC-Type"] for r in mine) == ["request", "revisit"], [r["WARC-Type"] for r in mine]
    request = next(r for r in mine if r["WARC-Type"] == "request")
    assert request["http"].get("If-None-Match") == log[0]["inm"] or request["http"].get("If-Modified-Since")
    rv = next(r for r in mine if r["WARC-Type"] == "revisit")
    assert rv["file"].endswith("-warc.warc.gz"), rv["file"]  # the main WARC file, beside the responses
    assert rv["status"] == "304" and rv["payload"] == b""
    assert rv["WARC-Profile"] == NOT_MODIFIED_PROFILE
    assert (rv["WARC-Refers-To-Target-URI"], rv["WARC-Refers-To-Date"], rv["WARC-Payload-Digest"]) == \
        (original["WARC-Target-URI"], original["WARC-Date"], original["WARC-Payload-Digest"])

    # warcio's checker passes the file (every digest it checks), and its indexer places the record
    # where our page index does
    warcio = [sys.executable, "-c", "import sys; from warcio.cli import main; main(sys.argv[1:])"]
    check = subprocess.run([*warcio, "check", str(root / rv["file"])], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    idx = subprocess.run([*warcio, "index", "-f", "warc-type,warc-target-uri,offset,length", str(root / rv["file"])],
                         capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(x) for x in idx.stdout.splitlines()]
    found = [x for x in lines if x["warc-type"] == "revisit" and x["warc-target-uri"] == url]
    assert [(int(x["offset"]), int(x["length"])) for x in found] == [(rv["offset"], rv["length"])]

    con = duckdb.connect()
    rows = con.execute(f"""
        SELECT round, subset, warc_type, fetch_status, crawl_status, warc_filename, warc_record_offset,
               warc_record_length, content_digest
        FROM read_parquet('{root}/index/crawl={CRAWL}/*/*.parquet', hive_partitioning = true)
        WHERE url = ? ORDER BY round
    """, [url]).fetchall()
    assert rows == [
        (1, "warc", "response", 200, "fetched", original["file"], original["offset"], original["length"],
         original["WARC-Payload-Digest"].removeprefix("sha1:")),
        (2, "warc", "revisit", 304, "not_modified", rv["file"], rv["offset"], rv["length"],
         original["WARC-Payload-Digest"].removeprefix("sha1:")),
    ], rows


@pytest.fixture(scope="module")
def server(crawled):
    from airflow_harness import inprocess_api_on

    with inprocess_api_on(crawled[0]) as api:
        yield api


def test_the_capture_lookups_give_the_first_rounds_body(crawled, server) -> None:
    root, url, _ = crawled
    original = next(r for r in _records(root, 1) if r["WARC-Target-URI"] == url and r["WARC-Type"] == "response")
    token = server.token()
    status, body, headers = server.request("GET", f"/crawl/pages?url={quote(url, safe='')}&crawl_id={CRAWL}",
                                           token=token)
    assert status == 200, body[:300]
    cap = json.loads(body)
    assert (cap["warc_type"], cap["fetch_status"]) == ("revisit", 304), cap  # the latest capture: round 2's 304
    status, body, _ = server.request("GET", f"/crawl/pages?url={quote(url, safe='')}&crawl_id={CRAWL}&body=1",
                                     token=token)
    assert status == 200 and body == original["payload"], (status, len(body), len(original["payload"]))
    # the dashboard's download of that very capture (the page lookup's "download" link)
    status, body, _ = server.request(
        "GET", f"/crawl/dashboard/crawls/{CRAWL}/body?url={quote(url, safe='')}&at={quote(cap['fetch_time'], safe='')}",
        token=token)
    assert status == 200 and body == original["payload"], (status, body[:300])
