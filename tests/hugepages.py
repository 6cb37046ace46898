"""Transparent huge pages in tests. The kernel's per-process "no huge pages" flag (``PR_SET_THP_DISABLE``,
which :func:`crawl.warmup.no_transparent_hugepages` sets) is inherited by child processes, and tests call
``crawl.cli.main`` inside pytest's own process, which sets it there. A test that checks our code set it in
a child must therefore start the child from a process that allows huge pages, or it passes whatever our
code does."""

from __future__ import annotations

import ctypes

_PR_SET_THP_DISABLE = 41

#: Python source: allow huge pages in the process that runs it (first line of a fresh interpreter's snippet).
ALLOW_CODE = f"import ctypes; ctypes.CDLL(None).prctl({_PR_SET_THP_DISABLE}, 0, 0, 0, 0)\n"

#: Python expression: the process's ``THP_enabled`` from /proc/self/status ("0" once the flag is set).
THP_ENABLED_EXPR = "next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('THP_enabled:'))"


def allow_hugepages() -> None:
    """Clear the flag in this process, so the processes it starts next inherit huge pages allowed."""
    ctypes.CDLL(None).prctl(_PR_SET_THP_DISABLE, 0, 0, 0, 0)
