"""The ``recrawl`` DAG: it imports cleanly, its trigger-form Params refuse bad input exactly as the API
server does, and its structure keeps the promises the DAG docstring makes (order, retries, one run at
a time, the round's time)."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
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
        "max_pages_per_host": 10, "politeness_delay_s": 0.5, "max_depth": 3, "coverage_share": 0.25,
        "allowed_hosts": r"\.example$", "dask_address": "tcp://127.0.0.1:8786",
    }).validate()
    assert resolved["seeds"] == ["http://a.example/", "https://b.example/x"]
    assert resolved["coverage_share"] == 0.25
    # Scheduled runs have no conf: the defaults must validate on their own.
    defaults = served_params.deep_merge(None).validate()
    assert defaults["seeds"] and defaults["max_pages"] is None and defaults["dask_address"] == ""


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"crawl_id": "Bad Id"}, "crawl_id"),
        ({"crawl_id": "-starts-with-dash"}, "crawl_id"),
        ({"crawl_id": "x" * 64}, "crawl_id"),
        ({"seeds": []}, "non-empty"),
        ({"seeds": "http://a.example/"}, "seeds"),
        ({"seeds": [""]}, "seeds"),
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
    params = {"crawl_id": "c1", "seeds": ["http://a/"], "max_pages": None, "max_pages_per_host": 7,
              "politeness_delay_s": 0.0, "max_depth": None, "coverage_share": 0.5, "allowed_hosts": "",
              "dask_address": ""}
    overrides = module.config_overrides(params)
    assert overrides == {"root": str(tmp_path), "crawl_id": "c1", "max_pages_per_host_per_round": 7,
                         "politeness_delay_s": 0.0, "coverage_share": 0.5}
    cfg = load_config(overrides=overrides)
    assert cfg.dask_address == "tcp://10.0.0.1:8786"  # the deployment's env still applies
    assert cfg.max_pages == load_config(overrides={"crawl_id": "c1"}).max_pages
    monkeypatch.delenv("CRAWL_ROOT")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    assert module.crawl_root() == str(tmp_path / "home" / "crawldata")


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
