"""Audit "never fetch or store the same thing twice, spend the budget where pages change" from outside.

A real multi-round ``crawl round`` (the CLI, one process per round, ``--now`` six hours apart, the
simulated web's clock held at each round's time) against ``python -m crawl.simweb serve
--log-conditional``, then judged by the server and the simulated web's own model and truth, never by the
crawler's derived columns:

1. per round, requests per page (the server's own lookup: tracking/session spellings are one page;
   repeats after a 429/503/499/500 are retries) and robots.txt / sitemap requests per host;
2. requests of a page in later rounds by its true change rate λ, back-to-back (6 h) re-fetches, and
   re-fetches that found the true version unchanged;
3. the WARC files read with warcio (a payload digest stored twice as a response; revisits naming a
   stored response with their digest, by profile; 304s kept as crawldiagnostics responses), the index
   (DuckDB) against the truth's dup_kind; syndicated copies against their truth cluster
   (:func:`near_copies`: recall and precision of near_duplicate);
4. conditional GET: validators sent on re-fetches (the access log's inm/ims) and 200/304 against the
   truth's version change.

    python bench/dedup_audit.py [--hosts 80] [--rounds 4] [--seed 3] [--keep DIR]
    python bench/dedup_audit.py --pairs   # the fingerprints of the rendered pages alone, no crawl
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crawl.config import load_config  # noqa: E402
from crawl.simweb import model as M  # noqa: E402
from crawl.simweb.launch import launch, stop  # noqa: E402
from crawl.simweb.server import page_of_request  # noqa: E402
from crawl.simweb.truth import truth_table  # noqa: E402

T0 = 1_795_000_000.0
SPACING_S = 6 * 3600.0
PPH = 20
RETRYABLE = {429, 503, 499, 500}


def _post_json(port: int, path: str, payload: dict | None = None) -> dict:
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        body = json.dumps(payload or {}).encode()
        conn.request("POST", path, body=body, headers={"Host": "x", "Content-Type": "application/json"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def crawl(work: Path, hosts: int, seed: int, rounds: int) -> dict:
    proc, port = launch(hosts, seed, work / "access.jsonl", PPH, ("--log-conditional",), work / "simweb.stderr")
    try:
        cfg = load_config(overrides={
            "root": str(work / "crawl"), "crawl_id": "dd", "resolve": [f"*.sim.test=127.0.0.1:{port}"],
            "politeness_delay_s": 0.05, "max_pages": 600, "partitions": 2, "url_shards": 2,
            "round_duration_s": 60.0, "connect_timeout_s": 2.0, "read_timeout_s": 2.0, "total_timeout_s": 4.0,
            "max_crawl_delay_s": 5.0, "backoff_base_s": 2.0, "dask_workers": 2, "dask_dashboard": False},
            use_env=False)
        model = M.build(M.SimParams(seed=seed, hosts=hosts, pages_per_host=PPH))
        seeds = [h.base + "/" for h in model.hosts if h.kind in (*M.NORMAL_KINDS, "mirror")][:40]
        meta = {"rounds": [], "user_agent": cfg.user_agent, "root": cfg.root}
        for r in range(rounds):
            now = T0 + r * SPACING_S
            _post_json(port, "/_sim/clock", {"time": now, "speed": 0.0})
            cmd = [sys.executable, "-m", "crawl", "round", "--now", datetime.fromtimestamp(now, UTC).isoformat(),
                   "--config-json", json.dumps(cfg.to_dict())]
            if r == 0:
                cmd[4:4] = ["--seeds", *seeds]
            t = time.time()
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO,
                                 env={**os.environ, "PYTHONPATH": str(REPO)})
            _post_json(port, "/_sim/flush")
            meta["rounds"].append({"round": r + 1, "now": now, "real_start": t, "real_end": time.time()})
            last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
            print(f"round {r + 1}: exit {out.returncode}: {last}", flush=True)
        return meta
    finally:
        stop(proc)


def audit(work: Path, meta: dict, hosts: int, seed: int) -> dict:
    model = M.build(M.SimParams(seed=seed, hosts=hosts, pages_per_host=PPH))
    con = duckdb.connect()
    rel = con.execute(f"SELECT * FROM read_json_auto('{work / 'access.jsonl'}', format='newline_delimited')")
    cols = [d[0] for d in rel.description]
    rows = [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
    rows = [r for r in rows if r["user_agent"] == meta["user_agent"]]
    rounds = meta["rounds"]
    for r in rows:
        r["round"] = next((x["round"] for x in rounds if x["real_start"] <= r["start"] <= x["real_end"] + 1), None)
        path = r["path"].partition("?")[0]
        r["kind"] = ("robots" if path in ("/robots.txt", "/robots-moved.txt") else "sitemap"
                     if path == "/sitemap.xml" or (path.startswith("/sitemap-") and path.endswith(".xml")) else "page")
        r["pid"] = page_of_request(model, r["host"], r["path"])
    out: dict = {"requests": len(rows)}
    per: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["start"]):
        if r["kind"] == "page" and r["pid"] is not None:
            per[(r["round"], r["pid"])].append(r)
    out["1 page requests"] = sum(len(v) for v in per.values())
    out["1 pages asked twice in a round (retries excluded)"] = sum(
        1 for rs in per.values() if any(a["status"] not in RETRYABLE for a, _ in zip(rs, rs[1:], strict=False)))
    ctl = Counter((r["round"], r["host"], r["path"]) for r in rows if r["kind"] != "page")
    out["1 robots/sitemap files asked twice in a round"] = sum(c - 1 for c in ctl.values() if c > 1)
    robots_rounds: dict[str, set] = defaultdict(set)
    for r in rows:
        if r["kind"] == "robots" and r["path"] == "/robots.txt":
            robots_rounds[r["host"]].add(r["round"])
    out["1 hosts by rounds their robots.txt was asked in"] = dict(Counter(len(v) for v in robots_rounds.values()))
    fetched: dict[int, list[int]] = defaultdict(list)
    for (rd, pid), rs in per.items():
        if any(x["status"] in (200, 304) for x in rs):
            fetched[pid].append(rd)
    first = {p: min(v) for p, v in fetched.items()}
    rate = model.rate
    table = []
    for lo, hi, name in ((0, 0, "never (λ=0)"), (1e-9, 0.1, "λ<0.1/d"), (0.1, 1, "0.1-1/d"), (1, 5, "1-5/d"),
                         (5, 1e9, "≥5/d")):
        pids = [p for p, f in first.items() if f <= 2 and ((rate[p] == 0) if hi == 0 else lo <= rate[p] < hi)]
        if pids:
            later = [sum(1 for rd in fetched[p] if rd > first[p]) for p in pids]
            b2b = sum(1 for p in pids for a, b in zip(sorted(fetched[p]), sorted(fetched[p])[1:], strict=False)
                      if b == a + 1)
            table.append((name, len(pids), round(float(np.mean(later)), 2), b2b))
    out["2 (λ, pages first fetched in rounds 1-2, later fetches per page, back-to-back)"] = table
    same = Counter()
    for p, rds in fetched.items():
        rds = sorted(rds)
        for a, b in zip(rds, rds[1:], strict=False):
            va, vb = (model.version_at([p], rounds[x - 1]["now"])[0] for x in (a, b))
            same["unchanged" if va == vb else "changed"] += 1
    out["2 re-fetches by true change"] = dict(same)
    from warcio.archiveiterator import ArchiveIterator
    digests: Counter = Counter()
    resp, revisits = {}, []
    profiles: Counter = Counter()  # revisit profile (last path segment) -> records
    for f in sorted(glob.glob(f"{meta['root']}/**/*-warc.warc.gz", recursive=True)):
        with open(f, "rb") as fh:
            for rec in ArchiveIterator(fh):
                h = rec.rec_headers
                if rec.rec_type == "response":
                    digests[h.get_header("WARC-Payload-Digest")] += 1
                    resp[(h.get_header("WARC-Target-URI"), h.get_header("WARC-Date"))] = h.get_header("WARC-Payload-Digest")
                elif rec.rec_type == "revisit":
                    revisits.append((h.get_header("WARC-Refers-To-Target-URI"), h.get_header("WARC-Refers-To-Date"),
                                     h.get_header("WARC-Payload-Digest")))
                    profiles[(h.get_header("WARC-Profile") or "").rsplit("/", 1)[-1]] += 1
    diag_304 = 0  # a 304 kept as a response record (status 304, no payload) in crawldiagnostics
    for f in sorted(glob.glob(f"{meta['root']}/**/*-crawldiagnostics.warc.gz", recursive=True)):
        with open(f, "rb") as fh:
            diag_304 += sum(1 for rec in ArchiveIterator(fh) if rec.rec_type == "response"
                            and rec.http_headers is not None and rec.http_headers.get_statuscode() == "304")
    out["3 responses / digests stored twice"] = (sum(digests.values()), sum(1 for c in digests.values() if c > 1))
    out["3 revisits / not naming a stored response with their digest"] = (
        len(revisits), sum(1 for u, d, g in revisits if resp.get((u, d)) != g))
    out["3 revisits by profile / 304s stored as a crawldiagnostics response"] = (dict(profiles), diag_304)
    truth = truth_table(model, rounds[-1]["now"]).select(["url", "dup_kind"])
    con.register("truth", truth)
    idx = f"{meta['root']}/index/crawl=dd/*/*.parquet"
    out["3 index captures sharing (url, fetch_time)"] = con.execute(
        f"SELECT count(*) FROM (SELECT url, fetch_time FROM read_parquet('{idx}', hive_partitioning = true) "
        "GROUP BY ALL HAVING count(*) > 1)").fetchall()[0][0]
    out["3 stored captures (truth dup_kind, crawl_status)"] = con.execute(
        f"SELECT coalesce(nullif(t.dup_kind, ''), 'unique'), p.crawl_status, count(*) FROM read_parquet('{idx}', "
        "hive_partitioning = true) p JOIN truth t USING (url) WHERE p.subset = 'warc' GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    out.update(near_copies(con, idx, model, rounds, load_config(overrides={}, use_env=False).simhash_max_distance))
    cond = Counter()
    for r in rows:
        prev = [rd for rd in fetched.get(r["pid"], []) if r["round"] and rd < r["round"]] if r["pid"] else []
        if r["kind"] != "page" or not prev:
            continue
        host = model.hosts[int(model.page_host[r["pid"]])]
        va, vb = (model.version_at([r["pid"]], rounds[x - 1]["now"])[0] for x in (max(prev), r["round"]))
        cond[(("conditional host" if host.conditional else "plain host"),
              "validators" if r.get("inm") or r.get("ims") else "none", r["status"],
              "changed" if va != vb else "unchanged")] += 1
    out["4 re-fetches (host, validators sent, status, true change)"] = sorted(cond.items())
    return out


def near_copies(con: duckdb.DuckDBPyConnection, idx: str, model: M.Model, rounds: list[dict], k: int) -> dict:
    """Syndicated copies (the truth's ``near``: cluster = the simulated web's content id, never our
    columns) stored with a member of their cluster stored in an earlier round at the same true version
    (the text was the same then): flagged ``near_duplicate`` of a cluster member, or stored as new, and
    the SimHash distance (the index's) to the nearest such member; and every ``near_duplicate`` the
    index holds, judged by the truth's clusters (precision)."""
    caps = con.execute(f"""
        SELECT url, round, crawl_status, duplicate_of, simhash FROM read_parquet('{idx}', hive_partitioning = true)
        WHERE subset = 'warc' AND warc_type = 'response' AND simhash IS NOT NULL AND simhash <> 0
    """).fetchall()
    index = model.url_index
    cluster = model.content
    now = {x["round"]: x["now"] for x in rounds}
    by_cluster: dict[int, list] = defaultdict(list)
    for url, rd, status, dup_of, sim in caps:
        pid = index.get(url)
        if pid is not None:
            v = int(model.version_at([pid], now[rd])[0])
            by_cluster[int(cluster[pid])].append((pid, rd, status, dup_of, sim, v))
    flagged, missed, same_round, missed_pairs = [], [], 0, []
    for members in by_cluster.values():
        for pid, rd, status, dup_of, sim, v in members:
            if pid == cluster[pid] or model.render_src[pid] != pid:  # the original; mirrors (byte copies)
                continue
            earlier = [(s2, p2) for p2, r2, _, _, s2, v2 in members if p2 != pid and r2 < rd and v2 == v]
            if not earlier:
                same_round += any(p2 != pid and r2 == rd and v2 == v for p2, r2, _, _, _, v2 in members)
                continue
            dist, p2 = min((bin((sim ^ s2) & (2**64 - 1)).count("1"), p2) for s2, p2 in earlier)
            ok = status == "near_duplicate" and dup_of in index and cluster[index[dup_of]] == cluster[pid]
            # the simulated web writes other special words into a text on an ISO-8859-1 host
            # (crawl.simweb.render.Renderer._text): such a pair differs in ~1 word in 37, not in chrome
            latin1 = [model.hosts[int(model.page_host[q])].charset == "iso-8859-1" for q in (pid, p2)]
            (flagged if ok else missed).append(f"{dist}{'*' if latin1[0] != latin1[1] else ''}")
            if not ok:
                missed_pairs.append((model.url(pid), model.url(p2), dist))
    nd = [(cluster[index[u]] == cluster[index[d]]) if u in index and d in index else False
          for u, _, st, d, _ in caps if st == "near_duplicate"]
    return {
        "3 syndicated copies with a same-version member stored in an earlier round: flagged / stored as new":
            (len(flagged), len(missed)),
        f"3 their SimHash distances to the nearest such member (k = {k}; * = one of the two on an ISO-8859-1 "
        "host, whose text has other words): flagged / stored as new":
            (sorted(flagged, key=lambda x: (int(x.rstrip("*")), x)), sorted(missed, key=lambda x: (int(x.rstrip("*")), x))),
        "3 stored as new: (copy, nearest same-version member stored earlier, distance)": sorted(missed_pairs),
        "3 syndicated copies whose only same-version member was stored in the same round": same_round,
        "3 near_duplicate captures: duplicate_of in the truth's cluster / not (precision)":
            (int(sum(nd)), int(len(nd) - sum(nd))),
    }


def rendered_pairs(hosts: int, seed: int, k: int, at: float = T0) -> dict:
    """Every HTML page of the simulated web rendered at ``at`` and parsed by ``crawl.parse`` (no crawl):
    SimHash distances of each syndicated copy to its original (truth cluster), and the pairs of pages
    of different clusters within k, split into same host (one site template) and other hosts. The
    static side of the audit's near-copy figures: recall and precision of the fingerprint alone."""
    import pyarrow as pa

    from crawl.parse import parse_bodies
    from crawl.simweb.render import Renderer

    model = M.build(M.SimParams(seed=seed, hosts=hosts, pages_per_host=PPH))
    rend = Renderer(model)
    pids = [p for p in range(model.n_pages) if model.render_src[p] == p
            and model.page_type[p] in (M.HOME, M.ARTICLE)]  # mirrors serve another page's bytes
    urls = [model.url(p) for p in pids]
    bodies = []
    for i, p in enumerate(pids):
        r = rend.get(p, int(model.version_at([p], at)[0]), at)
        bodies.append((i, [("Content-Type", r.content_type)], r.body(1, at)))
    table = pa.table({"url": urls, "url_hash": pa.array(range(len(pids)), pa.uint64()),
                      "content_type": ["text/html"] * len(pids), "status": ["fetched"] * len(pids),
                      "redirect_location": pa.nulls(len(pids), pa.string())})
    pages, _ = parse_bodies(table, bodies, 1000)
    sims = pages.column("simhash").to_numpy().view(np.uint64)
    cl = model.content[pids]
    host = model.page_host[pids]
    d = np.bitwise_count(sims[:, None] ^ sims[None, :])
    upper = np.triu(np.ones_like(d, bool), 1) & (sims[:, None] != 0) & (sims[None, :] != 0)
    same = cl[:, None] == cl[None, :]
    near = upper & same
    latin1 = np.array([model.hosts[h].charset == "iso-8859-1" for h in host])
    mixed = latin1[:, None] != latin1[None, :]
    false = upper & ~same & (d <= k)
    return {
        f"pairs: copy-original distances, same text (k = {k})": sorted(d[near & ~mixed].tolist()),
        "pairs: copy-original distances, one on an ISO-8859-1 host (other words)": sorted(d[near & mixed].tolist()),
        f"pairs: within k = {k}, same text / other words": (int((near & ~mixed & (d <= k)).sum()),
                                                             int((near & mixed & (d <= k)).sum())),
        f"pairs: different clusters within k = {k}: same host (template) / other hosts, of pairs":
            (int((false & (host[:, None] == host[None, :])).sum()), int((false & (host[:, None] != host[None, :])).sum()),
             int((upper & ~same).sum())),
        "pairs: smallest distance between different clusters, same host": int(d[upper & ~same & (host[:, None] == host[None, :])].min()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=80)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--keep", help="keep the crawl root and access log in this folder")
    ap.add_argument("--pairs", action="store_true", help="only the rendered pages' pairs (no crawl, ~10 s)")
    a = ap.parse_args()
    if a.pairs:
        for k, v in rendered_pairs(a.hosts, a.seed, load_config(overrides={}, use_env=False).simhash_max_distance).items():
            print(f"{k}: {json.dumps(v)}")
        return 0
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="dedup-audit-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        meta = crawl(work, a.hosts, a.seed, a.rounds)
        for k, v in audit(work, meta, a.hosts, a.seed).items():
            print(f"{k}: {json.dumps(v, ensure_ascii=False, default=str)}")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
