"""One crawl round as plain, idempotent steps: inject, generate, fetch_parse, update, reprioritise, publish.

Each step is a function of (config, round number, round time) and files under the crawl root, and
writes its results at deterministic paths plus a small ``<step>.json`` with its stats. Nothing is
published until :func:`publish` flips ``CURRENT.json``; a crash anywhere before that leaves the
published state as it was, and running the round again resumes: generate reuses its fetch lists,
fetch/parse skip partitions already marked done, update and reprioritise recompute the same files.
The Airflow DAG calls these steps one task each; the CLI calls :func:`run_round`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawl import crawldb, frontier, schedule, seen
from crawl.config import ConfigError, CrawlConfig
from crawl.digests import write_round_captures
from crawl.errors import FetchStopped, LeaseLost, PartitionFailed, SeedError, StepOrder, permanent_reason
from crawl.lease import FETCH_PHASE, Lease, held
from crawl.progress import steps_of
from crawl.store import Store, part_number
from crawl.tasks import fetch_parse_task, fetch_task, host_crawl_delays, parse_task, render_task, robots_keys
from crawl.url import InvalidURL, canonicalize, filter_reason, host_of, parse_url, url_hash

if TYPE_CHECKING:
    from crawl.linkparts import EarlyLinks

SEED_PRIORITY = 1_000.0
PART_RETRIES = 2  # resubmissions of a partition whose fetch or parse raised a retryable error
Progress = Callable[[str], None]


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    return now if now.tzinfo else now.replace(tzinfo=UTC)


def _store(cfg: CrawlConfig) -> Store:
    return Store(cfg.root, cfg.crawl_id)


def next_round(cfg: CrawlConfig) -> int:
    return _store(cfg).current_round() + 1


# ---- inject ---------------------------------------------------------------------------------------
def validate_seeds(seeds: Sequence[str], cfg: CrawlConfig | None = None) -> list[str]:
    """Canonical seeds, or :class:`SeedError` naming every bad one (nothing is written then)."""
    max_len = cfg.max_url_length if cfg else 2048
    schemes = tuple(cfg.allowed_schemes) if cfg else ("http", "https")  # ftp only when the crawl allows it
    if not seeds:
        raise SeedError([("", "no seeds given")])
    good, bad = [], []
    for seed in seeds:
        if not isinstance(seed, str) or not seed.strip():
            bad.append((str(seed), "empty"))
            continue
        s = seed.strip()
        scheme = s.split(":", 1)[0].lower() if ":" in s else ""
        if scheme not in schemes:
            bad.append((seed, f"scheme must be {' or '.join(schemes)}, got {scheme!r}" if scheme else
                        f"no scheme: write it as {schemes[0]}://{s}"))  # 'example.org', as typed in a browser
            continue
        if len(s) > max_len:
            bad.append((seed, f"longer than {max_len} characters"))
            continue
        if any(c.isspace() for c in s):  # 'url1 url2' pasted on one line: the parser would make one URL of it
            bad.append((seed, "contains whitespace: one URL per seed (one per line in the form); "
                              "write a space inside a URL as %20"))
            continue
        try:
            parse_url(s, schemes=schemes)
        except InvalidURL as e:
            bad.append((seed, f"not a parseable URL with a host: {e}"))
            continue
        canon = canonicalize(s, schemes=schemes)
        if canon is None:
            bad.append((seed, "not a parseable URL with a host"))
            continue
        if cfg is not None and (reason := filter_reason(canon, 0, cfg)) is not None:
            bad.append((seed, f"refused by URL filter: {reason}"))
            continue
        if cfg is not None and (reason := _private_seed(canon, cfg)) is not None:
            bad.append((seed, reason))
            continue
        good.append(canon)
    if bad:
        raise SeedError(bad)
    return list(dict.fromkeys(good))


def _private_seed(canon: str, cfg: CrawlConfig) -> str | None:
    """Why the fetch's connection guard (crawl.net) would refuse every request to this seed's host: an
    IP literal in a private network that no ``resolve`` rule names, while ``allow_private_networks`` is
    off; None otherwise (a name's DNS answer is only known, and checked, at fetch time).

    crawl.net (which imports aiohttp, ~0.2 s of CPU) is imported only for an IP literal: a round's
    driver never needs aiohttp (tests/test_warmup.py)."""
    if cfg.allow_private_networks:
        return None
    host = parse_url(canon, schemes=tuple(cfg.allowed_schemes)).host or ""
    if not host or not (host.startswith("[") or host[-1].isdigit()):
        return None  # a name (a literal is bracketed IPv6 or dotted IPv4: the URL model normalised it)
    from crawl.net import ResolverMap, blocked_reason, parse_ip

    try:
        addr = parse_ip(host)
    except ValueError:
        return None  # a name
    why = blocked_reason(addr)
    if why is None or ResolverMap.from_rules(cfg.resolve or ()).lookup(host.strip("[]")) is not None:
        return None
    return (f"{host} is a {why} address: the private-address guard refuses it (a --resolve rule / CRAWL_RESOLVE "
            "naming the host lets it through, or allow_private_networks)")


def inject(cfg: CrawlConfig, seeds: Sequence[str], now: datetime | None = None,
           lease: Lease | None = None) -> dict[str, Any]:
    """Queue seeds for the next round (merged with seeds injected earlier for that round)."""
    validate_seeds(seeds, cfg)  # bad seeds fail before anything (the lease included) is written
    with held(cfg, lease, phase="inject"):
        return _inject(cfg, seeds, now)


def _inject(cfg: CrawlConfig, seeds: Sequence[str], now: datetime | None) -> dict[str, Any]:
    now = _utc(now)
    canon = validate_seeds(seeds, cfg)
    store = _store(cfg)
    n = next_round(cfg)
    rel = crawldb.inject_path(store, n)
    hosts = [host_of(u, cfg.allowed_schemes) for u in canon]
    rows = crawldb.conform(pa.table({
        "url": pa.array(canon, pa.string()),
        "url_hash": pa.array([url_hash(u) for u in canon], pa.uint64()),
        "host": pa.array(hosts, pa.string()),
        "pkey": pa.array(hosts, pa.string()),
        "depth": pa.array(np.zeros(len(canon), np.int32)),
        "discovered_round": pa.array(np.full(len(canon), n, np.int32)),
        "source": pa.array(["seed"] * len(canon), pa.string()),
        "status": pa.array(["unfetched"] * len(canon), pa.string()),
        "fetch_count": pa.array(np.zeros(len(canon), np.int32)),
        "check_count": pa.array(np.zeros(len(canon), np.int32)),
        "change_count": pa.array(np.zeros(len(canon), np.int32)),
        "retry_count": pa.array(np.zeros(len(canon), np.int32)),
        "priority": pa.array(np.full(len(canon), SEED_PRIORITY)),
        "round": pa.array(np.full(len(canon), n, np.int32)),
    }))
    if cfg.politeness_key != "host":
        from crawl.update import pkeys

        rows = rows.set_column(rows.schema.get_field_index("pkey"), "pkey",
                               pkeys(cfg, rows.column("host").combine_chunks()))
    if store.exists(rel):
        old = store.read_table(rel, crawldb.CRAWLDB_SCHEMA)
        old_hashes = seen.sorted_unique(old.column("url_hash").to_numpy())
        rows = pa.concat_tables([old, rows.filter(pa.array(~seen.confirm(rows.column("url_hash").to_numpy(),
                                                                         old_hashes)))])
    store.write_table(rel, rows)
    return {"round": n, "injected": len(canon), "pending_seeds": rows.num_rows}


# ---- generate -------------------------------------------------------------------------------------
def generate(cfg: CrawlConfig, now: datetime | None = None, lease: Lease | None = None) -> dict[str, Any]:
    """Write this round's fetch lists (reused as they are when the round is being resumed)."""
    with held(cfg, lease, phase="generate"):
        return _generate(cfg, now)


def _generate(cfg: CrawlConfig, now: datetime | None) -> dict[str, Any]:
    now = _utc(now)
    store = _store(cfg)
    n = next_round(cfg)
    store.finish_publish(n - 1)  # the last round's publish may have been cut off mid-move
    stats_rel = store.round_dir(n, "generate.json")
    done = store.read_json(stats_rel)
    if done is not None:
        return done
    # due rows only (filtered and projected in DuckDB over the shards), and every live URL's hash
    # every column of the due rows: the selected ones are what update merges this round's fetches into
    due_rows, known_hashes = crawldb.read_due(store, n - 1, cfg.url_shards, now, columns=tuple(crawldb.CRAWLDB_SCHEMA.names))
    db = due_rows.select(list(crawldb.GENERATE_COLUMNS))
    cands = [db]
    inj = crawldb.read_injected(store, n)
    if inj is not None:
        inj = inj.select(db.column_names)
        known = seen.sorted_unique(known_hashes)
        cands.append(inj.filter(pa.array(~seen.confirm(inj.column("url_hash").to_numpy(), known))))
    candidates = pa.concat_tables(cands)
    n_candidates = known_hashes.size + candidates.num_rows - db.num_rows
    delays = host_crawl_delays(store, n - 1, cfg.user_agent, cfg.robots_max_bytes)
    selected = frontier.select(cfg, candidates, now, delays)
    selected = frontier.co_locate(selected, robots_keys(store, n - 1))
    ip_stats = None
    if cfg.politeness_key == "ip":  # hosts sharing an address: one key, one queue, one task
        selected, ip_stats = frontier.with_ip_keys(cfg, selected)
        before = selected.num_rows
        selected = frontier.cap_keys(cfg, selected, delays)  # one queue: one round's worth per address
        ip_stats["over_cap"] = before - selected.num_rows
    parts = frontier.split(cfg, selected)
    picked = pc.is_in(due_rows.column("url_hash"), value_set=selected.column("url_hash").combine_chunks())
    store.write_table(store.round_dir(n, "selected.parquet"), due_rows.filter(picked))  # before generate.json
    write_round_captures(store, n, selected.column("prev_digest"))  # for the fetch tasks; before generate.json
    paths = []
    for k, t in enumerate(parts):
        rel = store.part_file(n, "fetchlist", k)
        if t.num_rows:
            store.write_table(rel, t, scratch=True)
            paths.append(rel)
    stats = {
        "round": n, "now": now.isoformat(), "urls": selected.num_rows, "fresh": frontier.fresh_count(selected),
        "hosts": len(set(selected.column("host").to_pylist())) if selected.num_rows else 0,
        "partitions": paths, "candidates": n_candidates,
    }
    if ip_stats is not None:
        stats["ip_keys"] = ip_stats
    store.write_json(stats_rel, stats)
    return stats


# ---- fetch + parse on Dask ------------------------------------------------------------------------
def fetch_parse(cfg: CrawlConfig, round_no: int, now: datetime | None = None,
                progress: Progress | None = None, client: Any = None, lease: Lease | None = None,
                on_parsed: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run the fetch and parse of every fetch-list partition on the Dask cluster (one task per
    partition that does both, or fetch -> render -> parse tasks when the crawl renders; see
    :func:`_run_parts`).

    Under the lease: first wait until a dead previous attempt's fetchers are known to have stopped
    (:meth:`Lease.wait_quiet`), then hand the fencing token to every fetch task, which stops between
    requests once the token is no longer current. ``on_parsed(part)``: called on this process as each
    partition's fetch and parse end (with ``client`` given: run_round starts update's link parts).
    """
    with held(cfg, lease, phase=FETCH_PHASE) as lz:
        lz.wait_quiet(progress)
        _store(cfg).clean_temp()  # a dead attempt's writers have stopped: its temp files are litter
        return _fetch_parse(cfg, round_no, now, progress, client, lz.token, on_parsed)


def _fetch_parse(cfg: CrawlConfig, round_no: int, now: datetime | None, progress: Progress | None,
                 client: Any, token: int | None, on_parsed: Callable[[int], None] | None = None) -> dict[str, Any]:
    now = _utc(now)
    store = _store(cfg)
    gen = store.read_json(store.round_dir(round_no, "generate.json"))
    if gen is None:
        raise StepOrder(f"round {round_no}: generate has not run")
    parts = sorted(part_number(p) for p in gen["partitions"])
    _check_parsers(cfg)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    dashboard = ""
    if parts:
        if client is None:
            from crawl.cluster import dashboard_url, dask_client

            with dask_client(cfg, announce=progress) as c:
                dashboard = dashboard_url(c, cfg)
                results = _run_parts(c, cfg, round_no, parts, now, progress, token)
        else:
            from crawl.cluster import dashboard_url

            dashboard = dashboard_url(client, cfg)
            results = _run_parts(client, cfg, round_no, parts, now, progress, token, on_parsed)
    elapsed = time.monotonic() - started
    # page requests (robots.txt excluded) -- fetch stats count every attempt
    fetched = sum(int(r.get("fetch", {}).get("requests", 0) or 0) for r in results)
    stats = {
        "round": round_no, "partitions": len(parts), "seconds": round(elapsed, 3),
        "pages": sum(int(r.get("parse", {}).get("pages", 0)) for r in results),
        "fetched": fetched, "pages_per_s": round(fetched / elapsed, 1) if elapsed > 0 else 0.0,
        "dask_dashboard": dashboard,  # live only while the round's cluster runs
        "per_partition": results,
    }
    store.write_json(store.round_dir(round_no, "fetch_parse.json"), stats)
    return stats


def _check_parsers(cfg: CrawlConfig) -> None:
    """Load (not register: the workers do that) the parser plugins, so a bad name fails the round
    before any fetch."""
    from crawl.parsers import ParserLoadError, find_parsers

    try:
        find_parsers(cfg.parsers)
    except ParserLoadError as exc:
        raise ConfigError(f"parsers: {exc}") from None


def _run_parts(client: Any, cfg: CrawlConfig, round_no: int, parts: list[int], now: datetime,
               progress: Progress | None, token: int | None = None,
               on_parsed: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """One task per partition that fetches and parses (:func:`~crawl.tasks.fetch_parse_task`: the pages
    are parsed from memory) when ``parse_in_fetch_max_bytes`` > 0 and nothing of the partition may be
    rendered (:func:`_render_parts`), else a fetch, a render (if the crawl renders) and a parse task;
    a failed partition is resubmitted up to
    :data:`PART_RETRIES` times, unless its error is one a retry cannot fix (disk full, permissions:
    :func:`~crawl.errors.permanent_reason`) or the lease is gone. Dask's own ``retries`` cannot tell
    errors apart, so the driver decides. A worker lost mid-task is Dask's business (the task is
    rescheduled on another worker) and is not counted here.
    """
    from crawl.cluster import wait_all, wait_for_workers
    from crawl.config import render_enabled
    from crawl.warmup import warm_driver

    render = render_enabled(cfg)
    if render:
        from crawl.render import check_browser_workers

        wait_for_workers(client, cfg)  # an embedded cluster may still be starting them (crawl run)
        check_browser_workers(client)
    rendered = _render_parts(cfg, round_no, parts) if render else set()
    futures: dict[Any, tuple[int, Any, Any, int]] = {}

    # Dask keys name this call's tasks only: a key another client still holds (a zombie attempt of this
    # round, fenced by an older lease token; another crawl root's same crawl id on a shared scheduler)
    # would hand back that attempt's task instead of running ours. Outputs do not depend on keys.
    run_key = (f"t{token}-" if token is not None else "") + uuid.uuid4().hex[:8]

    def submit(k: int, attempt: int) -> Any:
        tag = f"{cfg.crawl_id}-{round_no}-{run_key}-{k}" + (f"-retry{attempt}" if attempt else "")
        if cfg.parse_in_fetch_max_bytes > 0 and k not in rendered:
            fp = client.submit(fetch_parse_task, cfg, round_no, k, now, token, key=f"fetch-{tag}", pure=False)
            futures[fp] = (k, None, None, attempt)
            return fp
        f = client.submit(fetch_task, cfg, round_no, k, now, token, key=f"fetch-{tag}", pure=False)
        r = None
        if k in rendered:  # after the fetch, before the parse, on a worker with a browser (crawl.render)
            r = client.submit(render_task, cfg, round_no, k, f, key=f"render-{tag}", pure=False,
                              resources={"browser": 1})
        p = client.submit(parse_task, cfg, round_no, k, r if r is not None else f, key=f"parse-{tag}",
                          pure=False)
        futures[p] = (k, f, r, attempt)
        return p

    for k in parts:
        submit(k, 0)
    # update's and reprioritise's imports, while this process only waits on the workers: once one is up,
    # not before (an embedded cluster's forkserver may still be preloading their modules on the other core:
    # crawl.cluster.start_forkserver), and after the submits (imports hold the GIL)
    warm_driver(lambda: client.wait_for_workers(1, timeout=cfg.dask_wait_for_workers_s))
    out: list[dict[str, Any]] = []

    def done(fut: Any) -> list[Any]:
        k, ffut, rfut, attempt = futures[fut]
        try:
            if ffut is None:  # fetch_parse_task
                both = fut.result()
                fetch_stats, parse_stats = both["fetch"], both["parse"]
            else:
                parse_stats = fut.result()
                fetch_stats = ffut.result()
            render_stats = rfut.result() if rfut is not None else None
        except (FetchStopped, LeaseLost):
            raise
        except Exception as exc:
            reason = permanent_reason(exc)
            if reason is None and attempt < PART_RETRIES:
                if progress:
                    progress(f"  partition {k:03d} failed ({exc!r}); retry {attempt + 1} of {PART_RETRIES}")
                return [submit(k, attempt + 1)]
            why = f"not retried: {reason}" if reason else f"after {attempt + 1} attempts"
            raise PartitionFailed(f"round {round_no} partition {k:03d} failed ({why}): {exc}") from exc
        out.append({"part": k, "fetch": fetch_stats, "parse": parse_stats,
                    **({"render": render_stats} if rfut is not None else {})})
        if on_parsed is not None:
            on_parsed(k)
        if progress:
            progress(f"  partition {k:03d} done ({len(out)}/{len(parts)}): "
                     f"{fetch_stats.get('requests', 0)} fetched, {parse_stats.get('pages', 0)} parsed")
        steps_of(progress).advance(int(fetch_stats.get("requests", 0) or 0))
        return []

    wait_all(client, list(futures), cfg, f"round {round_no} fetch/parse", done)
    return sorted(out, key=lambda r: r["part"])


def _render_parts(cfg: CrawlConfig, round_no: int, parts: list[int]) -> set[int]:
    """The partitions whose pages may be rendered: all of them with ``render_auto`` (the heuristic
    looks at the bodies), else those with a host in ``render_hosts`` (a fetch task fetches only its
    fetch list's hosts: redirects to another origin are not followed)."""
    if cfg.render_auto:
        return set(parts)
    from crawl.config import render_globs
    from crawl.render import host_matches

    globs = render_globs(cfg.render_hosts)
    store = _store(cfg)
    out = set()
    for k in parts:
        hosts = pc.unique(store.read_table(store.part_file(round_no, "fetchlist", k)).column("host")).to_pylist()
        if any(h and host_matches(h, globs) for h in hosts):
            out.add(k)
    return out


# ---- update, reprioritise, publish ---------------------------------------------------------------
def update(cfg: CrawlConfig, round_no: int, now: datetime | None = None, client: Any = None,
           lease: Lease | None = None, early_links: EarlyLinks | None = None) -> dict[str, Any]:
    """Merge the round into the next CrawlDb version (per URL-hash shard: Dask tasks when a client is given).
    ``early_links``: link parts started during the fetch (:class:`crawl.linkparts.EarlyLinks`)."""
    with held(cfg, lease, phase="update"):
        return _update_step(cfg, round_no, now, client, early_links)


def _check_fetched_and_parsed(store: Store, round_no: int) -> None:
    """Update's order contract: the round's fetch lists were generated and every one of them was fetched
    and parsed, else :class:`StepOrder` naming the step to run (before anything is written).

    Why: update merges whatever fetch and parse files it finds, so right after inject (no fetch lists) or
    after a fetch_parse cut off part-way it ran, and the round's publish then published a round that had
    fetched nothing or half its partitions. The truth is each generated partition's ``parsed`` marker
    (the last thing its fetch+parse writes, :func:`crawl.tasks._parse_and_mark`; one listing), not
    ``fetch_parse.json``: callers that run the tasks themselves (bench/profile_round.py) leave the markers
    too. A round with no fetch list (nothing due) has nothing to wait for. Markers stay until the round is
    published, so a rerun of a completed update passes."""
    gen = store.read_json(store.round_dir(round_no, "generate.json"))
    if gen is None:
        raise StepOrder(f"round {round_no}: generate has not run")
    parts = sorted(part_number(p) for p in gen["partitions"])
    marked = set(store.ls(store.round_dir(round_no, "parsed")))
    missing = [k for k in parts if store.part_file(round_no, "parsed", k, "done") not in marked]
    if len(missing) == len(parts) and parts:
        raise StepOrder(f"round {round_no}: fetch_parse has not run")
    if missing:
        raise StepOrder(f"round {round_no}: fetch_parse has not finished: {len(missing)} of {len(parts)} "
                        f"partitions not fetched and parsed ({', '.join(f'{k:03d}' for k in missing[:10])}"
                        f"{', ...' if len(missing) > 10 else ''}); run it again")


def _update_step(cfg: CrawlConfig, round_no: int, now: datetime | None, client: Any,
                 early_links: EarlyLinks | None = None) -> dict[str, Any]:
    from crawl.update import update as _update

    store = _store(cfg)
    if store.current_round() >= round_no:
        raise StepOrder(f"round {round_no} is already published")
    _check_fetched_and_parsed(store, round_no)
    stats = _update(cfg, round_no, _utc(now), client, early_links)
    store.write_json(store.round_dir(round_no, "update.json"), stats)
    return stats


def reprioritise(cfg: CrawlConfig, round_no: int, now: datetime | None = None,
                 lease: Lease | None = None) -> dict[str, Any]:
    """Turn the merged rows into CrawlDb version ``round_no``: change rates, importance, priorities."""
    with held(cfg, lease, phase="reprioritise"):
        return _reprioritise(cfg, round_no, now)


def _reprioritise(cfg: CrawlConfig, round_no: int, now: datetime | None) -> dict[str, Any]:
    now = _utc(now)
    store = _store(cfg)
    if store.current_round() >= round_no:  # as update: a published CrawlDb version is never rewritten in place
        raise StepOrder(f"round {round_no} is already published")
    if not store.exists(store.round_dir(round_no, "update.json")):  # written last by a completed update
        raise StepOrder(f"round {round_no}: update has not run")
    carried = schedule.carry_forward(cfg, store, round_no)
    if carried is not None:
        stats = {"round": round_no, **carried}
        store.write_json(store.round_dir(round_no, "reprioritise.json"), stats)
        return stats
    from crawl.update import delta_path

    shards = range(cfg.url_shards)
    deltas = [store.read_table(delta_path(store, round_no, s), crawldb.CRAWLDB_SCHEMA) for s in shards]
    touched = np.concatenate([d.column("url_hash").to_numpy() for d in deltas])
    others = schedule.untouched(cfg, store, round_no, touched, now)
    if others is not None:
        # rescore the touched rows only; each shard of N is N-1's base file plus a grown overlay
        scored, stats = schedule.reprioritise(cfg, store, round_no, pa.concat_tables(deltas), now, others)
        scored = crawldb.conform(scored)
        where = crawldb.shard_of(scored.column("url_hash"), cfg.url_shards)
        for s in shards:
            crawldb.write_overlay(store, round_no, s, scored.filter(pa.array(where == s)))
    else:  # every row rescored: N is written whole (folding in any overlay of N-1)
        merged = pa.concat_tables([crawldb.splice(crawldb.read_shard(store, round_no - 1, s), deltas[s])
                                   for s in shards])
        scheduled, stats = schedule.reprioritise(cfg, store, round_no, merged, now)
        crawldb.write(store, round_no, cfg.url_shards, scheduled)
    stats = {"round": round_no, **stats}
    store.write_json(store.round_dir(round_no, "reprioritise.json"), stats)
    return stats


def publish(cfg: CrawlConfig, round_no: int, lease: Lease | None = None) -> dict[str, Any]:
    """The round's single commit: manifest, then the CURRENT pointer flips to ``round_no``.

    Fenced: refused (:class:`~crawl.errors.LeaseLost`) when the lease's token is no longer current.
    """
    with held(cfg, lease, phase="publish") as lz:
        return _publish(cfg, round_no, lz)


def _publish(cfg: CrawlConfig, round_no: int, lease: Lease) -> dict[str, Any]:
    store = _store(cfg)
    if store.current_round() == round_no:
        store.finish_publish(round_no)  # a publish interrupted mid-move: roll it forward
        return store.read_json(store.round_dir(round_no, "manifest.json"))
    if store.current_round() != round_no - 1:
        raise StepOrder(f"cannot publish round {round_no}: published round is {store.current_round()}")
    for s in range(cfg.url_shards):
        if not store.exists(crawldb.shard_path(store, round_no, s)):
            raise StepOrder(f"round {round_no}: CrawlDb shard {s} missing, run reprioritise first")
    # the settings the round ran with, so reports and the dashboard can show them (delay, budget)
    summary = {"round": round_no, "crawl_id": cfg.crawl_id, "published_at": datetime.now(UTC).isoformat(),
               "config": cfg.to_dict()}
    for step in ("generate", "fetch_parse", "update", "reprioritise"):
        s = store.read_json(store.round_dir(round_no, f"{step}.json"), {})
        s.pop("per_partition", None)
        summary[step] = s
    round_health = store.read_json(store.round_dir(round_no, "health.json")) or {}
    summary["degraded"] = bool(round_health.get("degraded"))  # crawl.health: the round's health gate
    summary["health"] = round_health
    lease.check(f"publish of round {round_no}")
    store.publish(round_no, summary)
    return summary


def report(cfg: CrawlConfig, round_no: int, origin: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the round's HTML report (``reports/crawl=ID/round=NNNNN.html``); safe to run twice.

    ``origin`` (e.g. the Airflow DAG run: ``{"dag_id", "run_id"}``) is kept next to the round so the
    report and the dashboard can link the round to the run that made it.
    """
    from crawl.reporthtml import write_report

    store = _store(cfg)
    if store.current_round() < round_no:
        raise StepOrder(f"round {round_no} is not published yet")
    if origin:
        store.write_json(store.round_dir(round_no, "airflow.json"), origin)
    rel = write_report(cfg.root, cfg.crawl_id, round_no)
    return {"round": round_no, "report": rel, "path": store.location(rel)}


def unreported_round(cfg: CrawlConfig) -> int | None:
    """The last published round when its report file is missing, else None.

    Why: ``crawl round`` and ``crawl run`` write a round's report after its publish; a process killed
    in between left the round published without a report, and the rerun (the next round) and ``crawl
    report`` (the last round's only) never wrote it: the dashboard's report link of that round answered
    404 for good (bench/crash_sweep.py, kill point "report"). They write it first (:func:`report`)."""
    from crawl.report import report_path

    store = _store(cfg)
    current = store.current_round()
    return current if current and not store.exists(report_path(store, current)) else None


def run_round(cfg: CrawlConfig, seeds: Sequence[str] | None = None, now: datetime | None = None,
              progress: Progress | None = None, client: Any = None, lease: Lease | None = None,
              before_update: Callable[[], None] | None = None) -> dict[str, Any]:
    """inject (if seeds) → generate → fetch+parse → update → reprioritise → publish, under one lease.

    ``before_update``: called between fetch+parse and update (``crawl run`` waits there for the previous
    round's report, written meanwhile in a thread; an exception it raises ends the round there)."""
    now = _utc(now)
    steps = steps_of(progress)  # a bar per step on a terminal (crawl.progress); plain callables: lines only
    if seeds:
        validate_seeds(seeds, cfg)
    with held(cfg, lease, phase="round") as lz:
        return _run_round(cfg, seeds, now, progress, client, lz, steps, before_update)


def _run_round(cfg: CrawlConfig, seeds: Sequence[str] | None, now: datetime, progress: Progress | None,
               client: Any, lease: Lease, steps: Any, before_update: Callable[[], None] | None = None) -> dict[str, Any]:
    if seeds:
        steps.start("inject")
        inject(cfg, seeds, now, lease=lease)
        steps.finish()
    steps.start("generate")
    gen = generate(cfg, now, lease=lease)
    steps.finish()
    n = gen["round"]
    if progress:
        progress(f"round {n}: {gen['urls']} URLs on {gen['hosts']} hosts in {len(gen['partitions'])} partitions")
    steps.start("fetch_parse", total=gen["urls"])
    # update's link parts start on the workers as partitions are parsed (crawl.linkparts.EarlyLinks)
    early = None
    if client is not None:
        from crawl.linkparts import EarlyLinks

        early = EarlyLinks(client, cfg, n)
    try:
        fp = fetch_parse(cfg, n, now, progress, client, lease=lease, on_parsed=early.start if early else None)
        steps.finish()
        if before_update is not None:
            before_update()
        steps.start("update")
        up = update(cfg, n, now, client, lease=lease, early_links=early)
    finally:
        if early is not None:
            early.release()
    steps.finish()
    steps.start("reprioritise")
    reprioritise(cfg, n, now, lease=lease)
    steps.finish()
    steps.start("publish")
    summary = publish(cfg, n, lease=lease)
    steps.finish()
    if progress:
        progress(f"round {n} published: {fp['fetched']} fetched ({fp['pages_per_s']} pages/s), "
                 f"{up['new_urls']} new URLs, {up['duplicates']} duplicates, "
                 f"{up['near_duplicates']} near-duplicates, {up['known']} known")
    return summary
