"""``python -m crawl …`` (also installed as ``crawl``): inject, round, run, stats, report, query, lookup, step.

Configuration is one typed object (:mod:`crawl.config`): ``--config FILE`` (YAML) < ``CRAWL_*`` env <
flags. An invalid value exits with status 2 and a message naming the key; bad seeds exit with
status 2 and list every bad seed, and nothing is written. A round refused because another round of
the crawl holds its lease (or whose lease was taken over) exits with status 3 and names the lease's
owner; a Dask cluster that cannot run the round (no workers within ``dask_wait_for_workers_s``)
exits with status 4 and names the scheduler. ``round`` and ``run`` warn about a degraded round
(:mod:`crawl.health`) and, with ``--strict``, exit with status 5. A ``step`` out of order
(:class:`crawl.errors.StepOrder`), a ``--now`` that is not ISO 8601 and SQL DuckDB refuses are bad input
too (status 2); a closed output pipe ends the command with 141, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from crawl.config import (
    SETTING_KEYS,
    ConfigError,
    CrawlConfig,
    CrawlSettings,
    cli_flag_specs,
    describe,
    load_config,
)
from crawl.errors import ClusterError, LeaseHeld, LeaseLost, PartitionFailed, SeedError, StepOrder

EXIT_LEASE = 3
EXIT_CLUSTER = 4
EXIT_DEGRADED = 5
EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command killed by a closed pipe

STEPS = ("inject", "generate", "fetch_parse", "update", "reprioritise", "publish")


# Older spellings kept working next to the flags derived from the settings declaration.
FLAG_ALIASES = {"politeness_delay_s": ("--delay",)}
SEEDS_HELP = f"{CrawlSettings.model_fields['seeds'].title}: {describe('seeds')}"
_DEFAULTS = CrawlConfig()  # the defaults the flags without a declared setting name in their help


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", help="crawl root: a folder or an fsspec URL (default: crawldata)")
    p.add_argument("--config", help="YAML config file (keys as in include/config/crawl.yaml)")
    # The user-facing settings, derived from crawl.config.CrawlSettings (same titles, bounds, defaults):
    # --crawl-id, --max-pages, --politeness-delay-s (--delay), --max-depth, --coverage-share, ...
    for key, spec in cli_flag_specs().items():
        p.add_argument(spec["flag"], *FLAG_ALIASES.get(key, ()), dest=spec["dest"], type=spec["type"],
                       default=spec["default"], help=spec["help"])
    p.add_argument("--resolve", action="append", metavar="PATTERN=IP:PORT",
                   help="send connections for matching hosts to IP:PORT (like curl --connect-to); repeatable")
    p.add_argument("--partitions", type=int,
                   help=f"fetch tasks per round, whole hosts each (default: {_DEFAULTS.partitions})")
    p.add_argument("--dask-address", help="Dask scheduler address (empty: embedded LocalCluster)")
    p.add_argument("--workers", type=int,
                   help=f"workers of the embedded LocalCluster (default: {_DEFAULTS.dask_workers})")
    p.add_argument("--dashboard-port", type=int, dest="dask_dashboard_port",
                   help="port of the embedded cluster's Dask dashboard (default: any free port)")
    p.add_argument("--no-dashboard", action="store_false", dest="dask_dashboard", default=None,
                   help="do not serve the embedded cluster's Dask dashboard")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any config key; repeatable")
    p.add_argument("--config-json", help="a whole config as JSON (used by the Airflow layer)")


def build_config(args: argparse.Namespace) -> CrawlConfig:
    overrides: dict[str, Any] = {}
    if getattr(args, "config_json", None):
        overrides.update(json.loads(args.config_json))
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set: expected KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        overrides[k.strip()] = v
    flags = {key: getattr(args, key) for key in SETTING_KEYS}
    flags.update({
        "root": args.root, "partitions": args.partitions, "dask_address": args.dask_address,
        "dask_workers": args.workers, "resolve": args.resolve, "dask_dashboard": args.dask_dashboard,
        "dask_dashboard_port": args.dask_dashboard_port,
    })
    overrides.update({k: v for k, v in flags.items() if v is not None})
    return load_config(args.config, overrides)


def _now(value: str | None) -> datetime:
    if not value:
        return datetime.now(UTC)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--now: not an ISO 8601 time (e.g. 2026-12-03T15:00:00Z): {value!r}") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _rounds(value: str) -> int:
    """``--rounds``: a count, so never negative (argparse then exits with status 2 before anything runs)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The ``crawl`` command line (settings flags derived from crawl.config.CrawlSettings)."""
    ap = argparse.ArgumentParser(prog="crawl", description="Polite, deduplicated batch recrawl rounds on Dask.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("inject", help="queue seed URLs for the next round")
    _common(p)
    p.add_argument("--seeds", nargs="+", required=True, help=SEEDS_HELP)

    p = sub.add_parser("round", help="run one round (inject seeds first if given)")
    _common(p)
    p.add_argument("--seeds", nargs="*", help=SEEDS_HELP)
    p.add_argument("--now", help="the round's time (ISO 8601; default: now)")
    p.add_argument("--strict", action="store_true",
                   help="exit with status 5 when a round is degraded (crawl.health: hosts unreachable, few answers)")

    p = sub.add_parser("run", help="run N rounds")
    _common(p)
    p.add_argument("--seeds", nargs="*", help=SEEDS_HELP)
    p.add_argument("--rounds", type=_rounds, default=1, help="rounds to run (default: 1)")
    p.add_argument("--now", help="time of the first round (ISO 8601; default: now)")
    p.add_argument("--strict", action="store_true",
                   help="exit with status 5 when a round is degraded (crawl.health: hosts unreachable, few answers)")

    p = sub.add_parser("stats", help="crawl summary (JSON)")
    _common(p)

    p = sub.add_parser("report", help="print the path of the crawl's HTML report of its last round (written if missing)")
    _common(p)
    p.add_argument("--round", type=int, help="(re)write the report of this published round and print its path")

    p = sub.add_parser("query", help="run a named query (include/sql) or SQL over the views pages, crawldb, links, text, images")
    _common(p)
    p.add_argument("sql", nargs="?", default="summary",
                   help="a named query (a file stem of include/sql: summary, status_mix, ...) or SQL over the "
                        "views (default: summary)")
    p.add_argument("--json", action="store_true", help="print the rows as one JSON list")

    p = sub.add_parser("lookup", help="where is the stored copy of URL (WARC file, offset, length)")
    _common(p)
    p.add_argument("url")
    p.add_argument("--body", action="store_true", help="write the stored body to stdout")

    p = sub.add_parser("step", help="run one step of a round (the Airflow DAG calls this)")
    _common(p)
    p.add_argument("name", choices=STEPS)
    p.add_argument("--round", type=int, help="the round the step belongs to (required but for inject and generate)")
    p.add_argument("--now", help="the round's time (ISO 8601; default: now)")
    p.add_argument("--seeds", nargs="*", help=SEEDS_HELP)
    p.add_argument("--run-id", help="the logical round this step belongs to (the DAG passes its run id): "
                                    "steps of one run share the crawl's lease, which outlives each step")
    return ap


def main(argv: list[str] | None = None) -> int:
    from crawl.prestart import start_for_argv
    from crawl.warmup import collector_back_on, no_transparent_hugepages, single_threaded_math, skip_final_gc

    no_transparent_hugepages()  # none in this process (crawl.warmup); the forkserver and workers set their own
    start_for_argv(sys.argv[1:] if argv is None else argv)  # no-op when python -m crawl did it (crawl.prestart)
    skip_final_gc()  # the process's exit need not garbage-collect a heap it is about to return
    single_threaded_math()  # no spinning BLAS/OpenMP threads next to the workers (crawl.warmup)
    try:
        args = build_parser().parse_args(argv)
        cfg = build_config(args)
        return _dispatch(args, cfg)
    except (ConfigError, SeedError, StepOrder) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (LeaseHeld, LeaseLost) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LEASE
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    except PartitionFailed as exc:  # e.g. disk full: the message says whether it was retried
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left early (`crawl query ... | head`): no traceback, as for cat
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush has nowhere to fail
        return EXIT_PIPE
    finally:
        collector_back_on()  # when the command ended before _dispatch did it (python -m crawl turned it off)


def _uses_embedded_cluster(args: argparse.Namespace) -> bool:
    """Whether the command starts a Dask cluster (an embedded one unless ``dask_address`` is set)."""
    return args.cmd in ("run", "round") or (args.cmd == "step" and args.name == "fetch_parse")


def _dispatch(args: argparse.Namespace, cfg: CrawlConfig) -> int:
    from crawl.warmup import collector_back_on

    if not _uses_embedded_cluster(args):
        collector_back_on()
        return _command(args, cfg)
    from crawl.cluster import start_forkserver, stop_forkserver
    from crawl.withhold import pyarrow_without_pandas

    # The embedded cluster's forkserver preloads the workers' modules (~1.5 s of CPU) on the other core
    # while this process imports its own, starts the scheduler, injects and generates: the workers are
    # then forked as round 1 is being submitted instead of before inject (bench/RESULTS.md, "Run start
    # and end"). ``python -m crawl`` has started it already, before its imports (crawl.prestart). Stopped
    # by the cluster's close, or here when the command ends without one (failed before it, nothing due,
    # or a dask_address the early start could not see).
    start_forkserver(cfg)
    try:
        # pyarrow's first pa.array (inject, generate) would import pandas only to ask whether its argument is
        # a pandas object: ~0.25 s of CPU before round 1's submits, beside the forkserver's preload (crawl.withhold)
        pyarrow_without_pandas()
        # the round's modules and distributed, imported with the collector off (python -m crawl), then frozen
        import distributed  # noqa: F401

        from crawl import round as _round  # noqa: F401

        collector_back_on()
        return _run_rounds(cfg, args) if args.cmd == "run" else _command(args, cfg)
    finally:
        stop_forkserver()


def _command(args: argparse.Namespace, cfg: CrawlConfig) -> int:
    from crawl import api, query
    from crawl import round as rnd

    if args.cmd == "inject":
        print(json.dumps(rnd.inject(cfg, args.seeds)))
    elif args.cmd == "round":
        from crawl.progress import make_progress

        if (unreported := rnd.unreported_round(cfg)) is not None:  # killed after its publish, before its report
            rnd.report(cfg, unreported)
        with make_progress() as progress:
            summary = rnd.run_round(cfg, args.seeds, _now(args.now), progress=progress)
        summary["report"] = rnd.report(cfg, summary["round"])["path"]
        print(json.dumps(summary, default=str))
        if summary.get("degraded"):
            return _degraded([summary], args.strict)
    elif args.cmd == "report":
        return _report(cfg, args)
    elif args.cmd == "stats":
        summary = api.crawl_summary(cfg.root, cfg.crawl_id)
        if summary is None:  # JSON null on stdout, as the API's None; a typo in --root or --crawl-id said so
            print(f"note: no crawl {cfg.crawl_id!r} under {cfg.root}", file=sys.stderr)
        print(json.dumps(summary, indent=2, default=str))
    elif args.cmd == "query":
        import duckdb

        crawls = api.list_crawls(cfg.root)
        if cfg.crawl_id not in crawls:  # the views are then empty: say why (--crawl-id defaults to 'demo')
            print(f"note: no crawl {cfg.crawl_id!r} under {cfg.root}; crawls there: {', '.join(crawls) or 'none'} "
                  "(pick one with --crawl-id)", file=sys.stderr)
        try:
            table = query.run(cfg.root, cfg.crawl_id, args.sql)
        except (ValueError, duckdb.Error) as exc:  # an unknown name, or SQL DuckDB refuses
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(table.to_pylist(), default=str) if args.json else query.format_table(table))
    elif args.cmd == "lookup":
        try:
            cap = api.lookup(cfg.root, cfg.crawl_id, args.url)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if cap is None:
            print(f"not captured: {args.url}", file=sys.stderr)
            return 1
        if args.body:
            sys.stdout.buffer.write(api.read_body(cfg.root, cap))
        else:
            print(json.dumps(cap, indent=2, default=str))
    elif args.cmd == "step":
        print(json.dumps(_step(cfg, args), default=str))
    return 0


def _report(cfg: CrawlConfig, args: argparse.Namespace) -> int:
    """Print the report's path; without --round, write the last round's report only when missing."""
    from crawl import round as rnd
    from crawl.report import report_path
    from crawl.store import Store

    store = Store(cfg.root, cfg.crawl_id)
    current = store.current_round()
    if args.round is not None:
        if not 1 <= args.round <= current:
            print(f"error: crawl {cfg.crawl_id!r} has no published round {args.round} "
                  f"(published: {f'1..{current}' if current else 'none'})", file=sys.stderr)
            return 2
        print(rnd.report(cfg, args.round)["path"])
        return 0
    if current == 0:
        print(f"error: crawl {cfg.crawl_id!r} has no published round under {cfg.root}", file=sys.stderr)
        return 1
    rel = report_path(store, current)
    print(rnd.report(cfg, current)["path"] if not store.exists(rel) else store.location(rel))
    return 0


def _step(cfg: CrawlConfig, args: argparse.Namespace) -> dict[str, Any]:
    from crawl import round as rnd
    from crawl.lease import FETCH_PHASE, held

    now = _now(args.now)
    if args.name == "inject":
        rnd.validate_seeds(args.seeds or [], cfg)
    elif args.name != "generate" and args.round is None:
        raise ConfigError(f"step {args.name}: --round is required")
    if args.name not in ("inject", "generate"):
        from crawl.store import Store

        store = Store(cfg.root, cfg.crawl_id)
        if not store.ls(store.state()):  # a typo in --root or --crawl-id: no lease file in a new folder
            raise ConfigError(f"step {args.name}: no crawl {cfg.crawl_id!r} under {cfg.root}")
    # a step of a run keeps the lease for the run's next step; publish (or a step without a run) ends it
    keep = bool(args.run_id) and args.name != "publish"
    phase = FETCH_PHASE if args.name == "fetch_parse" else args.name
    with held(cfg, run=args.run_id, phase=phase, keep=keep) as lease:
        if args.name == "inject":
            return rnd.inject(cfg, args.seeds or [], now, lease=lease)
        if args.name == "generate":
            return rnd.generate(cfg, now, lease=lease)
        if args.name == "fetch_parse":
            out = rnd.fetch_parse(cfg, args.round, now, progress=_progress, lease=lease)
            out.pop("per_partition", None)
            return out
        if args.name == "update":
            return rnd.update(cfg, args.round, now, lease=lease)
        if args.name == "reprioritise":
            return rnd.reprioritise(cfg, args.round, now, lease=lease)
        return rnd.publish(cfg, args.round, lease=lease)


def _degraded(summaries: list[dict[str, Any]], strict: bool) -> int:
    """Warn about degraded rounds; with --strict they make the command fail (status 5)."""
    from crawl.health import describe

    bad = [s for s in summaries if s.get("degraded")]
    for s in bad:
        print(f"{'error' if strict else 'warning'}: round {s['round']} is degraded: {describe(s.get('health', {}))}",
              file=sys.stderr)
    return EXIT_DEGRADED if bad and strict else 0


class _Reports:
    """``crawl run``'s per-round HTML reports, each written in a thread while the run goes on.

    Why: a report (DuckDB queries over the published round, ~0.1-0.2 s) needs nothing of the next round
    and the next round nothing of it, yet it sat between publish and the next round's generate, with no
    request in flight (bench/RESULTS.md, "Between rounds (session 8, helper gaps)"). Round N's report
    now runs beside round N+1's generate and fetch, and the last round's beside the cluster's close.

    At most one is in flight: :meth:`wait` joins it and raises its error, if any, in the caller's thread.
    The run waits for round N's report before round N+1's update (so a report never overlaps the steps
    that write the next CrawlDb version, index and links), and for the last one before it ends: every
    report exists before the process exits, and a failed report still fails the run (then with round
    N+1 fetched, not published: resumable like any interrupted round).
    """

    def __init__(self, cfg: CrawlConfig, progress: Any) -> None:
        self.cfg, self.progress = cfg, progress
        self._thread: Any = None
        self._error: BaseException | None = None

    def start(self, round_no: int) -> None:
        import threading

        self.wait()

        def write() -> None:
            from crawl import round as rnd

            try:
                self.progress(f"round {round_no} report: {rnd.report(self.cfg, round_no)['path']}")
            except BaseException as exc:  # re-raised by wait(), in the run's thread
                self._error = exc

        self._thread = threading.Thread(target=write, name=f"report-{round_no}")
        self._thread.start()

    def wait(self, raise_error: bool = True) -> None:
        """Join the report in flight; raise its error (``raise_error``: not while another one propagates)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        err, self._error = self._error, None
        if err is not None and raise_error:
            raise err


