"""Start the embedded Dask cluster's forkserver before the CLI imports anything else.

The forkserver (:mod:`crawl.forkserver`, ``crawl.cluster.EMBEDDED_WORKER_CONFIG``) spends ~1.5 s of CPU
importing distributed and the task modules before it can fork the first worker, and that preload is the
critical path of a ``crawl run``'s start: the driver's own imports, scheduler, inject, generate and submits
are done before it (bench/RESULTS.md, "Run start and end" and "(session 8, helper start)"). Spawning it
only after ``crawl.cli`` and ``crawl.config`` are imported and the config is built put ~0.3 s of the driver's
start in front of it. This module imports only the standard library, so ``python -m crawl``
(``crawl/__main__.py``) can call :func:`start_for_argv` first, from the raw command line.

Only a guess from the command line: the commands that start an embedded cluster (``run``, ``round``,
``step fetch_parse``) without a scheduler address on the command line, in ``CRAWL_DASK_ADDRESS``, or
named anywhere in a ``--config`` file. When the built config still says otherwise (a ``--set`` or a
config file the guess cannot see), the CLI stops the forkserver (``crawl.cluster.stop_forkserver``):
its CPU was spent for nothing, the run is the same.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

#: What the embedded cluster's forkserver imports before it forks a worker: :mod:`crawl.forkserver`, which
#: imports distributed itself, with the garbage collector off.
FORKSERVER_PRELOAD = ["crawl.forkserver"]

#: The embedded workers' pre-spawn environment (Dask's default for a Nanny's worker, minus
#: MALLOC_TRIM_THRESHOLD_: see ``crawl.cluster.EMBEDDED_WORKER_CONFIG``): one OpenMP/BLAS thread.
WORKER_SPAWN_ENV: dict[str, int] = {"OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1, "OPENBLAS_NUM_THREADS": 1}

#: Commands (and ``step`` names) that run an embedded cluster when no scheduler address is configured.
CLUSTER_COMMANDS = ("run", "round")
CLUSTER_STEPS = ("fetch_parse",)


def start() -> None:
    """Spawn the forkserver with our preload now (returns at once; idempotent). The workers' pre-spawn
    environment is put in this process's environment first: a forked worker has the forkserver's
    environment, and the math libraries the forkserver loads (NumPy's OpenBLAS) read their thread counts
    there. (The Nanny's PYTHONHASHSEED is for one hash seed across workers; workers forked from one
    forkserver share its seed anyway.)"""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
    for key, value in WORKER_SPAWN_ENV.items():
        os.environ[key] = str(value)
    forkserver.ensure_running()  # spawns it and returns; a worker's fork waits for the preload


def embedded_cluster_likely(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether the command line ``argv`` (without the program name) will start an embedded cluster, as far
    as can be told without building the config: a cluster command, not ``--help``, and no scheduler address
    in ``--dask-address``, ``--set dask_address=…``, ``--config-json`` (the Airflow DAG passes its whole
    config there), a ``dask_address:`` line of the ``--config`` file, or ``CRAWL_DASK_ADDRESS``."""
    env = os.environ if environ is None else environ
    args = list(argv)
    if not args or (args[0] not in CLUSTER_COMMANDS and args[0] != "step"):
        return False
    if args[0] == "step" and not any(a in CLUSTER_STEPS for a in args[1:]):
        return False
    if env.get("CRAWL_DASK_ADDRESS", "").strip():
        return False
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--") and "=" in a else (args[i + 1] if i + 1 < len(args) else "")
        if a in ("-h", "--help") or (a.startswith("--dask-address") and value.strip()):
            return False
        if a.startswith("--set") and re.fullmatch(r"\s*dask_address\s*=\s*\S.*", value):
            return False
        if a.startswith("--config-json"):
            try:
                if str(json.loads(value).get("dask_address") or "").strip():
                    return False
            except (ValueError, AttributeError):
                return False  # the CLI reports it
        if a == "--config" or a.startswith("--config="):
            try:
                with open(value, encoding="utf-8", errors="replace") as f:
                    if _YAML_ADDRESS.search(f.read()):
                        return False
            except OSError:
                return False  # the CLI reports it
    return True


# a ``dask_address:`` line of a YAML config with a value other than empty, "" or '' or null
_YAML_ADDRESS = re.compile(r"""^\s*dask_address\s*:\s*(?!(?:""|''|~|null)?\s*(?:#.*)?$)\S""", re.M)


def start_for_argv(argv: Sequence[str]) -> bool:
    """:func:`start` when :func:`embedded_cluster_likely`; True when it did."""
    if not embedded_cluster_likely(argv):
        return False
    start()
    return True
