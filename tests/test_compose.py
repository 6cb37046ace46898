"""Structure checks of docker-compose.yaml and the Dockerfile.

No Docker engine runs on the development machines or in CI, so the stack cannot be started here. These
tests catch the mistakes that would stop it from starting or make it crawl to the wrong place: a
service without an image, a dependency on a service that does not exist or has no healthcheck, the crawl
root not on MinIO, the Dask address not the scheduler's port, the lock not installed in the image; and
the deployment defaults: no secret has a default (compose refuses to start without it), published
ports listen on loopback unless BIND_ADDR says otherwise, the crawler is a bucket-scoped MinIO user.

Variables are substituted as ``docker compose`` does (``$$``, ``${VAR}``, ``${VAR:-default}``,
``${VAR-default}``, ``${VAR:?message}``, ``${VAR?message}``, ``${VAR:+alt}``), by :func:`interpolate`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yaml"
DOCKERFILE = REPO / "Dockerfile"
ENV_EXAMPLE = REPO / ".env.example"
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
DASK_WORKERS = ("dask-worker-1", "dask-worker-2")
CRAWL_SERVICES = (*AIRFLOW_SERVICES, "airflow-init", "dask-scheduler", *DASK_WORKERS)
SECRETS = ("AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_FERNET_KEY", "POSTGRES_PASSWORD",
           "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "CRAWL_S3_ACCESS_KEY", "CRAWL_S3_SECRET_KEY")
# What an operator puts in .env (distinct values, so a test can tell which one a service got).
FILLED = {name: f"{name.lower().replace('_', '-')}-value-0123456789" for name in SECRETS}

_VAR = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?", re.S)


class MissingVariable(Exception):
    """A ``${VAR:?message}`` (or ``${VAR?message}``) whose variable is not set: compose stops here."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name, self.message = name, message


def _substitute(text: str, env: dict[str, str], missing: list[MissingVariable]) -> str:
    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        if m.group("plain"):
            return env.get(m.group("plain"), "")
        spec = _BRACED.fullmatch(m.group("braced"))
        assert spec, f"unsupported substitution {m.group(0)!r}"
        name, op, arg = spec["name"], spec["op"], spec["arg"] or ""
        value = env.get(name)
        unset_or_empty = value is None or (value == "" and op and op.startswith(":"))
        if op in ("-", ":-"):
            return arg if unset_or_empty else value
        if op in ("?", ":?"):
            if unset_or_empty:
                missing.append(MissingVariable(name, arg))
                return ""
            return value
        if op in ("+", ":+"):
            return "" if unset_or_empty else arg
        return value or ""

    return _VAR.sub(one, text)


def interpolate(node: object, env: dict[str, str], missing: list[MissingVariable] | None = None) -> object:
    """The compose file as ``docker compose config`` sees it with ``env``; raises the first
    :class:`MissingVariable` (after collecting all of them into ``missing`` when given)."""
    own = [] if missing is None else missing
    out = _interpolate(node, env, own)
    if own:
        raise own[0]
    return out


def _interpolate(node: object, env: dict[str, str], missing: list[MissingVariable]) -> object:
    if isinstance(node, str):
        return _substitute(node, env, missing)
    if isinstance(node, list):
        return [_interpolate(v, env, missing) for v in node]
    if isinstance(node, dict):
        return {k: _interpolate(v, env, missing) for k, v in node.items()}
    return node


def _dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an env file (comments and blank lines skipped)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@pytest.fixture(scope="module")
def raw_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose(raw_compose: dict) -> dict:
    """As deployed with every secret filled in and nothing else set."""
    return interpolate(raw_compose, dict(FILLED))


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


