"""Ground truth of the simulated web as one Arrow table (one row per page), written as Parquet.

It is what a crawl is scored against with a DuckDB join on ``url``: true change rate and version,
duplicate clusters, traps, robots decisions for our own bot, and importance. ``importance`` is the
PageRank (damping 0.85, all unique page-to-page links, nofollow included, dangling mass spread evenly)
of the true link graph; ``importance_rank`` is 1 for the most important page.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import sparse
from scipy.sparse.csgraph import shortest_path

from crawl.config import DEFAULT_USER_AGENT
from crawl.records import TS
from crawl.simweb import media
from crawl.simweb import model as M
from crawl.simweb.render import Renderer

try:  # the crawler's own robots decision, so truth and crawler agree by construction
    from crawl.robots import is_allowed as _crawler_is_allowed
except ImportError:  # pragma: no cover - only while crawl/robots.py does not exist
    _crawler_is_allowed = None


def robots_allows(robots_txt: str, user_agent: str, url: str) -> bool:
    """RFC 9309 decision for one URL (the crawler's ``crawl.robots.is_allowed``; Protego as fallback)."""
    if _crawler_is_allowed is not None:
        return _crawler_is_allowed(robots_txt, user_agent, url)
    from protego import Protego
    return Protego.parse(robots_txt.removeprefix("\ufeff")).can_fetch(url, user_agent)


def robots_allowed(model: M.Model, user_agent: str = DEFAULT_USER_AGENT) -> np.ndarray:
    """Per page: may ``user_agent`` fetch it? 404 robots allow all; 5xx and timeout allow nothing."""
    out = np.zeros(model.n_pages, dtype=bool)
    urls = model.urls
    for h in model.hosts:
        sl = slice(h.first, h.first + h.count)
        if h.robots == "404":
            out[sl] = True
            continue
        text = M.robots_text(model, h)
        if text is None:
            continue
        out[sl] = [robots_allows(text, user_agent, u) for u in urls[sl]]
    return out


def edges(model: M.Model) -> tuple[np.ndarray, np.ndarray]:
    """Unique (src, dst) page pairs of the link graph, without self links."""
    src = np.repeat(np.arange(model.n_pages), np.diff(model.link_ptr))
    dst = model.link_dst
    keep = src != dst
    pairs = np.unique(src[keep] * model.n_pages + dst[keep])
    return pairs // model.n_pages, pairs % model.n_pages


def pagerank(n: int, src: np.ndarray, dst: np.ndarray, damping: float = 0.85, iters: int = 100) -> np.ndarray:
    out_deg = np.bincount(src, minlength=n).astype(np.float64)
    w = 1.0 / out_deg[src]
    a = sparse.csr_matrix((w, (dst, src)), shape=(n, n))
    r = np.full(n, 1.0 / n)
    dangling = out_deg == 0
    for _ in range(iters):
        new = damping * (a @ r + r[dangling].sum() / n) + (1 - damping) / n
        if np.abs(new - r).sum() < 1e-12:
            r = new
            break
        r = new
    return r / r.sum()


def depth_from_home(model: M.Model, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Same-host link hops from the host's home page (-1 when unreachable that way)."""
    n = model.n_pages
    same = model.page_host[src] == model.page_host[dst]
    homes = np.array([h.first for h in model.hosts])
    s = np.concatenate([src[same], np.full(homes.size, n)])
    d = np.concatenate([dst[same], homes])
    g = sparse.csr_matrix((np.ones(s.size), (s, d)), shape=(n + 1, n + 1))
    dist = shortest_path(g, directed=True, unweighted=True, indices=n)[:n]
    return np.where(np.isinf(dist), -1, dist - 1).astype(np.int32)


def truth_table(model: M.Model, at: float | None = None) -> pa.Table:
    """The truth at virtual time ``at`` (default: now)."""
    at = time.time() if at is None else float(at)
    n = model.n_pages
    ids = np.arange(n)
    v, last, _ = model.version_info(ids, at)
    src, dst = edges(model)
    pr = pagerank(n, src, dst)
    rank = np.empty(n, dtype=np.int32)
    rank[np.argsort(-pr, kind="stable")] = np.arange(1, n + 1)
    cluster_size = np.bincount(model.content, minlength=n)[model.content]
    is_rep = model.content == ids
    dup_kind = np.where(~is_rep & (model.render_src != ids), "exact",
                        np.where(~is_rep, "near", np.where(cluster_size > 1, "original", "")))
    hosts = model.hosts
    ph = model.page_host
    can = model.canonical
    return pa.table({
        "url": pa.array(model.urls, pa.string()),
        "host": pa.array([hosts[h].name for h in ph], pa.string()),
        "path": pa.array(model.paths, pa.string()),
        "kind": pa.array([hosts[h].kind for h in ph], pa.string()),
        "page_type": pa.array([M.PAGE_TYPES[t] for t in model.page_type], pa.string()),
        "section": pa.array(model.section, pa.string()),
        "content_type": pa.array([M.CONTENT_TYPES[t] for t in model.page_type], pa.string()),
        "change_rate": pa.array(model.rate, pa.float64()),
        "version": pa.array(v, pa.int64()),
        "last_change_time": pa.array((last * 1000).astype(np.int64), pa.int64()).cast(TS),
        "robots_allowed": pa.array(robots_allowed(model), pa.bool_()),
        "duplicate_cluster": pa.array(model.content, pa.int64()),
        "cluster_size": pa.array(cluster_size, pa.int32()),
        "dup_kind": pa.array(dup_kind, pa.string()),
        "is_canonical": pa.array(is_rep, pa.bool_()),
        "canonical_link": pa.array([model.url(c) if c >= 0 else None for c in can.tolist()], pa.string()),
        "trap": pa.array(model.page_type == M.TRAP, pa.bool_()),
        "fault": pa.array([f or None for f in model.fault], pa.string()),
        "importance": pa.array(pr, pa.float64()),
        "importance_rank": pa.array(rank, pa.int32()),
        "in_degree": pa.array(np.bincount(dst, minlength=n), pa.int32()),
        "depth_from_home": pa.array(depth_from_home(model, src, dst), pa.int32()),
        "meta_robots": pa.array(model.meta_robots, pa.string()),
        "js_only": pa.array((model.flags & 4) > 0, pa.bool_()),
        "malformed": pa.array((model.flags & 2) > 0, pa.bool_()),
        "base_href": pa.array((model.flags & 1) > 0, pa.bool_()),
        "charset": pa.array([hosts[h].charset for h in ph], pa.string()),
        "noisy": pa.array([hosts[h].noisy for h in ph], pa.bool_()),
        "host_robots": pa.array([hosts[h].robots for h in ph], pa.string()),
        "crawl_delay": pa.array([hosts[h].crawl_delay for h in ph], pa.float64()),
        "host_sitemap": pa.array([hosts[h].sitemap for h in ph], pa.string()),
        "host_lastmod": pa.array([hosts[h].lastmod if hosts[h].sitemap != "none" else None for h in ph],
                                 pa.string()),
        "host_conditional": pa.array([hosts[h].conditional for h in ph], pa.bool_()),
        "host_mode": pa.array([hosts[h].mode or None for h in ph], pa.string()),
        **media_columns(model, v),
    })


def media_columns(model: M.Model, version: np.ndarray) -> dict[str, pa.Array]:
    """What each PDF and image contains (null on other pages): PDF title, page count, http(s) link
    targets and text (its words joined by single spaces, at ``version``); image format, width, height,
    EXIF DateTimeOriginal (naive, as EXIF has no time zone) and camera make and model."""
    n = model.n_pages
    r = Renderer(model, cache_bytes=0)
    seed = model.params.seed
    cols: dict[str, list] = {k: [None] * n for k in (
        "pdf_title", "pdf_pages", "pdf_links", "pdf_text", "image_format", "image_width", "image_height",
        "exif_datetime", "camera_make", "camera_model")}
    for pid in np.flatnonzero(np.isin(model.page_type, [M.PDF, M.PNG, M.JPEG])).tolist():
        src, content = int(model.render_src[pid]), int(model.content[pid])
        if model.page_type[pid] == M.PDF:
            cols["pdf_title"][pid] = model.titles[src]
            cols["pdf_pages"][pid] = media.pdf_page_count(seed, content)
            cols["pdf_links"][pid] = r.pdf_links(src)
            cols["pdf_text"][pid] = " ".join(r.pdf_words(src, int(version[pid])))
        else:
            spec = media.image_spec(seed, content, model.page_type[pid] == M.JPEG)
            cols["image_format"][pid], cols["image_width"][pid] = spec.format, spec.width
            cols["image_height"][pid], cols["exif_datetime"][pid] = spec.height, spec.exif_datetime
            cols["camera_make"][pid], cols["camera_model"][pid] = spec.camera_make, spec.camera_model
    types = {"pdf_pages": pa.int32(), "pdf_links": pa.list_(pa.string()), "image_width": pa.int32(),
             "image_height": pa.int32(), "exif_datetime": pa.timestamp("ms")}
    return {k: pa.array(vals, types.get(k, pa.string())) for k, vals in cols.items()}


def write_truth(model: M.Model, out: str | os.PathLike[str], at: float | None = None) -> pa.Table:
    table = truth_table(model, at)
    pq.write_table(table, str(out))
    return table
