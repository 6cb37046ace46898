"""Shared fixtures: a real simulated web (``python -m crawl.simweb serve``) as a subprocess on loopback.

``simweb`` (module scope) is a small web (30 hosts, ~20 pages/host, seed 1); ``make_simweb(...)`` starts
others of any size. Both stop the server by its PID at teardown (SIGTERM, then SIGKILL after 10 s).
"""

from __future__ import annotations

import http.client
import json
import subprocess
from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parent.parent
DEFAULT_HOSTS, DEFAULT_SEED, DEFAULT_PAGES = 30, 1, 20


class SimWeb:
    """A running simulated web: where it listens, how to reach it, and its ground truth."""

    def __init__(self, proc: subprocess.Popen, port: int, hosts: int, seed: int, pages_per_host: int,
                 access_log: Path, stderr_path: Path):
        self.proc = proc
        self.port = port
        self.hosts = hosts
        self.seed = seed
        self.pages_per_host = pages_per_host
        self.access_log = access_log
        self.stderr_path = stderr_path
        self.base = f"http://127.0.0.1:{port}"
        self.resolve_rule = f"*.sim.test=127.0.0.1:{port}"

    @cached_property
    def model(self):
        """The same model the server built (pure function of hosts/seed/pages), built in this process."""
        from crawl.simweb.model import SimParams, build
        return build(SimParams(seed=self.seed, hosts=self.hosts, pages_per_host=self.pages_per_host))

    def seed_urls(self, n: int = 5) -> list[str]:
        """Home pages of normal hosts with a plain robots.txt and no crawl-delay."""
        return self.model.seed_urls(n)

    def truth(self, at: float | None = None) -> pa.Table:
        """Ground truth at virtual time ``at`` (default: the server's current virtual time)."""
        from crawl.simweb.truth import truth_table
        return truth_table(self.model, self.clock()["time"] if at is None else at)

    def request(self, url: str, method: str = "GET", headers: dict[str, str] | None = None,
                body: bytes | None = None, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
        """One raw HTTP request to ``url`` through the server (Host header from the URL, no redirects)."""
        parts = urlsplit(url)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            h = {"Host": parts.netloc, "User-Agent": "simweb-test"}
            h.update(headers or {})
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request(method, target, body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def clock(self) -> dict:
        return json.loads(self.request(self.base + "/_sim/clock")[2])

    def set_clock(self, t: float | None = None, speed: float | None = None) -> dict:
        payload = {k: v for k, v in (("time", t), ("speed", speed)) if v is not None}
        status, _, data = self.request(self.base + "/_sim/clock", "POST", {"Content-Type": "application/json"},
                                       json.dumps(payload).encode())
        assert status == 200, data
        return json.loads(data)

    def flush_log(self) -> int:
        """Make the server write out its access log now (``POST /_sim/flush``); returns its line count.

        Every request answered before this call is then in the file: read it after this, never after a
        sleep (the background flush runs only twice a second)."""
        status, _, data = self.request(self.base + "/_sim/flush", "POST")
        assert status == 200, data
        return json.loads(data)["lines"]

    def log(self) -> pa.Table:
        """The access log as a table, flushed first (see :meth:`flush_log`)."""
        from crawl.simweb.accesslog import read_log

        self.flush_log()
        return read_log(self.access_log)

    def stats(self) -> dict:
        return json.loads(self.request(self.base + "/_sim/stats")[2])

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode


def start_simweb(workdir: Path, hosts: int = DEFAULT_HOSTS, seed: int = DEFAULT_SEED,
                 pages_per_host: int = DEFAULT_PAGES, extra_args: tuple[str, ...] = (),
                 ready_timeout: float = 60.0) -> SimWeb:
    """Start ``python -m crawl.simweb serve --port 0`` and wait for its READY line."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "access.jsonl"
    err = workdir / "simweb.stderr"
    from crawl.simweb.launch import launch

    proc, port = launch(hosts, seed, log, pages_per_host, extra_args, err, ready_timeout)
    return SimWeb(proc, port, hosts, seed, pages_per_host, log, err)


@pytest.fixture(scope="module")
def simweb(tmp_path_factory: pytest.TempPathFactory):
    sw = start_simweb(tmp_path_factory.mktemp("simweb"))
    try:
        yield sw
    finally:
        sw.stop()


@pytest.fixture
def make_simweb(tmp_path_factory: pytest.TempPathFactory):
    started: list[SimWeb] = []

    def factory(hosts: int = DEFAULT_HOSTS, seed: int = DEFAULT_SEED, pages_per_host: int = DEFAULT_PAGES,
                extra_args: tuple[str, ...] = ()) -> SimWeb:
        sw = start_simweb(tmp_path_factory.mktemp("simweb"), hosts, seed, pages_per_host, extra_args)
        started.append(sw)
        return sw

    try:
        yield factory
    finally:
        for sw in started:
            sw.stop()
