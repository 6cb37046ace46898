"""The Dask client: an embedded LocalCluster by default, or a scheduler address from config.

A run (DAG params, the crawl API) may only pick a scheduler the deployment allows
(:func:`check_run_dask_address`); the CLI, run by the operator, takes any address.

Workers only ever import ``crawl`` (never Airflow): the functions Dask runs live in ``crawl.tasks``
and take the config and a partition number, reading everything else from the crawl root, so a
task can run on any worker, twice, or after its worker died.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import CancelledError
from typing import Any

from crawl.config import ConfigError, CrawlConfig
from crawl.errors import ClusterError
from crawl.prestart import FORKSERVER_PRELOAD, WORKER_SPAWN_ENV  # noqa: F401 - FORKSERVER_PRELOAD re-exported
from crawl.prestart import start as start_embedded_forkserver

#: Seconds to reach an external scheduler before the round fails naming its address.
CONNECT_TIMEOUT_S = 30.0

#: Dask settings of the embedded cluster's workers: fewer timer wake-ups of a worker's own. Why: with
#: distributed's defaults an idle pair of workers burns 0.065 CPU s per s (the event-loop tick every
#: 20 ms, the statistical profiler walking the task thread's stack every 10 ms under the GIL, the
#: memory monitor every 100 ms, the system monitor every 500 ms), ~0.2 ms of worker CPU per page over
#: a fetch+parse step; with these 0.007 (bench/RESULTS.md, "Worker CPU outside fetch and parse").
#: What is given up: the dashboard's "Profile" page (use py-spy: bench/worker_cpu_profile.py), finer
#: system-monitor graphs, and pause/spill reacting within 1 s instead of 0.1 s; the tick stays under
#: distributed's 3 s "event loop unresponsive" limit. An external cluster keeps its operator's settings.
EMBEDDED_WORKER_CONFIG: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    # distributed's default environment of a worker process minus MALLOC_TRIM_THRESHOLD_=65536: a fixed
    # trim threshold also pins glibc's mmap threshold at 128 KiB, so every larger buffer (response
    # bodies, WARC and Parquet buffers) is mmap'd, faulted in and unmapped again; with glibc's dynamic
    # thresholds the fetch+parse task cost 0.066 ms CPU per page less (12 alternated reps, bench/dask_gap_bench.py;
    # bench/RESULTS.md "Dask workers vs plain processes"). Given up: freed memory goes back to the OS
    # later (the workers' RSS reads higher between tasks); the math libraries stay single-threaded.
    "distributed.nanny.pre-spawn-environ": dict(WORKER_SPAWN_ENV),
    # Workers forked by one forkserver that has imported distributed, the task modules and parse's compiled
    # kernel (crawl.forkserver) instead of each spawned interpreter importing and loading them itself:
    # with spawn two workers spent 3.4-4.0 s of CPU to come up warm, forked ones ~0.1 s (plus ~1.7 s once in
    # the forkserver), and were warm 1.5-2 s sooner (bench/RESULTS.md, "Fixed work of a crawl run").
    # Fork-safe: the forkserver runs no thread and the math libraries are single-threaded (above).
    "distributed.worker.multiprocessing-method": "forkserver",
    # One task per worker thread at a time, not 1.1 (distributed's default, which rounds up to 2 slots for
    # a one-thread worker): tasks submitted before any worker joined (``crawl run`` submits round 1 while
    # the workers are being forked) were all sent to the first worker that registered, and the second
    # worker's partition only started when work stealing moved it, 0.6-1.7 s later (traced; round 1's
    # two partitions then ended that far apart). With 1.0 the second task stays queued on the scheduler
    # until the next worker joins. Costs nothing later: one task per worker is what a round submits.
    "distributed.scheduler.worker-saturation": 1.0,
}

# Operator allowlist of scheduler addresses a run (trigger form, POST /crawl/crawls) may choose, besides
# the deployment's CRAWL_DASK_ADDRESS; comma or space separated. Set on the deployment, never by a run.
DASK_ALLOWLIST_ENV = "RECRAWL_DASK_ADDRESSES"


def allowed_run_dask_addresses(environ: Mapping[str, str] | None = None) -> list[str]:
    """The scheduler addresses a run may name: ``CRAWL_DASK_ADDRESS`` and the operator's allowlist."""
    env = os.environ if environ is None else environ
    listed = [a for a in re.split(r"[,\s]+", env.get(DASK_ALLOWLIST_ENV, "")) if a]
    deployment = env.get("CRAWL_DASK_ADDRESS", "").strip()
    return list(dict.fromkeys([deployment, *listed] if deployment else listed))


