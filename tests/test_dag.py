"""The ``recrawl`` DAG: it imports cleanly, its trigger-form Params refuse bad input exactly as the API
server does, and its structure keeps the promises the DAG docstring makes (order, retries, one run at
a time, the round's time)."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow_harness import REPO, configure_env

configure_env()  # before anything imports airflow

from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.sdk.definitions.param import ParamValidationError  # noqa: E402
from airflow.serialization.serialized_objects import DagSerialization  # noqa: E402

DAG_FOLDER = REPO / "dags"
TASK_ORDER = ["inject", "generate", "fetch_parse", "update", "reprioritise", "report"]


def _bag() -> DagBag:
    return DagBag(dag_folder=str(DAG_FOLDER))


@pytest.fixture(scope="module")
def bag() -> DagBag:
    return _bag()


@pytest.fixture(scope="module")
def dag(bag: DagBag):
    return bag.dags["recrawl"]


@pytest.fixture(scope="module")
def served_params(dag):
    """The params as the API server holds them (serialized DAG): what the trigger form and REST validate."""
    return DagSerialization.from_dict(DagSerialization.to_dict(dag)).params


@pytest.fixture(scope="module")
def module():
    """The DAG file as a module, for its plain helper functions."""
    spec = importlib.util.spec_from_file_location("recrawl_dag_under_test", DAG_FOLDER / "recrawl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dagbag_imports_without_errors(bag: DagBag) -> None:
    assert bag.import_errors == {}
    assert list(bag.dags) == ["recrawl"]


def test_tasks_run_in_round_order_with_backoff_retries(dag) -> None:
    assert sorted(dag.task_ids) == sorted(TASK_ORDER)
    for upstream, downstream in zip(TASK_ORDER, TASK_ORDER[1:], strict=False):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    for task in dag.tasks:
        assert task.retries >= 2, task.task_id
        assert task.retry_exponential_backoff >= 2, task.task_id
        assert task.max_retry_delay is not None, task.task_id
    assert dag.max_active_runs == 1
    assert dag.catchup is False


def test_schedule_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECRAWL_SCHEDULE", raising=False)
    hourly = _bag().dags["recrawl"]
    assert hourly.schedule == "@hourly" and hourly.timetable.expression == "0 * * * *"
    monkeypatch.setenv("RECRAWL_SCHEDULE", "*/20 * * * *")
    assert _bag().dags["recrawl"].timetable.expression == "*/20 * * * *"
    monkeypatch.setenv("RECRAWL_SCHEDULE", "none")
    manual = _bag().dags["recrawl"]
    assert manual.schedule is None and not manual.timetable.can_be_scheduled


def test_params_accept_a_typical_trigger(served_params) -> None:
    resolved = served_params.deep_merge({
        "crawl_id": "news-1", "seeds": ["http://a.example/", "https://b.example/x"], "max_pages": 50,
        "max_pages_per_host_per_round": 10, "politeness_delay_s": 0.5, "max_depth": 3, "coverage_share": 0.25,
        "allowed_hosts": r"\.example$",
    }).validate()
    assert resolved["seeds"] == ["http://a.example/", "https://b.example/x"]
    assert resolved["coverage_share"] == 0.25
    # Scheduled runs have no conf: the defaults must validate on their own.
    defaults = served_params.deep_merge(None).validate()
    assert defaults["seeds"] and defaults["max_pages"] is None and defaults["allowed_hosts"] is None


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"crawl_id": "Bad Id"}, "crawl_id"),
        ({"crawl_id": "-starts-with-dash"}, "crawl_id"),
        ({"crawl_id": "x" * 64}, "crawl_id"),
        ({"seeds": []}, "non-empty"),
        ({"seeds": "http://a.example/"}, "seeds"),
        ({"seeds": [""]}, "seeds"),
        # the engine's seed shape (crawl.config.seed_pattern): refused on trigger, before a run exists
        ({"seeds": ["http://a.example/", "example.org"]}, "'example.org' does not match"),
        ({"seeds": ["http://a.example/ http://b.example/"]}, "does not match"),
        ({"seeds": ["htp://a.example/"]}, "does not match"),
        ({"seeds": ["ftp://nope.example/"]}, "does not match"),  # ftp only when the deployment allows it
        ({"coverage_share": 1.5}, "maximum of 1"),
        ({"coverage_share": -0.1}, "coverage_share"),
        ({"max_pages": 0}, "max_pages"),
        ({"max_pages": 2.5}, "max_pages"),
        ({"max_depth": -1}, "max_depth"),
        ({"politeness_delay_s": "slow"}, "politeness_delay_s"),
    ],
)
def test_params_refuse_bad_values(served_params, conf: dict, message: str) -> None:
    with pytest.raises(ParamValidationError, match=message):
        served_params.deep_merge(conf).validate()


def test_config_overrides_treat_empty_as_not_given(module, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from crawl.config import load_config

    monkeypatch.setenv("CRAWL_ROOT", str(tmp_path))
    monkeypatch.setenv("CRAWL_DASK_ADDRESS", "tcp://10.0.0.1:8786")
    params = {"crawl_id": "c1", "seeds": ["http://a/"], "max_pages": None, "max_pages_per_host_per_round": 7,
              "politeness_delay_s": 0.0, "max_depth": None, "coverage_share": 0.5, "allowed_hosts": ""}
    overrides = module.config_overrides(params)
    assert overrides == {"root": str(tmp_path), "crawl_id": "c1", "max_pages_per_host_per_round": 7,
                         "politeness_delay_s": 0.0, "coverage_share": 0.5}
    cfg = load_config(overrides=overrides)
    assert cfg.dask_address == "tcp://10.0.0.1:8786"  # the deployment's env still applies
    assert cfg.max_pages == load_config(overrides={"crawl_id": "c1"}).max_pages
    monkeypatch.delenv("CRAWL_ROOT")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    assert module.crawl_root() == str(tmp_path / "home" / "crawldata")


def test_run_dask_address_only_from_the_deployment(module, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A run may not point the fetch step at a scheduler of its choosing (the client unpickles its replies)."""
    from crawl.config import ConfigError

    monkeypatch.setenv("CRAWL_ROOT", str(tmp_path))
    monkeypatch.setenv("CRAWL_DASK_ADDRESS", "tcp://dask-scheduler:8786")
    monkeypatch.delenv("RECRAWL_DASK_ADDRESSES", raising=False)
    with pytest.raises(ConfigError, match=r"^dask_address: 'tcp://evil\.example:8786' is not allowed for a run; "
                                          r"allowed: 'tcp://dask-scheduler:8786'"):
        module.config_overrides({"dask_address": "tcp://evil.example:8786"})
    assert module.config_overrides({"dask_address": "tcp://dask-scheduler:8786"})["dask_address"] == \
        "tcp://dask-scheduler:8786"
    assert "dask_address" not in module.config_overrides({"dask_address": ""})  # not given: the env applies
    monkeypatch.setenv("RECRAWL_DASK_ADDRESSES", "tcp://big:8786, tcp://small:8786")
    assert module.config_overrides({"dask_address": "tcp://small:8786"})["dask_address"] == "tcp://small:8786"
    monkeypatch.delenv("CRAWL_DASK_ADDRESS")
    monkeypatch.delenv("RECRAWL_DASK_ADDRESSES")
    with pytest.raises(ConfigError, match="allowed: none"):  # no deployment cluster: only the embedded one
        module.config_overrides({"dask_address": "tcp://small:8786"})


