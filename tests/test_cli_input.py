"""What an operator's mistakes on the command line get back: ``python -m crawl`` as a real process on real
roots. Bad input exits with status 2 and one line naming what was wrong (README, *Crawl from the command
line*: "2 bad input"), never a traceback, and writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CRAWL = [sys.executable, "-m", "crawl"]


def _crawl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CRAWL, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(("argv", "says"), [
    (["stats", "--config", "{tmp}/no-such.yaml"], "config file {tmp}/no-such.yaml: cannot be read"),
    (["round", "--now", "yesterday", "--no-dashboard"], "--now: not an ISO 8601 time"),
    (["run", "--rounds", "-1", "--seeds", "http://a.example/", "--no-dashboard"], "--rounds: must be >= 0"),
], ids=["missing-config-file", "bad-now", "negative-rounds"])
def test_bad_input_exits_2_names_it_and_writes_nothing(tmp_path: Path, argv: list[str], says: str) -> None:
    root = tmp_path / "root"
    out = _crawl(*[a.replace("{tmp}", str(tmp_path)) for a in argv], "--root", str(root))
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert says.replace("{tmp}", str(tmp_path)) in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert not root.exists()  # no lease taken, no round started, nothing injected
