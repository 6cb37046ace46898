"""Start ``python -m crawl.simweb serve --port 0`` as a child process and wait for its READY line.

The one launcher the tests, the demo and the benchmarks share: a free port, the access log where the
caller wants it, and a clear error with the server's stderr when it does not come up.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


#: rendered-page memory of a launched simulated web: a 20,000-page benchmark set is ~0.7 GB of bodies;
#: at the CLI's 256 MB LRU every request of a pass over it missed and re-rendered its page, so the server
#: (one process) measured its own rendering and capped the bare-loop ceilings at ~1 core of it
RENDER_CACHE_MB = 4096


def launch(hosts: int, seed: int, access_log: Path, pages_per_host: int | None = None,
           extra_args: tuple[str, ...] = (), stderr_path: Path | None = None,
           ready_timeout: float = 60.0) -> tuple[subprocess.Popen, int]:
    """(process, port) of a running simulated web; the caller stops it by its PID."""
    cmd = [sys.executable, "-m", "crawl.simweb", "serve", "--hosts", str(hosts), "--seed", str(seed),
           "--port", "0", "--access-log", str(access_log), "--render-cache-mb", str(RENDER_CACHE_MB),
           *extra_args]
    if pages_per_host is not None:
        cmd[cmd.index("--port"):cmd.index("--port")] = ["--pages-per-host", str(pages_per_host)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    err = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env)
    finally:
        if stderr_path:
            err.close()
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline().decode()
            if line.startswith("SIMWEB READY"):
                return proc, int(line.strip().rsplit(":", 1)[1])
    if proc.poll() is None:
        proc.kill()
    proc.wait(5)
    detail = stderr_path.read_text(errors="replace")[-2000:] if stderr_path else ""
    raise RuntimeError(f"the simulated web did not start: {detail}")


@contextlib.contextmanager
def served(hosts: int, seed: int, prefix: str) -> Iterator[tuple[Path, int]]:
    """(folder, port): a simulated web for the length of a with-block, with a fresh temp folder (its
    access log at ``access.jsonl``) for the caller's files too; after the block the server is stopped
    (:func:`stop`) and the folder removed -- the set-up and teardown each benchmark used to write out."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        proc, port = launch(hosts, seed, work / "access.jsonl")
        try:
            yield work, port
        finally:
            stop(proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stop(proc: subprocess.Popen) -> None:
    """Stop a child started here (the simulated web, or any server a test or bench started) by its
    PID: SIGTERM, then SIGKILL if it has not exited within 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