def test_round_time_is_interval_end_else_run_after(module) -> None:
    end = datetime(2026, 3, 1, 12, tzinfo=UTC)
    after = datetime(2026, 3, 2, 8, 30, tzinfo=UTC)
    run = SimpleNamespace(run_after=after)
    assert module.round_time({"data_interval_end": end, "dag_run": run, "logical_date": end}) == end
    # a manual Airflow 3 run: no logical date, no data interval
    assert module.round_time({"dag_run": run}) == after


def test_default_seeds_file(module, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# comment\n\nhttp://one.example/\n  https://two.example/a  \n")
    monkeypatch.setenv("RECRAWL_SEEDS_FILE", str(seeds))
    assert module.default_seeds() == ["http://one.example/", "https://two.example/a"]
    monkeypatch.delenv("RECRAWL_SEEDS_FILE")
    shipped = module.default_seeds()
    assert shipped and all(s.startswith(("http://", "https://")) for s in shipped)


def test_a_bad_default_seeds_file_breaks_the_dag_naming_the_seed(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A scheduled DAG's Param defaults are checked when Airflow loads the file, so a seeds file line of the
    wrong shape for the form's pattern makes the DAG an import error: Airflow's DagBag shows the file, the
    line and the seed, not its generic "default values are not valid" with the pattern."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# ours\nhttp://one.example/\nexample.org\n")
    monkeypatch.setenv("RECRAWL_SEEDS_FILE", str(seeds))
    errors = _bag().import_errors
    assert len(errors) == 1, errors
    message = next(iter(errors.values())).strip().splitlines()[-1]
    assert message.startswith(f"ValueError: RECRAWL_SEEDS_FILE {seeds}, line 3: 'example.org' is not a seed"), message


# ---- full rounds through the DAG (dag.test: real tasks, real engine, a real site on loopback) ------

@pytest.fixture(scope="module")
def site(simweb):
    """The simulated web (tests/conftest.py): what every crawl test runs against."""
    return simweb


@pytest.fixture(scope="module")
def dag_env(site, tmp_path_factory):
    """A migrated metadata DB, the crawl root and resolve rule in env (the subprocess inherits them)."""
    import os

    from airflow_harness import init_db

    init_db()
    root = tmp_path_factory.mktemp("crawlroot")
    saved = {k: os.environ.get(k) for k in ("CRAWL_ROOT", "CRAWL_RESOLVE", "RECRAWL_TASK_RETRIES")}
    # No retries here: a failing task fails the run at once instead of after minutes of backoff.
    os.environ.update({"CRAWL_ROOT": str(root), "CRAWL_RESOLVE": site.resolve_rule, "RECRAWL_TASK_RETRIES": "0"})
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _index(root: Path, crawl_id: str):
    import duckdb

    # page captures of every subset but robots.txt and sitemaps (errors land in crawldiagnostics)
    glob = f"{root}/index/crawl={crawl_id}/*/*.parquet"
    return duckdb.sql(
        f"SELECT url, fetch_status, fetch_time, warc_filename, warc_record_offset, warc_record_length, round "
        f"FROM read_parquet('{glob}', hive_partitioning=true) WHERE subset NOT IN ('robotstxt', 'sitemap') "
        f"ORDER BY round, url").to_arrow_table().to_pylist()


@pytest.fixture(scope="module")
def run_dag(dag_env):
    """The DAG parsed with the test env (no retries), for dag.test()."""
    return _bag().dags["recrawl"]


def test_two_rounds_through_the_dag(run_dag, dag_env: Path, site) -> None:
    import gzip

    t1 = datetime(2026, 5, 1, 10, tzinfo=UTC)
    conf = {"crawl_id": "dagtest", "seeds": site.seed_urls(2), "politeness_delay_s": 0.0, "max_pages": 50}
    run1 = run_dag.test(run_conf=conf, logical_date=t1)
    assert run1.state == "success", run1.state
    rows = _index(dag_env, "dagtest")
    assert {r["url"] for r in rows if r["round"] == 1} == set(site.seed_urls(2))
    for r in rows:
        assert r["fetch_status"] == 200
        # The stored WARC record is where the index says, and it is this URL's response.
        with open(dag_env / r["warc_filename"], "rb") as fh:
            fh.seek(r["warc_record_offset"])
            record = gzip.decompress(fh.read(r["warc_record_length"]))
        assert record.startswith(b"WARC/1.1") and f"WARC-Target-URI: {r['url']}".encode() in record
    # The round's time is the run's data-interval end, not the wall clock.
    assert {r["fetch_time"].astimezone(UTC).date() for r in rows} == {t1.date()}

    # Round 2, a week later, no seeds in conf: nothing injected, discovered links fetched, seeds recrawled.
    t2 = t1 + timedelta(days=7)
    run2 = run_dag.test(run_conf={"crawl_id": "dagtest", "politeness_delay_s": 0.0, "max_pages": 50}, logical_date=t2)
    assert run2.state == "success", run2.state
    rows = _index(dag_env, "dagtest")
    round2 = [r for r in rows if r["round"] == 2]
    assert len(round2) > 2 and all(r["fetch_time"].astimezone(UTC).date() == t2.date() for r in round2)
    assert {r["url"] for r in round2} - set(site.seed_urls(2)), "round 2 fetched no discovered URL"
    assert set(site.seed_urls(2)) <= {r["url"] for r in round2}, "seeds fetched a week ago not recrawled"
    from crawl import api

    summary = api.crawl_summary(str(dag_env), "dagtest")
    assert summary["last_round"] == 2 and summary["fetched"] >= len({r["url"] for r in rows})


def test_bad_seeds_fail_inject_and_write_nothing(run_dag, dag_env: Path) -> None:
    """A seed of the right shape that the engine still refuses (a port out of range): the form's pattern
    lets it through, inject fails naming it and writes nothing."""
    run = run_dag.test(run_conf={"crawl_id": "badseeds", "seeds": ["http://nope.example:99999/",
                                                                   "http://fine.alpha.test/"]})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["inject"] == "failed" and states["generate"] in ("upstream_failed", None)
    assert not list(dag_env.glob("*/crawl=badseeds*")), "a failed inject must write nothing"


def test_a_run_naming_its_own_dask_scheduler_fails_without_contacting_it(run_dag, dag_env: Path, site) -> None:
    """A canary listener stands in for the run's scheduler: the run fails at inject and nobody connects."""
    import socket

    canary = socket.socket()
    canary.bind(("127.0.0.1", 0))
    canary.listen()
    canary.setblocking(False)
    try:
        run = run_dag.test(run_conf={"crawl_id": "owndask", "seeds": site.seed_urls(1),
                                     "dask_address": f"tcp://127.0.0.1:{canary.getsockname()[1]}"})
        assert run.state == "failed"
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        assert states["inject"] == "failed" and states["fetch_parse"] in ("upstream_failed", None)
        with pytest.raises(BlockingIOError):
            canary.accept()
    finally:
        canary.close()
    assert not list(dag_env.glob("*/crawl=owndask*")), "a refused run must write nothing"


def test_a_misspelt_crawl_variable_fails_the_run_at_inject_naming_the_key(dag_env: Path, site) -> None:
    """As any invalid config: the inject task fails at once (AirflowFailException: no retry can fix it), its
    log naming the variable and the key it probably meant, and nothing is written. ``airflow dags test`` as a
    process, so the task's log is its output (this process's task logging may be bound to another test's)."""
    import json
    import os
    import re
    import subprocess
    import sys

    conf = json.dumps({"crawl_id": "envtypo", "seeds": site.seed_urls(1)})
    out = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "recrawl", "-c", conf],
                         env={**os.environ, "CRAWL_MAX_PAGE_PER_HOST": "5"}, capture_output=True, text=True,
                         timeout=300)
    log = out.stdout + out.stderr
    assert ("AirflowFailException: invalid crawl config: CRAWL_MAX_PAGE_PER_HOST (environment): no such config "
            "key; did you mean CRAWL_MAX_PAGES_PER_HOST?") in log, log[-3000:]
    assert "starting task_id=generate" not in log and re.search(r"DagRun Finished: .*state=failed", log), log[-3000:]
    assert not list(dag_env.glob("*/crawl=envtypo*")), "a refused run must write nothing"


