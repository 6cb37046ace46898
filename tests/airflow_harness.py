"""Helpers that give tests a private Airflow: settings in env before Airflow is imported, a migrated
metadata DB, and a real ``airflow standalone`` started and stopped by PID.

Airflow reads its configuration once, on first import, so :func:`configure_env` must run before any
``import airflow`` in the test process (the test modules call it at import time, before they import
anything from Airflow or the DAG).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
TEST_USER = "crawltester"
TEST_PASSWORD = "crawl-test-pw"
# a read-only user (simple auth manager role VIEWER): may read DAGs and the crawl API, not trigger runs
VIEWER_USER = "crawlviewer"
VIEWER_PASSWORD = "crawl-viewer-pw"
PASSWORDS = {TEST_USER: TEST_PASSWORD, VIEWER_USER: VIEWER_PASSWORD}

_HOME: Path | None = None


def airflow_env(home: Path) -> dict[str, str]:
    """The Airflow settings every test process and server uses (small, fast, isolated)."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "RECRAWL_SCHEDULE": "none",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{TEST_USER}:admin,{VIEWER_USER}:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "test_passwords.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": "recrawl-test-secret-" + "0123456789abcdef" * 4,
        # the DAG, the plugin and `python -m crawl` import the engine from the checkout
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def configure_env() -> Path:
    """Point this process at a private AIRFLOW_HOME (once per process) and return it."""
    global _HOME
    if _HOME is None:
        if "airflow" in sys.modules:
            raise RuntimeError("airflow was imported before configure_env(); its settings are already fixed")
        _HOME = Path(tempfile.mkdtemp(prefix="airflow-test-"))
        (_HOME / "test_passwords.json").write_text(json.dumps(PASSWORDS))
        os.environ.update(airflow_env(_HOME))
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
    return _HOME


def init_db() -> None:
    """Migrate the private SQLite metadata DB (~3 s); needed by dag.test()."""
    configure_env()
    from airflow.utils import db

    db.initdb()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class AirflowServer:
    """A running ``airflow standalone`` (api-server, scheduler, dag-processor, triggerer)."""

    home: Path
    port: int
    proc: subprocess.Popen
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: object | None = None, token: str | None = None,
                timeout: float = 30.0) -> tuple[int, bytes, dict[str, str]]:
        """One HTTP call; returns (status, body, headers) also for 4xx/5xx."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def token(self, username: str = TEST_USER, password: str = TEST_PASSWORD) -> str:
        status, body, _ = self.request("POST", "/auth/token", {"username": username, "password": password})
        assert status in (200, 201), f"token: {status} {body[:300]!r}"
        return json.loads(body)["access_token"]

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 40.0) -> float:
        """Stop everything we started; returns the seconds it took.

        SIGINT to the standalone parent only: it shuts its components down in order (a SIGINT to the
        whole group makes every component handle it at once, and the scheduler and dag-processor
        were seen hanging). Whatever is left in our process group then gets SIGTERM, then SIGKILL.
        """
        started = time.monotonic()
        pgid = self.proc.pid  # started with start_new_session: its own group, id = its pid
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            if not _group_alive(pgid):
                break
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(pgid):
                time.sleep(0.5)
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)
        return time.monotonic() - started


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process of the group exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def start_standalone(home: Path, extra_env: dict[str, str] | None = None, ready_timeout: float = 180.0) -> AirflowServer:
    """Start ``airflow standalone`` in its own process group with a fixed test user.

    Own session/process group: airflow standalone stops all its components on SIGINT to the group
    (a SIGTERM to the parent alone would orphan them); stop() signals exactly that group.
    """
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (home / "test_passwords.json").write_text(json.dumps(PASSWORDS))
    env = {
        **os.environ,
        **airflow_env(home),
        # standalone starts its components as `airflow ...` from PATH
        "PATH": os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
        "AIRFLOW__TRIGGERER__CAPACITY": "10",
        **(extra_env or {}),
    }
    log_path = home / "standalone.log"
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen([str(VENV_BIN / "airflow"), "standalone"], cwd=str(home), env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = AirflowServer(home=home, port=port, proc=proc, log_path=log_path, extra_env=extra_env or {})
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"airflow standalone exited {proc.returncode}:\n{server.log_tail()}")
        try:
            status, _, _ = server.request("GET", "/api/v2/monitor/health", timeout=3)
            if status == 200:
                return server
        except OSError:
            pass
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"airflow standalone not healthy after {ready_timeout}s:\n{server.log_tail()}")


@dataclass
class InProcessApi:
    """The real Airflow API app (REST, auth, plugins) served by uvicorn on loopback in a thread.

    Starts in a few seconds instead of the ~20 s of a separate ``airflow api-server``, and serves real
    HTTP, so the plugin's call back into ``/api/v2`` on the same server works as in production.
    """

    port: int
    server: object
    thread: object

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: object | None = None, token: str | None = None,
                timeout: float = 30.0) -> tuple[int, bytes, dict[str, str]]:
        return AirflowServer.request(self, method, path, body, token, timeout)  # type: ignore[arg-type]

    def token(self, username: str = TEST_USER, password: str = TEST_PASSWORD) -> str:
        return AirflowServer.token(self, username, password)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def start_inprocess_api(ready_timeout: float = 60.0) -> InProcessApi:
    import threading

    import uvicorn
    from airflow.api_fastapi.app import create_app

    configure_env()
    port = free_port()
    config = uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="airflow-api-test", daemon=True)
    thread.start()
    api = InProcessApi(port=port, server=server, thread=thread)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if server.started:
            return api
        if not thread.is_alive():
            raise RuntimeError("in-process Airflow API server exited during startup")
        time.sleep(0.1)
    api.stop()
    raise RuntimeError(f"in-process Airflow API server not up after {ready_timeout}s")


def sync_dags_to_db() -> None:
    """Parse dags/ and store the DAGs in the metadata DB, as the dag-processor would."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        assert bag.import_errors == {}, bag.import_errors
        sync_bag_to_db(bag, bundle.name, bundle.version)