def _published_on(service: dict) -> list[str]:
    """The host address of every published port (``""`` = all interfaces, compose's default)."""
    return [str(spec).rsplit(":", 2)[0] if str(spec).count(":") >= 2 else "" for spec in service.get("ports", [])]


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
    assert commands["airflow-scheduler"][:2] == ["airflow", "scheduler"]
    assert commands["airflow-dag-processor"] == ["airflow", "dag-processor"]
    assert commands["airflow-triggerer"][:2] == ["airflow", "triggerer"]
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
        # The crawler's own MinIO user, never the root user.
        assert env["AWS_ACCESS_KEY_ID"] == env["FSSPEC_S3_KEY"] == FILLED["CRAWL_S3_ACCESS_KEY"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == env["FSSPEC_S3_SECRET"] == FILLED["CRAWL_S3_SECRET_KEY"], name
    for worker in DASK_WORKERS:
        cmd = _command(services[worker])
        assert cmd[:3] == ["dask", "worker", f"tcp://dask-scheduler:{sched_port}"], worker
        assert cmd[cmd.index("--preload") + 1] == "crawl.warmup", f"{worker}: the embedded workers' preload"
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


def test_compiled_kernel_cache_is_on_a_named_volume(compose: dict, services: dict) -> None:
    """Every service that runs engine code (Airflow's tasks run in its containers with the LocalExecutor,
    the Dask workers run fetch and parse) keeps numba's cache of parse's compiled kernel (NUMBA_CACHE_DIR)
    on a named volume, so a fresh container loads it instead of compiling it again; the image makes that
    directory owned by the airflow user, so compose creates the volume writable for it."""
    declared = set(compose.get("volumes") or {})
    dirs = set()
    for name in (*AIRFLOW_SERVICES, *DASK_WORKERS):
        path = _env(services[name]).get("NUMBA_CACHE_DIR")
        assert path, f"{name}: no NUMBA_CACHE_DIR"
        mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in services[name].get("volumes", [])}
        assert mounts.get(path) in declared, f"{name}: {path} is not on a named volume"
        dirs.add(path)
    assert len(dirs) == 1, dirs  # one cache for all: the same image, the same code
    text = DOCKERFILE.read_text(encoding="utf-8")
    owned = re.search(r"mkdir -p ([^\n&]+)&& chown -R 50000:0 (\S+)", text.replace("\\\n", ""))
    assert owned and dirs <= set(owned.group(1).split()), "the image does not make the cache directory"
    assert all(d.startswith(owned.group(2) + "/") or d == owned.group(2) for d in dirs), "not the airflow user's"


