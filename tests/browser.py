"""Browser-test fixtures: Debian's Chromium driven by Playwright against a real ``airflow standalone``.

Reuse them from a test module with ``from browser import *`` (pytest finds fixtures imported into a
module). What they give:

* ``airflow_ui``: ``airflow standalone`` started the way ``make airflow`` starts it (this repo's dags/
  and plugins/, SimpleAuthManager with a fixed user, LocalExecutor on SQLite) by
  ``tests/airflow_harness.start_standalone``, crawling the simulated web (``simweb`` from conftest.py)
  through ``CRAWL_RESOLVE``; up once the ``recrawl`` DAG is parsed.
* ``chromium``: one browser per module: ``/usr/bin/chromium`` (``make chromium`` installs Debian's
  package) launched through Playwright's ``executable_path``: Playwright's own browser download cannot
  work without internet access, and ``--no-sandbox`` because tests run as root.
* ``logged_in_page``: a page whose context carries the ``_token`` cookie from ``POST /auth/token`` (for
  tests that do not test the login itself); :func:`login_through_form` logs in as a user does.
* ``artifacts``: where a test saves screenshots: ``test-artifacts/<module>/<test>/NN-name.png``
  (git-ignored), kept after the run so a human can look at what the browser saw.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import REPO, TEST_PASSWORD, TEST_USER, AirflowServer, start_standalone

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run", "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"
PAGE_TIMEOUT_MS = 60_000  # a shared 2-core machine: the UI's first render can take a while
VIEWPORT = {"width": 1400, "height": 900}

__all__ = [
    "ARTIFACTS", "CHROMIUM", "CHROMIUM_ARGS", "Artifacts", "airflow_ui", "artifacts", "chromium",
    "logged_in_page", "login_through_form", "new_page", "poll", "run_state",
]


def poll(fn: Callable[[], Any], timeout: float, every: float = 2.0, what: str = "") -> Any:
    """Call ``fn`` until it returns a truthy value; bounded in time."""
    deadline = time.monotonic() + timeout
    last_error: OSError | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
        except OSError as e:  # a REST call that timed out under load is "not yet", not a failure
            last_error, value = e, None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


def run_state(server: AirflowServer, token: str, dag_id: str, run_id: str) -> str | None:
    status, body, _ = server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", token=token)
    return json.loads(body)["state"] if status == 200 else None


@pytest.fixture(scope="module")
def airflow_ui(tmp_path_factory: pytest.TempPathFactory, simweb) -> Iterator[AirflowServer]:
    """A private ``airflow standalone`` whose crawls reach the simulated web; stopped by its PID."""
    home = tmp_path_factory.mktemp("airflow-ui")
    server = start_standalone(home, extra_env={
        "CRAWL_ROOT": str(home / "crawldata"),
        "CRAWL_RESOLVE": simweb.resolve_rule,
        "CRAWL_POLITENESS_DELAY_S": "0",
        "RECRAWL_TASK_RETRIES": "0",  # a failure shows at once instead of after backoff
    })
    try:
        token = server.token()
        poll(lambda: server.request("GET", "/api/v2/dags/recrawl", token=token)[0] == 200, 180,
             what="the recrawl DAG to be parsed")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's Chromium through Playwright (``make chromium`` installs it)."""
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"no Chromium at {CHROMIUM}: run `make chromium` (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Any, cookies: list[dict[str, Any]] | None = None) -> Any:
    """A page in a fresh browser context (no state shared with other tests)."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    if cookies:
        context.add_cookies(cookies)
    return context.new_page()


def login_through_form(page: Any, server: AirflowServer, username: str = TEST_USER,
                       password: str = TEST_PASSWORD, shot: Callable[[str], Any] | None = None) -> None:
    """Open the UI, get sent to the login page, fill username and password, sign in.

    ``shot(name)`` is called on the login page before it is filled in (a screenshot hook).
    """
    page.goto(server.url + "/")
    page.wait_for_url(re.compile(r"/auth/login"))
    page.locator("input[name=username]").wait_for()
    if shot:
        shot("login")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)
    page.get_by_role("link", name="Dags").first.wait_for()


@pytest.fixture
def logged_in_page(chromium, airflow_ui: AirflowServer) -> Iterator[Any]:
    """A page already logged in (the ``_token`` cookie the login page would set)."""
    page = new_page(chromium, cookies=[{"name": "_token", "value": airflow_ui.token(), "url": airflow_ui.url}])
    try:
        yield page
    finally:
        page.context.close()


@dataclass
class Artifacts:
    """Screenshots of one test, numbered in the order taken."""

    folder: Path
    saved: list[Path] = field(default_factory=list)

    def shot(self, page: Any, name: str, full_page: bool = True) -> Path:
        path = self.folder / f"{len(self.saved) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        self.saved.append(path)
        return path


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Artifacts:
    module = Path(request.node.fspath).stem
    folder = ARTIFACTS / module / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return Artifacts(folder)
