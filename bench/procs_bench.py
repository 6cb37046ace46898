"""Workers and partitions of the embedded cluster, alternated in one run: whole ``crawl run`` processes.

Each setting is a list of ``crawl run`` arguments (e.g. ``--workers 3 --partitions 3``); every rep runs each
setting once, in an order rotated by one each rep, on the same tree, against a fresh simulated web
(``bench/run_bench.py``'s ``run_once``: wall, CPU of the process and its workers, first request, idle gaps,
tail, step times). Next to those, this samples the memory of the ``crawl run`` process tree every 0.2 s: the
sum of PSS (proportional set size: pages shared by the forkserver's children counted once in all) and the
largest single RSS, and reports each run's peaks.

Why: a small round (~2,000 pages on 2 cores) is fetch then parse in each worker, one after the other, so the
cores are not both busy while the fetch runs (bench/RESULTS.md "Session 13 end checks"); more worker
processes than cores could let the OS run one worker's parse while another fetches. This measures whether
it pays, and what it costs in memory.

    python bench/procs_bench.py --reps 4 --warm --setting "" --setting "--workers 3 --partitions 3"
    python bench/procs_bench.py --hosts 1000 --max-pages 20000 --rounds 2 --reps 2 --setting "" ...

Ends with one ``RESULT`` line per setting (medians).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run_bench import add_run_arguments, run_once  # noqa: E402

from crawl.simweb.model import SimParams, build  # noqa: E402


class TreeMemory:
    """Peak PSS summed over every ``crawl run`` process tree under this process, and the largest one RSS."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s = every_s
        self.peak_pss = 0
        self.peak_rss_one = 0
        self.peak_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _crawl_tree(self) -> list[psutil.Process]:
        for child in psutil.Process().children(recursive=False):
            try:
                if "crawl" in child.cmdline() and "run" in child.cmdline():
                    return [child, *child.children(recursive=True)]
            except psutil.Error:
                continue
        return []

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            pss = 0
            procs = self._crawl_tree()
            for p in procs:
                try:  # smaps_rollup: one summary, far cheaper than psutil's full smaps walk
                    text = Path(f"/proc/{p.pid}/smaps_rollup").read_text()
                except OSError:
                    continue
                fields = dict(ln.split(":", 1) for ln in text.splitlines()[1:] if ":" in ln)
                pss += int(fields.get("Pss", "0 kB").split()[0]) * 1024
                self.peak_rss_one = max(self.peak_rss_one, int(fields.get("Rss", "0 kB").split()[0]) * 1024)
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, len(procs))


def main() -> None:
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    ap.add_argument("--setting", action="append", default=[],
                    help="crawl run arguments of one setting (repeatable; \"\" = the defaults)")
    ap.add_argument("--warm", action="store_true", help="as run_bench.py --warm")
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--warmup", action="store_true", help="one untimed run of the first setting first (a cold "
                    "box's first run pays caches and page-ins the others do not)")
    args = ap.parse_args()
    settings = args.setting or [""]
    seeds = [h.base + "/" for h in build(SimParams(seed=args.seed, hosts=args.hosts)).good_hosts()]
    work = Path(tempfile.mkdtemp(prefix="procs-bench-"))
    runs: dict[str, list[dict]] = {s: [] for s in settings}
    try:
        if args.warmup:
            run_once(REPO, seeds, args.hosts, args.seed, args.rounds, args.max_pages, args.per_host,
                     work / "warmup", settings[0].split(), None, (), args.warm)
            shutil.rmtree(work / "warmup", ignore_errors=True)
        for rep in range(args.reps):
            k = rep % len(settings)
            for i, setting in enumerate(settings[k:] + settings[:k]):
                with TreeMemory() as mem:
                    r = run_once(REPO, seeds, args.hosts, args.seed, args.rounds, args.max_pages, args.per_host,
                                 work / f"{rep}-{i}", setting.split(), None, (), args.warm)
                r.pop("lines")
                r.update(load=round(os.getloadavg()[0], 1), peak_pss_mib=round(mem.peak_pss / 2**20),
                         peak_rss_one_mib=round(mem.peak_rss_one / 2**20), procs=mem.peak_procs)
                runs[setting].append(r)
                print(f"[{setting or 'default'}] rep {rep + 1}: {json.dumps(r)}", flush=True)
                shutil.rmtree(work / f"{rep}-{i}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))

    def med(s: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[s])

    for s in settings:
        fp = [r["steps"].get("fetch_parse", []) for r in runs[s]]
        fp_med = [round(statistics.median(x), 2) for x in zip(*fp, strict=False)] if fp else []
        print(f"RESULT setting={s.replace(' ', '_') or 'default'} wall_s={med(s, 'wall'):.2f} cpu_s={med(s, 'cpu'):.2f} "
              f"fixed_s={med(s, 'fixed'):.2f} tail_s={med(s, 'tail'):.2f} pages={med(s, 'pages'):.0f} "
              f"fetch_parse_s={fp_med} peak_pss_mib={med(s, 'peak_pss_mib'):.0f} "
              f"peak_rss_one_mib={med(s, 'peak_rss_one_mib'):.0f} loads={[r['load'] for r in runs[s]]}")


if __name__ == "__main__":
    main()
