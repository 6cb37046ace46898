"""The embedded cluster's workers run with crawl.cluster.EMBEDDED_WORKER_CONFIG (fewer timer wake-ups).

Why a test: the settings reach a worker only if the Nanny that spawns it is created inside the config
block; read back from the worker processes themselves (dask's config there), not from our module.
"""

from __future__ import annotations

import os

from crawl.cluster import EMBEDDED_WORKER_CONFIG, dask_client
from crawl.config import load_config


def _worker_settings(keys: list[str]) -> dict[str, object]:
    import dask

    return {k: dask.config.get(k) for k in keys} | {"pid": os.getpid()}


def test_embedded_workers_run_with_fewer_timers(tmp_path):
    cfg = load_config(overrides={"root": str(tmp_path / "root"), "crawl_id": "t", "dask_workers": 1,
                                 "dask_dashboard": False}, use_env=False)
    keys = list(EMBEDDED_WORKER_CONFIG)
    with dask_client(cfg) as client:
        got = list(client.run(_worker_settings, keys).values())
    assert len(got) == 1 and got[0]["pid"] != os.getpid()  # a separate worker process
    assert {k: got[0][k] for k in keys} == {
        "distributed.worker.profile.enabled": False,
        "distributed.admin.tick.interval": "1s",
        "distributed.worker.memory.monitor-interval": "1s",
        "distributed.admin.system-monitor.interval": "2s",
    }
