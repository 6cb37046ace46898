"""``crawl run`` progress (issue 9 part 4): a live bar per step with pages/s and ETA on a terminal, plain
lines otherwise, and the embedded Dask cluster's dashboard served (bokeh) with its URL printed.

The CLI runs as a user runs it (a subprocess against the simulated web); the terminal is a real pty."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from crawl.config import load_config
from crawl.progress import LineProgress

REPO = Path(__file__).resolve().parent.parent


def _crawl_run(simweb, root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "crawl", "run", "--root", str(root), "--crawl-id", "progress",
            "--resolve", simweb.resolve_rule, "--delay", "0", "--rounds", "1", "--workers", "1",
            "--seeds", *simweb.seed_urls(3), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def test_line_progress_reports_rate_and_eta() -> None:
    out = io.StringIO()
    with LineProgress(out) as p:
        p.start("fetch_parse", total=10)
        p.advance(4)
        p.advance(6)
    lines = out.getvalue().splitlines()
    assert lines[0] == "fetch_parse: started (10 pages)"
    assert re.fullmatch(r"fetch_parse: 4/10 pages, [0-9.]+ pages/s, ETA \d+ s", lines[1]), lines[1]
    assert re.fullmatch(r"fetch_parse: 10/10 pages, [0-9.]+ pages/s", lines[2]), lines[2]  # no ETA when done
    assert re.fullmatch(r"fetch_parse: done in [0-9.]+ s", lines[3]), lines[3]


def test_plain_lines_without_a_terminal(simweb, tmp_path: Path) -> None:
    proc = subprocess.run(_crawl_run(simweb, tmp_path / "root"), capture_output=True, text=True, env=_env(),
                          timeout=600, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr[-2000:]
    err = proc.stderr
    assert "\x1b[" not in err, "escape codes written to a file"
    for step in ("inject", "generate", "fetch_parse", "update", "reprioritise", "publish"):
        assert re.search(rf"^{step}: done in [0-9.]+ s$", err, re.M), step
    assert re.search(r"^fetch_parse: 3/3 pages, [0-9.]+ pages/s$", err, re.M), err
    assert re.search(r"^Dask dashboard: http://127\.0\.0\.1:\d+/status$", err, re.M), err


def test_live_bars_on_a_terminal(simweb, tmp_path: Path) -> None:
    primary, secondary = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(primary, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {**_env(), "COLUMNS": "160", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.run(_crawl_run(simweb, tmp_path / "root"), stdout=subprocess.PIPE, stderr=secondary,
                          env=env, timeout=600, cwd=str(REPO))
    os.close(secondary)
    reader.join(timeout=10)
    os.close(primary)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    assert proc.returncode == 0, shown[-2000:]
    assert "━" in shown, "no bar drawn"  # rich's bar glyph
    bar = [line for line in shown.splitlines() if line.startswith("fetch_parse")]
    assert bar and re.search(r"3/3\s+100%\s+[0-9.]+ pages/s\s+ETA", bar[-1]), bar[-3:]
    assert re.search(r"Dask dashboard: http://127\.0\.0\.1:\d+/status", shown)


def test_embedded_cluster_serves_its_dashboard_and_can_turn_it_off() -> None:
    from crawl.cluster import dask_client

    said: list[str] = []
    cfg = load_config(overrides={"dask_workers": 1}, use_env=False)
    with dask_client(cfg, announce=said.append) as client:
        link = client.dashboard_link
        assert said == [f"Dask dashboard: {link}"] and link.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(link, timeout=30) as resp:
            assert resp.status == 200 and b"Dask" in resp.read()
    said.clear()
    with dask_client(cfg.replace(dask_dashboard=False), announce=said.append) as client:
        assert said == []
        # the scheduler's plain HTTP server stays (health checks) on a free port, without the dashboard
        port = int(client.dashboard_link.rsplit(":", 1)[1].split("/")[0])
        assert port != 8787
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30)
        assert err.value.code == 404


@pytest.mark.parametrize("argv, key, value", [
    (["--no-dashboard"], "dask_dashboard", False),
    (["--dashboard-port", "8799"], "dask_dashboard_port", 8799),
])
def test_dashboard_flags(argv: list[str], key: str, value: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from crawl import cli

    for k in [k for k in os.environ if k.startswith("CRAWL_")]:
        monkeypatch.delenv(k)
    cfg = cli.build_config(cli.build_parser().parse_args(["stats", *argv]))
    assert getattr(cfg, key) == value
    assert getattr(cli.build_config(cli.build_parser().parse_args(["stats"])), key) == getattr(load_config(), key)