def test_the_kernel_cache_honours_numba_cache_dir(tmp_path: Path) -> None:
    """What the compose setting relies on: with NUMBA_CACHE_DIR set, the first process writes the compiled
    kernel there and a second process loads it from there (its cache files are not written again)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    code = "from crawl.fingerprint import warm_up; warm_up()"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=600)
    written = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*") if p.suffix in (".nbi", ".nbc")}
    assert any(p.name.startswith("fingerprint_kernel") and p.suffix == ".nbc" for p in written), sorted(written)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=600)
    again = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*") if p.suffix in (".nbi", ".nbc")}
    assert again == written  # loaded, not compiled and saved again


# ---- deployment defaults ------------------------------------------------------------------------------

def test_refuses_to_start_without_each_secret(raw_compose: dict) -> None:
    """Unset, empty, or as shipped in .env.example: compose stops, naming every missing secret."""
    for env in ({}, {name: "" for name in SECRETS}, _dotenv(ENV_EXAMPLE)):
        missing: list[MissingVariable] = []
        with pytest.raises(MissingVariable):
            interpolate(raw_compose, env, missing)
        assert {m.name for m in missing} == set(SECRETS)
        assert all(m.name in m.message and ".env" in m.message for m in missing)
    for name in SECRETS:  # each one alone is enough to stop it
        missing = []
        with pytest.raises(MissingVariable):
            interpolate(raw_compose, {k: v for k, v in FILLED.items() if k != name}, missing)
        assert {m.name for m in missing} == {name}


def test_no_secret_has_a_default_anywhere() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    for name in SECRETS:
        uses = re.findall(r"\$\{" + name + r"(:?[-?+]?)", text)
        assert uses and set(uses) == {":?"}, f"{name}: {uses}"
    for known_default in ("minioadmin", "change-me", "admin:admin@", "AIRFLOW_ADMIN_PASSWORD:-"):
        assert known_default not in text


def _referenced(node: object) -> set[str]:
    """Names of the variables the compose file substitutes (``$$`` is an escape, not a reference)."""
    if isinstance(node, str):
        return {m["plain"] or _BRACED.fullmatch(m["braced"])["name"] for m in _VAR.finditer(node) if m[0] != "$$"}
    if isinstance(node, (list, dict)):
        return set().union(*map(_referenced, node.values() if isinstance(node, dict) else node))
    return set()


def test_env_example_documents_every_variable_and_ships_no_secret(raw_compose: dict) -> None:
    used = _referenced(raw_compose)
    assert set(SECRETS) <= used
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    documented = set(re.findall(r"^#?([A-Z_][A-Z0-9_]*)=", text, re.M))
    assert documented == used
    example = _dotenv(ENV_EXAMPLE)
    assert set(example) == set(SECRETS) and not any(example.values())
    assert ".env" in (REPO / ".gitignore").read_text().split()


def test_ports_listen_on_loopback_unless_bind_addr_says_otherwise(raw_compose: dict) -> None:
    default = interpolate(raw_compose, dict(FILLED))["services"]
    published = {name: _published_on(svc) for name, svc in default.items() if svc.get("ports")}
    assert set(published) == {"airflow-apiserver", "minio"}
    assert all(addr == "127.0.0.1" for addrs in published.values() for addr in addrs), published
    everywhere = interpolate(raw_compose, {**FILLED, "BIND_ADDR": "0.0.0.0"})["services"]
    assert {a for svc in everywhere.values() for a in _published_on(svc)} == {"0.0.0.0"}


def test_crawler_is_a_bucket_scoped_minio_user(services: dict) -> None:
    """minio-init creates CRAWL_S3_ACCESS_KEY with a policy on the crawl bucket only, and every service
    that touches the crawl root uses that user, not MinIO's root."""
    bucket = urlparse(_env(services["airflow-scheduler"])["CRAWL_ROOT"]).netloc
    init = services["minio-init"]
    script = " ".join(_command(init))
    env = _env(init)
    assert env["CRAWL_S3_ACCESS_KEY"] == FILLED["CRAWL_S3_ACCESS_KEY"] != FILLED["MINIO_ROOT_USER"]
    steps = [step.strip() for step in script.split("&&")]
    assert steps[0].startswith('mc alias set local http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"')
    assert f"mc mb --ignore-existing local/{bucket}" in steps
    policy_step = next(s for s in steps if s.startswith("mc admin policy create local "))
    policy_name, policy_path = policy_step.split()[-2:]
    assert 'mc admin user add local "$CRAWL_S3_ACCESS_KEY" "$CRAWL_S3_SECRET_KEY"' in steps
    assert f'mc admin policy attach local {policy_name} --user "$CRAWL_S3_ACCESS_KEY"' in steps
    assert steps.index(policy_step) < len(steps) - 1 and steps[-1].startswith("mc admin policy attach")
    # the policy file is the repository's, mounted read-only where the step reads it
    mounts = {v.split(":")[1]: v.split(":")[0] for v in init["volumes"]}
    policy = json.loads((REPO / mounts[policy_path]).read_text(encoding="utf-8"))
    resources, actions = set(), set()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow" and "NotResource" not in statement and "NotAction" not in statement
        resources |= set(statement["Resource"])
        actions |= set(statement["Action"])
    assert resources == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"}
    assert {"s3:GetObject", "s3:PutObject", "s3:ListBucket", "s3:DeleteObject"} <= actions
    assert not any(a.endswith("*") or a.startswith("admin:") for a in actions)
    for name in CRAWL_SERVICES:
        crawl_env = _env(services[name])
        assert FILLED["MINIO_ROOT_USER"] not in crawl_env.values(), name
        assert FILLED["MINIO_ROOT_PASSWORD"] not in crawl_env.values(), name
    # and the root credentials reach only MinIO itself and minio-init
    holders = {n for n, svc in services.items() if FILLED["MINIO_ROOT_PASSWORD"] in _env(svc).values()}
    assert holders == {"minio", "minio-init"}


def test_airflow_secrets_reach_every_component(services: dict) -> None:
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        env = _env(services[name])
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == FILLED["AIRFLOW_JWT_SECRET"], name
        assert env["AIRFLOW__CORE__FERNET_KEY"] == FILLED["AIRFLOW_FERNET_KEY"], name
        assert urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]).password == FILLED["POSTGRES_PASSWORD"], name
    assert _env(services["postgres"])["POSTGRES_PASSWORD"] == FILLED["POSTGRES_PASSWORD"]
    assert _env(services["airflow-init"])["AIRFLOW_ADMIN_PASSWORD"] == FILLED["AIRFLOW_ADMIN_PASSWORD"]


# ---- the native deployment (scripts/deploy_local.py) is this compose file under named changes ----------
def _deploy_local():
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import deploy_local

    return deploy_local


