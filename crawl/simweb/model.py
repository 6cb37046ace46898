"""The simulated web as data: hosts, pages, links, change rates, duplicates, robots, sitemaps, traps.

Pure and deterministic from ``SimParams`` (no I/O, no clock): the server renders it, the truth export
dumps it, tests read it. Pages are columns of NumPy arrays (one row per page, hosts contiguous) and
the link graph is CSR (``link_ptr``/``link_dst``) with a per-link spelling code, because at 1000 hosts
there are 10^5 pages and 10^6 links and per-row Python objects would dominate start-up. Per-host
properties are small Python objects (at most a few thousand).

Randomness comes from ``numpy.random.default_rng([seed, purpose, ...])`` and from
:mod:`crawl.simweb.events` hashes, never Python's ``hash()``, so a seed is the same web on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from crawl.config import DEFAULT_TRACKING_PARAMS, PRODUCT_TOKEN
from crawl.simweb import events

EPOCH0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: every page exists, at version 0, from here
DOMAIN = "sim.test"

NORMAL_KINDS = ("news", "blog", "shop", "docs", "archive", "forum")
_KIND_SHARE = np.array([0.25, 0.22, 0.15, 0.15, 0.1, 0.13])
NOISY_KINDS = frozenset({"news", "blog", "shop", "forum"})  # per-request timestamp + rotating ad
# changes/day multiplier of a host kind and the home page's own rate
_KIND_RATE = {"news": 2.0, "blog": 0.7, "shop": 1.0, "docs": 0.5, "archive": 0.3, "forum": 1.5,
              "trap": 0.5, "hostile": 0.5}
_HOME_RATE = {"news": 24.0, "blog": 1.0, "shop": 4.0, "docs": 0.2, "archive": 0.02, "forum": 12.0,
              "trap": 0.5, "hostile": 0.5}
# base changes/day of a URL section; archive never changes
SECTION_RATE = {"news": 6.0, "forum": 3.0, "tag": 1.5, "product": 0.4, "blog": 0.08, "docs": 0.03,
                "about": 0.01, "archive": 0.0, "private": 0.05, "files": 0.02, "syndicated": 1.0}
_SECTION_MIX = {
    "news": {"news": 0.55, "tag": 0.1, "archive": 0.2, "about": 0.03, "private": 0.05, "files": 0.07},
    "blog": {"blog": 0.6, "tag": 0.15, "archive": 0.13, "about": 0.03, "private": 0.05, "files": 0.04},
    "shop": {"product": 0.65, "tag": 0.15, "about": 0.03, "private": 0.07, "files": 0.1},
    "docs": {"docs": 0.75, "archive": 0.1, "private": 0.05, "files": 0.1},
    "archive": {"archive": 0.85, "about": 0.05, "files": 0.1},
    "forum": {"forum": 0.7, "tag": 0.1, "archive": 0.15, "private": 0.05},
    "trap": {"blog": 0.7, "about": 0.3},
    "hostile": {"blog": 0.7, "about": 0.3},
}

# page types (JPEG came last, so the older numbers did not move)
HOME, ARTICLE, PDF, PNG, BIN, TRAP, FAULT, JPEG = range(8)
PAGE_TYPES = ("home", "article", "pdf", "png", "bin", "trap", "fault", "jpeg")
CONTENT_TYPES = ("text/html", "text/html", "application/pdf", "image/png", "application/octet-stream",
                 "text/html", "text/html", "image/jpeg")

# link spellings: how a link to a page is written in HTML
(SP_ROOT, SP_REL, SP_ABS, SP_ABS_CASE, SP_ABS_PORT, SP_FRAGMENT, SP_TRACKING, SP_SESSION,
 SP_PROTOREL) = range(9)
# resolve to the page's own host (tracking links are root-relative when the target is on the same host)
RELATIVE_SPELLINGS = (SP_ROOT, SP_REL, SP_FRAGMENT, SP_SESSION, SP_TRACKING)

TRAP_ENTRIES = ("/calendar?month=1&year=2026", "/rep/a/b/", "/more/", "/session/?s=0", "/facets")
FAULTS = ("429-seconds", "429-date", "503", "404", "410", "500", "redirect-chain-3", "redirect-chain-8",
          "redirect-loop-a", "redirect-cross", "slow", "stall", "stall-accept", "endless", "huge",
          "gzip-bomb", "wrong-type-html", "wrong-type-image", "reset")
HOSTILE_MODES = ("mixed", "throttle", "burst503", "slow")

# robots.txt variants; the first ones are guaranteed to exist when there are enough normal hosts
ROBOTS_SPECIAL = ("404", "5xx", "redirect", "redirect-cross", "timeout", "huge", "bom", "agent-specific",
                  "agent-block", "delay", "delay", "delay", "wildcards", "disallow")
ROBOTS_COMMON = ("allow-all", "disallow", "wildcards", "agent-specific", "allow-all")
CRAWL_DELAYS = (0.5, 5.0, 60.0, 2.0, 10.0)
TRACKING = frozenset(DEFAULT_TRACKING_PARAMS)

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "ber", "dan", "el", "for", "gra", "hul",
              "is", "jor", "kel", "lum", "mar", "nor", "ost", "pel", "quin", "ras", "sol", "tur", "ul",
              "ven", "wex", "yar", "zen", "ab", "cor", "dri", "ex", "fen")
_ACCENTED = ("café", "naïve", "über", "señor", "façade", "crème", "déjà", "rôle", "Ångström", "smörgås",
             "jalapeño", "fiancée", "piñata", "Zürich", "coöperate")
_CP1252_ONLY = ("“quoted”", "€5", "‘single’", "—", "…", "™")


def _make_vocab() -> list[str]:
    rng = np.random.default_rng(20260101)
    words: set[str] = set()
    while len(words) < 2500:
        n = int(rng.integers(1, 4))
        words.add("".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n)))
    return sorted(words)


VOCAB = _make_vocab()


@dataclass(frozen=True)
class SimParams:
    """Everything that decides the web: same params, same bytes."""

    seed: int = 1
    hosts: int = 200
    pages_per_host: int = 50
    epoch0: float = EPOCH0


@dataclass
class Host:
    idx: int
    name: str
    kind: str
    first: int = 0  # first page id
    count: int = 0
    robots: str = "allow-all"
    crawl_delay: float | None = None
    robots_redirect_to: str | None = None  # absolute URL for redirect variants
    sitemap: str = "none"  # none | single | index
    lastmod: str = "true"  # true | now (lying) | absent
    charset: str = "utf-8"
    charset_decl: str = "both"  # header | meta | both
    conditional: bool = False  # ETag/Last-Modified and 304 answers
    noisy: bool = False
    mode: str = ""  # hostile host-wide behaviour
    mirror_of: int = -1
    tagline: str = ""

    @property
    def base(self) -> str:
        return f"http://{self.name}"


@dataclass
class Model:
    params: SimParams
    hosts: list[Host]
    host_index: dict[str, int]
    # per page (hosts contiguous)
    page_host: np.ndarray  # int32
    paths: list[str]
    page_type: np.ndarray  # int8, PAGE_TYPES
    section: list[str]
    rate: np.ndarray  # float64 changes/day (the content's)
    content: np.ndarray  # int64 content id = page id of the cluster's representative
    render_src: np.ndarray  # int64 page whose rendering is served (mirrors: the source page)
    canonical: np.ndarray  # int64 page named by rel=canonical, -1 none
    meta_robots: list[str]  # "" | noindex | nofollow | "noindex, nofollow"
    flags: np.ndarray  # uint8 bit set: 1 base href, 2 malformed, 4 js-only
    words: np.ndarray  # int32 body length in words
    weight: np.ndarray  # float64 popularity used to draw link targets
    totals: np.ndarray  # int64 events on the horizon (per content, copied to each page)
    titles: list[str]
    fault: list[str]
    # links
    link_ptr: np.ndarray  # int64 CSR offsets
    link_dst: np.ndarray  # int64
    link_spelling: np.ndarray  # uint8
    link_nofollow: np.ndarray  # bool
    path_index: list[dict[str, int]] = field(default_factory=list)

    # ---- lookups -------------------------------------------------------------------------------
    @property
    def n_pages(self) -> int:
        return len(self.paths)

    def url(self, page: int) -> str:
        return self.hosts[int(self.page_host[page])].base + self.paths[page]

    @cached_property
    def urls(self) -> list[str]:
        return [self.url(p) for p in range(self.n_pages)]

    @cached_property
    def url_index(self) -> dict[str, int]:
        return {u: i for i, u in enumerate(self.urls)}

    def host_of(self, name: str) -> Host | None:
        """Virtual host lookup: case-insensitive, port and trailing dot ignored."""
        name = name.strip().lower().rsplit("]", 1)[-1]
        name = name.split(":", 1)[0].rstrip(".")
        i = self.host_index.get(name)
        return None if i is None else self.hosts[i]

    def page_at(self, host: Host, key: str) -> int | None:
        return self.path_index[host.idx].get(key)

    def links(self, page: int) -> slice:
        return slice(int(self.link_ptr[page]), int(self.link_ptr[page + 1]))

    # ---- change process ------------------------------------------------------------------------
    def version_at(self, pages: np.ndarray | list[int] | list[str], t: float) -> np.ndarray:
        """Version (number of change events in [epoch0, t]) of each page (ids or URLs) at virtual time ``t``."""
        if len(pages) and isinstance(pages[0], str):
            return self.versions_of_urls(list(pages), t)
        pages = np.asarray(pages, dtype=np.int64)
        c = self.content[pages]
        return events.count_until(self.params.seed, c, self.totals[pages], t - self.params.epoch0)

    def versions_of_urls(self, urls: list[str], t: float) -> np.ndarray:
        """Like :meth:`version_at` keyed by canonical URL; -1 for a URL that is no page."""
        index = self.url_index
        ids = np.array([index.get(u, -1) for u in urls], dtype=np.int64)
        out = np.full(ids.size, -1, dtype=np.int64)
        ok = ids >= 0
        out[ok] = self.version_at(ids[ok], t)
        return out

    def change_time(self, pages: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Epoch seconds of the k-th change (1-based) of each page; epoch0 for k == 0; NaN past the end."""
        pages = np.asarray(pages, dtype=np.int64)
        off = events.kth_event(self.params.seed, self.content[pages], self.totals[pages], k)
        off = np.where(np.asarray(k) == 0, 0.0, off)
        return off + self.params.epoch0

    def version_info(self, pages: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(version, time of the last change or epoch0, time of the next change or inf) at ``t``."""
        pages = np.asarray(pages, dtype=np.int64)
        v = self.version_at(pages, t)
        last = self.change_time(pages, v)
        nxt = self.change_time(pages, v + 1)
        return v, last, np.where(np.isnan(nxt), np.inf, nxt)

    # ---- entry points for tests and benches ------------------------------------------------------
    def good_hosts(self) -> list[Host]:
        """Normal hosts whose robots.txt answers at once without crawl-delay: safe, fast crawl targets."""
        return [h for h in self.hosts if h.kind in NORMAL_KINDS and h.crawl_delay is None
                and h.robots in ("allow-all", "disallow", "wildcards", "agent-specific", "bom")]

    def seed_urls(self, n: int = 5) -> list[str]:
        return [h.base + "/" for h in self.good_hosts()[:n]]


def _rng(seed: int, *purpose: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, *purpose])


def _words(rng: np.random.Generator, n: int) -> list[str]:
    return [VOCAB[i] for i in rng.integers(0, len(VOCAB), n)]


def _assign_kinds(p: SimParams) -> list[str]:
    h = p.hosts
    n_special = {"mirror": max(2, round(h * 0.04)), "hostile": max(len(HOSTILE_MODES), round(h * 0.03)),
                 "trap": max(2, round(h * 0.03))}
    n_normal = max(len(NORMAL_KINDS), h - sum(n_special.values()))
    rng = _rng(p.seed, 1)
    kinds = list(NORMAL_KINDS) + list(rng.choice(NORMAL_KINDS, n_normal - len(NORMAL_KINDS), p=_KIND_SHARE))
    for k, n in n_special.items():
        kinds += [k] * n
    order = rng.permutation(len(kinds))
    return [str(kinds[i]) for i in order]


def _host_sizes(p: SimParams, n: int) -> np.ndarray:
    """Heavy-tailed pages per host (lognormal, sigma 1.1), rescaled so the mean is ``pages_per_host``."""
    rng = _rng(p.seed, 2)
    x = rng.lognormal(0.0, 1.1, n)
    sizes = np.maximum(4, np.round(x * p.pages_per_host / x.mean())).astype(np.int64)
    return np.minimum(sizes, max(4, p.pages_per_host * 40))


def _slug(rng: np.random.Generator) -> str:
    return "-".join(_words(rng, int(rng.integers(2, 4))))


def _page_specs(p: SimParams, host: Host, size: int) -> list[tuple[str, str, int]]:
    """(path, section, page_type) for a non-mirror host: home, articles by section, entry points."""
    rng = _rng(p.seed, 3, host.idx)
    mix = _SECTION_MIX[host.kind]
    names = list(mix)
    secs = rng.choice(names, size - 1, p=np.array(list(mix.values())) / sum(mix.values()))
    specs: list[tuple[str, str, int]] = [("/", "home", HOME)]
    years = rng.integers(2019, 2027, size)
    slug_len = rng.integers(2, 4, size)
    slug_words = rng.integers(0, len(VOCAB), (size, 4))
    for j, sec in enumerate(secs, start=1):
        slug = "-".join(VOCAB[w] for w in slug_words[j, :slug_len[j]])
        ptype = ARTICLE
        if sec == "news":
            path = f"/news/{years[j]}/{slug}-{j}.html"
        elif sec == "blog":
            path = f"/blog/{slug}-{j}"
        elif sec == "product":
            path = f"/product/{j}/{slug}"
        elif sec == "docs":
            path = f"/docs/{VOCAB[slug_words[j, 3]]}/{slug}.html"
        elif sec == "archive":
            path = f"/archive/{years[j]}/{slug}-{j}.html"
        elif sec == "forum":
            path = f"/forum/thread?id={j}"
        elif sec == "tag":
            path = f"/tag/{slug}/" + ("?sort=new" if j % 3 == 0 else "")
        elif sec == "about":
            path = f"/about-{j}.html"
        elif sec == "private":
            path = f"/private/public-{slug}-{j}.html" if j % 2 else f"/private/{slug}-{j}.html"
        else:  # files: PDF, image (PNG and JPEG alternate), binary
            ptype = (PDF, PNG if (j // 3) % 2 == 0 else JPEG, BIN)[j % 3]
            path = f"/files/{slug}-{j}." + {PDF: "pdf", PNG: "png", JPEG: "jpg", BIN: "bin"}[ptype]
        specs.append((path, str(sec), ptype))
    if host.kind == "trap":
        specs += [(e, "trap", TRAP) for e in TRAP_ENTRIES]
    if host.kind == "hostile":
        specs += [(f"/fault/{f}", "fault", FAULT) for f in FAULTS]
    return specs


def _robots_assignments(p: SimParams, hosts: list[Host]) -> None:
    rng = _rng(p.seed, 4)
    normal = [h for h in hosts if h.kind in NORMAL_KINDS]
    order = [normal[i] for i in rng.permutation(len(normal))]
    delays = iter(CRAWL_DELAYS)
    for i, h in enumerate(order):
        variant = ROBOTS_SPECIAL[i] if i < len(ROBOTS_SPECIAL) else str(rng.choice(ROBOTS_COMMON))
        h.robots = variant
        if variant == "delay":
            h.robots, h.crawl_delay = "disallow", next(delays, 1.0)
    plain = [h for h in order if h.robots in ("disallow", "allow-all") and h.crawl_delay is None]
    for h in hosts:
        if h.robots == "redirect":
            h.robots_redirect_to = h.base + "/robots-moved.txt"
        elif h.robots == "redirect-cross":
            target = plain[0] if plain else h
            h.robots_redirect_to = target.base + "/robots.txt"


def robots_text(model: Model, host: Host) -> str | None:
    """The robots.txt body a 200 answer carries (after redirects), None when there is no 200 answer."""
    if host.robots in ("404", "5xx", "timeout"):
        return None
    if host.robots == "redirect-cross":
        target = model.host_of(host.robots_redirect_to.split("/")[2])
        return robots_text(model, target) if target is not host else "User-agent: *\nDisallow:\n"
    sitemap = f"Sitemap: {host.base}/sitemap.xml\n" if host.sitemap != "none" else ""
    delay = f"Crawl-delay: {host.crawl_delay:g}\n" if host.crawl_delay is not None else ""
    v = host.robots
    if v == "allow-all":
        body = f"User-agent: *\n{delay}Disallow:\n"
    elif v in ("disallow", "redirect"):
        body = f"# {host.name}\nUser-agent: *\n{delay}Disallow: /private/\nDisallow: /tmp/\n"
    elif v == "wildcards":
        body = ("User-agent: *\nDisallow: /*?sort=\nDisallow: /*.pdf$\nDisallow: /private/\n"
                "Allow: /private/public-*.html$\n")
    elif v == "agent-specific":  # everybody else is shut out; our bot only loses /private/
        body = f"User-agent: *\nDisallow: /\n\nUser-agent: {PRODUCT_TOKEN}\nDisallow: /private/\n"
    elif v == "agent-block":  # our bot may not crawl the fast sections, others may
        body = (f"User-agent: {PRODUCT_TOKEN}\nDisallow: /news/\nDisallow: /forum/\nDisallow: /tag/\n\n"
                "User-agent: *\nDisallow: /private/\n")
    elif v == "bom":
        body = "\ufeffUser-agent: *\nDisallow: /private/\n"
    elif v == "huge":  # the rule that matters first, then > 500 KiB of harmless rules
        filler = "".join(f"Disallow: /filler-{i:06d}/never-linked-path-segment/\n" for i in range(11_000))
        body = "User-agent: *\nDisallow: /private/\n" + filler
    else:
        body = "User-agent: *\nDisallow:\n"
    return body + sitemap


def _pdf_links(p: SimParams, page_type: np.ndarray, page_host: np.ndarray, render_src: np.ndarray,
               weight: np.ndarray, hosts: list[Host], e_src: np.ndarray, e_dst: np.ndarray,
               spelling: np.ndarray, nofollow: np.ndarray) -> tuple[np.ndarray, ...]:
    """Add the link annotations of PDFs: 2-6 distinct absolute links per (non-mirror) PDF, the first to
    its home page, the rest to linkable pages (not traps or faults), one in four on another host.

    Own random stream and appended after the HTML links' spellings were drawn, so adding them changed
    no HTML link target or spelling kind (only the link indices after them, hence tracking tokens).
    """
    n = page_type.size
    pdfs = np.flatnonzero((page_type == PDF) & (render_src == np.arange(n)))
    linkable = np.flatnonzero(weight > 0)
    if pdfs.size == 0 or linkable.size == 0:
        return e_src, e_dst, spelling, nofollow
    rng = _rng(p.seed, 30)
    src_l, dst_l = [], []
    for pid in pdfs.tolist():
        h = hosts[int(page_host[pid])]
        own = linkable[np.searchsorted(linkable, h.first):np.searchsorted(linkable, h.first + h.count)]
        targets = [h.first]
        for _ in range(int(rng.integers(1, 6))):
            pool = linkable if (rng.random() < 0.25 or own.size == 0) else own
            targets.append(int(pool[int(rng.integers(0, pool.size))]))
        targets = [t for t in dict.fromkeys(targets) if t != pid]
        src_l += [pid] * len(targets)
        dst_l += targets
    m = len(src_l)
    e_src = np.concatenate([e_src, np.array(src_l, np.int64)])
    e_dst = np.concatenate([e_dst, np.array(dst_l, np.int64)])
    spelling = np.concatenate([spelling, np.full(m, SP_ABS, np.uint8)])
    nofollow = np.concatenate([nofollow, np.zeros(m, bool)])
    order = np.argsort(e_src, kind="stable")
    return e_src[order], e_dst[order], spelling[order], nofollow[order]


def build(p: SimParams) -> Model:
    """Generate the whole web for ``p`` (pure; ~1-2 s for 200 hosts × 50 pages)."""
    if p.hosts < 1 or p.pages_per_host < 1:
        raise ValueError("hosts and pages_per_host must be >= 1")
    kinds = _assign_kinds(p)
    counters: dict[str, int] = {}
    hosts: list[Host] = []
    rng = _rng(p.seed, 5)
    for i, kind in enumerate(kinds):
        counters[kind] = counters.get(kind, 0) + 1
        h = Host(idx=i, name=f"{kind}-{counters[kind]:03d}.{DOMAIN}", kind=kind)
        h.charset = str(rng.choice(["utf-8", "iso-8859-1", "windows-1252"], p=[0.7, 0.15, 0.15]))
        h.charset_decl = str(rng.choice(["header", "meta", "both"]))
        h.conditional = bool(rng.random() < 0.5) or kind in ("docs", "archive")
        h.noisy = kind in NOISY_KINDS
        h.tagline = " ".join(_words(rng, 5))
        if kind in NORMAL_KINDS:
            h.sitemap = str(rng.choice(["none", "single", "index"], p=[0.4, 0.35, 0.25]))
            h.lastmod = str(rng.choice(["true", "now", "absent"], p=[0.7, 0.15, 0.15]))
        hosts.append(h)
    hostile = [h for h in hosts if h.kind == "hostile"]
    for j, h in enumerate(hostile):
        h.mode = HOSTILE_MODES[j % len(HOSTILE_MODES)]
    normal = [h for h in hosts if h.kind in NORMAL_KINDS]
    # every normal kind gets a sitemap of each lastmod flavour when there are enough hosts
    for h, (sm, lm) in zip(normal, [("single", "true"), ("index", "true"), ("single", "now"),
                                    ("single", "absent")], strict=False):
        h.sitemap, h.lastmod = sm, lm
    sources = [h for h in normal if h.kind in ("docs", "archive")] or normal
    mirrors = [h for h in hosts if h.kind == "mirror"]
    for j, h in enumerate(mirrors):
        src = sources[j % len(sources)]
        h.mirror_of, h.charset, h.charset_decl = src.idx, src.charset, src.charset_decl
        h.conditional, h.noisy = src.conditional, src.noisy
    _robots_assignments(p, hosts)
    sizes = _host_sizes(p, len(hosts))
    specs: dict[int, list] = {}
    for h in hosts:
        if h.mirror_of < 0:
            specs[h.idx] = [(path, sec, t, -1) for path, sec, t in _page_specs(p, h, int(sizes[h.idx]))]
    # syndicated copies: news/blog articles re-published on other news/blog hosts (near-duplicates)
    synd_hosts = [h for h in normal if h.kind in ("news", "blog")]
    rng = _rng(p.seed, 6)
    if len(synd_hosts) >= 2:
        for h in synd_hosts:
            for local, (_path, sec, t, _) in enumerate(list(specs[h.idx])):
                if t == ARTICLE and sec in ("news", "blog") and rng.random() < 0.05:
                    for _ in range(int(rng.integers(1, 3))):
                        other = synd_hosts[int(rng.integers(0, len(synd_hosts)))]
                        if other is h:
                            continue
                        n = len(specs[other.idx])
                        specs[other.idx].append(
                            (f"/syndicated/{_slug(rng)}-{n}.html", "syndicated", ARTICLE, (h.idx, local)))
    # lay pages out contiguously; mirrors copy their source's page list
    first = 0
    for h in hosts:
        h.first = first
        h.count = len(specs[h.idx]) if h.mirror_of < 0 else len(specs[h.mirror_of])
        first += h.count
    n = first
    page_host = np.empty(n, dtype=np.int32)
    paths: list[str] = []
    sections: list[str] = []
    page_type = np.empty(n, dtype=np.int8)
    content = np.arange(n, dtype=np.int64)
    render_src = np.arange(n, dtype=np.int64)
    synd_of = np.full(n, -1, dtype=np.int64)
    for h in hosts:
        src = hosts[h.mirror_of] if h.mirror_of >= 0 else h
        page_host[h.first:h.first + h.count] = h.idx
        for local, (path, sec, t, synd) in enumerate(specs[src.idx]):
            pid = h.first + local
            paths.append(path)
            sections.append(sec)
            page_type[pid] = t
            if h.mirror_of >= 0:
                render_src[pid] = src.first + local
            elif synd != -1:
                synd_of[pid] = hosts[synd[0]].first + synd[1]
    content[synd_of >= 0] = synd_of[synd_of >= 0]
    content[render_src != np.arange(n)] = content[render_src[render_src != np.arange(n)]]

    # ---- change rates ------------------------------------------------------------------------------
    rng = _rng(p.seed, 7)
    kind_of_page = [hosts[h].kind for h in page_host]
    noise = rng.lognormal(0.0, 0.8, n)
    never = rng.random(n) < 0.15
    rate = np.empty(n)
    for i in range(n):
        k = kind_of_page[i] if kind_of_page[i] != "mirror" else "docs"
        if page_type[i] == HOME:
            rate[i] = _HOME_RATE[k]
        elif page_type[i] in (TRAP, FAULT):
            rate[i] = 0.0
        else:
            rate[i] = SECTION_RATE[sections[i]] * _KIND_RATE[k] * noise[i]
    rate[never & (page_type == ARTICLE) & ~np.isin(sections, ["news", "forum"])] = 0.0
    rate = np.minimum(rate, 24.0)
    rate = rate[content]  # copies change with their original
    totals_c = events.total_events(p.seed, np.arange(n, dtype=np.uint64), rate)
    totals = totals_c[content]

    # ---- per-page rendering flags --------------------------------------------------------------
    rng = _rng(p.seed, 8)
    html = np.isin(page_type, [HOME, ARTICLE])
    u = rng.random((5, n))
    flags = np.zeros(n, dtype=np.uint8)
    flags[html & (u[0] < 0.08)] |= 1  # <base href>
    flags[html & (u[1] < 0.04)] |= 2  # malformed markup
    meta = np.where(u[2] < 0.03, "noindex", np.where(u[2] < 0.05, "nofollow",
                    np.where(u[2] < 0.06, "noindex, nofollow", "")))
    meta[~html | (page_type == HOME)] = ""
    words = np.clip(rng.lognormal(np.log(1600), 0.6, n), 700, 7000).astype(np.int32)
    words[page_type == HOME] = 700
    tr = _rng(p.seed, 9)
    tlen = tr.integers(3, 8, n)
    tw = tr.integers(0, len(VOCAB), int(tlen.sum()))
    tptr = np.concatenate([[0], np.cumsum(tlen)])
    own_titles = [" ".join(VOCAB[w].capitalize() for w in tw[tptr[i]:tptr[i + 1]]) for i in range(n)]
    titles = [own_titles[c] for c in content.tolist()]
    fault = [paths[i].removeprefix("/fault/") if page_type[i] == FAULT else "" for i in range(n)]

    # ---- link graph --------------------------------------------------------------------------------
    weight = rng.pareto(1.1, n) + 1.0
    weight[page_type == HOME] *= 20
    weight[np.isin(page_type, [TRAP, FAULT])] = 0.0
    # a tree inside each host keeps every page reachable from its home page
    container = html & (render_src == np.arange(n))
    parent = np.full(n, -1, dtype=np.int64)
    js = np.zeros(n, dtype=bool)
    for h in hosts:
        if h.mirror_of >= 0:
            continue
        lo, cnt = h.first, h.count
        local_types = page_type[lo:lo + cnt]
        # js-only pages: leaves (never parents), ~3% of articles, at least one per bigger host
        cand = np.flatnonzero(local_types == ARTICLE)
        tr = _rng(p.seed, 10, h.idx)
        if cand.size >= 6 and h.kind in NORMAL_KINDS:
            pick = cand[tr.random(cand.size) < 0.03]
            if pick.size == 0 and h.idx % 3 == 0:
                pick = cand[-1:]
            js[lo + pick] = True
        cont = np.flatnonzero(container[lo:lo + cnt] & ~js[lo:lo + cnt])
        j = np.arange(1, cnt)
        before = np.searchsorted(cont, j)  # containers with local index < j (home is one)
        before = np.maximum(before, 1)
        pick = cont[np.minimum((tr.random(cnt - 1) ** 2 * before).astype(np.int64), before - 1)]
        parent[lo + 1:lo + cnt] = lo + pick
    flags[js] |= 4
    parent[page_type == TRAP] = -1
    parent[page_type == FAULT] = -1

    out_deg = np.where(container, rng.integers(20, 61, n), 0)
    out_deg[page_type == HOME] += 10
    src_pages = np.repeat(np.arange(n), out_deg)
    cross = rng.random(src_pages.size) < 0.2
    cum = np.concatenate([[0.0], np.cumsum(weight)])
    hfirst = np.array([h.first for h in hosts])[page_host[src_pages]]
    hcount = np.array([h.count for h in hosts])[page_host[src_pages]]
    ul = rng.random(src_pages.size)
    lo_w, hi_w = cum[hfirst], cum[hfirst + hcount]
    same_pick = np.searchsorted(cum, lo_w + ul * (hi_w - lo_w), side="right") - 1
    cross_pick = np.searchsorted(cum, ul * cum[-1], side="right") - 1
    dst = np.where(cross, cross_pick, same_pick)
    dst = np.clip(dst, 0, n - 1)
    bad = (weight[dst] == 0) | (dst == src_pages)
    dst[bad] = np.array([h.first for h in hosts])[page_host[src_pages[bad]]]
    # explicit edges: tree parent -> child, home -> trap / fault entry points
    child = np.flatnonzero(parent >= 0)
    entry = np.flatnonzero(np.isin(page_type, [TRAP, FAULT]))
    home_of = np.array([h.first for h in hosts])
    e_src = np.concatenate([parent[child], home_of[page_host[entry]], src_pages])
    e_dst = np.concatenate([child, entry, dst])
    # mirror hosts: copy the source page's links; relative ones now point into the mirror
    keep = render_src[e_src] == e_src
    e_src, e_dst = e_src[keep], e_dst[keep]
    order = np.argsort(e_src, kind="stable")
    e_src, e_dst = e_src[order], e_dst[order]
    m = e_src.size
    lk = np.arange(m, dtype=np.uint64)
    sp = (events.hash_uniform(p.seed, e_src.astype(np.uint64), lk, 11) * 100).astype(np.int64)
    spelling = np.select(
        [sp < 30, sp < 50, sp < 62, sp < 67, sp < 71, sp < 78, sp < 88, sp < 94],
        [SP_ROOT, SP_REL, SP_ABS, SP_ABS_CASE, SP_ABS_PORT, SP_FRAGMENT, SP_TRACKING, SP_SESSION],
        SP_PROTOREL).astype(np.uint8)
    is_cross = page_host[e_src] != page_host[e_dst]
    relative = np.isin(spelling, (SP_ROOT, SP_REL, SP_FRAGMENT, SP_SESSION))
    spelling[is_cross & relative] = np.where(sp[is_cross & relative] % 2 == 0, SP_ABS, SP_TRACKING)
    nofollow = events.hash_uniform(p.seed, e_src.astype(np.uint64), lk, 12) < 0.05
    e_src, e_dst, spelling, nofollow = _pdf_links(p, page_type, page_host, render_src, weight, hosts,
                                                  e_src, e_dst, spelling, nofollow)
    counts = np.bincount(e_src, minlength=n)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    mirror_pages = np.flatnonzero(render_src != np.arange(n))
    if mirror_pages.size:
        ms, md, msp, mnf = [], [], [], []
        for pid in mirror_pages:
            s = int(render_src[pid])
            sl = slice(int(ptr[s]), int(ptr[s + 1]))
            d = e_dst[sl].copy()
            rel = np.isin(spelling[sl], RELATIVE_SPELLINGS) & (page_host[d] == page_host[s])
            d[rel] = d[rel] - s + pid  # same local index on the mirror
            ms.append(np.full(d.size, pid))
            md.append(d)
            msp.append(spelling[sl])
            mnf.append(nofollow[sl])
        e_src = np.concatenate([e_src, *ms])
        e_dst = np.concatenate([e_dst, *md])
        spelling = np.concatenate([spelling, *msp])
        nofollow = np.concatenate([nofollow, *mnf])
        order = np.argsort(e_src, kind="stable")
        e_src, e_dst, spelling, nofollow = e_src[order], e_dst[order], spelling[order], nofollow[order]
        ptr = np.concatenate([[0], np.cumsum(np.bincount(e_src, minlength=n))])

    # ---- canonical links -------------------------------------------------------------------------------
    canonical = np.full(n, -1, dtype=np.int64)
    own = html & (render_src == np.arange(n))
    canonical[own & (u[3] < 0.5)] = np.flatnonzero(own & (u[3] < 0.5))
    synd = (synd_of >= 0) & (u[4] < 0.6)
    canonical[synd] = synd_of[synd]
    canonical[mirror_pages] = canonical[render_src[mirror_pages]]

    model = Model(
        params=p, hosts=hosts, host_index={h.name: h.idx for h in hosts}, page_host=page_host,
        paths=paths, page_type=page_type, section=sections, rate=rate, content=content,
        render_src=render_src, canonical=canonical, meta_robots=[str(x) for x in meta], flags=flags,
        words=words, weight=weight, totals=totals, titles=titles, fault=fault, link_ptr=ptr,
        link_dst=e_dst, link_spelling=spelling, link_nofollow=nofollow,
    )
    model.path_index = [dict() for _ in hosts]
    for pid, (hidx, path) in enumerate(zip(page_host.tolist(), paths, strict=True)):
        model.path_index[hidx][path] = pid
    return model
