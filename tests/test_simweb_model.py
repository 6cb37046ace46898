"""The simulated web as data: determinism, shape of the web, the change process, truth (no server)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy import stats

from crawl.simweb import events
from crawl.simweb import model as M
from crawl.simweb.render import Renderer, strip_noise
from crawl.simweb.truth import truth_table

T_AT = M.EPOCH0 + 200 * 86400.0


@pytest.fixture(scope="module")
def web() -> M.Model:
    return M.build(M.SimParams(seed=1, hosts=120, pages_per_host=30))


def test_same_seed_same_web_other_seed_other_web(web: M.Model) -> None:
    again = M.build(M.SimParams(seed=1, hosts=120, pages_per_host=30))
    assert again.paths == web.paths
    assert np.array_equal(again.link_dst, web.link_dst) and np.array_equal(again.rate, web.rate)
    assert truth_table(again, T_AT).equals(truth_table(web, T_AT))
    r1, r2 = Renderer(web), Renderer(again)
    for p in range(0, web.n_pages, 97):
        v = int(web.version_at([p], T_AT)[0])
        assert strip_noise(r1.render(p, v, T_AT).body(1, 0.0)) == strip_noise(r2.render(p, v, T_AT).body(1, 0.0))
    other = M.build(M.SimParams(seed=2, hosts=120, pages_per_host=30))
    assert other.paths != web.paths
    assert not np.array_equal(other.rate[:100], web.rate[:100])


def test_builds_200_hosts() -> None:
    # how long it takes is measured by bench/simweb_model_bench.py, not asserted here
    m = M.build(M.SimParams(seed=1, hosts=200, pages_per_host=50))
    assert m.n_pages > 8000 and len(m.hosts) == 200


def test_scales_to_1000_hosts() -> None:
    m = M.build(M.SimParams(seed=5, hosts=1000, pages_per_host=50))
    assert len(m.hosts) == 1000 and 40_000 < m.n_pages < 65_000 and len(set(m.host_index)) == 1000
    v = m.version_at(np.arange(m.n_pages), T_AT)
    assert v.shape == (m.n_pages,) and v.max() > 1000


def test_hosts_named_by_kind_and_heavy_tailed(web: M.Model) -> None:
    kinds = {h.kind for h in web.hosts}
    assert set(M.NORMAL_KINDS) | {"mirror", "hostile", "trap"} <= kinds
    assert all(h.name == f"{h.kind}-{h.name.split('-')[1].split('.')[0]}.sim.test" for h in web.hosts)
    sizes = np.array([h.count for h in web.hosts if h.mirror_of < 0 and h.kind in M.NORMAL_KINDS])
    assert sizes.max() >= 5 * np.median(sizes)  # a few big hosts, many small ones
    assert 15 <= sizes.mean() <= 60


def test_power_law_in_degree_and_importance(web: M.Model) -> None:
    tb = truth_table(web, T_AT)
    indeg = tb["in_degree"].to_numpy()
    top = np.sort(indeg)[::-1]
    assert top[: len(top) // 100].sum() > 0.15 * indeg.sum()  # top 1 % of pages hold > 15 % of in-links
    assert top[0] > 20 * np.median(indeg)
    pr = tb["importance"].to_numpy()
    assert abs(pr.sum() - 1.0) < 1e-9
    assert stats.spearmanr(pr, indeg).statistic > 0.5
    assert tb["importance_rank"].to_numpy()[np.argmax(pr)] == 1


def test_change_rates_correlate_with_kind_and_url(web: M.Model) -> None:
    sec = np.array(web.section)
    own = web.content == np.arange(web.n_pages)
    med = {s: np.median(web.rate[own & (sec == s)]) for s in ("news", "blog", "docs", "archive")}
    assert med["news"] > med["blog"] > med["docs"] >= med["archive"] == 0.0
    assert web.rate.max() >= 20.0 and (web.rate == 0).sum() > 0.1 * web.n_pages  # hourly .. never
    kind = np.array([web.hosts[h].kind for h in web.page_host])
    assert np.median(web.rate[kind == "news"]) > 5 * np.median(web.rate[kind == "docs"])


def test_change_counts_match_rates_statistically(web: M.Model) -> None:
    """Empirical changes in a 30-day window vs true λ, and exponential gaps on fast pages (fixed seed)."""
    pages = np.flatnonzero(web.rate > 0)
    t0, t1 = M.EPOCH0 + 100 * 86400.0, M.EPOCH0 + 130 * 86400.0
    counts = web.version_at(pages, t1) - web.version_at(pages, t0)
    expected = web.rate[pages] * 30.0
    # the total is Poisson with the summed mean (copies share their original's process: count contents once)
    _, first = np.unique(web.content[pages], return_index=True)
    z = (counts[first].sum() - expected[first].sum()) / np.sqrt(expected[first].sum())
    assert abs(z) < 4, z
    # per-rate-bucket: relative error small where there are many expected events
    for lo, hi in ((0.05, 0.5), (0.5, 5), (5, 25)):
        sel = first[(web.rate[pages][first] >= lo) & (web.rate[pages][first] < hi)]
        if expected[sel].sum() > 400:
            assert abs(counts[sel].sum() / expected[sel].sum() - 1) < 0.15
    # one fast page: gaps between its first 400 events are exponential with mean 1/λ
    p = int(np.argmax(web.rate))
    times = web.change_time(np.full(400, p), np.arange(1, 401))
    gaps = np.diff(times) / 86400.0
    assert stats.kstest(gaps, "expon", args=(0, 1 / web.rate[p])).pvalue > 0.001
    # day counts are Poisson: variance ≈ mean
    days = np.diff(web.version_at(np.full(61, p), M.EPOCH0 + np.arange(61) * 86400.0))
    assert 0.5 < days.var() / days.mean() < 1.6


def test_version_queries_agree() -> None:
    keys = np.arange(3000, dtype=np.uint64)
    rates = np.geomspace(0.01, 24, keys.size)
    tot = events.total_events(7, keys, rates)
    t = 250 * 86400.0
    v = events.count_until(7, keys, tot, t)
    assert np.all(events.count_until(7, keys, tot, t + 86400.0) >= v)  # monotone
    last = events.kth_event(7, keys, tot, v)
    nxt = events.kth_event(7, keys, tot, v + 1)
    assert np.all(np.isnan(last[v == 0]))
    assert np.all(last[v > 0] <= t) and np.all(np.isnan(nxt) | (nxt > t))
    assert np.array_equal(events.count_until(7, keys[v > 0], tot[v > 0], last[v > 0]), v[v > 0])


def test_version_by_url(web: M.Model) -> None:
    ids = [0, 5, 17]
    urls = [web.url(p) for p in ids]
    assert np.array_equal(web.version_at(urls + ["http://nowhere.sim.test/"], T_AT)[:3], web.version_at(ids, T_AT))
    assert web.version_at([*urls, "http://nowhere.sim.test/"], T_AT)[3] == -1


def test_duplicates_exact_and_near(web: M.Model) -> None:
    r = Renderer(web)
    mirrors = np.flatnonzero(web.render_src != np.arange(web.n_pages))
    assert mirrors.size
    p = int(mirrors[5])
    s = int(web.render_src[p])
    v = int(web.version_at([p], T_AT)[0])
    assert v == int(web.version_at([s], T_AT)[0])
    assert web.content[p] == web.content[s]
    assert strip_noise(r.get(p, v, 0.0).body(1, 0)) == strip_noise(r.get(s, v, 0.0).body(2, 0))
    near = np.flatnonzero((web.content != np.arange(web.n_pages)) & (web.render_src == np.arange(web.n_pages)))
    assert near.size
    c = int(near[0])
    o = int(web.content[c])
    assert web.page_host[c] != web.page_host[o]
    vc = int(web.version_at([c], T_AT)[0])
    a = r.render(c, vc, 0.0).body(1, 0).decode(web.hosts[web.page_host[c]].charset)
    b = r.render(o, vc, 0.0).body(1, 0).decode(web.hosts[web.page_host[o]].charset)
    assert a != b
    para = b.split("<p>")[3][:200]  # the article text itself is shared
    assert para in a


def test_truth_columns_traps_and_robots(web: M.Model, tmp_path) -> None:
    from crawl.simweb.truth import write_truth
    tb = write_truth(web, tmp_path / "t.parquet", T_AT)
    back = pq.read_table(tmp_path / "t.parquet")
    assert back.equals(tb)
    for col in ("url", "host", "change_rate", "robots_allowed", "duplicate_cluster", "trap", "importance",
                "version", "kind", "content_type", "depth_from_home", "in_degree", "is_canonical",
                "last_change_time"):
        assert col in tb.column_names
    d = tb.to_pydict()
    traps = [u for u, t in zip(d["url"], d["trap"], strict=True) if t]
    n_trap_hosts = sum(h.kind == "trap" for h in web.hosts)
    assert len(traps) == n_trap_hosts * len(M.TRAP_ENTRIES)
    assert any(u.endswith("/calendar?month=1&year=2026") for u in traps)
    by_host = {h.robots: h for h in web.hosts}
    allowed = dict(zip(d["url"], d["robots_allowed"], strict=True))
    assert all(allowed[web.url(p)] for p in range(by_host["404"].first, by_host["404"].first + 3))
    assert not any(allowed[web.url(p)] for p in range(by_host["5xx"].first, by_host["5xx"].first + 3))
    assert not allowed[by_host["timeout"].base + "/"]
    for h in web.hosts:  # our bot: private pages are off limits on the agent-specific host, the rest is open
        if h.robots == "agent-specific":
            for p in range(h.first, h.first + h.count):
                assert allowed[web.url(p)] == (not web.paths[p].startswith("/private/"))
            break
    ab = by_host["agent-block"]
    for p in range(ab.first, ab.first + ab.count):
        assert allowed[web.url(p)] == (not web.paths[p].startswith(("/news/", "/forum/", "/tag/")))
    assert min(d["depth_from_home"]) == -1 or min(d["depth_from_home"]) == 0
    home_rows = [i for i, u in enumerate(d["url"]) if u.endswith(".sim.test/")]
    assert all(d["depth_from_home"][i] == 0 for i in home_rows)
    # every non-mirror page is reachable from its own home page
    own = [i for i, k in enumerate(d["kind"]) if k != "mirror"]
    assert all(d["depth_from_home"][i] >= 0 for i in own)