def check_run_dask_address(value: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """``value`` if a run may use it, None when not given ("" or None: the deployment's setting applies).

    Why a run cannot name any scheduler: the fetch step connects to it as a Dask client and unpickles
    its replies, so whoever may trigger a run could otherwise run code in the task's process. A value
    not allowed raises :class:`ConfigError` naming the key and what is allowed.
    """
    if value is None or not value.strip():
        return None
    allowed = allowed_run_dask_addresses(environ)
    if value.strip() in allowed:
        return value.strip()
    choices = ", ".join(repr(a) for a in allowed) or "none (leave it empty for the deployment's cluster)"
    raise ConfigError(
        f"dask_address: {value!r} is not allowed for a run; allowed: {choices} "
        f"(the operator sets CRAWL_DASK_ADDRESS or {DASK_ALLOWLIST_ENV} on the deployment)"
    )


@contextlib.contextmanager
def dask_client(cfg: CrawlConfig, announce: Callable[[str], None] | None = None,
                wait_for_embedded_workers: bool = True) -> Iterator[object]:
    """Yield a ``distributed.Client``; an embedded cluster lives only for the block.

    The embedded cluster serves Dask's dashboard (task stream, worker memory and CPU) on
    127.0.0.1:``dask_dashboard_port`` (0 = a free port) unless ``dask_dashboard`` is off; ``announce``
    gets its URL (``crawl run`` prints it). Distributed serves it only when bokeh is installed.

    ``wait_for_embedded_workers=False`` yields as soon as the embedded scheduler runs, while its workers
    are still being forked: tasks submitted meanwhile wait on the scheduler for them. ``crawl run`` does
    that so its inject and generate overlap the forkserver's preload (:func:`start_forkserver`); a
    worker that cannot start then fails the round after ``dask_wait_for_workers_s``
    (:func:`wait_all`) instead of at once.
    """
    import dask
    from distributed import Client, LocalCluster

    if cfg.dask_address:
        try:
            client = Client(cfg.dask_address, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {cfg.dask_address} within "
                               f"{CONNECT_TIMEOUT_S:g} s: {exc}") from exc
        try:
            wait_for_workers(client, cfg)
        except BaseException:
            client.close()
            raise
        _announce(client, cfg, announce)
        try:
            yield client
        finally:
            client.close()
        return
    # Workers are processes (fetch and parse are CPU-heavy between awaits), forked by a forkserver (a
    # fresh interpreter started by multiprocessing, see EMBEDDED_WORKER_CONFIG). The Airflow layer runs
    # the engine in a plain ``python -m crawl`` subprocess (see dags/recrawl.py), never inside an
    # ``airflow`` entry point that a new interpreter would re-run.
    # The settings stay for the cluster's life, not just its construction: a Nanny reads the start method
    # and the spawn environment when it (re)starts its worker process, which with
    # wait_for_embedded_workers=False, or after a worker died, happens after LocalCluster() returned.
    with contextlib.ExitStack() as stack:
        stack.callback(stop_forkserver)  # last: after the cluster's close, also when its start failed
        stack.enter_context(dask.config.set(EMBEDDED_WORKER_CONFIG))  # each Nanny hands it to its worker
        _forkserver_preload()
        cluster = LocalCluster(
            n_workers=cfg.dask_workers if wait_for_embedded_workers else 0,
            threads_per_worker=1,
            processes=True,
            # The scheduler runs an HTTP server (health, metrics) even without the dashboard, on 8787 by
            # default: always give it our port (0 = a free one) and switch the dashboard itself on or off.
            dashboard_address=f"127.0.0.1:{cfg.dask_dashboard_port if cfg.dask_dashboard else 0}",
            scheduler_kwargs={"dashboard": cfg.dask_dashboard},
            host="127.0.0.1",
            silence_logs=40,
            resources={"browser": 1},  # every embedded worker may run one render task (crawl.render)
            # imports the task modules as each worker comes up and makes its exit skip the final GC
            # (crawl.warmup: seconds before the first request and in the close, at a few thousand pages)
            preload=["crawl.warmup"],
        )
        stack.callback(cluster.close)
        client = stack.enter_context(Client(cluster))  # closed first; waits for the cluster's workers
        if not wait_for_embedded_workers:  # none yet: add them now, without waiting (Client() would)
            cluster.scale(cfg.dask_workers)  # returns at once; the scheduler's loop starts the Nannies
        _announce(client, cfg, announce)
        yield client


def start_forkserver(cfg: CrawlConfig) -> None:
    """Start the embedded cluster's forkserver now, when ``cfg`` will use one (no ``dask_address``), so its
    preload (distributed, the task modules, the fingerprint kernel; SciPy and pandas withheld:
    :mod:`crawl.forkserver`, ~1.6 s of CPU in a fresh process) runs on the other core while this process imports its own modules and builds the cluster.
    :func:`dask_client` then finds it running; without this call it starts it itself. Cheap
    (multiprocessing only); stop it with :func:`stop_forkserver` if no cluster follows."""
    if cfg.dask_address:
        return
    start_embedded_forkserver()  # ``python -m crawl`` may have started it already, before its imports (crawl.prestart)


def _forkserver_preload() -> None:
    """Have the forkserver import :mod:`crawl.forkserver` (the task modules, the fingerprint kernel) before
    it forks the first worker, and start it. Called in the embedded config block: distributed's own choice
    of preload (``get_mp_context``, once per process) is made first, then replaced by ours; a forkserver
    already started by :func:`start_forkserver` keeps running. That choice imports every package of
    distributed's list that is installed, pandas among them: withheld (:mod:`crawl.withhold`), since the
    list is discarded and nothing here uses pandas."""
    import dask
    from distributed.utils import get_mp_context

    from crawl.withhold import withheld

    with withheld("pandas"):  # one of its "optional packages", ~0.25 s of CPU in this process for nothing
        get_mp_context()
    if dask.config.get("distributed.worker.multiprocessing-method") == "forkserver":
        start_embedded_forkserver()  # our preload (after get_mp_context's); it starts before the scheduler does, not after it


def stop_forkserver() -> None:
    """Stop the forkserver once its workers are gone and wait for it, so its CPU (and its workers',
    which it reaps) counts as this process's children's, as the spawned workers' did (the benchmarks read
    ``RUSAGE_CHILDREN``), and a later cluster in this process starts a fresh one with the preload.

    Killed, not asked to exit: an interpreter's normal exit tears down every module it imported and runs
    their exit handlers, 0.19-0.31 s here that ``crawl run``'s user waited for after the last report
    (0.02-0.09 s killed; bench/RESULTS.md, "Run start and end"). It has nothing to flush or remove: no
    thread, no open file, and its workers have exited and been reaped (a Nanny learns a worker's exit
    code from the forkserver after the forkserver's ``waitpid``)."""
    import multiprocessing.forkserver as fs

    server = getattr(fs, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):  # a private method of the standard library's forkserver (3.4+)
        server._stop()  # type: ignore[union-attr]  # reaps it, closes its pipe, removes its socket file


def scheduler_address(client: Any) -> str:
    with contextlib.suppress(Exception):
        return str(client.scheduler.address)
    return "?"


def wait_for_workers(client: Any, cfg: CrawlConfig) -> None:
    """Fail fast, naming the scheduler, when no worker is there within ``dask_wait_for_workers_s``.

    Without this a round submitted to a scheduler with no workers waits forever without a word.
    """
    try:
        client.wait_for_workers(1, timeout=cfg.dask_wait_for_workers_s)
    except TimeoutError:
        raise ClusterError(
            f"no Dask worker joined the scheduler at {scheduler_address(client)} within "
            f"{cfg.dask_wait_for_workers_s:g} s (dask_wait_for_workers_s); start workers with "
            f"`dask worker {scheduler_address(client)}` or use another dask_address") from None


def _n_workers(client: Any) -> int:
    try:
        return len(client.scheduler_info(n_workers=-1)["workers"])
    except TypeError:  # older distributed: no n_workers argument
        return len(client.scheduler_info()["workers"])


def wait_all(client: Any, futures: Iterable[Any], cfg: CrawlConfig, what: str,
             on_done: Callable[[Any], Iterable[Any] | None] | None = None, stall_s: float | None = None) -> None:
    """Wait for every future, calling ``on_done(future)`` as each finishes; never hang silently.

    ``on_done`` may return new futures (resubmissions) to wait for as well.

    Raises :class:`ClusterError` naming the scheduler when the scheduler is lost, when it has had no
    worker for ``dask_wait_for_workers_s``, or when nothing finished for ``stall_s`` (default: the
    round duration plus five minutes, longer than any fetch task may run).
    """
    from distributed import wait as dask_wait

    addr = scheduler_address(client)
    stall_s = cfg.round_duration_s + 300.0 if stall_s is None else stall_s
    pending = set(futures)
    last_progress = time.monotonic()
    no_workers_since: float | None = None
    while pending:
        try:
            done, pending = dask_wait(pending, timeout=1.0, return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        except (OSError, CancelledError) as exc:
            raise ClusterError(f"{what}: lost the Dask scheduler at {addr}: {exc!r}") from exc
        for fut in done:
            try:
                if on_done is not None:
                    pending |= set(on_done(fut) or ())
                else:
                    fut.result()
            except CancelledError as exc:
                raise ClusterError(f"{what}: task {fut.key} was cancelled (Dask scheduler at {addr} lost?): "
                                   f"{exc!r}") from exc
        now = time.monotonic()
        if done:
            last_progress, no_workers_since = now, None
            continue
        try:
            workers = _n_workers(client)
        except (OSError, CancelledError) as exc:
            raise ClusterError(f"{what}: lost the Dask scheduler at {addr}: {exc!r}") from exc
        if workers:
            no_workers_since = None
        elif no_workers_since is None:
            no_workers_since = now
        elif now - no_workers_since > cfg.dask_wait_for_workers_s:
            raise ClusterError(f"{what}: the Dask scheduler at {addr} has had no worker for "
                               f"{cfg.dask_wait_for_workers_s:g} s (dask_wait_for_workers_s); "
                               f"{len(pending)} task(s) still waiting")
        if now - last_progress > stall_s:
            raise ClusterError(f"{what}: no task finished for {stall_s:g} s on the Dask scheduler at {addr}; "
                               f"{len(pending)} task(s) still waiting")


def dashboard_url(client: object, cfg: CrawlConfig) -> str:
    """The Dask dashboard's URL for this client ("" when the embedded cluster's is off)."""
    if not cfg.dask_address and not cfg.dask_dashboard:
        return ""
    return getattr(client, "dashboard_link", "") or ""


def _announce(client: object, cfg: CrawlConfig, announce: Callable[[str], None] | None) -> None:
    link = dashboard_url(client, cfg)
    if announce and link:
        announce(f"Dask dashboard: {link}")
