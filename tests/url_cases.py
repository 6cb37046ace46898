"""Shared URL test inputs: a filter config and random-plus-adversarial URLs (not a test module)."""

from __future__ import annotations

import random

from crawl.config import CrawlConfig

CFG = CrawlConfig(max_url_length=80, max_depth=3, max_path_repeats=2, max_path_segments=6,
                  max_query_params=3, allowed_hosts=r"(^|\.)example\.com$")


def varied_urls(n: int, seed: int) -> list[str | None]:
    """Random plus adversarial URLs: every shape the vectorised classifier must either get exactly
    right or hand to the scalar path (escapes of every kind, dot segments, ports, IDNA, IPs, userinfo,
    non-ASCII, whitespace, fragments holding anything, tracking names in any case)."""
    rng = random.Random(seed)
    schemes = ["http://", "https://", "https://", "HTTP://", "hTTps://", "ftp://", "", " http://", "http:/",
               "http:\\\\"]
    hosts = ["example.com", "Example.COM", "a-b.c", "www.x.org", "1.2.3.4", "h.0x1", "h.12", "xn--bcher-kva.de",
             "XN--bcher-kva.de", "b\u00fccher.de", "a..b", "h", "-", "u:p@h.com", "@h.com", "[::1]", "h.com.",
             "ex%41mple.com", "h1.c2", "sub.h-1.com"]
    ports = ["", "", "", ":80", ":443", ":8080", ":0", ":080", ":65535", ":65536", ":", ":8a"]
    pieces = ["a", "B", "0", "-", ".", "..", "/", "//", "%2e", "%2E", "%2f", "%2F", "%41", "%7e", "%7E", "%20",
              "%c3%a9", "%C3%A9", "%", "%4", "%zz", "~", "_", "x y", "\u00e9", "'", "`", "{", "|", "[", "^", ";",
              "=", "&", ":", "@", "!", "$", "(", "*", ",", "+", "\t", "\\", '"', "<"]
    qpieces = ["a=1", "b=2", "A=0", "a=2", "", "", "utm_source=x", "UTM_Medium=y", "gclid", "sid=1", "z", "=v",
               "b", "c=%41", "c=%2f", "d=%c3%a9", "e=%7E", "f=a b", "g='", "h=?", "i=/.", "j=%", "k=%2", "l=\u00e9",
               "m=`", "n={}", "p=%20", "q=%5B"]
    frags = ["", "", "", "#", "#x", "#a b", "#%", "#%zz", "#\u00e9", "#a#b", "#\t", "#?q=1", "#/../"]
    clean = {  # what the vectorised path must handle itself; mixed with the above at random
        "schemes": ["http://", "https://"], "hosts": ["example.com", "Example.COM", "a-b.c", "www.x.org", "h",
                                                      "h1.c2"],
        "ports": ["", "", ":80", ":443", ":8080"],
        "pieces": ["a", "B", "0", "-", "/", "//", "%2F", "%20", "%c3%a9", "%C3%A9", "~", "_", ";", "=", "&", ":",
                   "@", "!", "$", "(", "*", ",", "+", "|", "["],
        "qpieces": qpieces[:12] + ["c=%2f", "d=%c3%a9", "h=?", "i=/.", "n={}", "p=%20", "q=%5B", "r=`"],
    }
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.01:
            out.append(None)
            continue
        c = rng.random() < 0.6
        sc, ho, po, pi, qp = (
            (clean["schemes"] if c and rng.random() < 0.9 else schemes),
            (clean["hosts"] if c and rng.random() < 0.9 else hosts),
            (clean["ports"] if c and rng.random() < 0.9 else ports),
            (clean["pieces"] if c and rng.random() < 0.9 else pieces),
            (clean["qpieces"] if c and rng.random() < 0.9 else qpieces),
        )
        path = "".join(rng.choice(pi) for _ in range(rng.randint(0, 6)))
        if rng.random() < 0.5:
            path = "/" + "/".join(rng.choice(["a", "b", "x", "Y", "%41", "%C3%A9", "a%20b", ".", "..", ".a"])
                                  for _ in range(rng.randint(0, 4))) + rng.choice(["", "/", path])
        elif path and rng.random() < 0.8:
            path = "/" + path
        query = ""
        if rng.random() < 0.6:
            query = "?" + "&".join(rng.choice(qp) for _ in range(rng.randint(0, 5)))
        url = f"{rng.choice(sc)}{rng.choice(ho)}{rng.choice(po)}{path}{query}{rng.choice(frags)}"
        if rng.random() < 0.03:
            url += rng.choice([" ", "\n", "\x00"])
        out.append(url)
    return out


def url_strategy():
    """Hypothesis strategy of adversarial absolute URLs: userinfo, IPv6 and every IPv4 spelling,
    trailing dots, default and odd ports, percent-escapes of every kind, IDNA, dot segments, case."""
    from hypothesis import strategies as st

    schemes = st.sampled_from(["http://", "https://", "HTTP://", "hTTps://", "http:", "https:///", "ftp://", ""])
    userinfo = st.sampled_from(["", "", "", "user@", "a:b@", ":p@", "u%40x@", "@", "us er@"])
    hosts = st.sampled_from([
        "example.com", "Example.COM", "EXAMPLE.com.", "a-b.c", "www.x.org", "h", "h.", "-", "a..b", "foo.09..",
        "127.0.0.1", "0x7f.1", "2130706433", "0177.0.0.1", "127.1", "0x7F000001", "256.0.0.1", "1.2.3.4.5",
        "[::1]", "[::ffff:7f00:1]", "[::FFFF:127.0.0.1]", "[2001:db8::1]", "[0:0:0:0:0:0:0:1]", "[::1", "[1::2::3]",
        "b\u00fccher.de", "XN--bcher-kva.de", "xn--pokxncvks", "ex%41mple.com", "a%2Eb", "h%20x", "", ".",
    ])
    ports = st.sampled_from(["", "", ":80", ":443", ":8080", ":0", ":080", ":65535", ":65536", ":", ":8a"])
    pieces = st.sampled_from(["a", "B", "/", "//", ".", "..", "%2e", "%2E", "%41", "%7e", "%c3%a9", "%", "%zz",
                              "\u00e9", " ", "\t", "\\", ";sid=1", "~", "@", ":", "[", "'", "`", "{"])
    path = st.lists(pieces, max_size=6).map("".join)
    query = st.one_of(st.just(""), st.lists(st.sampled_from(
        ["a=1", "b=2", "", "utm_source=x", "A=%41", "c=%2f", "d=\u00e9", "e= ", "f=?", "g=%"]), max_size=4).map(
        lambda ps: "?" + "&".join(ps)))
    frag = st.sampled_from(["", "", "#", "#x", "#a b", "#%zz"])
    return st.builds(lambda *p: "".join(p), schemes, userinfo, hosts, ports,
                     st.one_of(st.just(""), path.map(lambda x: "/" + x)), query, frag)