def test_a_step_out_of_order_fails_at_once_instead_of_being_retried(dag_env: Path, site, tmp_path: Path) -> None:
    """With the DAG's retries on (3, backoff from 30 s), a step out of order (crawl.errors.StepOrder) fails
    on its first try with the engine's message: ``update`` run again for a run whose round is published
    (as after an operator clears it), and ``fetch_parse`` (the step run as a child process) for a round
    the crawl root never generated. Real Airflow throughout: ``airflow dags test`` makes the run, ``airflow
    tasks test`` runs the task in it and logs the state the task instance got. Before, StepOrder was an
    ordinary exception: ``up_for_retry``, three more tries minutes apart that could not help."""
    import json
    import os
    import re
    import subprocess
    import sys

    airflow = [sys.executable, "-m", "airflow"]
    env = {**os.environ, "RECRAWL_TASK_RETRIES": "3"}
    conf = json.dumps({"crawl_id": "steporder", "seeds": site.seed_urls(1), "politeness_delay_s": 0.0,
                       "max_pages": 5})
    made = subprocess.run([*airflow, "dags", "test", "recrawl", "-c", conf], env=env, capture_output=True,
                          text=True, timeout=300)
    finished = re.search(r"DagRun Finished: .*run_id=(\S+), .*state=success", made.stdout + made.stderr)
    assert finished, (made.stdout + made.stderr)[-3000:]
    run_id = finished.group(1)

    def task_fails_at_once(task_id: str, says: str, **extra_env: str) -> None:
        out = subprocess.run([*airflow, "tasks", "test", "recrawl", task_id, run_id], env={**env, **extra_env},
                             capture_output=True, text=True, timeout=300)
        log = out.stdout + out.stderr
        states = re.findall(r"Task instance state updated .*new_state=(\w+)", log)
        assert states == ["failed"], (states, log[-3000:])
        assert f"AirflowFailException: {says}" in log, log[-3000:]

    task_fails_at_once("update", "step update: round 1 is already published")
    other = tmp_path / "other-root"  # the crawl there has its seeds injected, no round generated
    injected = subprocess.run([sys.executable, "-m", "crawl", "inject", "--root", str(other), "--crawl-id",
                               "steporder", "--seeds", *site.seed_urls(1)], capture_output=True, text=True, timeout=120)
    assert injected.returncode == 0, injected.stderr[-2000:]
    task_fails_at_once("fetch_parse", "crawl step fetch_parse: round 1: generate has not run", CRAWL_ROOT=str(other))


