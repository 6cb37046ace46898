"""Run a snippet in a fresh interpreter: what a process imports or does at its start can only be seen
from outside it (a test's own process has imported everything already)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping


def python_c(code: str, *args: str, timeout: float = 300, env: Mapping[str, str] | None = None) -> str:
    """stdout of ``python -c code args...`` with this interpreter (``env``: the whole environment, else
    this process's); fails the test with its stderr if it fails."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                         env=None if env is None else dict(env))
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
