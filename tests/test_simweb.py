"""The simulated web over real HTTP on loopback: hosts, pages, links, change, duplicates, robots, sitemaps,
JS-only pages, the clock, the access log and the truth CLI."""

from __future__ import annotations

import calendar
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import lxml.html
import numpy as np
import pyarrow.parquet as pq
import pytest

from crawl.simweb import model as M
from crawl.simweb.accesslog import politeness_report
from crawl.simweb.render import strip_noise
from crawl.simweb.server import lookup_key

REPO = Path(__file__).resolve().parent.parent


def resolve_to_page(m: M.Model, url: str) -> int | None:
    """The model page a resolved absolute URL reaches on the server (None for off-web URLs)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return None
    host = m.host_of(parts.hostname)
    if host is None:
        return None
    return m.page_at(host, lookup_key(parts.path or "/", parts.query))


def links_of(m: M.Model, url: str, body: bytes) -> list[str]:
    doc = lxml.html.fromstring(body)
    base = doc.xpath("//base/@href")
    base_url = urljoin(url, base[0]) if base else url
    return [urljoin(base_url, h) for h in doc.xpath("//a/@href")]


def pages_where(m: M.Model, cond, limit: int = 1000) -> list[int]:
    return [p for p in range(m.n_pages) if cond(p)][:limit]


# ---- section 1: hosts --------------------------------------------------------------------------------
def test_virtual_hosts_case_insensitive_and_index(simweb) -> None:
    m = simweb.model
    h = m.good_hosts()[0]
    s1, hd1, b1 = simweb.request(h.base + "/")
    s2, _, b2 = simweb.request(f"http://{h.name.upper()}:8080/")
    assert s1 == s2 == 200 and hd1["content-type"].startswith("text/html")
    assert strip_noise(b1) == strip_noise(b2)
    s, _, idx = simweb.request("http://unknown.example/")
    assert s == 200 and all(x.name.encode() in idx for x in m.hosts)
    assert simweb.request(h.base + "/no/such/page")[0] == 404
    s, hd, body = simweb.request(h.base + "/", method="HEAD")
    assert s == 200 and body == b"" and hd["content-type"].startswith("text/html")


# ---- section 2: pages and links ---------------------------------------------------------------------
def test_served_links_are_exactly_the_true_graph(simweb) -> None:
    m = simweb.model
    sample = pages_where(m, lambda p: m.page_type[p] in (M.HOME, M.ARTICLE) and not m.flags[p] & 4
                         and m.hosts[m.page_host[p]].kind != "hostile")[::7][:40]
    spellings = set()
    for p in sample:
        url = m.url(p)
        status, headers, body = simweb.request(url)
        assert status == 200
        hrefs = links_of(m, url, body)
        targets = {resolve_to_page(m, u) for u in hrefs} - {None}
        assert targets == set(m.link_dst[m.links(p)].tolist()), url
        raw = body.decode("latin-1")
        spellings |= {k for k, pat in {
            "utm": "utm_source=", "gclid": "gclid=", "session": "sessionid", "port": ":80/",
            "fragment": "#section-", "mixed": ".SIM.TEST", "nofollow": 'rel="nofollow"', "mailto": "mailto:",
            "javascript": "javascript:", "invalid": ".invalid/", "protorel": '"//'}.items() if pat in raw}
    assert spellings >= {"utm", "gclid", "session", "port", "fragment", "mixed", "nofollow", "mailto",
                         "javascript", "invalid", "protorel"}


def test_page_features_sizes_types_charsets(simweb) -> None:
    m = simweb.model
    arts = pages_where(m, lambda p: m.page_type[p] == M.ARTICLE and m.hosts[m.page_host[p]].kind in M.NORMAL_KINDS)
    sizes = []
    n_links = []
    for p in arts[::9][:30]:
        _, _, body = simweb.request(m.url(p))
        sizes.append(len(body))
        n_links.append(body.count(b"<a "))
    assert 4_000 <= np.median(sizes) <= 50_000 and min(sizes) >= 3_000 and max(sizes) <= 80_000
    assert 20 <= np.median(n_links) <= 70
    for ptype, ctype, magic in ((M.PDF, "application/pdf", b"%PDF-"), (M.PNG, "image/png", b"\x89PNG"),
                                (M.BIN, "application/octet-stream", b"")):
        p = pages_where(m, lambda q, t=ptype: m.page_type[q] == t)[0]
        s, h, body = simweb.request(m.url(p))
        assert s == 200 and h["content-type"] == ctype and body.startswith(magic) and len(body) > 100
    found = set()
    for h in m.hosts:
        if h.kind not in M.NORMAL_KINDS:
            continue
        s, hd, body = simweb.request(h.base + "/")
        if h.charset_decl in ("header", "both"):
            assert f"charset={h.charset}" in hd["content-type"]
        if h.charset_decl in ("meta", "both"):
            assert f"charset={h.charset}".encode() in body or f'charset="{h.charset}"'.encode() in body
        body.decode(h.charset)
        found.add(h.charset)
    assert found >= {"utf-8", "iso-8859-1", "windows-1252"}
    feats = {"base": lambda p: m.flags[p] & 1, "malformed": lambda p: m.flags[p] & 2,
             "canonical": lambda p: m.canonical[p] >= 0, "meta": lambda p: m.meta_robots[p] != ""}
    for name, cond in feats.items():
        p = pages_where(m, lambda q, c=cond: bool(c(q)) and m.page_type[q] == M.ARTICLE)[0]
        body = simweb.request(m.url(p))[2].decode(m.hosts[m.page_host[p]].charset)
        marker = {"base": "<base href=", "malformed": "unbalanced", "canonical": 'rel="canonical"',
                  "meta": '<meta name="robots"'}[name]
        assert marker in body, name


def test_js_only_pages_have_links_only_in_script(simweb) -> None:
    m = simweb.model
    p = pages_where(m, lambda q: bool(m.flags[q] & 4))[0]
    url = m.url(p)
    body = simweb.request(url)[2]
    plain = {resolve_to_page(m, u) for u in links_of(m, url, body)} - {None}
    assert plain == set()
    script = re.search(rb"var r=\[(.*?)\];", body).group(1).decode()
    hrefs = [s[::-1] for s in json.loads("[" + script + "]")]
    targets = {resolve_to_page(m, urljoin(url, h)) for h in hrefs} - {None}
    assert targets == set(m.link_dst[m.links(p)].tolist()) and targets


# ---- section 3: change over time, noise, clock -------------------------------------------------------
def test_content_changes_with_version_noise_does_not(simweb) -> None:
    m = simweb.model
    p = int(np.argmax(np.where([m.hosts[h].noisy for h in m.page_host], m.rate, 0)))
    url = m.url(p)
    t0 = M.EPOCH0 + 50 * 86400.0
    v0, last0, nxt0 = (x[0] for x in m.version_info(np.array([p]), t0))
    try:
        simweb.set_clock(t0)
        a1, a2 = simweb.request(url)[2], simweb.request(url)[2]
        assert a1 != a2  # per-request noise
        assert strip_noise(a1) == strip_noise(a2)
        simweb.set_clock((t0 + nxt0) / 2 if np.isfinite(nxt0) else t0 + 1)  # same version
        assert strip_noise(simweb.request(url)[2]) == strip_noise(a1)
        simweb.set_clock(nxt0 + 1)  # one change later
        b = simweb.request(url)[2]
        assert strip_noise(b) != strip_noise(a1)
        assert int(m.version_at([p], nxt0 + 1)[0]) == v0 + 1
        simweb.set_clock(t0)  # back again: the same bytes as before
        assert strip_noise(simweb.request(url)[2]) == strip_noise(a1)
        # a page that never changes stays identical across a year
        q = pages_where(m, lambda x: m.rate[x] == 0 and m.page_type[x] == M.ARTICLE)[0]
        before = strip_noise(simweb.request(m.url(q))[2])
        simweb.set_clock(t0 + 365 * 86400)
        assert strip_noise(simweb.request(m.url(q))[2]) == before
    finally:
        simweb.set_clock(time.time(), speed=1.0)


def test_clock_speed_and_stats(simweb) -> None:
    try:
        st = simweb.set_clock(M.EPOCH0, speed=3600.0)
        time.sleep(0.3)
        now = simweb.clock()
        assert now["speed"] == 3600.0 and 500 < now["time"] - st["time"] < 3600
        s, _, b = simweb.request(simweb.base + "/_sim/clock", "POST", {"Content-Type": "application/json"},
                                 b"not json")
        assert s == 400
        # a day per second: a fast page keeps changing, and what is served is the version at the clock
        m = simweb.model
        p = int(np.argmax(m.rate))
        simweb.set_clock(M.EPOCH0 + 10 * 86400, speed=86400.0)
        served = set()
        for _ in range(6):
            before = simweb.clock()["time"]
            body = simweb.request(m.url(p))[2].decode("latin-1")
            after = simweb.clock()["time"]
            updated = re.search(r'class="date">Updated (\S+)</p>', body).group(1)
            t = calendar.timegm(time.strptime(updated, "%Y-%m-%dT%H:%M:%SZ"))
            _, last_before, _ = m.version_info(np.array([p]), before)
            assert int(last_before[0]) <= t <= after
            served.add(t)
            time.sleep(0.2)
        assert len(served) >= 3
    finally:
        simweb.set_clock(time.time(), speed=1.0)
    stats = simweb.stats()
    assert stats["requests"] > 0 and stats["hosts"] == simweb.hosts


def test_conditional_get(simweb) -> None:
    m = simweb.model
    p = pages_where(m, lambda q: m.hosts[m.page_host[q]].conditional and m.page_type[q] == M.ARTICLE)[0]
    s, h, _ = simweb.request(m.url(p))
    assert s == 200 and "etag" in h and "last-modified" in h
    assert simweb.request(m.url(p), headers={"If-None-Match": h["etag"]})[0] == 304
    assert simweb.request(m.url(p), headers={"If-Modified-Since": h["last-modified"]})[0] == 304
    assert simweb.request(m.url(p), headers={"If-None-Match": '"other"'})[0] == 200


def test_launched_web_serves_a_second_pass_from_its_render_cache(simweb, make_simweb) -> None:
    """Benchmarks pass over the same pages again (warm-up, ceilings, our crawl): the server launched for
    them must answer the second pass without rendering, or it measures its own rendering, not the client."""
    m = simweb.model
    urls = [m.url(p) for h in m.good_hosts()[:8] for p in range(h.first, h.first + 5)]
    from crawl.simweb.launch import RENDER_CACHE_MB

    assert simweb.stats()["cache_limit_bytes"] == RENDER_CACHE_MB << 20
    tiny = make_simweb(extra_args=("--render-cache-mb", "0"))  # the last --render-cache-mb given wins
    for sw, grows in ((simweb, False), (tiny, True)):
        for u in urls:
            sw.request(u)
        first = sw.stats()["cache_misses"]
        for u in urls:
            sw.request(u)
        assert (sw.stats()["cache_misses"] > first) is grows, (grows, first)


# ---- section 4: duplicates -------------------------------------------------------------------------------
def test_mirrors_serve_identical_bytes(simweb) -> None:
    m = simweb.model
    mirrors = pages_where(m, lambda q: m.render_src[q] != q and m.page_type[q] in (M.HOME, M.ARTICLE))[:5]
    assert mirrors
    for p in mirrors:
        a = simweb.request(m.url(p))[2]
        b = simweb.request(m.url(int(m.render_src[p])))[2]
        assert strip_noise(a) == strip_noise(b)
    tb = simweb.truth()
    d = tb.select(["url", "duplicate_cluster", "dup_kind"]).to_pylist()
    row = {r["url"]: r for r in d}
    assert row[m.url(mirrors[0])]["duplicate_cluster"] == row[m.url(int(m.render_src[mirrors[0]]))]["duplicate_cluster"]
    assert {r["dup_kind"] for r in d} >= {"exact", "near", "original", ""}


# ---- section 5: robots.txt -------------------------------------------------------------------------------
def test_robots_variants(simweb) -> None:
    m = simweb.model
    by = {}
    for h in m.hosts:
        by.setdefault(h.robots, h)
    assert simweb.request(by["404"].base + "/robots.txt")[0] == 404
    assert simweb.request(by["5xx"].base + "/robots.txt")[0] >= 500
    s, h, _ = simweb.request(by["redirect"].base + "/robots.txt")
    assert s == 301 and h["location"] == by["redirect"].base + "/robots-moved.txt"
    s, _, body = simweb.request(h["location"])
    assert s == 200 and b"Disallow: /private/" in body
    s, h, _ = simweb.request(by["redirect-cross"].base + "/robots.txt")
    assert s == 301 and urlsplit(h["location"]).hostname != by["redirect-cross"].name
    assert simweb.request(h["location"])[0] == 200
    s, _, body = simweb.request(by["huge"].base + "/robots.txt")
    assert s == 200 and len(body) > 500 * 1024 and body.startswith(b"User-agent: *\nDisallow: /private/")
    assert simweb.request(by["bom"].base + "/robots.txt")[2].startswith(b"\xef\xbb\xbfUser-agent")
    assert b"User-agent: RecrawlBot" in simweb.request(by["agent-specific"].base + "/robots.txt")[2]
    assert b"Allow: /private/public-*.html$" in simweb.request(by["wildcards"].base + "/robots.txt")[2]
    delays = sorted(h.crawl_delay for h in m.hosts if h.crawl_delay is not None)
    assert delays[0] == 0.5 and delays[-1] == 60.0
    dh = next(h for h in m.hosts if h.crawl_delay == 60.0)
    assert b"Crawl-delay: 60" in simweb.request(dh.base + "/robots.txt")[2]
    sm = next(h for h in m.hosts if h.sitemap != "none" and h.robots == "allow-all")
    assert f"Sitemap: {sm.base}/sitemap.xml".encode() in simweb.request(sm.base + "/robots.txt")[2]
    with pytest.raises(TimeoutError):
        simweb.request(by["timeout"].base + "/robots.txt", timeout=1.0)


# ---- section 6: sitemaps ---------------------------------------------------------------------------------
def test_sitemaps_lastmod_tracks_truth(simweb) -> None:
    m = simweb.model
    t = M.EPOCH0 + 123.5 * 86400
    try:
        simweb.set_clock(t)
        truth = {r["url"]: r["last_change_time"] for r in
                 simweb.truth(at=t).select(["url", "last_change_time"]).to_pylist()}
        flavours = {(h.sitemap, h.lastmod): h for h in m.hosts if h.sitemap != "none"}
        assert {("single", "true"), ("index", "true"), ("single", "now"), ("single", "absent")} <= set(flavours)
        h = flavours[("single", "true")]
        seen = []
        # the server answers sitemaps from its per-page version cache: it must follow the clock both ways
        for at in (t, t + 200 * 86400, t - 110 * 86400):
            if at != t:
                simweb.set_clock(at)
                truth = {r["url"]: r["last_change_time"] for r in
                         simweb.truth(at=at).select(["url", "last_change_time"]).to_pylist()}
            xml = simweb.request(h.base + "/sitemap.xml")[2].decode()
            entries = re.findall(r"<loc>(.*?)</loc><lastmod>(.*?)</lastmod>", xml)
            assert len(entries) == h.count
            for loc, lastmod in entries:
                loc = loc.replace("&amp;", "&")
                assert lastmod == truth[loc].strftime("%Y-%m-%dT%H:%M:%SZ"), (at, loc)
            seen.append(tuple(entries))
        assert any(not lm.startswith("2026-01-01T00:00:00") for _, lm in seen[0])
        assert len(set(seen)) == 3  # pages changed between the three times
        simweb.set_clock(t)
        idx = flavours[("index", "true")]
        xml = simweb.request(idx.base + "/sitemap.xml")[2].decode()
        assert "<sitemapindex" in xml
        children = re.findall(r"<loc>(.*?)</loc>", xml)
        urls = []
        for c in children:
            urls += re.findall(r"<loc>(.*?)</loc>", simweb.request(c)[2].decode())
        assert len(urls) == idx.count
        liar = simweb.request(flavours[("single", "now")].base + "/sitemap.xml")[2].decode()
        assert set(re.findall(r"<lastmod>(.*?)</lastmod>", liar)) <= {
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t + d)) for d in range(0, 10)}
        absent = simweb.request(flavours[("single", "absent")].base + "/sitemap.xml")[2].decode()
        assert "<loc>" in absent and "<lastmod>" not in absent
    finally:
        simweb.set_clock(time.time(), speed=1.0)


# ---- access log --------------------------------------------------------------------------------------------
def test_access_log_gaps_and_concurrency(simweb) -> None:
    m = simweb.model
    hosts = m.good_hosts()
    seq, conc = hosts[1], next(h for h in m.hosts if h.kind == "hostile" and h.mode == "slow")
    ua_seq, ua_conc = f"seq-{time.time()}", f"conc-{time.time()}"
    for _ in range(4):
        simweb.request(seq.base + "/", headers={"User-Agent": ua_seq})
        time.sleep(0.3)
    threads = [threading.Thread(target=simweb.request, args=(conc.base + "/",),
                                kwargs={"headers": {"User-Agent": ua_conc}}) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    simweb.flush_log()
    rep = {r["host"]: r for r in politeness_report(simweb.access_log, user_agent_like=ua_seq).to_pylist()}
    assert rep[seq.name]["requests"] == 4 and rep[seq.name]["max_in_flight"] == 1
    assert 0.29 <= rep[seq.name]["min_gap_s"] < 1.0
    rep = {r["host"]: r for r in politeness_report(simweb.access_log, user_agent_like=ua_conc).to_pylist()}
    assert rep[conc.name]["requests"] == 4 and rep[conc.name]["max_in_flight"] == 4
    assert rep[conc.name]["min_gap_s"] < 0.5
    line = json.loads(simweb.access_log.read_text().splitlines()[-1])
    assert {"host", "path", "start", "end", "status", "bytes", "in_flight", "method", "user_agent"} <= set(line)


# ---- truth CLI and determinism over HTTP -------------------------------------------------------------------
def test_truth_cli_deterministic(tmp_path) -> None:
    outs = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        out = tmp_path / f"{name}.parquet"
        subprocess.run([sys.executable, "-m", "crawl.simweb", "truth", "--hosts", "20", "--seed", str(seed),
                        "--pages-per-host", "10", "--out", str(out), "--at", str(M.EPOCH0 + 86400 * 30)],
                       check=True, cwd=REPO, timeout=60, capture_output=True)
        outs.append(pq.read_table(out))
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert outs[0].equals(outs[1])
    assert not outs[0].equals(outs[2])


def test_same_seed_same_bytes_over_http(simweb, make_simweb) -> None:
    other = make_simweb(seed=1)
    diff = make_simweb(seed=2)
    t = M.EPOCH0 + 77 * 86400
    for sw in (simweb, other, diff):
        sw.set_clock(t)
    try:
        m = simweb.model
        for p in range(0, m.n_pages, 23):
            if m.page_type[p] in (M.TRAP, M.FAULT):
                continue
            a, b = simweb.request(m.url(p)), other.request(m.url(p))
            assert a[0] == b[0] and strip_noise(a[2]) == strip_noise(b[2]), m.url(p)
        h = m.good_hosts()[0].base + "/"
        assert strip_noise(simweb.request(h)[2]) != strip_noise(diff.request(h)[2])
    finally:
        simweb.set_clock(time.time(), speed=1.0)
