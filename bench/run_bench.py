"""Fixed work of a whole ``crawl run`` process, against a same-run baseline revision.

The ``crawl run`` that ``bench/scrapy_bench.py`` times (same simulated web, seeds, scope and flags: 3 rounds
of 2,000 pages by default), run as a whole process for this tree ("current") and for ``crawl/`` of
``--baseline-rev`` ("baseline", extracted with ``git archive``), alternated ``--reps`` times, a fresh
simulated web and crawl root each run. Per run, from outside the process: wall time, CPU (user + system of
the process and the workers it waits for, ``getrusage``), and from the server's access log the seconds to
the first request, the idle gaps (no request in progress for over 0.5 s: between rounds) and the seconds
after the last answer; from the CLI's step lines (timestamped as they arrive) where the gaps go: each
step's wall time, and the report of each round (publish done -> "round N report:" line).

Why: at this size most of a ``crawl run``'s wall time is not crawling (bench/RESULTS.md, "Fixed costs of
a whole run"); this measures that part alone, on a shared box, as a same-run ratio.

    python bench/run_bench.py [--reps 3] [--baseline-rev main] [--rounds 3] [--max-pages 2000] [--json out] [--warm]
                              [--current-env ARROW_DEFAULT_MEMORY_POOL=system]

Ends with ``RESULT run_wall_s=… baseline=… ratio=… fixed_s=… fixed_baseline=…`` (medians; ratio =
baseline / current, above 1 = faster; fixed = first request + gaps + tail).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from scrapy_bench import scope_regex, timeline, warm_server  # noqa: E402
from trees import compile_tree, tree_at  # noqa: E402

from crawl.simweb.launch import launch  # noqa: E402
from crawl.simweb.launch import stop as stop_process  # noqa: E402
from crawl.simweb.model import SimParams, build  # noqa: E402


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


STEP_DONE = re.compile(r"^(inject|generate|fetch_parse|update|reprioritise|publish): done in ([0-9.]+) s")
REPORT = re.compile(r"^round (\d+) report: ")


def run_once(tree: Path, seeds: list[str], hosts: int, seed: int, rounds: int, max_pages: int,
             per_host: int, work: Path, extra: list[str], py_args: list[str] | None = None,
             wrap: tuple[str, ...] = (), warm: bool = False, env_extra: dict[str, str] | None = None) -> dict:
    """One ``crawl run`` of ``tree`` against a fresh simulated web (every page of the seeds' hosts
    rendered once first with ``warm``, as scrapy_bench.py does): timings from outside the process.
    ``env_extra``: variables added to the crawl run's environment (not the simulated web's)."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "access.jsonl"
    proc, port = launch(hosts, seed, log)
    if warm:
        try:
            warm_server(port, hosts, seed, seeds)
        except BaseException:
            stop_process(proc)
            raise
    env = {**os.environ, "PYTHONPATH": str(tree), **(env_extra or {})}
    cmd = [*wrap, sys.executable, *(py_args or []), "-m", "crawl", "run", "--root", str(work / "root"), "--crawl-id", "bench",
           "--resolve", f"*.sim.test=127.0.0.1:{port}", "--delay", "0", "--max-pages", str(max_pages),
           "--max-pages-per-host-per-round", str(per_host), "--round-duration-s", "600", "--no-dashboard",
           "--allowed-hosts", scope_regex(seeds), "--rounds", str(rounds), *extra, "--seeds", *seeds]
    lines: list[tuple[float, str]] = []
    try:
        t0, c0 = time.time(), children_cpu_s()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=work)

        def read_err() -> None:
            assert p.stderr is not None
            for line in p.stderr:
                lines.append((time.time() - t0, line.rstrip("\n")))

        reader = threading.Thread(target=read_err, daemon=True)
        reader.start()
        out = p.stdout.read() if p.stdout else ""
        p.wait(timeout=900)
        reader.join(timeout=10)
        t1, c1 = time.time(), children_cpu_s()
    finally:
        stop_process(proc)
    if p.returncode != 0:
        raise RuntimeError(f"crawl run failed ({p.returncode}): {[ln for _, ln in lines][-30:]}")
    tl = timeline(log, t0, t1)
    steps: dict[str, list[float]] = {}
    reports: list[float] = []
    last_publish = None
    for t, ln in lines:
        if m := STEP_DONE.match(ln):
            steps.setdefault(m.group(1), []).append(float(m.group(2)))
            if m.group(1) == "publish":
                last_publish = t
        elif REPORT.match(ln) and last_publish is not None:
            reports.append(round(t - last_publish, 2))
    fetched = re.search(r"summary: \d+ round\(s\), (\d+) fetched", out)
    (work / "t0").write_text(repr(t0))
    return {"wall": round(t1 - t0, 2), "cpu": round(c1 - c0, 2), "pages": tl["pages"], "first": tl["first_s"],
            "gaps": tl["gap_s"], "tail": tl["tail_s"], "fixed": round(tl["first_s"] + tl["gap_s"] + tl["tail_s"], 2),
            "steps": {k: [round(x, 2) for x in v] for k, v in steps.items()}, "reports": reports,
            "fetched": int(fetched.group(1)) if fetched else None, "lines": lines, "exit_after_last_line": round(t1 - t0 - lines[-1][0], 2)
            if lines else None}


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The crawl every run of :func:`run_once` makes (the simulated web, rounds, budget) and the reps; shared
    with bench/procs_bench.py."""
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-pages", type=int, default=2000)
    ap.add_argument("--per-host", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)


def main() -> None:
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    ap.add_argument("--baseline-rev", default="", help="also run crawl/ of this git revision, alternated")
    ap.add_argument("--extra", default="", help="extra crawl run arguments (space separated), both sides")
    ap.add_argument("--current-extra", default="", help="extra crawl run arguments of the current side only "
                                                        "(e.g. a setting against the baseline's default)")
    ap.add_argument("--current-env", action="append", default=[], metavar="VAR=VALUE",
                    help="an environment variable of the current side's crawl run only (e.g. "
                         "ARROW_DEFAULT_MEMORY_POOL=system against --baseline-rev main); repeatable")
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--wrap", default="", help="a command the crawl run runs under (e.g. 'py-spy record -o F --')")
    ap.add_argument("--warm", action="store_true", help="render every page of the seeds' hosts before each run "
                    "(a warm simulated web, as scrapy_bench.py has; not timed)")
    ap.add_argument("--keep", action="store_true", help="keep the crawl roots and access logs")
    ap.add_argument("--show-lines", action="store_true", help="print the CLI's step lines with their arrival times")
    ap.add_argument("--py-args", default="", help="interpreter arguments before -m crawl (e.g. '-X importtime', "
                                                  "'-m cProfile -o FILE'), both sides")
    args = ap.parse_args()
    current_env = dict(v.split("=", 1) for v in args.current_env)
    seeds = [h.base + "/" for h in build(SimParams(seed=args.seed, hosts=args.hosts)).good_hosts()]
    work = Path(tempfile.mkdtemp(prefix="run-bench-"))
    sides = [("current", REPO)]
    compile_tree(REPO)  # both sides run with crawl/'s bytecode written, as installed (trees.compile_tree)
    if args.baseline_rev:
        sides.insert(0, ("baseline", tree_at(args.baseline_rev, work / "baseline-tree", warm=True)))
    runs: dict[str, list[dict]] = {name: [] for name, _ in sides}
    try:
        for rep in range(args.reps):
            for name, tree in (sides if rep % 2 == 0 else sides[::-1]):
                r = run_once(tree, seeds, args.hosts, args.seed, args.rounds, args.max_pages, args.per_host,
                             work / f"{name}-{rep}",
                             args.extra.split() + (args.current_extra.split() if name == "current" else []),
                             args.py_args.split(), tuple(args.wrap.split()), args.warm,
                             current_env if name == "current" else None)
                r["load"] = round(os.getloadavg()[0], 1)
                lines = r.pop("lines")
                if args.show_lines:
                    print("\n".join(f"  {t:7.2f} {ln}" for t, ln in lines if "pages/s, ETA" not in ln))
                runs[name].append(r)
                print(f"{name} rep {rep + 1}: {json.dumps(r)}", flush=True)
                if args.keep and args.show_lines:  # for a timeline of the kept access log against the steps
                    (work / f"{name}-{rep}" / "lines.txt").write_text("".join(f"{t:.3f} {ln}\n" for t, ln in lines))
                if not args.keep:
                    shutil.rmtree(work / f"{name}-{rep}", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    for name in runs:
        print(f"{name}: wall {med(name, 'wall'):.2f} s, CPU {med(name, 'cpu'):.2f} s, first request "
              f"{med(name, 'first'):.2f} s, gaps {med(name, 'gaps'):.2f} s, tail {med(name, 'tail'):.2f} s, "
              f"fixed {med(name, 'fixed'):.2f} s, pages {med(name, 'pages'):.0f} (medians of {len(runs[name])})")
    line = f"RESULT run_wall_s={med('current', 'wall'):.2f} fixed_s={med('current', 'fixed'):.2f}"
    if "baseline" in runs:
        line += (f" baseline={med('baseline', 'wall'):.2f} ratio={med('baseline', 'wall') / med('current', 'wall'):.2f}"
                 f" fixed_baseline={med('baseline', 'fixed'):.2f}")
    print(line)


if __name__ == "__main__":
    main()
