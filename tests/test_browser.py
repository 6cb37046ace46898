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


def _run_count(server: AirflowServer, token: str) -> int:
    status, body, _ = server.request("GET", "/api/v2/dags/recrawl/dagRuns?limit=1", token=token)
    assert status == 200, body
    return json.loads(body)["total_entries"]


def open_trigger_form(page: Any, server: AirflowServer, shots: Artifacts) -> tuple[Any, Any]:
    """Dags → recrawl → Trigger: the open dialog and its Trigger button."""
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
    return dialog, submit


def trigger_through_the_form(page: Any, server: AirflowServer, shots: Artifacts, seeds: list[str]) -> None:
    """Dags → recrawl → Trigger: defaults enable the button; fill crawl id and seeds; submit."""
    dialog, submit = open_trigger_form(page, server, shots)
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


# What an operator types that the engine refuses (crawl.round.validate_seeds): each with the text the form's
# error must show (the seed as Airflow's jsonschema message quotes it).
BAD_FORM_SEEDS = [
    ("example.org", "'example.org'"),  # no scheme, as typed in a browser's address bar
    ("http://www.alpha.test/ http://www.beta.test/", "'http://www.alpha.test/ http://www.beta.test/'"),  # two on a line
    ("htp://x.test/", "'htp://x.test/'"),  # a typo in the scheme
    ("http://www.alpha.test/\n\nhttp://www.beta.test/", "''"),  # an empty line between two good seeds
]


def test_the_form_refuses_bad_seeds_before_a_run_exists(chromium, airflow_ui: AirflowServer,  # noqa: F811
                                                        artifacts: Artifacts) -> None:  # noqa: F811
    """Type each bad seed into the trigger form and press Trigger: the dialog stays open and shows
    Airflow's refusal naming the seed and saying what a seed must be; no DAG run is created (Airflow's
    REST API counts them). Airflow 3.3 validates the Params' JSON schema on the server when the run is
    created (jsonschema; its form checks only that required fields are filled), so the refusal is the
    trigger request's 400, shown in the dialog."""
    token = airflow_ui.token()
    before = _run_count(airflow_ui, token)
    page = new_page(chromium, cookies=[{"name": "_token", "value": token, "url": airflow_ui.url}])
    try:
        page.goto(airflow_ui.url + "/")
        dialog, submit = open_trigger_form(page, airflow_ui, artifacts)
        dialog.locator("[name=element_crawl_id]").fill("badseeds")
        for i, (typed, named) in enumerate(BAD_FORM_SEEDS):
            dialog.locator("[name=element_seeds]").fill(typed)
            submit.click()
            refusal = dialog.get_by_text("Invalid input for param seeds").first
            expect(refusal).to_contain_text(named, timeout=30_000)  # this seed's refusal, not the last one's
            expect(refusal).to_contain_text("each line one URL starting with http: or https:")
            refusal.scroll_into_view_if_needed()
            artifacts.shot(page, f"refused-{i}", full_page=False)
            print(f"refused {typed!r}: {refusal.inner_text().splitlines()[0][:120]!r}")
            assert dialog.is_visible(), typed  # still open: the operator fixes the seed and triggers again
            # Airflow's "Failed to Trigger Dag" toast covers the Trigger button for a few seconds (the pointer
            # resting on it keeps it): move away as a person would and let it go
            page.mouse.move(5, 5)
            page.locator("[data-scope=toast][data-part=root]").first.wait_for(state="detached", timeout=30_000)
        assert _run_count(airflow_ui, token) == before, "a bad seed created a DAG run"
    finally:
        page.context.close()


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
