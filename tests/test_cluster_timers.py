"""The embedded cluster's workers run with crawl.cluster.EMBEDDED_WORKER_CONFIG (fewer timer wake-ups,
glibc's dynamic malloc thresholds, single-threaded math libraries).

Why a test: the settings reach a worker only if the Nanny that spawns it is created inside the config
block; read back from the worker processes themselves (dask's config there), not from our module.
"""

from __future__ import annotations

import os

import pytest

from crawl.cluster import EMBEDDED_WORKER_CONFIG, dask_client
from crawl.config import load_config


def _worker_settings(keys: list[str]) -> dict[str, object]:
    import dask

    return {k: dask.config.get(k) for k in keys} | {"pid": os.getpid(), "environ": dict(os.environ)}


@pytest.mark.parametrize("wait", [True, False], ids=["workers-started-in-LocalCluster", "workers-added-after"])
def test_embedded_workers_run_with_fewer_timers(tmp_path, wait):
    """Also for workers the cluster starts after it was handed out (``crawl run``: no wait for them)."""
    cfg = load_config(overrides={"root": str(tmp_path / "root"), "crawl_id": "t", "dask_workers": 1,
                                 "dask_dashboard": False}, use_env=False)
    keys = list(EMBEDDED_WORKER_CONFIG)
    with dask_client(cfg, wait_for_embedded_workers=wait) as client:
        client.wait_for_workers(1, timeout=120)
        got = list(client.run(_worker_settings, keys).values())
    assert len(got) == 1 and got[0]["pid"] != os.getpid()  # a separate worker process
    assert {k: got[0][k] for k in keys} == {
        "distributed.worker.profile.enabled": False,
        "distributed.admin.tick.interval": "1s",
        "distributed.worker.memory.monitor-interval": "1s",
        "distributed.admin.system-monitor.interval": "2s",
        "distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1, "OPENBLAS_NUM_THREADS": 1},
        "distributed.worker.multiprocessing-method": "forkserver",
        "distributed.scheduler.worker-saturation": 1.0,
    }
    # the worker process's own environment, as glibc and the math libraries read it at start: one
    # thread each, and no fixed malloc trim threshold (distributed's default sets 65536)
    env = got[0]["environ"]
    assert "MALLOC_TRIM_THRESHOLD_" not in env
    assert [env.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")] == ["1", "1", "1"]


def test_forked_workers_load_one_blas_thread_without_the_callers_variables(tmp_path):
    """The forkserver is spawned before any Nanny puts distributed's pre-spawn environment in place, and
    forked workers keep the forkserver's environment and the math libraries it loaded: crawl.cluster puts
    the one-thread variables there first. In a fresh process whose environment has none of them."""
    import subprocess
    import sys

    code = (
        "from crawl.cluster import dask_client\n"
        "from crawl.config import load_config\n"
        "def blas():\n"
        "    import threadpoolctl\n"
        "    return sorted({d['num_threads'] for d in threadpoolctl.threadpool_info() if d['user_api'] == 'blas'})\n"
        "cfg = load_config(overrides={'dask_workers': 1, 'dask_dashboard': False}, use_env=False)\n"
        "with dask_client(cfg) as client:\n"
        "    print(list(client.run(blas).values()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "[[1]]", (out.stdout, os.cpu_count())
