"""The product in a real browser (Debian's Chromium through Playwright), the way a new user meets it.

Start Airflow as ``make airflow`` does, log in through the login page, open Dags → recrawl → Trigger,
check that the Trigger button is enabled with the form's defaults, fill in seeds of the simulated web,
submit, and wait (REST) for the run to succeed; then the crawl dashboard. Screenshots of every page go
to ``test-artifacts/test_browser/<test>/`` (not committed).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import AirflowServer
from browser import (  # noqa: F401 - fixtures are found by name
    Artifacts,
    airflow_ui,
    artifacts,
    chromium,
    login_through_form,
    new_page,
    poll,
    run_state,
)
from browser_dashboard import check_dashboard
from playwright.sync_api import expect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CRAWL = "browser"
RUN_TIMEOUT_S = 420


def _latest_run(server: AirflowServer, token: str) -> dict[str, Any] | None:
    status, body, _ = server.request(
        "GET", "/api/v2/dags/recrawl/dagRuns?order_by=-run_after&limit=1", token=token)
    runs = json.loads(body)["dag_runs"] if status == 200 else []
    return runs[0] if runs else None


def trigger_through_the_form(page: Any, server: AirflowServer, shots: Artifacts, seeds: list[str]) -> None:
    """Dags → recrawl → Trigger: defaults enable the button; fill crawl id and seeds; submit."""
    page.get_by_role("link", name="Dags").first.click()
    page.wait_for_url(lambda url: url.rstrip("/").endswith("/dags"))
    page.get_by_role("link", name="recrawl", exact=True).first.wait_for()
    shots.shot(page, "dags")
    page.get_by_role("link", name="recrawl", exact=True).first.click()
    page.wait_for_url(lambda url: url.rstrip("/").endswith("/dags/recrawl"))
    page.get_by_text("fetch_parse").first.wait_for()
    shots.shot(page, "dag-recrawl")

    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.locator("[role=dialog][data-state=open]")
    dialog.get_by_text("Run Parameters").wait_for()
    submit = dialog.get_by_role("button", name="Trigger", exact=True)
    submit.wait_for()
    # The bug: empty optional string params made the form invalid and disabled this button.
    assert submit.is_enabled(), "Trigger button disabled with the form's defaults"
    shots.shot(page, "trigger-form-defaults")

    # Airflow's form names each Param's field element_<param> (the labels are not tied to them).
    # The declared bounds reach the form (crawl.config.CrawlSettings: 0 <= coverage share <= 1): its
    # number field clamps a value typed outside them.
    share = dialog.locator("[name=element_coverage_share]")
    share.fill("1.5")
    share.blur()
    expect(share).to_have_value("1", timeout=20_000)
    shots.shot(page, "trigger-form-clamped")
    share.fill("-3")
    share.blur()
    expect(share).to_have_value("0", timeout=20_000)
    share.fill("")
    share.blur()
    expect(submit).to_be_enabled(timeout=20_000)
    dialog.locator("[name=element_crawl_id]").fill(CRAWL)
    dialog.locator("[name=element_seeds]").fill("\n".join(seeds))
    assert submit.is_enabled(), "Trigger button disabled after filling crawl id and seeds"
    shots.shot(page, "trigger-form-filled")
    submit.click()
    dialog.wait_for(state="detached")


def test_trigger_a_crawl_from_the_ui(chromium, airflow_ui: AirflowServer, simweb,  # noqa: F811
                                     artifacts: Artifacts) -> None:  # noqa: F811
    started = time.monotonic()
    token = airflow_ui.token()
    seeds = simweb.seed_urls(3)
    before = _latest_run(airflow_ui, token)

    page = new_page(chromium)
    try:
        login_through_form(page, airflow_ui, shot=lambda name: artifacts.shot(page, name))
        artifacts.shot(page, "home")
        trigger_through_the_form(page, airflow_ui, artifacts, seeds)

        run = poll(lambda: (r := _latest_run(airflow_ui, token)) and r != before and r, 60,
                   what="the run the form triggered")
        run_id = run["dag_run_id"]
        assert run["conf"]["seeds"] == seeds and run["conf"]["crawl_id"] == CRAWL, run["conf"]
        assert run["conf"].get("coverage_share") is None, run["conf"]  # cleared: the config's default applies
        assert run["run_type"] == "manual"
        state = poll(lambda: (s := run_state(airflow_ui, token, "recrawl", run_id)) in ("success", "failed") and s,
                     RUN_TIMEOUT_S, what=f"DAG run {run_id}")
        if state != "success":
            _, tis, _ = airflow_ui.request("GET", f"/api/v2/dags/recrawl/dagRuns/{run_id}/taskInstances",
                                           token=token)
            states = {t["task_id"]: t["state"] for t in json.loads(tis)["task_instances"]}
            pytest.fail(f"run {state}: {states}\n{airflow_ui.log_tail(80)}")
        run_seconds = time.monotonic() - started

        page.goto(f"{airflow_ui.url}/dags/recrawl/runs/{run_id}")
        page.get_by_text("report").first.wait_for()
        page.get_by_text("success").first.wait_for()
        artifacts.shot(page, "run-succeeded")

        check_dashboard(page, airflow_ui, artifacts, Path(airflow_ui.extra_env["CRAWL_ROOT"]), CRAWL, run_id)
    finally:
        page.context.close()
    print(f"browser: login → trigger → run succeeded in {run_seconds:.1f}s; "
          f"whole test {time.monotonic() - started:.1f}s; screenshots: {[str(p) for p in artifacts.saved]}")