def test_a_step_past_its_time_limit_is_killed_and_says_so(module, site, tmp_path: Path) -> None:
    """``fetch_parse`` runs as a child process that starts Dask workers. Past its time limit the task
    kills the child and fails saying so (before, the message was "exited -9", which reads like a crash
    of the engine); judged by the simulated web's access log, nothing asks the host after the task gave
    up (the embedded workers end with the child) and the task returns at once."""
    import subprocess
    import sys
    import time

    from crawl.config import load_config

    root = tmp_path / "root"
    home = site.seed_urls(1)[0]
    host = home.split("/")[2]
    seeds = [home] + [f"{home}?page={i}" for i in range(40)]  # one host at 1 s apart: ~40 s of fetching
    cfg = load_config(overrides={"root": str(root), "crawl_id": "slowstep", "resolve": (site.resolve_rule,),
                                 "politeness_delay_s": 1.0, "max_crawl_delay_s": 1.0, "partitions": 1,
                                 "sitemaps": False}, use_env=False)
    common = ["--root", str(root), "--crawl-id", "slowstep", "--config-json", cfg.to_json()]
    for step in (["inject", "--seeds", *seeds], ["generate"]):
        out = subprocess.run([sys.executable, "-m", "crawl", "step", *step, *common], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
    now = datetime(2026, 5, 1, tzinfo=UTC)
    since = time.time()
    with pytest.raises(RuntimeError, match=r"crawl step fetch_parse ran past 12 s and was killed"):
        module.run_step_subprocess("fetch_parse", cfg, 1, now, limit_s=12)
    gave_up = time.time()
    assert gave_up - since < 40, "the task waited for the workers instead of killing them"
    time.sleep(3)  # a surviving worker would go on fetching at 1 s apart
    asked = [r["start"] for r in site.log().to_pylist() if r["host"] == host and r["start"] >= since]
    assert asked, "the step never fetched: the limit did not cut a fetch"
    late = [round(t - gave_up, 2) for t in asked if t > gave_up]
    assert not late, f"requests after the task killed the step: {late}"
