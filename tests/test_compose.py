"""Structure checks of docker-compose.yaml and the Dockerfile.

No Docker engine runs on the development machines or in CI, so the stack cannot be started here. These
tests catch the mistakes that would stop it from starting or make it crawl to the wrong place: a
service without an image, a dependency on a service that does not exist or has no healthcheck, the crawl
root not on MinIO, the Dask address not the scheduler's port, the lock not installed in the image.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yaml"
DOCKERFILE = REPO / "Dockerfile"
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
DASK_WORKERS = ("dask-worker-1", "dask-worker-2")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=VALUE list form is legal compose too
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _command(service: dict) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]


def _published_ports(service: dict) -> list[tuple[int, int]]:
    out = []
    for spec in service.get("ports", []):
        parts = str(spec).split(":")  # [ip:]host:container[/proto]
        out.append((int(parts[-2]), int(parts[-1].split("/")[0])))
    return out


def test_every_service_has_one_image_source(services: dict) -> None:
    assert set(AIRFLOW_SERVICES) | {"airflow-init", "postgres", "minio", "minio-init", "dask-scheduler",
                                    *DASK_WORKERS} <= set(services)
    own = [*AIRFLOW_SERVICES, "airflow-init", "dask-scheduler", *DASK_WORKERS]
    for name in own:
        svc = services[name]
        # Built from this repo's Dockerfile and tagged the same, so Airflow and Dask run identical code.
        assert svc.get("build") in (".", {"context": "."}), name
        assert svc.get("image") == "recrawl:latest", name
    for name, svc in services.items():
        if name not in own:
            assert "build" not in svc and re.fullmatch(r"[\w./-]+:[\w.-]+", svc["image"]), name
            assert not svc["image"].endswith(":latest"), f"{name}: third-party image must be pinned"


def test_airflow_components_and_executor(services: dict) -> None:
    commands = {name: _command(services[name]) for name in AIRFLOW_SERVICES}
    assert commands["airflow-apiserver"][:2] == ["airflow", "api-server"]
    assert commands["airflow-scheduler"] == ["airflow", "scheduler"]
    assert commands["airflow-dag-processor"] == ["airflow", "dag-processor"]
    assert commands["airflow-triggerer"] == ["airflow", "triggerer"]
    assert "airflow db migrate" in " ".join(_command(services["airflow-init"]))
    pg = _env(services["postgres"])
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        env = _env(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        conn = urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert conn.scheme.startswith("postgresql") and conn.hostname == "postgres", name
        assert conn.path.lstrip("/") == pg["POSTGRES_DB"] and conn.username == pg["POSTGRES_USER"], name
        # Every component must sign and check task tokens with the same secret.
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"], name
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/recrawl/dags", name
        assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == "/opt/recrawl/plugins", name
        exec_url = urlparse(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
        assert exec_url.hostname == "airflow-apiserver" and exec_url.path == "/execution/", name
        api_port = int(_command(services["airflow-apiserver"])[-1])
        assert exec_url.port == api_port, name
    assert (8080, 8080) in _published_ports(services["airflow-apiserver"])


def test_crawl_root_on_minio_and_dask_address_on_scheduler(services: dict) -> None:
    sched_cmd = _command(services["dask-scheduler"])
    sched_port = int(sched_cmd[sched_cmd.index("--port") + 1])
    minio_cmd = _command(services["minio"])
    assert minio_cmd[:2] == ["server", "/data"]
    bucket = re.search(r"local/([a-z0-9.-]+)", " ".join(_command(services["minio-init"]))).group(1)
    for name in (*AIRFLOW_SERVICES, "airflow-init", "dask-scheduler", *DASK_WORKERS):
        env = _env(services[name])
        root = urlparse(env["CRAWL_ROOT"])
        assert root.scheme == "s3" and root.netloc == bucket, f"{name}: crawl root {env['CRAWL_ROOT']}"
        dask = urlparse(env["CRAWL_DASK_ADDRESS"])
        assert (dask.scheme, dask.hostname, dask.port) == ("tcp", "dask-scheduler", sched_port), name
        for key in ("AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL"):
            endpoint = urlparse(env[key])
            assert (endpoint.hostname, endpoint.port) == ("minio", 9000), f"{name}: {key}"
        # Keys equal MinIO's root credentials (same variable, same default).
        assert env["AWS_ACCESS_KEY_ID"] == _env(services["minio"])["MINIO_ROOT_USER"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == _env(services["minio"])["MINIO_ROOT_PASSWORD"], name
        assert env["FSSPEC_S3_KEY"] == env["AWS_ACCESS_KEY_ID"], name
    for worker in DASK_WORKERS:
        cmd = _command(services[worker])
        assert cmd[:3] == ["dask", "worker", f"tcp://dask-scheduler:{sched_port}"], worker
    assert len({_command(services[w])[-1] for w in DASK_WORKERS}) == len(DASK_WORKERS), "worker names unique"


def test_depends_on_and_healthchecks_consistent(services: dict) -> None:
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        for dep, spec in deps.items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert dep != name
            cond = spec.get("condition", "service_started")
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} healthy, which has no healthcheck"
            if cond == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} is a one-shot job"
    for name in (*AIRFLOW_SERVICES, "postgres", "minio", "dask-scheduler", *DASK_WORKERS):
        hc = services[name].get("healthcheck")
        assert hc and hc["test"][0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
    for name in AIRFLOW_SERVICES:
        deps = services[name]["depends_on"]
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
        assert deps["postgres"]["condition"] == "service_healthy", name
    # The LocalExecutor runs tasks in the scheduler: it needs the Dask scheduler up.
    assert services["airflow-scheduler"]["depends_on"]["dask-scheduler"]["condition"] == "service_healthy"
    # Healthchecks probe the ports the services actually listen on.
    api_hc = " ".join(services["airflow-apiserver"]["healthcheck"]["test"])
    assert "localhost:8080/api/v2/monitor/health" in api_hc
    sched_cmd = _command(services["dask-scheduler"])
    dash = sched_cmd[sched_cmd.index("--dashboard-address") + 1].rsplit(":", 1)[1]
    assert f"localhost:{dash}/health" in " ".join(services["dask-scheduler"]["healthcheck"]["test"])
    for worker in DASK_WORKERS:
        cmd = _command(services[worker])
        dash = cmd[cmd.index("--dashboard-address") + 1].rsplit(":", 1)[1]
        assert f"localhost:{dash}/health" in " ".join(services[worker]["healthcheck"]["test"])


def test_ports_and_volumes(compose: dict, services: dict) -> None:
    published = [host for svc in services.values() for host, _ in _published_ports(svc)]
    assert len(published) == len(set(published)), "two services publish the same host port"
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            source = str(vol).split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name}: named volume {source} not declared"
                used.add(source)
    assert {"postgres-data", "minio-data"} <= used
    assert used == declared, f"declared but unused: {declared - used}"


def test_dockerfile_installs_the_lock_and_copies_the_code() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert re.search(r"pip install -r requirements\.txt -c requirements\.lock", text)
    assert re.search(r"^COPY requirements\.txt requirements\.lock ", text, re.M)
    for folder in ("crawl", "dags", "plugins", "include"):
        assert re.search(rf"^COPY {folder}/ \./{folder}/", text, re.M), folder
        assert (REPO / folder).is_dir(), folder
    assert "PYTHONPATH=/opt/recrawl" in text and "WORKDIR /opt/recrawl" in text
    # Everything installed comes from the pinned requirements: no package is installed outside them.
    pinned = {line.split("==")[0].split("[")[0].lower() for line in
              (REPO / "requirements.txt").read_text().splitlines() if "==" in line}
    assert {"psycopg2-binary", "asyncpg"} <= pinned  # the metadata DB drivers the compose stack needs
    assert not re.findall(r'pip install[^\n]*"[A-Za-z0-9_.-]+==', text)
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored and "crawldata" in ignored