class LoopbackSite:
    """A tiny linked website on 127.0.0.1 for a handful of ``*.test`` hosts (routed by Host header).

    Enough for a real crawl round through Airflow: robots.txt, HTML pages that link across two hosts,
    one page that changes on every fetch (so a recrawl sees a new digest). The crawler reaches it
    through a ``resolve`` rule (``resolve_rule``), exactly as it reaches the simulated web.
    """

    HOSTS = ("www.alpha.test", "blog.alpha.test")
    PAGES = 6

    def __init__(self) -> None:
        import http.server
        import threading

        site = self
        self.hits = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                site.hits += 1
                host = (self.headers.get("Host") or "").split(":")[0]
                status, ctype, body = site.page(host, self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def resolve_rule(self) -> str:
        return f"*.alpha.test=127.0.0.1:{self.port}"

    def seed_urls(self, n: int = 1) -> list[str]:
        return [f"http://{h}/" for h in self.HOSTS][:n]

    def page(self, host: str, path: str) -> tuple[int, str, str]:
        if host not in self.HOSTS:
            return 404, "text/plain", "no such host"
        if path == "/robots.txt":
            return 200, "text/plain", "User-agent: *\nAllow: /\n"
        other = self.HOSTS[1 - self.HOSTS.index(host)]
        if path == "/":
            idx = -1
        elif path.startswith("/p") and path[2:].isdigit() and int(path[2:]) < self.PAGES:
            idx = int(path[2:])
        else:
            return 404, "text/html", "<html><body>not found</body></html>"
        links = "".join(f'<a href="/p{i}">page {i}</a> ' for i in range(self.PAGES) if i != idx)
        links += f'<a href="http://{other}/">the other host</a>'
        extra = f"<p>visit {self.hits}</p>" if path == "/p0" else ""
        words = " ".join(f"{host.split('.')[0]}-word{(idx + 7) * k % 97}" for k in range(1, 60))
        body = (f"<html><head><title>{host} {path}</title></head><body><h1>{host} {path}</h1>"
                f"<p>{words}</p>{extra}{links}</body></html>")
        return 200, "text/html; charset=utf-8", body

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def inprocess_api_on(root: Path) -> Iterator[InProcessApi]:
    """The real Airflow API app (with our plugin) serving the crawl root ``root``: a migrated DB, the
    DAGs synced, ``CRAWL_ROOT`` set for the plugin while it runs and restored afterwards."""
    saved = os.environ.get("CRAWL_ROOT")
    os.environ["CRAWL_ROOT"] = str(root)
    init_db()
    sync_dags_to_db()
    api = start_inprocess_api()
    try:
        yield api
    finally:
        api.stop()
        if saved is None:
            os.environ.pop("CRAWL_ROOT", None)
        else:
            os.environ["CRAWL_ROOT"] = saved
