"""The steps of a round after fetch+parse (update, reprioritise, publish, report, the next round's
generate), replayed on a saved
crawl root, with each step's wall and CPU time and optionally its cProfile.

Why: at 20,000 pages these steps run in the driver while the workers wait (``round_timeline.py``);
replaying them on the same saved state gives same-input A/B figures in seconds, without re-crawling,
and CPU seconds are far less sensitive to a shared box's load than wall time.

    python bench/round_timeline.py --hosts 1000 --pages 20000 --save-fetched /tmp/fetched20k
    python bench/after_fetch_bench.py /tmp/fetched20k [--reps 3] [--profile 30] [--keep /tmp/out-new]
                                       [--workers 2 [--early-links]]
    python bench/after_fetch_compare.py /tmp/out-old /tmp/out-new   # the outputs of two trees, by DuckDB

Update runs its per-shard merges (and per-partition links) in threads here (no Dask client), as
``crawl.update`` does without one; ``--workers N`` runs them on an embedded Dask cluster, as a round does.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawl import round as rnd  # noqa: E402
from crawl.config import load_config  # noqa: E402


def replay(saved: Path, profile: int, client: Any = None, keep: Path | None = None,
           early_links: bool = False) -> dict[str, tuple[float, float, float]]:
    """{step: (wall s, CPU s, main-thread CPU s)} of update, reprioritise, publish, report and the next
    round's generate (the driver's work between two rounds of ``crawl run``) on a fresh copy of ``saved``; ``keep``: where the crawl root is left afterwards (to compare two trees' outputs).

    The main thread's CPU is the step's serial driver work: what a side thread or a worker does in
    parallel is in the process's CPU (or the workers') but not in it, so on a loaded box, where walls
    swing, it tells whether work left the step's critical path.

    ``early_links`` (with a client): the link parts are started and finished before update, as
    ``crawl.update.EarlyLinks`` has them in a round (during the fetch), so update's wall is a round's."""
    work = Path(tempfile.mkdtemp(prefix="after-fetch-"))
    try:
        shutil.copytree(saved / "root", work / "root", ignore=shutil.ignore_patterns("lease"))  # the bench's, expired
        over = json.loads((saved / "config.json").read_text())
        over["root"] = str(work / "root")
        cfg = load_config(overrides={k: v for k, v in over.items() if v is not None}, use_env=False)
        gen = json.loads((work / "root").joinpath(*_gen_rel(cfg)).read_text())
        n, now = gen["round"], datetime.fromisoformat(gen["now"]).astimezone(UTC)
        out = {}
        later = now + timedelta(seconds=cfg.round_duration_s)  # the next round's time, as `crawl run` sets it
        early = None
        if early_links and client is not None:
            from distributed import wait

            from crawl.update import EarlyLinks

            early = EarlyLinks(client, cfg, n)
            for part in range(cfg.partitions):
                early.start(part)
            wait(list(early.futures.values()))
        for name, fn in (("update", lambda: rnd.update(cfg, n, now, client, early_links=early)),
                         ("reprioritise", lambda: rnd.reprioritise(cfg, n, now)),
                         ("publish", lambda: rnd.publish(cfg, n)),
                         ("report", lambda: rnd.report(cfg, n)),
                         ("generate", lambda: rnd.generate(cfg, later))):
            prof = cProfile.Profile() if profile else None
            w0, c0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
            if prof is not None:
                prof.runcall(fn)
            else:
                fn()
            out[name] = (time.perf_counter() - w0, time.process_time() - c0, time.thread_time() - t0)
            if prof is not None:
                st = pstats.Stats(prof, stream=io.StringIO())
                rows = sorted(st.stats.items(), key=lambda kv: kv[1][3], reverse=True)  # type: ignore[attr-defined]
                print(f"\n{name}: top {profile} by cumulative time")
                for (path, line, f), (_cc, nc, tt, ct, _) in rows[:profile]:
                    short = path.split("/crawl/", 1)[-1] if "/crawl/" in path else path.rsplit("/", 1)[-1]
                    print(f"  {ct:7.3f} cum {tt:7.3f} own {nc:7d}x  {short}:{line}({f})")
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(work / "root", keep)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _gen_rel(cfg: Any) -> list[str]:
    from crawl.store import Store

    store = Store(cfg.root, cfg.crawl_id)
    rel = store.round_dir(store.current_round() + 1, "generate.json")
    return [rel]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("saved", type=Path, help="a directory written by round_timeline.py --save-fetched")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, metavar="TOP")
    ap.add_argument("--keep", type=Path, default=None, help="leave the first rep's crawl root here")
    ap.add_argument("--workers", type=int, default=0,
                    help="run update's tasks on an embedded Dask cluster of this many workers, as a round does "
                         "(0: threads in this process)")
    ap.add_argument("--early-links", action="store_true",
                    help="with --workers: the link parts done before update, as EarlyLinks has them in a round")
    args = ap.parse_args()
    from driverproc import as_crawl_run_driver

    as_crawl_run_driver()  # as `crawl run` does for its own process
    import contextlib

    with contextlib.ExitStack() as stack:
        client = None
        if args.workers:
            from crawl.cluster import dask_client

            over = json.loads((args.saved / "config.json").read_text())
            cfg = load_config(overrides={**{k: v for k, v in over.items() if v is not None},
                                         "dask_workers": args.workers, "dask_address": None}, use_env=False)
            client = stack.enter_context(dask_client(cfg))
            client.run(lambda: __import__("crawl.update"))  # workers' imports out of the first rep
        run_reps(args, client)


def run_reps(args: argparse.Namespace, client: Any) -> None:
    for rep in range(args.reps):
        res = replay(args.saved, args.profile if rep == 0 else 0, client, args.keep if rep == 0 else None,
                     args.early_links)
        print(f"rep {rep + 1}: " + "; ".join(f"{k} {w:.2f} s wall {c:.2f} s CPU {t:.2f} main"
                                             for k, (w, c, t) in res.items())
              + f"; total {sum(v[0] for v in res.values()):.2f} s wall {sum(v[1] for v in res.values()):.2f} s CPU "
              f"{sum(v[2] for v in res.values()):.2f} main")


if __name__ == "__main__":
    main()