def test_native_plan_is_the_compose_file_on_loopback(tmp_path: Path) -> None:
    """Same commands and environment as compose; only host names, ports, container paths and the named
    loopback additions differ (replaced here by plain string substitution, not the script's own code)."""
    dl = _deploy_local()
    compose = dl.load_compose({**FILLED, "RECRAWL_SCHEDULE": "none"})
    ports = dl.Ports(api=18080, postgres=15432, s3=19000, dask=18786, dask_dashboard=18787, scheduler_health=18974,
                     worker_dashboards=(18788, 18789))
    plan = dl.native_plan(compose, ports, tmp_path / "home")
    subst = {"postgres:5432": "127.0.0.1:15432", "minio:9000": "127.0.0.1:19000",
             "dask-scheduler:8786": "127.0.0.1:18786", "airflow-apiserver:8080": "127.0.0.1:18080",
             "localhost:8080": "127.0.0.1:18080", "/opt/airflow": str(tmp_path / "home"), "/opt/recrawl": str(REPO)}

    def local(value: str) -> str:
        for old, new in subst.items():
            value = value.replace(old, new)
        return value

    services = compose["services"]
    workers = sorted(n for n in services if n.startswith("dask-worker"))
    assert set(plan.services) == {*AIRFLOW_SERVICES, "dask-scheduler", *workers}
    for name, native in plan.services.items():
        svc = services[name]
        compose_env = {k: local(v) for k, v in _env(svc).items()}
        extra = dl.native_env(name, ports, tmp_path / "home")
        assert {k: v for k, v in native.env.items() if k in compose_env} == compose_env, name
        assert set(native.env) == set(compose_env) | set(extra) | set(dl.base_env()), name
        assert set(extra) <= {"AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST",
                              "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT"}, name
        cmd = _command(svc)
        added = dl.NATIVE_ARGS.get("dask-worker" if name in workers else name, [])
        assert added in ([], ["--host", "127.0.0.1"]), name
        argv = native.argv[:len(native.argv) - len(added)]
        assert Path(argv[0]).name == cmd[0] and Path(argv[0]).parent == dl.VENV_BIN, name
        assert len(argv) == len(cmd), name
        for ours, theirs, prev in zip(argv[1:], cmd[1:], cmd[:-1], strict=True):
            if prev == "--port":
                assert ours == {"airflow-apiserver": "18080", "dask-scheduler": "18786"}[name], name
            elif prev == "--dashboard-address":
                assert ours.startswith("127.0.0.1:"), name
            else:
                assert ours == local(theirs), (name, ours, theirs)
    # the one-shot jobs: the database compose creates, the bucket minio-init makes, the admin login
    pg = _env(services["postgres"])
    assert (plan.pg_user, plan.pg_password, plan.pg_db) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])
    assert urlparse(plan.crawl_env["CRAWL_ROOT"]).netloc == plan.bucket
    assert plan.admin_password == _env(services["airflow-init"])["AIRFLOW_ADMIN_PASSWORD"]
    assert plan.crawl_env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:19000"


def test_versions_match_the_native_deployment() -> None:
    """PostgreSQL's major version and Python's minor version are those `make deploy-local` runs."""
    import sys

    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    major = int(services["postgres"]["image"].split(":")[1].split(".")[0])
    assert Path(f"/usr/lib/postgresql/{major}").is_dir() or not list(Path("/usr/lib/postgresql").glob("*")), \
        f"compose runs postgres:{major}, this machine has {sorted(p.name for p in Path('/usr/lib/postgresql').glob('*'))}"
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(rf"^FROM python:{sys.version_info.major}\.{sys.version_info.minor}-slim\b", text, re.M)


def test_compose_interpolation() -> None:
    dl = _deploy_local()
    assert dl.interpolate("a${X:-d}b${Y-e}$$Z", {"X": "", "Y": ""}) == "adb$Z"
    assert dl.interpolate("${X}", {"X": "v"}) == "v"
    assert dl.interpolate("${X:+alt}|${Y:+alt}|${Z+alt}", {"X": "v", "Y": "", "Z": ""}) == "alt||alt"
    generated: dict[str, str] = {}
    first = dl.interpolate("${SECRET:?set it}", {}, generated)
    assert len(first) == 64 and dl.interpolate("${SECRET:?set it}", {}, generated) == first
    from cryptography.fernet import Fernet

    Fernet(dl.interpolate("${AIRFLOW_FERNET_KEY:?set it}", {}, generated))  # a valid key, or this raises
    with pytest.raises(dl.DeployError, match="SECRET must be set"):
        dl.interpolate("${SECRET:?set it}", {})
