"""Parser choice by measurement: selectolax (Lexbor) vs lxml for link + visible-text extraction.

Generates a few hundred deterministic HTML pages of 5-50 KB with 20-60 links each, then measures
pages/s of the same job done with each library (links from a/area/link/frame/iframe with their rel,
text without script/style/noscript/template), plus our full ``crawl.parse`` HTML parser and SimHash.
Single process, single core. Run: ``.venv/bin/python bench/parse_bench.py [--pages 300] [--rounds 3]``.

``--simweb-hosts N`` (default 60, 0 = off) adds the whole parse step, ``crawl.parse.parse_partition``,
over one real WARC file written from the simulated web's pages (``crawl.simweb``: ~20 pages per host,
HTML with menus, relative and absolute links, ``<base>``, accents and typographic characters, plus a
few PDFs and images; ``--html-only`` keeps the HTML pages). ``--baseline-rev REV`` also runs
``crawl/parse.py``, ``crawl/fingerprint.py`` (with its ``crawl/fingerprint_kernel.py``) and the link resolution (``crawl/url/links.py``,
``crawl/url/parse.py``) as they were at git revision REV, interleaved with the current ones (``--reps``
runs per side, alternating which goes first), checks that both give identical page and link tables,
and prints CPU ms per page of each side and ``RESULT parse_cpu_ms_per_page=… baseline=… ratio=…``::

    .venv/bin/python bench/parse_bench.py --pages 100 --rounds 1 --simweb-hosts 150 --html-only \
        --baseline-rev 4d69ba7 --reps 6

``--stages`` times the HTML pass and the link resolution alone; ``--bodies`` times ``parse_bodies`` over the
bodies held in memory (no WARC read), both sides alternated every 300 pages in one process.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lxml.etree  # noqa: E402
import lxml.html  # noqa: E402
from selectolax.lexbor import LexborHTMLParser  # noqa: E402

_VOCAB_RNG = random.Random(0)
WORDS = ["".join(_VOCAB_RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_VOCAB_RNG.randint(2, 10)))
         for _ in range(4000)]


def make_page(rng: random.Random) -> str:
    """One page: head with meta/links, nav, paragraphs, a script and a style block, 20-60 links."""
    target = rng.randint(5_000, 50_000)
    n_links = rng.randint(20, 60)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>",
        " ".join(rng.choice(WORDS) for _ in range(6)),
        "</title><link rel='canonical' href='/c'><link rel='alternate' hreflang='de' href='/de/'>",
        "<style>body{font:12px sans-serif} .x{color:red}</style>",
        "<script>var tracking = {a: 1, b: [1,2,3]}; function f(){return 1;}</script></head><body>",
        "<nav><ul>",
    ]
    links_left = n_links
    for _ in range(min(8, links_left)):
        parts.append(f"<li><a href='/section/{rng.choice(WORDS)}'>{rng.choice(WORDS)}</a></li>")
        links_left -= 1
    parts.append("</ul></nav><article>")
    size = sum(map(len, parts))
    while size < target or links_left > 0:
        para = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 90)))
        if links_left > 0:
            kind = rng.random()
            if kind < 0.8:
                rel = " rel='nofollow'" if rng.random() < 0.1 else ""
                link = f"<a href='https://host{rng.randint(0, 500)}.test/{rng.choice(WORDS)}?id={rng.randint(0, 99)}'{rel}>{rng.choice(WORDS)}</a>"
            elif kind < 0.9:
                link = f"<iframe src='/embed/{rng.randint(0, 999)}'></iframe>"
            else:
                link = f"<map><area href='/area/{rng.randint(0, 999)}'></map>"
            para = para + " " + link
            links_left -= 1
        chunk = f"<p>{para}</p>"
        parts.append(chunk)
        size += len(chunk)
    parts.append("<noscript>enable js</noscript></article><footer>(c) 2026</footer></body></html>")
    return "".join(parts)


LINK_CSS = "a[href], area[href], link[href], frame[src], iframe[src]"


def extract_selectolax(html: str) -> tuple[int, int]:
    tree = LexborHTMLParser(html)
    links = []
    for node in tree.css(LINK_CSS):
        attrs = node.attributes
        url = attrs.get("href") or attrs.get("src")
        links.append((node.tag, url, attrs.get("rel")))
    tree.strip_tags(["script", "style", "noscript", "template"])
    body = tree.body
    text = " ".join((body.text(separator=" ") if body is not None else "").split())
    return len(links), len(text)


def extract_lxml(html: str) -> tuple[int, int]:
    doc = lxml.html.document_fromstring(html)
    links = []
    for el in doc.iter("a", "area", "link", "frame", "iframe"):
        url = el.get("src") if el.tag in ("frame", "iframe") else el.get("href")
        if url is not None:
            links.append((el.tag, url, el.get("rel")))
    lxml.etree.strip_elements(doc, "script", "style", "noscript", "template", with_tail=False)
    body = doc.find("body")
    text = " ".join((" ".join(body.itertext()) if body is not None else "").split())
    return len(links), len(text)


def extract_resiliparse(html: str) -> tuple[int, int]:
    """The same job with resiliparse (its Lexbor tree, CSS selector and plain-text extractor)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    links = []
    for node in tree.document.query_selector_all(LINK_CSS):
        links.append((node.tag, node.getattr("href") or node.getattr("src"), node.getattr("rel")))
    return len(links), len(extract_plain_text(tree, main_content=False))


