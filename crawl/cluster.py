"""The Dask client: an embedded LocalCluster by default, or a scheduler address from config.

Workers only ever import ``crawl`` (never Airflow): the functions Dask runs live in ``crawl.tasks``
and take the config and a partition number, reading everything else from the crawl root, so a
task can run on any worker, twice, or after its worker died.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from crawl.config import CrawlConfig


@contextlib.contextmanager
def dask_client(cfg: CrawlConfig) -> Iterator[object]:
    """Yield a ``distributed.Client``; an embedded cluster lives only for the block."""
    from distributed import Client, LocalCluster

    if cfg.dask_address:
        client = Client(cfg.dask_address, timeout="30s")
        try:
            yield client
        finally:
            client.close()
        return
    # Workers are processes (fetch and parse are CPU-heavy between awaits). Nanny processes are
    # spawned; when the parent is an ``airflow`` entry point, spawn would re-run it, so the Airflow
    # layer runs the engine in a plain ``python -m crawl`` subprocess (see dags/recrawl.py).
    cluster = LocalCluster(
        n_workers=cfg.dask_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
        silence_logs=40,
    )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
