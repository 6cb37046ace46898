"""Hostile and faulty hosts, traps, and clean shutdown of the simulated web, over real sockets."""

from __future__ import annotations

import http.client
import socket
import time
import zlib
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import lxml.html
import pytest

from crawl.simweb import model as M
from crawl.simweb.server import lookup_key


def hostile(simweb, mode: str = "mixed") -> M.Host:
    return next(h for h in simweb.model.hosts if h.kind == "hostile" and h.mode == mode)


def trap_host(simweb) -> M.Host:
    return next(h for h in simweb.model.hosts if h.kind == "trap")


def raw_get(simweb, host: str, path: str, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", simweb.port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: simweb-test\r\n\r\n".encode())
    return s


def read_upto(s: socket.socket, limit: int, seconds: float) -> bytes:
    buf = bytearray()
    end = time.monotonic() + seconds
    while len(buf) < limit and time.monotonic() < end:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def test_status_faults(simweb) -> None:
    h = hostile(simweb)
    s, hd, _ = simweb.request(h.base + "/fault/429-seconds")
    assert s == 429 and hd["retry-after"] == "7"
    s, hd, _ = simweb.request(h.base + "/fault/429-date")
    assert s == 429 and parsedate_to_datetime(hd["retry-after"]).timestamp() > time.time() + 10
    s, hd, _ = simweb.request(h.base + "/fault/503")
    assert s == 503 and hd["retry-after"] == "5"
    for code in (404, 410, 500):
        assert simweb.request(f"{h.base}/fault/{code}")[0] == code


def test_redirect_chains_loops_and_cross_host(simweb) -> None:
    h = hostile(simweb)

    def follow(url: str, limit: int = 20) -> tuple[int, list[str]]:
        seen = [url]
        for _ in range(limit):
            s, hd, _ = simweb.request(url)
            if s not in (301, 302):
                return s, seen
            url = urljoin(url, hd["location"])
            seen.append(url)
        return 0, seen

    s, hops = follow(h.base + "/fault/redirect-chain-3")
    assert s == 200 and len(hops) == 4
    s, hops = follow(h.base + "/fault/redirect-chain-8")
    assert s == 200 and len(hops) == 9
    s, hops = follow(h.base + "/fault/redirect-loop-a", limit=6)
    assert s == 0 and set(hops) == {h.base + "/fault/redirect-loop-a", h.base + "/fault/redirect-loop-b"}
    s, hops = follow(h.base + "/fault/redirect-cross")
    assert s == 200 and urlsplit(hops[-1]).hostname != h.name


