"""Run a snippet in a fresh interpreter: what a process imports or does at its start can only be seen
from outside it (a test's own process has imported everything already)."""

from __future__ import annotations

import subprocess
import sys


def python_c(code: str, timeout: float = 300) -> str:
    """stdout of ``python -c code`` with this interpreter; fails the test with its stderr if it fails."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
