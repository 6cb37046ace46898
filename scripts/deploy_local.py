"""``make deploy-local``: the deployment of docker-compose.yaml, run natively on this machine.

Every part is a real server on loopback, started and stopped by this one script:

* PostgreSQL from Debian's packages (``apt-get install -y postgresql`` when missing) with its own data
  folder, port and socket folder, as Airflow's metadata database;
* the Airflow components as separate processes: api-server, scheduler (LocalExecutor), dag-processor,
  triggerer (not ``airflow standalone``);
* an external Dask scheduler and two Dask workers, reached by the DAG through ``CRAWL_DASK_ADDRESS``;
* moto's standalone S3 server (``moto[server]``) in place of MinIO (which cannot be installed here),
  holding the crawl root ``CRAWL_ROOT=s3://BUCKET/PREFIX``.

Why it reads docker-compose.yaml instead of repeating it. The compose file is the one definition of
the deployment: this script takes each service's command and environment from it and changes only
what a container network gives for free -- service host names and fixed ports become 127.0.0.1 and
free ports, container paths (/opt/airflow, /opt/recrawl) become local folders -- plus a short, named
list of loopback-only additions (``NATIVE_ARGS``, ``native_env``). So the two cannot drift apart;
tests/test_compose.py checks that the native plan is the compose file under exactly these changes.
The code under test never learns which S3 server it talks to: endpoint and keys reach s3fs/botocore
through the usual ``AWS_*`` / ``FSSPEC_S3_*`` variables, exactly as with MinIO or AWS.

State lives in a fresh temporary folder (metadata DB, logs, Airflow home) removed at stop: moto keeps
objects in memory, so a metadata DB that outlived the object store would describe crawls that no
longer exist. ``--keep`` leaves the folder for inspection.

Stopping: Ctrl-C or SIGTERM stops every part this script started, each by its PID (its own process
group, so the components' children go too), in reverse start order; PostgreSQL through ``pg_ctl stop``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yaml"
VENV_BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
# Container paths of the image (Dockerfile: AIRFLOW_HOME=/opt/airflow, WORKDIR/PYTHONPATH=/opt/recrawl).
CONTAINER_AIRFLOW_HOME = "/opt/airflow"
CONTAINER_REPO = "/opt/recrawl"
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
DASK_SCHEDULER = "dask-scheduler"
# Loopback-only additions to a service's compose command (a container binds all its interfaces; here
# every listener is on 127.0.0.1). Nothing else in a command differs from the compose file.
NATIVE_ARGS: dict[str, list[str]] = {
    "airflow-apiserver": ["--host", HOST],
    "dask-scheduler": ["--host", HOST],
    "dask-worker": ["--host", HOST],
}
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_VAR_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class DeployError(RuntimeError):
    """A part could not be started; the message says which and why."""


# ---- reading the compose file -------------------------------------------------------------------
def interpolate(value: str, env: Mapping[str, str], generated: dict[str, str] | None = None) -> str:
    """Compose variable substitution: ``${V}``, ``${V:-default}``, ``${V-default}``, ``${V:?msg}``,
    ``${V:+alt}``, ``$$``.

    A required variable (``:?``) missing from ``env`` gets a random value for this session (recorded
    in ``generated``): the stack is on loopback and its state is thrown away at stop.
    """
    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3) or ""
        val = env.get(name)
        if op and op.startswith(":") and not val:
            val = None
        if op in ("+", ":+"):
            return "" if val is None else arg
        if val is not None:
            return val
        if op in ("-", ":-"):
            return arg
        if op in ("?", ":?"):
            if generated is None:
                raise DeployError(f"{name} must be set: {arg}")
            return generated.setdefault(name, session_secret(name))
        return ""

    return _VAR_RE.sub(repl, value)


def session_secret(name: str) -> str:
    """A random value for a required secret: a Fernet key where Airflow needs one, else 64 hex chars."""
    if "FERNET" in name:
        return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    return secrets.token_hex(32)


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a compose ``.env`` file (``#`` comments, optional quotes); {} when absent."""
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.removeprefix("export ").split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def load_compose(env: Mapping[str, str], generated: dict[str, str] | None = None,
                 path: Path = COMPOSE) -> dict[str, Any]:
    """The compose file with YAML anchors merged and every string interpolated from ``env``."""
    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return interpolate(node, env, generated)
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(yaml.safe_load(path.read_text(encoding="utf-8")))


