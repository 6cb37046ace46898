"""The ``recrawl`` DAG: one DAG run is one crawl round.

inject → generate → fetch_parse → update → reprioritise → report (publish + reports/crawl=ID/round=NNNNN.html)

Each task is a thin call into the engine (``crawl.round``); the engine steps are idempotent functions
of (config, round, now), so Airflow's retries and manual clears are always safe. Tasks hand each other
only small dicts (round number, counts) through XCom: pages, fetch lists and WARC data stay in the
crawl root.

Time. The round's logical time is the run's ``data_interval_end``: a scheduled run (or a backfill)
replays the round at its own time. Manual runs in Airflow 3 have no logical date and no data interval,
so they use the run's ``run_after`` (set once when the run is created), never the wall clock, so a
retried task sees the same ``now`` as its first try.

Why fetch_parse runs in a subprocess. fetch_parse is the one step that runs Dask work. Under the real
LocalExecutor, a Dask ``LocalCluster`` with worker processes started from inside the task spawns
nannies that re-run the ``airflow`` entry point and die ("Nanny failed to start"); functions from a
DAG file cannot be unpickled on workers either. So the task starts ``python -m crawl step fetch_parse``
as a plain Python child process: the embedded cluster's workers then only ever import ``crawl``, never
Airflow, and the same command works with an external scheduler (``dask_address``). The other steps are
cheap single-process work (DuckDB/Arrow) and run in the task itself.

Configuration. The Params are derived from ``crawl.config.CrawlSettings`` (the one declaration of
the settings a user gives a crawl; each Param is the config key of the same name). Precedence is the
engine's: defaults < ``CRAWL_*`` env < the run's params. Params left empty (null / "") mean "not
given", so ``CRAWL_MAX_PAGES`` or ``CRAWL_ALLOWED_HOSTS`` set on the deployment still apply. A run's
``dask_address`` (not a crawl setting: where to run) must be ``CRAWL_DASK_ADDRESS`` or in the operator's
allowlist ``RECRAWL_DASK_ADDRESSES`` (``crawl.cluster.check_run_dask_address``); any other value fails
the run at once. The crawl root is ``CRAWL_ROOT``, default ``$AIRFLOW_HOME/crawldata``.

Schedule. ``RECRAWL_SCHEDULE`` (cron or preset, default ``@hourly``; ``none`` = manual runs only).
A scheduled run has no conf: it runs a round of the default crawl (``RECRAWL_CRAWL_ID``, default
``demo``), injecting the default seeds (``RECRAWL_SEEDS_FILE``, default ``include/seeds/default.txt``)
only if that crawl does not exist yet. A run whose conf gives ``seeds`` always injects them (the
engine merges seeds into an existing crawl). ``max_active_runs=1``: two rounds never overlap. The seeds
Param's schema (``crawl.config.seed_pattern``) applies to that file's seeds too: one of the wrong shape
(no scheme, a space inside) makes the DAG fail to load, and Airflow's "Dag Import Errors" names the file,
the line and the seed (:func:`default_seeds`; Airflow 3.3 checks a scheduled DAG's Param defaults on load).

One round at a time. The engine's lease (``crawl.lease``) spans the DAG run: every step takes it
with the run's id as its *run* (``airflow:recrawl:<run_id>``), keeps it for the next step, and the
publish in ``report`` releases it. A CLI round or another DAG's round of the same crawl is refused
while the lease is live; a retried step takes a new fencing token, which stops a previous attempt's
fetchers still running on the cluster. A run that dies leaves the lease to expire
(``lease_expiry_s``).

Health. A degraded round (``crawl.health``: most hosts unreachable, or few planned URLs answered) is
published with ``degraded`` in its manifest; the ``report`` task then fails (``degraded_fails_dag``,
default) or logs a warning.

Retries. Every task retries (``RECRAWL_TASK_RETRIES``, default 3) with exponential backoff from 30 s,
capped at 15 min; bad input (config values, seeds, a step out of order such as an update cleared after
its round was published: ``crawl.errors.StepOrder``) fails at once instead, since retrying cannot help.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from crawl.config import SETTING_KEYS, param_specs

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
DAG_ID = "recrawl"


def crawl_root() -> str:
    """Where crawls live: ``CRAWL_ROOT``, else ``$AIRFLOW_HOME/crawldata``.

    Not the engine's relative default ("crawldata"): task processes do not share a working directory
    with the API server, and the plugin must read what the DAG wrote. plugins/crawl_api.py has the
    same rule.
    """
    root = os.environ.get("CRAWL_ROOT")
    if root:
        return root
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return str(Path(home) / "crawldata")


def default_seeds(schemes: tuple[str, ...] | None = None) -> list[str]:
    """Seeds for a new crawl started by the schedule: one URL a line, '#' comments.

    A seed of the wrong shape for the seeds Param's pattern (``crawl.config.seed_pattern``) is a
    :class:`ValueError` naming the file, the line and the seed: Airflow checks a scheduled DAG's Param
    defaults when it loads the file, so the DAG shows as broken with this message instead of with
    Airflow's generic one and the pattern."""
    from crawl.config import seed_pattern

    path = Path(os.environ.get("RECRAWL_SEEDS_FILE") or REPO / "include" / "seeds" / "default.txt")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return ["https://example.com/"]
    schemes = schemes or seed_schemes()
    shape = re.compile(seed_pattern(schemes))
    seeds = []
    for n, line in enumerate(lines, start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not shape.search(s):
            raise ValueError(f"RECRAWL_SEEDS_FILE {path}, line {n}: {s[:100]!r} is not a seed: one URL a line, "
                             f"starting with {' or '.join(f'{x}:' for x in schemes)} and then its host, no spaces "
                             "inside ('#' starts a comment)")
        seeds.append(s)
    return seeds or ["https://example.com/"]


def seed_schemes() -> tuple[str, ...]:
    """The deployment's ``allowed_schemes`` (the form's seed pattern admits these); every scheme the
    engine knows if the config does not load here (the run's tasks then report why)."""
    from crawl.config import KNOWN_SCHEMES, ConfigError, load_config

    try:
        return tuple(load_config(overrides={"root": crawl_root()}).allowed_schemes)
    except ConfigError:
        return KNOWN_SCHEMES


SEED_SCHEMES = seed_schemes()  # read once per DAG parse: the form's pattern and the seeds file's check


def schedule_from_env() -> str | None:
    value = os.environ.get("RECRAWL_SCHEDULE", "@hourly").strip()
    return None if value.lower() in {"", "none", "manual"} else value


def config_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """Map run params to load_config overrides (same names); None and "" mean "not given"."""
    overrides: dict[str, Any] = {"root": crawl_root()}
    for key in (*SETTING_KEYS, "dask_address"):
        value = params.get(key)
        if value is None or value == "":
            continue
        overrides[key] = value
    if "dask_address" in overrides:  # only a scheduler the deployment allows (ConfigError otherwise)
        from crawl.cluster import check_run_dask_address

        overrides["dask_address"] = check_run_dask_address(overrides["dask_address"])
    return overrides


def round_time(context: Any) -> datetime:
    """The round's logical time: data_interval_end, else the manual run's run_after."""
    for candidate in (context.get("data_interval_end"), getattr(context.get("dag_run"), "run_after", None),
                      context.get("logical_date")):
        if candidate is not None:
            return candidate.astimezone(UTC)
    return datetime.now(UTC)  # only outside a real run (e.g. a bare function call)


def _cfg_and_now() -> tuple[Any, datetime, dict[str, Any]]:
    from crawl.config import ConfigError, load_config

    context = get_current_context()
    params = dict(context["params"])
    try:
        cfg = load_config(overrides=config_overrides(params))
    except ConfigError as exc:  # bad input does not get better with retries
        raise AirflowFailException(f"invalid crawl config: {exc}") from exc
    return cfg, round_time(context), context


def lease_run(context: Any) -> str:
    """The lease's run id for this DAG run: every step of the run shares the crawl's lease."""
    run_id = context.get("run_id") or getattr(context.get("dag_run"), "run_id", None) or "manual"
    return f"airflow:{DAG_ID}:{run_id}"


def leased_step(step: str, fn: Any, keep: bool = True) -> Any:
    """Run ``fn(lease)`` under the run's lease (kept for the next step unless ``keep`` is False), in this
    task's process without transparent huge pages, as ``python -m crawl`` runs its steps
    (:func:`crawl.warmup.no_transparent_hugepages`: update and reprioritise are Arrow-heavy)."""
    from crawl.errors import LeaseHeld, StepOrder
    from crawl.lease import held
    from crawl.warmup import no_transparent_hugepages

    no_transparent_hugepages()
    cfg, _, context = _cfg_and_now()
    try:
        with held(cfg, run=lease_run(context), phase=step, keep=keep) as lease:
            return fn(lease)
    except LeaseHeld as exc:  # another round runs: a retry later may find the crawl free
        raise RuntimeError(f"step {step}: {exc}") from exc
    except StepOrder as exc:  # out of order (e.g. a cleared step of a published round): no retry fixes it
        raise AirflowFailException(f"step {step}: {exc}") from exc


def run_step_subprocess(step: str, cfg: Any, round_no: int, now: datetime, run_id: str | None = None,
                        limit_s: float | None = None) -> dict[str, Any]:
    """Run one engine step as ``python -m crawl step ...`` and return the JSON dict it prints last.

    The child's stderr goes to this task's log line by line as it comes; stdout's last line is the
    step's result. Exit status 2 is bad input (``crawl.cli``: a step out of order, an invalid config):
    the task fails at once with the child's ``error:`` line, since a retry cannot fix it. Past ``limit_s``
    (default twice ``round_duration_s`` plus 10 min) the child is killed (its embedded Dask workers end
    with it) and the task fails saying so.
    """
    cmd = [
        sys.executable, "-m", "crawl", "step", step,
        "--root", cfg.root, "--crawl-id", cfg.crawl_id, "--round", str(round_no),
        "--now", now.isoformat(), "--config-json", cfg.to_json(),
    ] + (["--run-id", run_id] if run_id else [])
    log.info("running %s", " ".join(cmd[:10]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO))
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    limit = 2 * cfg.round_duration_s + 600 if limit_s is None else limit_s
    timed_out = threading.Event()
    timer = threading.Timer(limit, lambda: (timed_out.set(), proc.kill()))  # its embedded workers go with it
    timer.start()
    said = ""
    for line in proc.stderr:  # to the task log as it comes; the bad-input line kept for the failure
        sys.stderr.write(line)
        if line.startswith("error: "):
            said = line[len("error: "):].strip()
    proc.wait()
    timer.cancel()
    reader.join()
    lines = [line for line in out if line.strip()]
    if timed_out.is_set():
        raise RuntimeError(f"crawl step {step} ran past {limit:g} s and was killed: {' | '.join(lines[-5:])}")
    if proc.returncode == 2:
        raise AirflowFailException(f"crawl step {step}: {said or 'bad input (exit 2)'}")
    if proc.returncode != 0:
        raise RuntimeError(f"crawl step {step} exited {proc.returncode}: {' | '.join(lines[-5:])}")
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise RuntimeError(f"crawl step {step} printed no JSON result: {lines[-3:]}") from exc


@dag(
    dag_id=DAG_ID,
    schedule=schedule_from_env(),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["crawl"],
    default_args={
        "retries": int(os.environ.get("RECRAWL_TASK_RETRIES", "3")),
        "retry_delay": timedelta(seconds=30),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(minutes=15),
    },
    # The crawl settings are derived from their one declaration (crawl.config.CrawlSettings): same
    # titles, descriptions, bounds; optional ones nullable, so the form submits with only the seeds.
    # Seeds carry the engine's seed pattern: Airflow refuses a bad one on trigger, before a run exists.
    params={
        **{name: Param(**spec) for name, spec in param_specs(
            seeds_default=default_seeds(SEED_SCHEMES), crawl_id_default=os.environ.get("RECRAWL_CRAWL_ID"),
            seed_schemes=SEED_SCHEMES).items()},
        "dask_address": Param(None, type=["null", "string"], title="Dask scheduler address",
                              description="empty = CRAWL_DASK_ADDRESS or an embedded LocalCluster; otherwise one "
                                          "of the addresses the operator allows (RECRAWL_DASK_ADDRESSES)"),
    },
)
def recrawl() -> None:
    @task
    def inject() -> dict[str, Any]:
        """Inject seeds when the run gives them or the crawl is new; otherwise a no-op."""
        from crawl import api
        from crawl import round as rnd
        from crawl.errors import SeedError

        cfg, now, context = _cfg_and_now()
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        is_new = api.crawl_summary(cfg.root, cfg.crawl_id) is None
        if "seeds" not in conf and not is_new:
            return {"crawl_id": cfg.crawl_id, "injected": 0, "skipped": "existing crawl, no seeds given"}
        seeds = list(context["params"]["seeds"])
        try:
            rnd.validate_seeds(seeds, cfg)  # before the lease: bad input writes nothing
            result = leased_step("inject", lambda lease: rnd.inject(cfg, seeds, now, lease=lease))
        except SeedError as exc:  # names each bad seed; nothing was written; retrying cannot help
            raise AirflowFailException(str(exc)) from exc
        return {"crawl_id": cfg.crawl_id, "new_crawl": is_new, **_small(result)}

    @task
    def generate(_injected: dict[str, Any]) -> dict[str, Any]:
        from crawl import round as rnd

        cfg, now, _ = _cfg_and_now()
        result = leased_step("generate", lambda lease: rnd.generate(cfg, now, lease=lease))
        return {"round": int(result["round"]), "urls": int(result.get("urls", 0))}

    @task
    def fetch_parse(gen: dict[str, Any]) -> dict[str, Any]:
        cfg, now, context = _cfg_and_now()
        result = run_step_subprocess("fetch_parse", cfg, gen["round"], now, lease_run(context))
        return {"round": gen["round"], **_small(result)}

    @task
    def update(fetched: dict[str, Any]) -> dict[str, Any]:
        from crawl import round as rnd

        cfg, now, _ = _cfg_and_now()
        return {"round": fetched["round"],
                **_small(leased_step("update", lambda lease: rnd.update(cfg, fetched["round"], now, lease=lease)))}

    @task
    def reprioritise(updated: dict[str, Any]) -> dict[str, Any]:
        from crawl import round as rnd

        cfg, now, _ = _cfg_and_now()
        return {"round": updated["round"], **_small(leased_step(
            "reprioritise", lambda lease: rnd.reprioritise(cfg, updated["round"], now, lease=lease)))}

    @task
    def report(prioritised: dict[str, Any]) -> dict[str, Any]:
        """Publish the round (the engine's atomic commit), write its HTML report, return its summary stats."""
        from crawl import round as rnd

        cfg, _, context = _cfg_and_now()
        stats = leased_step("publish", lambda lease: rnd.publish(cfg, prioritised["round"], lease=lease),
                            keep=False)
        log.info("crawl %s round %s published: %s", cfg.crawl_id, prioritised["round"], stats)
        run_id = context.get("run_id") or getattr(context.get("dag_run"), "run_id", None)
        written = rnd.report(cfg, prioritised["round"], origin={"dag_id": DAG_ID, "run_id": run_id})
        log.info("report: %s", written["path"])
        if stats.get("degraded"):  # crawl.health: published, but its hosts were mostly unreachable
            from crawl.health import describe

            msg = f"round {prioritised['round']} is degraded: {describe(stats.get('health', {}))}"
            if cfg.degraded_fails_dag:
                raise AirflowFailException(msg)  # published already: retrying cannot change it
            log.warning(msg)
        return {"crawl_id": cfg.crawl_id, "round": prioritised["round"], "report": written["path"], **_small(stats)}

    report(reprioritise(update(fetch_parse(generate(inject())))))


def _small(result: Any, limit: int = 20) -> dict[str, Any]:
    """Keep XCom small: scalars, and short lists only (never page data)."""
    if not isinstance(result, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, (str, int, float, bool)) or value is None:
            out[key] = value
        elif isinstance(value, (list, tuple)) and len(value) <= limit:
            out[key] = list(value)
        elif isinstance(value, dict) and len(value) <= limit:
            out[key] = _small(value, limit)
    return json.loads(json.dumps(out, default=str))


recrawl()
