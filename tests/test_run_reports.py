"""``crawl run`` writes each round's HTML report in a thread beside the next round (crawl.cli._Reports):
every report must still exist when the process ends, and a report that fails must still fail the run,
before the next round is published.

The CLI runs as a user runs it (a subprocess against the simulated web). A report is made to fail for
real: its path is taken by a directory, so the report's atomic rename onto it fails (IsADirectoryError)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from crawl.store import Store

REPO = Path(__file__).resolve().parent.parent
CRAWL = "reports"


def _run(simweb, root: Path, rounds: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "crawl", "run", "--root", str(root), "--crawl-id", CRAWL,
           "--resolve", simweb.resolve_rule, "--delay", "0", "--max-pages", "12", "--rounds", str(rounds),
           "--workers", "1", "--no-dashboard", "--seeds", *simweb.seed_urls(3)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=str(REPO))


def _report(root: Path, n: int) -> Path:
    return root / "reports" / f"crawl={CRAWL}" / f"round={n:05d}.html"


def test_every_report_is_written_before_the_run_ends_and_the_last_ones_failure_fails_it(simweb, tmp_path):
    root = tmp_path / "root"
    _report(root, 2).mkdir(parents=True)  # round 2's report cannot be written: the run must fail
    proc = _run(simweb, root, rounds=2)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "IsADirectoryError" in proc.stderr, proc.stderr[-3000:]
    assert "summary:" not in proc.stdout  # the run did not report success
    assert Store(str(root), CRAWL).current_round() == 2
    html = _report(root, 1).read_text()  # round 1's, written beside round 2, is complete
    assert html.rstrip().endswith("</html>") and "round 1" in html.lower()
    assert f"round 1 report: {_report(root, 1)}" in proc.stderr


def test_a_failed_report_stops_the_run_before_the_next_round_is_published(simweb, tmp_path):
    root = tmp_path / "root"
    _report(root, 1).mkdir(parents=True)
    proc = _run(simweb, root, rounds=2)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "IsADirectoryError" in proc.stderr, proc.stderr[-3000:]
    store = Store(str(root), CRAWL)
    assert store.current_round() == 1  # round 2 was fetched beside the report, never updated or published
    assert not store.exists(store.round_dir(2, "update.json"))
    assert not _report(root, 2).exists()
