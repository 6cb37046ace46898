"""Which WHATWG parser backs the URL model: ada-url vs can-ada (both wrap Ada, Node.js's parser),
against our URL model (:func:`crawl.url.parse_url`, on ada-url's C API) and ``urllib.parse`` in the
same run. (Before the swap the same run also timed the hand-written parser the model replaced; its
figure is in bench/RESULTS.md.)

The task timed is what every module asks of a URL: parse it, then its host and origin. The URLs are
the simulated-web-like links of ``bench/urls_bench.py`` (resolved hrefs, repeats, mixed case, default
ports, escapes) plus 2 % of the forms the SSRF guard and politeness keys must get right (userinfo,
IPv4 in decimal/octal/hex/short forms, IPv6, trailing dots, IDNA, ports).

Why ratios: absolute times on a shared 2-core box are noise; ``other / ada-url`` from one run is the
figure to compare. Each candidate runs over the same list; best CPU time of ``--repeat`` runs.

    .venv/bin/python bench/urlparse_bench.py [--n 1000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ada_url  # noqa: E402

try:  # the runner-up, not a dependency: pip install can-ada==3.0.0 to time it
    import can_ada
except ImportError:
    can_ada = None

from bench.urls_bench import make_links  # noqa: E402

ODD = ["http://user@127.0.0.1:{p}/a", "http://a:b@Example.COM:80/x", "http://[::1]:{p}/", "http://[::ffff:7f00:1]/",
       "http://0x7f.1/", "http://2130706433/", "http://0177.0.0.1/", "http://HOST.example./p",
       "https://bücher.de/ü", "http://xn--bcher-kva.de:{p}/", "https://h.test:443/?q=%41", "http://[2001:db8::1]:{p}/x"]


def make_urls(n: int) -> list[str]:
    rng = random.Random(3)
    links = make_links(n)
    for i in rng.sample(range(n), n // 50):
        links[i] = rng.choice(ODD).format(p=rng.randint(1, 65535))
    return links


def with_model(urls: list[str]) -> list[tuple[str, str]]:
    from crawl.url import InvalidURL, parse_url  # the URL model: ada-url's C API, sliced in Python

    out = []
    for u in urls:
        try:
            p = parse_url(u)
            out.append((p.host, p.origin))
        except InvalidURL:
            out.append(("", ""))
    return out


def with_urllib(urls: list[str]) -> list[tuple[str, str]]:
    out = []
    for u in urls:
        try:
            s = urlsplit(u)
            port = s.port
            out.append((s.hostname or "", f"{s.scheme}://{s.hostname}" + (f":{port}" if port else "")))
        except ValueError:
            out.append(("", ""))
    return out


def with_ada_url(urls: list[str]) -> list[tuple[str, str]]:
    out = []
    URL = ada_url.URL
    for u in urls:
        try:
            p = URL(u)
            out.append((p.hostname, p.origin))
        except ValueError:
            out.append(("", ""))
    return out


def with_ada_url_dict(urls: list[str]) -> list[tuple[str, str]]:
    out = []
    parse, attrs = ada_url.parse_url, ("hostname", "origin")
    for u in urls:
        try:
            d = parse(u, attrs)
            out.append((d["hostname"], d["origin"]))
        except ValueError:
            out.append(("", ""))
    return out


def with_can_ada(urls: list[str]) -> list[tuple[str, str]]:
    out = []
    parse = can_ada.parse
    for u in urls:
        try:
            p = parse(u)
            out.append((p.hostname, p.origin))
        except ValueError:
            out.append(("", ""))
    return out


def best_cpu(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        c = time.process_time()
        fn()
        best = min(best, time.process_time() - c)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    urls = make_urls(args.n)
    print(f"{args.n:,} URLs ({len(set(urls)):,} distinct) made in {time.perf_counter() - t0:.1f} s; "
          f"ada-url {ada_url.get_version()}")
    cands = [("ada-url URL()", with_ada_url), ("ada-url parse_url()", with_ada_url_dict),
             *([("can-ada parse()", with_can_ada)] if can_ada else []), ("crawl.url.parse_url", with_model),
             ("urllib.urlsplit", with_urllib)]
    ref = with_ada_url(urls[:20000])
    times = {}
    for name, fn in cands:
        times[name] = best_cpu(lambda fn=fn: fn(urls), args.repeat)
        same = sum(a == b for a, b in zip(fn(urls[:20000]), ref, strict=True)) / len(ref)
        print(f"{name:<22}{times[name]:>8.2f} s cpu {args.n / times[name]:>12,.0f} URLs/s   "
              f"same host+origin as ada-url on 20k: {same:.2%}", flush=True)
    base = times["ada-url URL()"]
    print("ratio (time / ada-url URL()): " + ", ".join(f"{k} {v / base:.2f}" for k, v in times.items()))


if __name__ == "__main__":
    main()
