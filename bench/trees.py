"""A git revision's ``crawl/`` extracted beside the checkout: the baseline side of the benches' A/Bs.

One definition for every bench with ``--baseline-rev`` (run_bench, fetch_cpu_bench, writes_bench,
warc_writer_bench, fetch_same_outputs). Imports nothing of ``crawl``, so a bench's child process
running on either tree can import this module without mixing the trees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# the tree's own warm-up of its compiled kernels, newest first (crawl.parse.warm_up also loads parse's
# charset kernels; revisions before it only had the fingerprint kernels)
_WARM_UP = ("try:\n    from crawl.parse import warm_up\nexcept ImportError:\n"
            "    from crawl.fingerprint import warm_up\nwarm_up()\n")


def tree_at(rev: str, dest: Path, warm: bool = False) -> Path:
    """``crawl/`` of git revision ``rev`` extracted under ``dest`` (importable as ``crawl``).

    ``warm``: compile the tree's numba kernels now. numba's on-disk cache is per source path, so an
    extracted tree starts with none, and without this its first run pays the compiles (~10 s of CPU
    seen as a 30-40 s first request in a whole ``crawl run``) that the checkout's cache spares the
    other side."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev, "crawl"], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    if warm:
        subprocess.run([sys.executable, "-c", _WARM_UP], check=True, env={**os.environ, "PYTHONPATH": str(dest)},
                       cwd=dest, timeout=600)
        compile_tree(dest)
    return dest


def compile_tree(tree: Path) -> None:
    """Write the bytecode of ``tree``'s ``crawl/`` package (``python -m compileall``), as an install does.

    Why: with ``PYTHONDONTWRITEBYTECODE=1`` in the environment (this box's, and the project's Docker
    image's before session 15) no process writes ``__pycache__``, so every process of a timed ``crawl
    run`` -- the CLI, the forkserver, each worker for what it imports after the fork -- compiled
    ``crawl/`` from source: ~0.29 s of CPU for the whole package, ~0.14 s in the forkserver before the
    first request (bench/RESULTS.md, "session 15, helper small15"); pip compiles the bytecode of the
    packages it installs (ours and Scrapy's dependencies alike). Files whose source changes afterwards
    are compiled again in memory at import (their bytecode no longer matches): still correct."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "crawl")], check=True,
                   capture_output=True, timeout=600)