def rate(fn, pages: list, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for p in pages:
            fn(p)
        best = min(best, time.perf_counter() - t0)
    return len(pages) / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--simweb-hosts", type=int, default=60, help="hosts of the simulated-web WARC (0 = skip)")
    ap.add_argument("--baseline-rev", default="", help="also run crawl/parse.py of this git revision")
    ap.add_argument("--reps", type=int, default=3, help="interleaved runs per side of the simulated-web WARC")
    ap.add_argument("--html-only", action="store_true", help="parse only the HTML pages of the simulated-web WARC")
    ap.add_argument("--stages", action="store_true",
                    help="with --baseline-rev: only time the HTML pass (alternated every 250 pages) and the link resolution of each side, "
                         "bodies in memory, alternated, and check their outputs are equal")
    ap.add_argument("--bodies", action="store_true",
                    help="with --baseline-rev: only time parse_bodies over the bodies held in memory, both sides in one "
                         "process, alternated every 300 pages (thread CPU), and check their tables are equal")
    args = ap.parse_args()
    if args.bodies:
        if not args.baseline_rev:
            ap.error("--bodies needs --baseline-rev")
        simweb_bodies(args.simweb_hosts, args.baseline_rev, args.reps, args.html_only)
        return
    if args.stages:
        if not args.baseline_rev:
            ap.error("--stages needs --baseline-rev")
        simweb_stages(args.simweb_hosts, args.baseline_rev, args.reps, args.html_only)
        return
    rng = random.Random(args.seed)
    pages = [make_page(rng) for _ in range(args.pages)]
    raw = [p.encode("utf-8") for p in pages]
    avg_kb = sum(map(len, raw)) / len(raw) / 1024
    sx = [extract_selectolax(p) for p in pages[:20]]
    lx = [extract_lxml(p) for p in pages[:20]]
    assert [a for a, _ in sx] == [a for a, _ in lx], "both must find the same links"
    print(f"# parse bench {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} {os.cpu_count()} cpu, "
          f"python {platform.python_version()}")
    print(f"pages: {len(pages)}, avg {avg_kb:.1f} KB, best of {args.rounds} rounds, one core")
    # alternate the two libraries round by round so load from other processes hits both alike
    r_sx = r_lx = 0.0
    for _ in range(args.rounds):
        r_sx = max(r_sx, rate(extract_selectolax, pages, 1))
        r_lx = max(r_lx, rate(extract_lxml, pages, 1))
    print(f"selectolax/lexbor links+text: {r_sx:8.0f} pages/s")
    print(f"lxml            links+text: {r_lx:8.0f} pages/s   (selectolax = {r_sx / r_lx:.2f}x lxml)")
    if importlib.util.find_spec("resiliparse") is not None:  # optional: not a dependency of the crawler
        r_rp = 0.0
        for _ in range(args.rounds):
            r_rp = max(r_rp, rate(extract_resiliparse, pages, 1))
        print(f"resiliparse     links+text: {r_rp:8.0f} pages/s   (selectolax = {r_sx / r_rp:.2f}x resiliparse)")
    try:
        from crawl.fingerprint import simhash
        from crawl.parse import parse_html

        hdrs = {"content-type": "text/html; charset=utf-8"}
        r_ours = rate(lambda b: parse_html("http://bench.test/p/", b, hdrs), raw, args.rounds)
        print(f"crawl.parse.parse_html    : {r_ours:8.0f} pages/s   (charset, links resolved, robots meta, text)")
        texts = [parse_html("http://bench.test/p/", b, hdrs).text for b in raw]
        r_sim = rate(simhash, texts, args.rounds)
        avg_text = sum(map(len, texts)) / len(texts) / 1024
        print(f"crawl.fingerprint.simhash : {r_sim:8.0f} pages/s   (avg text {avg_text:.1f} KB)")
    except ImportError as exc:  # parse not importable yet
        print(f"crawl.parse not measured: {exc}")
        return
    print(f"parse_partition (WARC read + parse + SimHash + Arrow): {partition_rate(raw):8.0f} pages/s")
    if args.simweb_hosts > 0:
        simweb_partition(args.simweb_hosts, args.baseline_rev, args.reps, args.html_only)


def load_parse_at(rev: str):
    """``crawl/parse.py`` of git revision ``rev`` as a module, bound to that revision's
    ``crawl/fingerprint.py`` (everything else it imports is the current package)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def source(path: str) -> str:
        return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=repo, check=True, capture_output=True,
                              text=True).stdout

    tmp = tempfile.mkdtemp(prefix="parse_rev_")
    mods = {}
    parse_src = source("crawl/parse.py").replace("from crawl.fingerprint import", "from parse_baseline_fingerprint import")
    fingerprint_src = source("crawl/fingerprint.py")
    modules = []
    if "crawl.fingerprint_kernel" in fingerprint_src:  # that revision's compiled kernel too (numba)
        fingerprint_src = fingerprint_src.replace("from crawl.fingerprint_kernel import",
                                                  "from parse_baseline_fingerprint_kernel import")
        modules.append(("parse_baseline_fingerprint_kernel", source("crawl/fingerprint_kernel.py")))
    modules.append(("parse_baseline_fingerprint", fingerprint_src))
    link_import = "from crawl.url import WEB_SCHEMES, resolve_many"
    if link_import in parse_src:  # that revision's link resolution too (crawl/url/links.py and parse.py)
        parse_src = parse_src.replace(link_import, "from parse_baseline_links import WEB_SCHEMES, resolve_many")
        # and its per-key resolution (else the baseline would run the current tree's crawl/url/links.py)
        parse_src = parse_src.replace("from crawl.url.links import", "from parse_baseline_links import")
        modules += [("parse_baseline_urlparse", source("crawl/url/parse.py")),
                    ("parse_baseline_links", source("crawl/url/links.py").replace(
                        "from crawl.url.parse import", "from parse_baseline_urlparse import"))]
    modules.append(("parse_baseline", parse_src))
    for name, text in modules:
        file = os.path.join(tmp, name + ".py")
        with open(file, "w", encoding="utf-8") as fh:
            fh.write(text)
        spec = importlib.util.spec_from_file_location(name, file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
        mods[name] = mod
    # the built-in PDF/image parsers register themselves in the current crawl.parse; give the baseline
    # module the same ones, or its tables differ on every non-HTML document
    import crawl.parse as current

    current._load_builtins()
    base = mods["parse_baseline"]
    base._builtins_loaded = True
    base._PARSERS.update({m: fn for m, fn in current._PARSERS.items() if fn is not current.parse_html})
    return base


def simweb_warc(root: str, hosts: int):
    """Every page of a simulated web (``hosts`` x ~20 pages) as one WARC file; returns the fetch table."""
    import pyarrow as pa

    from crawl.records import FETCH_SCHEMA
    from crawl.simweb import model as M
    from crawl.simweb.render import Renderer
    from crawl.warc import WarcFile

    m = M.build(M.SimParams(seed=3, hosts=hosts, pages_per_host=20))
    r = Renderer(m)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    with WarcFile.open(root, "sim.warc.gz") as w:
        for p in range(m.n_pages):
            rend = r.get(p, 0, m.params.epoch0)
            body = rend.body(1, m.params.epoch0 + 10)
            url = m.url(p)
            ref = w.write_response(url, t0, 200, "OK", [("Content-Type", rend.content_type)], body,
                                   "127.0.0.1", None)
            row = {f.name: None for f in FETCH_SCHEMA}
            row.update(url=url, url_hash=p, status="fetched", warc_type="response", warc_filename="sim.warc.gz",
                       warc_record_offset=ref.offset, warc_record_length=ref.length,
                       content_type=rend.content_type, fetch_time=t0, http_status=200)
            rows.append(row)
    return pa.Table.from_pylist(rows, schema=FETCH_SCHEMA)


def simweb_partition(hosts: int, baseline_rev: str, reps: int, html_only: bool = False) -> None:
    import pyarrow.compute as pc

    from crawl.parse import parse_partition

    with tempfile.TemporaryDirectory() as root:
        table = simweb_warc(root, hosts)
        if html_only:  # the pages a crawl round mostly parses (PDFs cost ~15 ms each in pypdf)
            table = table.filter(pc.starts_with(table.column("content_type"), "text/html"))
        n = table.num_rows
        sides = [("current", parse_partition)]
        if baseline_rev:
            sides.insert(0, ("baseline", load_parse_at(baseline_rev).parse_partition))
        best = {name: 0.0 for name, _ in sides}
        cpu: dict[str, list[float]] = {name: [] for name, _ in sides}
        outputs = {}
        for _name, fn in sides:  # untimed: a revision's numba kernels compile at its first call
            fn(root, table, 500)
        for rep in range(max(1, reps)):
            for name, fn in (sides if rep % 2 == 0 else sides[::-1]):  # alternate who runs first
                t, c = time.perf_counter(), time.process_time()
                outputs[name] = fn(root, table, 500)
                cpu[name].append(1000 * (time.process_time() - c) / n)
                best[name] = max(best[name], n / (time.perf_counter() - t))
        pages, links = outputs["current"]
        print(f"simulated web: {n} pages ({pages.num_rows} parsed, {links.num_rows} links), one WARC, "
              f"best of {max(1, reps)}, load {os.getloadavg()[0]:.1f}")

        def ms(name: str) -> str:
            return f"CPU ms/page {', '.join(f'{x:.3f}' for x in cpu[name])} (median {statistics.median(cpu[name]):.3f})"

        print(f"parse_partition simweb current : {best['current']:8.0f} pages/s   {ms('current')}")
        if baseline_rev:
            b_pages, b_links = outputs["baseline"]
            same = b_pages.equals(pages) and b_links.equals(links)
            print(f"parse_partition simweb {baseline_rev:8s}: {best['baseline']:8.0f} pages/s   {ms('baseline')}")
            print(f"RESULT parse_cpu_ms_per_page={statistics.median(cpu['current']):.3f} "
                  f"baseline={statistics.median(cpu['baseline']):.3f} "
                  f"ratio={statistics.median(cpu['baseline']) / statistics.median(cpu['current']):.2f} "
                  f"tables={'identical' if same else 'DIFFER'}")


def simweb_stages(hosts: int, baseline_rev: str, reps: int, html_only: bool = False) -> None:
    """CPU ms per page of the HTML pass (``_parse_document`` of every body, held in memory: Lexbor,
    the tree walk, text) and of the link resolution (``_resolve_pages`` over that pass's links) of
    the current tree and of ``baseline_rev``, alternated ``reps`` times; the links, canonical URLs and
    texts of both sides must be equal (else it says DIFFER)."""
    import pyarrow.compute as pc

    import crawl.parse as current
    from crawl.fingerprint import warm_up

    warm_up()
    with tempfile.TemporaryDirectory() as root:
        table = simweb_warc(root, hosts)
        if html_only:
            table = table.filter(pc.starts_with(table.column("content_type"), "text/html"))
        bodies = [(r, list(h), p) for r, h, p in current.warc_bodies(root, table)]
    urls = table.column("url").to_pylist()
    page_urls = [urls[r] for r, _, _ in bodies]
    n = len(bodies)
    sides = [("baseline", load_parse_at(baseline_rev)), ("current", current)]
    cpu: dict[tuple[str, str], list[float]] = {}
    # outputs once per side, untimed (held, they would weigh on the timed passes' memory)
    got = {}
    raws_of = {}
    for name, mod in sides:
        parsed = [mod._parse_document(urls[r], p, h, 500, defer=True) for r, h, p in bodies]
        raws_of[name] = [raw for _, raw in parsed]
        res = mod._resolve_pages(page_urls, raws_of[name], 500)
        got[name] = ([(d.title, d.language, d.meta_noindex, d.meta_nofollow, d.content_text,
                       raw.text if raw else d.text) for d, raw in parsed],
                     res.canonical, res.page.tolist(), res.to_url.to_pylist(), res.kind.to_pylist(),
                     res.nofollow.tolist())
        del parsed, res
    chunk = 250  # the HTML pass alternates sides every 250 pages, so load swings hit both alike
    for rep in range(max(1, reps) + 1):  # the first round is a warm-up, untimed
        spent = {name: 0.0 for name, _ in sides}
        for k, i in enumerate(range(0, n, chunk)):
            for name, mod in (sides if (rep + k) % 2 == 0 else sides[::-1]):
                c = time.process_time()
                for r, h, p in bodies[i:i + chunk]:
                    mod._parse_document(urls[r], p, h, 500, defer=True)
                spent[name] += time.process_time() - c
        for name, mod in (sides if rep % 2 == 0 else sides[::-1]):
            c1 = time.process_time()
            mod._resolve_pages(page_urls, raws_of[name], 500)
            c2 = time.process_time()
            if rep:
                cpu.setdefault((name, "html"), []).append(1000 * spent[name] / n)
                cpu.setdefault((name, "links"), []).append(1000 * (c2 - c1) / n)
    same = got["baseline"] == got["current"]
    print(f"simulated web: {n} pages, bodies in memory, {max(1, reps)} alternated runs per side, "
          f"load {os.getloadavg()[0]:.1f}")
    for stage in ("html", "links"):
        b, c = cpu[("baseline", stage)], cpu[("current", stage)]
        print(f"{stage:5s} {baseline_rev:8s}: CPU ms/page {', '.join(f'{x:.4f}' for x in b)} (median {statistics.median(b):.4f})")
        print(f"{stage:5s} current : CPU ms/page {', '.join(f'{x:.4f}' for x in c)} (median {statistics.median(c):.4f})")
        print(f"RESULT stage={stage} current={statistics.median(c):.4f} baseline={statistics.median(b):.4f} "
              f"ratio={statistics.median(b) / statistics.median(c):.2f} outputs={'identical' if same else 'DIFFER'}")


def simweb_bodies(hosts: int, baseline_rev: str, reps: int, html_only: bool = False) -> None:
    """CPU ms per page of ``parse_bodies`` (HTML pass, links, text column, fingerprints, no WARC read)
    of the current tree and of ``baseline_rev`` over the simulated web's bodies held in memory, the two
    alternated every 300 pages so that the box's load swings hit both alike (thread CPU time); prints
    each run's figures, the medians and in how many runs the current side was lower."""
    import pyarrow.compute as pc

    import crawl.parse as current

    current.warm_up()
    with tempfile.TemporaryDirectory() as root:
        table = simweb_warc(root, hosts)
        if html_only:
            table = table.filter(pc.starts_with(table.column("content_type"), "text/html"))
        bodies = [(r, list(h), p) for r, h, p in current.warc_bodies(root, table)]
    sides = [("baseline", load_parse_at(baseline_rev)), ("current", current)]
    got = {name: mod.parse_bodies(table, bodies, 500) for name, mod in sides}  # untimed: kernels compile
    same = got["baseline"][0].equals(got["current"][0]) and got["baseline"][1].equals(got["current"][1])
    del got
    n, chunk = len(bodies), 300
    cpu: dict[str, list[float]] = {name: [] for name, _ in sides}
    for rep in range(max(1, reps)):
        spent = {name: 0 for name, _ in sides}
        for k, i in enumerate(range(0, n, chunk)):
            for name, mod in (sides if (rep + k) % 2 == 0 else sides[::-1]):
                c = time.thread_time_ns()
                mod.parse_bodies(table, bodies[i:i + chunk], 500)
                spent[name] += time.thread_time_ns() - c
        for name in spent:
            cpu[name].append(spent[name] / n / 1e6)
    b, c = statistics.median(cpu["baseline"]), statistics.median(cpu["current"])
    lower = sum(x < y for x, y in zip(cpu["current"], cpu["baseline"], strict=True))
    print(f"simulated web: {n} pages, bodies in memory, {max(1, reps)} runs, load {os.getloadavg()[0]:.1f}")
    for name in cpu:
        print(f"parse_bodies {name:8s}: CPU ms/page {', '.join(f'{x:.4f}' for x in cpu[name])}")
    print(f"RESULT parse_bodies_ms_per_page={c:.4f} baseline={b:.4f} ratio={b / c:.3f} lower_in={lower}/{len(cpu['current'])} "
          f"tables={'identical' if same else 'DIFFER'}")


def partition_rate(raw: list[bytes]) -> float:
    """The whole parse step over one WARC file holding every page (request + response records)."""
    import tempfile

    import pyarrow as pa

    from crawl.parse import parse_partition
    from crawl.records import FETCH_SCHEMA
    from crawl.warc import WarcFile

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as root:
        rows = []
        with WarcFile.open(root, "bench.warc.gz") as w:
            for i, body in enumerate(raw):
                url = f"http://bench{i % 50}.test/p{i}"
                w.write_request(url, t0, "GET", [("Host", "bench.test")])
                ref = w.write_response(url, t0, 200, "OK", [("Content-Type", "text/html; charset=utf-8")],
                                       body, "127.0.0.1", None)
                row = {f.name: None for f in FETCH_SCHEMA}
                row.update(url=url, url_hash=i, status="fetched", warc_type="response",
                           warc_filename="bench.warc.gz", warc_record_offset=ref.offset,
                           warc_record_length=ref.length, content_type="text/html; charset=utf-8")
                rows.append(row)
        table = pa.Table.from_pylist(rows, schema=FETCH_SCHEMA)
        t = time.perf_counter()
        pages, _ = parse_partition(root, table, 500)
        assert pages.num_rows == len(raw)
        return len(raw) / (time.perf_counter() - t)


if __name__ == "__main__":
    main()
