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
    }
    # the worker process's own environment, as glibc and the math libraries read it at start: one
    # thread each, and no fixed malloc trim threshold (distributed's default sets 65536)
    env = got[0]["environ"]
    assert "MALLOC_TRIM_THRESHOLD_" not in env
    assert [env.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")] == ["1", "1", "1"]