def test_slow_stall_and_others_undisturbed(simweb) -> None:
    h = hostile(simweb)
    t = time.monotonic()
    assert simweb.request(h.base + "/fault/slow")[0] == 200
    assert time.monotonic() - t >= 2.9
    # slowloris: headers and a few bytes, then nothing
    conn = http.client.HTTPConnection("127.0.0.1", simweb.port, timeout=1.0)
    conn.request("GET", "/fault/stall", headers={"Host": h.name, "User-Agent": "stall-test"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Length") == "100000"
    with pytest.raises(TimeoutError):
        resp.read()
    # while that handler still stalls, another host is served (the server is not blocked by it)
    good = simweb.model.good_hosts()[0]
    assert simweb.request(good.base + "/", headers={"User-Agent": "undisturbed-test"})[0] == 200
    conn.close()
    # accepts, then never answers
    with pytest.raises(TimeoutError):
        simweb.request(h.base + "/fault/stall-accept", timeout=1.0)
    # the stalled handler noticed the disconnect and ended (bounded): it is in the access log
    deadline = time.monotonic() + 5
    rows = []
    while time.monotonic() < deadline and not rows:
        time.sleep(0.3)
        rows = [r for r in simweb.log().to_pylist() if r["user_agent"] == "stall-test"]
    assert rows and rows[0]["path"] == "/fault/stall" and rows[0]["end"] - rows[0]["start"] < 5
    # server-side order, not a stopwatch: the good page was answered inside the stall's lifetime
    (served,) = [r for r in simweb.log().to_pylist() if r["user_agent"] == "undisturbed-test"]
    assert rows[0]["start"] < served["start"] and served["end"] < rows[0]["end"]


def test_endless_huge_and_gzip_bomb(simweb) -> None:
    h = hostile(simweb)
    s = raw_get(simweb, h.name, "/fault/endless")
    data = read_upto(s, 3_000_000, 10)
    s.close()
    assert b"Transfer-Encoding: chunked" in data.split(b"\r\n\r\n")[0] and len(data) >= 3_000_000
    s = raw_get(simweb, h.name, "/fault/huge")
    data = read_upto(s, 2_000_000, 10)
    s.close()
    assert b"Content-Length: 268435456" in data.split(b"\r\n\r\n")[0] and len(data) >= 2_000_000
    status, hd, body = simweb.request(h.base + "/fault/gzip-bomb", timeout=30)
    assert status == 200 and hd["content-encoding"] == "gzip" and len(body) < 1_000_000
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    total = 0
    buf = body
    while buf:
        total += len(d.decompress(buf, 1 << 20))
        buf = d.unconsumed_tail
    assert total >= 100_000_000


def test_wrong_types_and_reset(simweb) -> None:
    h = hostile(simweb)
    s, hd, body = simweb.request(h.base + "/fault/wrong-type-html")
    assert hd["content-type"].startswith("text/html") and body.startswith(b"\x89PNG")
    s, hd, body = simweb.request(h.base + "/fault/wrong-type-image")
    assert hd["content-type"] == "image/jpeg" and body.startswith(b"<html>")
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
        simweb.request(h.base + "/fault/reset")


def test_host_wide_modes(simweb) -> None:
    th = hostile(simweb, "throttle")
    statuses = [simweb.request(th.base + "/") for _ in range(4)]
    assert [s for s, _, _ in statuses].count(429) == 2 and all(
        "retry-after" in hd for s, hd, _ in statuses if s == 429)
    b = hostile(simweb, "burst503")
    codes = [simweb.request(b.base + "/")[0] for _ in range(10)]
    assert codes.count(503) == 3 and codes.count(200) == 7
    sl = hostile(simweb, "slow")
    t = time.monotonic()
    assert simweb.request(sl.base + "/")[0] == 200 and time.monotonic() - t >= 0.95


def _links(url: str, body: bytes) -> list[str]:
    return [urljoin(url, h) for h in lxml.html.fromstring(body).xpath("//a/@href")]


def test_traps_are_endless(simweb) -> None:
    h = trap_host(simweb)
    m = simweb.model
    home = simweb.request(h.base + "/")[2]
    reached = set()
    for u in _links(h.base + "/", home):
        p = urlsplit(u)
        if m.host_of(p.hostname or "") is h:
            reached.add(m.page_at(h, lookup_key(p.path, p.query)))
    for entry in M.TRAP_ENTRIES:  # linked from home (under some spelling)
        assert m.page_at(h, entry) in reached, entry
    for entry, pick in (("/calendar?month=1&year=2026", 0), ("/rep/a/b/", 0), ("/more/", 0),
                        ("/session/?s=0", -2), ("/facets", -2)):
        url = h.base + entry
        seen = set()
        for _ in range(30):
            status, _, body = simweb.request(url)
            assert status == 200, url
            seen.add(url)
            url = _links(url, body)[pick]
        assert len(seen) == 30, entry  # 30 hops, 30 distinct URLs, no end in sight


def test_sigterm_shuts_down_cleanly_during_stall(make_simweb) -> None:
    sw = make_simweb(hosts=12, pages_per_host=8)
    h = next(x for x in sw.model.hosts if x.kind == "hostile")
    s = raw_get(sw, h.name, "/fault/stall-accept", timeout=10)
    e = raw_get(sw, h.name, "/fault/endless", timeout=10)
    read_upto(e, 100_000, 5)
    time.sleep(0.3)
    rc = sw.stop(timeout=15)
    assert rc == 0  # SIGTERM did it: after 15 s stop() would have used SIGKILL (rc -9)
    s.close()
    e.close()
    lines = sw.access_log.read_text().splitlines()
    assert any('"/fault/endless"' in x for x in lines)