def service_env(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=VALUE list form
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def service_command(service: Mapping[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


# ---- the native plan ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Ports:
    """Where each listener is on loopback (all free ports by default)."""

    api: int
    postgres: int
    s3: int
    dask: int
    dask_dashboard: int
    scheduler_health: int
    worker_dashboards: tuple[int, ...]

    @classmethod
    def free(cls, workers: int = 2, api: int | None = None) -> Ports:
        return cls(api or free_port(), free_port(), free_port(), free_port(), free_port(), free_port(),
                   tuple(free_port() for _ in range(workers)))


@dataclass
class NativeService:
    name: str
    argv: list[str]
    env: dict[str, str]


@dataclass
class Plan:
    """What to run, derived from the compose file: one entry per long-running service, plus the
    one-shot jobs' facts (database, bucket, admin login)."""

    ports: Ports
    home: Path
    services: dict[str, NativeService]
    pg_user: str
    pg_password: str
    pg_db: str
    bucket: str
    admin_user: str
    admin_password: str
    passwords_file: Path
    crawl_env: dict[str, str]
    generated: dict[str, str] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"http://{HOST}:{self.ports.api}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://{HOST}:{self.ports.s3}"

    @property
    def dask_address(self) -> str:
        return self.crawl_env["CRAWL_DASK_ADDRESS"]


def host_map(ports: Ports) -> dict[tuple[str, int], int]:
    """(compose host name, container port) -> loopback port."""
    return {
        ("postgres", 5432): ports.postgres,
        ("minio", 9000): ports.s3,
        ("dask-scheduler", 8786): ports.dask,
        ("airflow-apiserver", 8080): ports.api,
        ("localhost", 8080): ports.api,  # the api-server's own BASE_URL
    }


def translate(value: str, ports: Ports, home: Path) -> str:
    """A compose value as it reads on this machine: ``name:port`` -> ``127.0.0.1:free``, container
    paths -> local folders. An unknown ``service:port`` is an error, not a silent leftover."""
    mapping = host_map(ports)
    names = sorted({h for h, _ in mapping}, key=len, reverse=True)

    def repl(m: re.Match[str]) -> str:
        key = (m.group(1), int(m.group(2)))
        if key not in mapping:
            raise DeployError(f"no loopback port for {m.group(0)!r} (add it to host_map)")
        return f"{HOST}:{mapping[key]}"

    value = re.sub(r"(?<![\w.-])(" + "|".join(map(re.escape, names)) + r"):(\d+)\b", repl, value)
    return value.replace(CONTAINER_AIRFLOW_HOME, str(home)).replace(CONTAINER_REPO, str(REPO))


def native_env(name: str, ports: Ports, home: Path) -> dict[str, str]:
    """Loopback-only settings a container does not need, per service (empty for Dask)."""
    if not name.startswith("airflow-"):
        return {}
    return {
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": HOST,
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(ports.scheduler_health),
    }


def base_env() -> dict[str, str]:
    """What the image's Dockerfile gives every container: the code on PYTHONPATH, tools on PATH."""
    return {
        "PATH": os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "/usr/bin:/bin")]),
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }


def _translate_command(name: str, cmd: list[str], ports: Ports, home: Path, worker_no: int) -> list[str]:
    out = []
    prev = ""
    for arg in cmd:
        if prev == "--port" and arg.isdigit():
            target = name.replace("airflow-", "")
            arg = str(host_map(ports)[{"apiserver": ("airflow-apiserver", int(arg)),
                                        "dask-scheduler": ("dask-scheduler", int(arg))}[target]])
        elif prev == "--dashboard-address":
            dash = ports.dask_dashboard if name == DASK_SCHEDULER else ports.worker_dashboards[worker_no]
            arg = f"{HOST}:{dash}"
        else:
            arg = translate(arg, ports, home)
        out.append(arg)
        prev = arg if arg.startswith("--") else ""
    if out and out[0] in ("airflow", "dask"):
        out[0] = str(VENV_BIN / out[0])
    return out