def _run_rounds(cfg: CrawlConfig, args: argparse.Namespace) -> int:
    from datetime import timedelta

    from crawl import round as rnd
    from crawl.cluster import dask_client
    from crawl.lease import held
    from crawl.progress import make_progress

    start = _now(args.now) if args.now else None
    totals = {"fetched": 0, "new_urls": 0, "duplicates": 0, "near_duplicates": 0, "errors": 0, "seconds": 0.0}
    summaries: list[dict[str, Any]] = []
    if args.seeds:
        rnd.validate_seeds(args.seeds, cfg)
    # A live bar per step on a terminal (pages/s, ETA), plain lines otherwise (crawl.progress).
    with held(cfg, phase="run") as lease, make_progress() as progress:
        reports = _Reports(cfg, progress)  # written beside the next round (or the close), under the lease
        if (unreported := rnd.unreported_round(cfg)) is not None:  # killed after its publish, before its report
            reports.start(unreported)
        try:
            with dask_client(cfg, announce=progress, wait_for_embedded_workers=False) as client:
                for i in range(args.rounds):
                    now = (start + timedelta(seconds=i * cfg.round_duration_s)) if start else datetime.now(UTC)
                    summary = rnd.run_round(cfg, args.seeds if i == 0 else None, now, progress=progress,
                                            client=client, lease=lease, before_update=reports.wait)
                    reports.start(summary["round"])
                    summaries.append(summary)
                    fp, up = summary["fetch_parse"], summary["update"]
                    totals["fetched"] += fp.get("fetched", 0)
                    totals["seconds"] += fp.get("seconds", 0.0)
                    totals["new_urls"] += up.get("new_urls", 0)
                    totals["duplicates"] += up.get("duplicates", 0)
                    totals["near_duplicates"] += up.get("near_duplicates", 0)
                    st = up.get("status", {})
                    totals["errors"] += sum(st.get(s, 0) for s in ("retry", "http_error", "gone"))
        except BaseException:
            reports.wait(raise_error=False)  # the run's own error wins; the report still ends before exit
            raise
        reports.wait()
    rate = totals["fetched"] / totals["seconds"] if totals["seconds"] else 0.0
    print(f"summary: {args.rounds} round(s), {totals['fetched']} fetched, {totals['new_urls']} new URLs, "
          f"{totals['duplicates']} duplicates, {totals['near_duplicates']} near-duplicates, "
          f"{totals['errors']} errors, {rate:.1f} pages/s (fetch+parse)")
    return _degraded(summaries, args.strict)


if __name__ == "__main__":
    raise SystemExit(main())
