"""The start of a command that runs an embedded cluster (``crawl run``, ``crawl round``, ``crawl step
fetch_parse``): its forkserver is spawned before the CLI's imports (crawl.prestart), preloads without SciPy
and pandas (crawl.forkserver), and tasks submitted before the workers exist go one per worker
(crawl.cluster.EMBEDDED_WORKER_CONFIG). Real processes throughout."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from crawl.config import load_config
from crawl.prestart import embedded_cluster_likely

# Runs ``python -m crawl ARGS`` in this interpreter and prints, when ``crawl.config`` is first imported (the
# CLI's first heavy import), whether the forkserver was already spawned, then the command's exit status.
_PROBE = """
import multiprocessing.forkserver as fs, runpy, sys

class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "crawl.config":
            print("forkserver-before-config", fs._forkserver._forkserver_pid is not None, flush=True)
            sys.meta_path.remove(self)

sys.meta_path.insert(0, Probe())
sys.argv = ["crawl", *sys.argv[1:]]
try:
    runpy.run_module("crawl", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    print("exit", exc.code, flush=True)
except Exception as exc:
    print("exit", type(exc).__name__, flush=True)
"""


def _python_m_crawl(*args: str, env: dict[str, str] | None = None) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return [ln for ln in out.stdout.splitlines() if ln.startswith(("forkserver-before-config", "exit"))]


def test_python_m_crawl_spawns_the_forkserver_before_the_cli_imports(tmp_path) -> None:
    root = str(tmp_path / "root")
    # crawl run: zero rounds still enters (and closes) its embedded cluster
    assert _python_m_crawl("run", "--root", root, "--rounds", "0", "--no-dashboard")[:2] == [
        "forkserver-before-config True", "exit 0"]
    # crawl round with nothing due: started early too (the command then ends without a cluster; the report of
    # a round that fetched nothing fails to build on a crawl that never fetched, as before: not asserted here)
    assert _python_m_crawl("round", "--root", root, "--no-dashboard")[0] == "forkserver-before-config True"
    # commands without a cluster, or with an external scheduler, spawn none
    assert _python_m_crawl("stats", "--root", root)[:2] == ["forkserver-before-config False", "exit 0"]
    assert _python_m_crawl("round", "--root", root, "--dask-address", "tcp://127.0.0.1:1", "--set",
                           "dask_wait_for_workers_s=1")[0] == "forkserver-before-config False"


def test_which_command_lines_start_the_forkserver_early(tmp_path) -> None:
    assert embedded_cluster_likely(["run", "--seeds", "http://a.test/"], {})
    assert embedded_cluster_likely(["round", "--root", "x"], {})
    assert embedded_cluster_likely(["step", "fetch_parse", "--round", "3"], {})
    assert not embedded_cluster_likely(["step", "update", "--round", "3"], {})
    assert not embedded_cluster_likely(["stats"], {})
    assert not embedded_cluster_likely([], {})
    assert not embedded_cluster_likely(["run", "--help"], {})
    assert not embedded_cluster_likely(["run", "--dask-address", "tcp://s:8786"], {})
    assert not embedded_cluster_likely(["run", "--dask-address=tcp://s:8786"], {})
    assert not embedded_cluster_likely(["run", "--set", "dask_address=tcp://s:8786"], {})
    assert not embedded_cluster_likely(["run", "--config-json", '{"dask_address": "tcp://s:8786"}'], {})
    # the Airflow DAG's steps pass their whole config, an empty dask_address among it
    assert embedded_cluster_likely(["step", "fetch_parse", "--config-json", '{"dask_address": "", "x": 1}'], {})
    assert not embedded_cluster_likely(["step", "fetch_parse", "--config-json", "not json"], {})
    assert embedded_cluster_likely(["run", "--dask-address", ""], {})
    assert embedded_cluster_likely(["run", "--set", "max_pages=3"], {})
    assert not embedded_cluster_likely(["run"], {"CRAWL_DASK_ADDRESS": "tcp://s:8786"})
    assert embedded_cluster_likely(["run"], {"CRAWL_DASK_ADDRESS": " "})
    with_address, without = tmp_path / "a.yaml", tmp_path / "b.yaml"
    with_address.write_text("dask_address: tcp://s:8786\n")
    without.write_text("max_pages: 10\ndask_address: ''  # embedded\n")
    assert not embedded_cluster_likely(["run", "--config", str(with_address)], {})
    assert not embedded_cluster_likely(["run", f"--config={with_address}"], {})
    assert embedded_cluster_likely(["run", "--config", str(without)], {})
    assert not embedded_cluster_likely(["run", "--config", str(tmp_path / "missing.yaml")], {})


def _worker_view() -> dict[str, object]:
    import pyarrow as pa

    from crawl.fingerprint import fingerprints

    withheld = {m: m in sys.modules for m in ("scipy", "pandas")}
    return {"withheld_loaded": withheld, "fingerprint": fingerprints("Grüße aus Köln: café, naïve, ŒUVRE"),
            "to_pandas": type(pa.table({"a": [1, 2]}).to_pandas()).__name__}


def test_workers_come_without_scipy_and_pandas_and_still_fingerprint_and_convert() -> None:
    """The forkserver withholds SciPy and pandas from its preload (numba's BLAS probe, pyarrow's pandas shim):
    the workers do not have them loaded, parse's compiled kernel gives the plain-Python values, and a worker
    that asks pyarrow for pandas explicitly still gets it."""
    from crawl.cluster import dask_client
    from crawl.fingerprint import fingerprints

    cfg = load_config(overrides={"dask_workers": 1, "dask_dashboard": False}, use_env=False)
    with dask_client(cfg) as client:
        got = next(iter(client.run(_worker_view).values()))
    assert got["withheld_loaded"] == {"scipy": False, "pandas": False}
    assert got["fingerprint"] == fingerprints("Grüße aus Köln: café, naïve, ŒUVRE")
    assert got["to_pandas"] == "DataFrame"


def _hold(seconds: float) -> tuple[str, float]:
    from distributed import get_worker

    started = time.time()
    time.sleep(seconds)
    return get_worker().address, started


@pytest.mark.parametrize("run", range(2))
def test_tasks_submitted_before_the_workers_exist_start_one_per_worker(run) -> None:
    """``crawl run`` submits round 1 while its workers are still being forked: each partition must start
    on its own worker as the workers join, not both on the first one to register (distributed's default
    worker-saturation 1.1 gives a one-thread worker two slots; the second task then waited for work
    stealing, 0.6-1.7 s in traces)."""
    from crawl.cluster import dask_client

    cfg = load_config(overrides={"dask_workers": 2, "dask_dashboard": False}, use_env=False)
    with dask_client(cfg, wait_for_embedded_workers=False) as client:
        assert client.scheduler_info()["workers"] == {}  # the forkserver is still preloading
        futures = [client.submit(_hold, 3.0, pure=False, key=f"fetch-hold-{k}") for k in range(2)]
        (w0, t0), (w1, t1) = (f.result(timeout=180) for f in futures)
    assert w0 != w1
    assert abs(t0 - t1) < 1.0, (t0, t1)  # both joined within ~0.1 s; a stolen task starts far later


# Runs ``python -m crawl ARGS`` in this interpreter, then prints whether pandas and crawl.parse are loaded in
# it, whether its start-up heap is frozen with the collector back on, and the status.
_PANDAS_PROBE = """
import gc, runpy, sys

sys.argv = ["crawl", *sys.argv[1:]]
try:
    runpy.run_module("crawl", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    print("frozen", gc.get_freeze_count() > 100_000, "collector", gc.isenabled(), flush=True)
    print("pandas", "pandas" in sys.modules, "parse", "crawl.parse" in sys.modules, "exit", exc.code, flush=True)
"""


def test_a_crawl_run_never_imports_pandas_or_the_parse_stack_in_its_cli_process(simweb, tmp_path) -> None:
    """Nothing in the engine uses pandas, yet the CLI process imported it (~0.25 s of CPU) before round 1's
    submits, twice over: distributed's ``get_mp_context`` imports it to pick a forkserver preload we replace,
    and pyarrow's first ``pa.array`` to ask whether its argument is a pandas object (crawl.withhold). And it
    imported crawl.parse (~0.1 s) only to check the parser plugins' names (crawl.parsers). A whole 1-round
    ``crawl run`` on the simulated web: pages fetched, neither loaded in the CLI process; its start-up heap
    frozen, the collector on."""
    out = subprocess.run(
        [sys.executable, "-c", _PANDAS_PROBE, "run", "--root", str(tmp_path / "root"), "--crawl-id", "nopandas",
         "--resolve", simweb.resolve_rule, "--delay", "0", "--max-pages", "20", "--no-dashboard", "--workers", "1",
         "--rounds", "1", "--seeds", *simweb.seed_urls(4)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "summary: 1 round(s), " in out.stdout and ", 0 fetched" not in out.stdout, out.stdout[-2000:]
    assert out.stdout.splitlines()[-1] == "pandas False parse False exit 0", out.stdout[-2000:]
    # its imports were made with the collector off (~0.1 s of CPU before round 1's submits), then frozen, and the
    # collector was back on for the run (crawl.warmup.collector_off_for_start)
    assert out.stdout.splitlines()[-2] == "frozen True collector True", out.stdout[-2000:]