def native_plan(compose: dict[str, Any], ports: Ports, home: Path,
                extra_env: Mapping[str, str] | None = None, generated: dict[str, str] | None = None) -> Plan:
    """Translate the compose services into native processes (no side effects)."""
    services = compose["services"]
    workers = sorted(n for n in services if n.startswith("dask-worker"))
    if len(workers) != len(ports.worker_dashboards):
        raise DeployError(f"compose has {len(workers)} Dask workers, {len(ports.worker_dashboards)} ports given")
    plan_services: dict[str, NativeService] = {}
    for name in (DASK_SCHEDULER, *workers, *AIRFLOW_SERVICES):
        svc = services[name]
        worker_no = workers.index(name) if name in workers else 0
        argv = _translate_command(name, service_command(svc), ports, home, worker_no)
        argv += NATIVE_ARGS.get("dask-worker" if name in workers else name, [])
        env = {k: translate(v, ports, home) for k, v in service_env(svc).items()}
        env = {**base_env(), **env, **native_env(name, ports, home), **(extra_env or {})}
        plan_services[name] = NativeService(name, argv, env)
    pg = service_env(services["postgres"])
    init = services["airflow-init"]
    init_env = service_env(init)
    mc = " ".join(service_command(services["minio-init"]))
    bucket = re.search(r"mc mb (?:--\S+ )*local/([a-z0-9.-]+)", mc)
    if not bucket:
        raise DeployError("minio-init does not create a bucket with `mc mb local/NAME`")
    users = init_env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")
    sched = plan_services["airflow-scheduler"].env
    crawl_env = {k: v for k, v in sched.items() if k.startswith(("CRAWL_", "AWS_", "FSSPEC_"))}
    return Plan(
        ports=ports, home=home, services=plan_services,
        pg_user=pg["POSTGRES_USER"], pg_password=pg["POSTGRES_PASSWORD"], pg_db=pg["POSTGRES_DB"],
        bucket=bucket.group(1),
        admin_user=users[0].split(":")[0],
        admin_password=init_env.get("AIRFLOW_ADMIN_PASSWORD", "admin"),
        passwords_file=Path(translate(init_env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"], ports, home)),
        crawl_env=crawl_env,
        generated=dict(generated or {}),
    )


# ---- processes ----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str, alive: Callable[[], None] | None = None,
               every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive:
            alive()
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(every)
    raise DeployError(f"{what}: not ready after {timeout:.0f}s")


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((HOST, port)) == 0


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500


def find_pg_bin(install: bool = True) -> Path:
    """Debian's PostgreSQL binaries; installs the ``postgresql`` package when missing (root only)."""
    found = sorted(Path("/").glob(PG_BIN_GLOB.lstrip("/")), key=lambda p: int(p.parent.name))
    found = [p for p in found if (p / "initdb").exists()]
    if found:
        return found[-1]
    if not install or os.geteuid() != 0 or not shutil.which("apt-get"):
        raise DeployError("PostgreSQL is not installed: run `apt-get install -y postgresql` (as root)")
    print("installing PostgreSQL (apt-get install -y postgresql) ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", "postgresql"], env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(["apt-get", "install", "-y", "postgresql"], env=env, check=True)
    return find_pg_bin(install=False)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path


class Deployment:
    """The native deployment: ``start()`` brings every part up, ``stop()`` takes down what it started."""

    def __init__(self, state_dir: Path | None = None, ports: Ports | None = None,
                 extra_env: Mapping[str, str] | None = None, keep: bool = False,
                 log: Callable[[str], None] = print) -> None:
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="recrawl-deploy-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o755)  # the postgres user must reach its data folder inside
        self.keep = keep
        self.log = log
        env = {**read_dotenv(REPO / ".env"), **os.environ}  # as compose: the shell wins over .env
        env.setdefault("RECRAWL_SCHEDULE", "none")  # rounds when triggered; compose's default is hourly
        generated: dict[str, str] = {}
        compose = load_compose(env, generated)
        self.ports = ports or Ports.free(workers=sum(1 for n in compose["services"] if n.startswith("dask-worker")))
        self.plan = native_plan(compose, self.ports, self.state_dir / "airflow", extra_env, generated)
        self.procs: list[Proc] = []
        self.pg_bin: Path | None = None
        self.pg_data = self.state_dir / "postgres"
        self.logs = self.state_dir / "logs"
        self.timings: dict[str, float] = {}

    # -- helpers
    def _as_postgres(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str], cwd: Path | None = None) -> Proc:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with open(log, "ab") as fh:
            popen = subprocess.Popen(argv, env=dict(env), cwd=str(cwd or self.state_dir), stdout=fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def _alive(self, proc: Proc) -> Callable[[], None]:
        def check() -> None:
            if proc.popen.poll() is not None:
                raise DeployError(f"{proc.name} exited {proc.popen.returncode}:\n{tail(proc.log)}")
        return check

    def pid(self, name: str) -> int:
        return next(p.popen.pid for p in self.procs if p.name == name)

    # -- parts
    def start_postgres(self) -> None:
        t0 = time.monotonic()
        self.pg_bin = find_pg_bin()
        self.pg_data.mkdir(mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(self.pg_data, "postgres", "postgres")
        run = self._run
        run("postgres-initdb", self._as_postgres([str(self.pg_bin / "initdb"), "-D", str(self.pg_data), "-U", "postgres",
                                                  "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8"]))
        run("postgres-start", self._as_postgres([
            str(self.pg_bin / "pg_ctl"), "-D", str(self.pg_data), "-w", "-t", "60", "-l", str(self.pg_data / "server.log"),
            "-o", f"-p {self.ports.postgres} -k {self.pg_data} -c listen_addresses={HOST}", "start"]))
        self.pg_started = True
        sql = (f"CREATE ROLE {self.plan.pg_user} LOGIN PASSWORD '{self.plan.pg_password}';"
               f" CREATE DATABASE {self.plan.pg_db} OWNER {self.plan.pg_user};")
        for stmt in sql.split(";"):
            if stmt.strip():
                run("postgres-setup", self._as_postgres([str(self.pg_bin / "psql"), "-v", "ON_ERROR_STOP=1", "-h",
                                                         str(self.pg_data), "-p", str(self.ports.postgres), "-U",
                                                         "postgres", "-d", "postgres", "-c", stmt]))
        self.timings["postgres"] = time.monotonic() - t0

    def start_s3(self) -> None:
        """moto's S3 server, then the bucket minio-init creates (create_bucket: idempotent here)."""
        t0 = time.monotonic()
        proc = self._spawn("s3", [str(VENV_BIN / "moto_server"), "-H", HOST, "-p", str(self.ports.s3)], base_env())
        wait_until(lambda: http_ok(self.plan.s3_endpoint + "/moto-api/"), 60, "moto S3 server", self._alive(proc))
        import boto3

        env = self.plan.crawl_env
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                              region_name=env.get("AWS_DEFAULT_REGION", "us-east-1"))
        client.create_bucket(Bucket=self.plan.bucket)
        self.timings["s3"] = time.monotonic() - t0

    def start_dask(self) -> None:
        t0 = time.monotonic()
        svc = self.plan.services[DASK_SCHEDULER]
        sched = self._spawn(DASK_SCHEDULER, svc.argv, svc.env)
        wait_until(lambda: port_open(self.ports.dask), 60, "dask scheduler", self._alive(sched))
        for name, svc in self.plan.services.items():
            if name.startswith("dask-worker"):
                self._spawn(name, svc.argv, svc.env)
        workers = [p for p in self.procs if p.name.startswith("dask-worker")]
        for proc, port in zip(workers, self.ports.worker_dashboards, strict=True):
            wait_until(lambda port=port: http_ok(f"http://{HOST}:{port}/health"), 90, proc.name, self._alive(proc))
        self.timings["dask"] = time.monotonic() - t0

    def init_airflow(self) -> None:
        """What the airflow-init service does: migrate the metadata DB, write the admin password file."""
        t0 = time.monotonic()
        self.plan.home.mkdir(parents=True, exist_ok=True)
        env = self.plan.services["airflow-scheduler"].env
        self._run("airflow-db-migrate", [str(VENV_BIN / "airflow"), "db", "migrate"], env=env, timeout=600)
        self.plan.passwords_file.parent.mkdir(parents=True, exist_ok=True)
        self.plan.passwords_file.write_text(json.dumps({self.plan.admin_user: self.plan.admin_password}))
        self.timings["airflow_init"] = time.monotonic() - t0

    def start_airflow(self, ready_timeout: float = 300) -> None:
        t0 = time.monotonic()
        for name in AIRFLOW_SERVICES:
            svc = self.plan.services[name]
            self._spawn(name, svc.argv, svc.env, cwd=self.plan.home)

        def all_alive() -> None:
            for p in self.procs:
                self._alive(p)()

        wait_until(lambda: http_ok(self.plan.api_url + "/api/v2/monitor/health"), ready_timeout,
                   "airflow api-server", all_alive, every=1.0)
        self.timings["airflow"] = time.monotonic() - t0

    def _run(self, name: str, argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 120) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with open(log, "ab") as fh:
            rc = subprocess.run(argv, env=dict(env or {**os.environ}), cwd=str(self.state_dir), stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout,
                                check=False).returncode
        if rc != 0:
            raise DeployError(f"{name} exited {rc}:\n{tail(log)}")

    # -- whole
    def start(self) -> Deployment:
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
            self.log(f"state folder: {self.state_dir}")
            self.log(f"PostgreSQL on {HOST}:{self.ports.postgres} ...")
            self.start_postgres()
            self.log(f"S3 (moto) on {self.plan.s3_endpoint}, bucket {self.plan.bucket} ...")
            self.start_s3()
            self.log(f"Dask scheduler {self.plan.dask_address} + workers ...")
            self.start_dask()
            self.log("airflow db migrate ...")
            self.init_airflow()
            self.log("Airflow api-server, scheduler, dag-processor, triggerer ...")
            self.start_airflow()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every part we started, newest first, each by its PID (its own process group)."""
        for proc in reversed(self.procs):
            stop_group(proc.popen, timeout)
        self.procs.clear()
        if getattr(self, "pg_started", False) and self.pg_bin:
            subprocess.run(self._as_postgres([str(self.pg_bin / "pg_ctl"), "-D", str(self.pg_data), "-m", "fast",
                                              "-w", "-t", "30", "stop"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60)
            self.pg_started = False
        if not self.keep:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> Deployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def banner(self) -> str:
        p = self.plan
        gen = (f"\n  secrets compose requires, generated for this session: {', '.join(sorted(p.generated))}"
               if p.generated else "")
        return (f"\nrecrawl deployment is up (everything on {HOST}):\n"
                f"  UI / REST:     {p.api_url}   login: {p.admin_user} / {p.admin_password}\n"
                f"  Crawl API:     {p.api_url}/crawl/docs\n"
                f"  crawl root:    {p.crawl_env['CRAWL_ROOT']}  (S3 endpoint {p.s3_endpoint}, "
                f"key {p.crawl_env.get('AWS_ACCESS_KEY_ID')}, secret {p.crawl_env.get('AWS_SECRET_ACCESS_KEY')})\n"
                f"  Dask:          {p.dask_address}  (dashboard http://{HOST}:{p.ports.dask_dashboard})\n"
                f"  PostgreSQL:    {HOST}:{p.ports.postgres} db {p.pg_db} user {p.pg_user}\n"
                f"  logs:          {self.logs}{gen}\n"
                f"Ctrl-C stops every part.")


def stop_group(popen: subprocess.Popen, timeout: float) -> None:
    """SIGTERM the process group we created for ``popen`` (its PID), then SIGKILL what is left."""
    pgid = popen.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        popen.poll()
        return
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        if popen.poll() is not None and not _group_has_live(pgid):
            break
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        popen.wait(10)
    except subprocess.TimeoutExpired:
        pass


def _group_has_live(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--api-port", type=int, default=int(os.environ.get("DEPLOY_API_PORT", "0")) or None,
                    help="UI/REST port on 127.0.0.1 (default: a free port; env DEPLOY_API_PORT)")
    ap.add_argument("--state-dir", type=Path, help="folder for the metadata DB and logs (default: a new temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the state folder after stopping")
    ap.add_argument("--print-plan", action="store_true", help="print the commands and environment, start nothing")
    args = ap.parse_args(argv)

    stop_requested = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True
        raise KeyboardInterrupt

    dep = Deployment(args.state_dir, Ports.free(api=args.api_port) if args.api_port else None, keep=args.keep)
    if args.print_plan:
        for svc in dep.plan.services.values():
            print(f"{svc.name}: {shlex.join(svc.argv)}")
        print(json.dumps({n: {k: v for k, v in s.env.items() if k not in base_env()} for n, s in dep.plan.services.items()},
                         indent=1))
        shutil.rmtree(dep.state_dir, ignore_errors=True)
        return 0
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        dep.start()
        print(dep.banner(), flush=True)
        while True:  # a part that dies takes the deployment down (no half-running stack)
            for proc in dep.procs:
                if proc.popen.poll() is not None:
                    print(f"{proc.name} exited {proc.popen.returncode}; stopping.\n{tail(proc.log)}", file=sys.stderr)
                    return 1
            time.sleep(1)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except DeployError as exc:
        print(f"deploy-local: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        dep.stop()
        print("stopped." if not stop_requested else "stopped every part.", flush=True)


if __name__ == "__main__":
    sys.exit(main())
