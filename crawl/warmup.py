"""Start and exit costs of the processes a ``crawl run`` owns: the CLI process and its embedded workers.

Why this module: at the size of a few thousand pages a round, a whole ``crawl run`` spent seconds
before its first request, between rounds and after its last request that had nothing to do with
crawling (``bench/RESULTS.md``, "Fixed costs of a whole run"):

- an embedded worker imported the fetch and parse stacks (aiohttp, uvloop, selectolax, FastWARC,
  DuckDB...) only when its first task arrived, after the driver had started the cluster, injected
  and generated; :func:`dask_setup` (the embedded cluster's worker *preload*) starts those imports
  in a background thread as the worker comes up, so they overlap the driver's own start; since
  session 6 the workers are forked from one forkserver that has already imported them and loaded
  parse's compiled kernel (:mod:`crawl.forkserver`, ``crawl.cluster.EMBEDDED_WORKER_CONFIG``): one
  copy of that work instead of one per worker, and the preload thread finds it done;
- the CLI process's math libraries ran 2 OpenBLAS and 2 OpenMP threads (one per core): on this
  loaded 2-core box the prior's Poisson GLM fit in reprioritise took 5-7 s of wall time and ~2 s of
  CPU, spinning threads, where one thread takes 0.15-0.4 s (the same fit, alternating, load ~8).
  :func:`single_threaded_math` gives the process one thread each, as Dask already does for its
  workers (``distributed.nanny.pre-spawn-environ``); ``OMP_NUM_THREADS`` & co. set by the user win;
- a process exit ran the interpreter's final garbage collection over every object the process ever
  built (1-2.5 s per worker, measured with ``py-spy dump --native``: ``gc_collect_main``), and the
  cluster's close waits for its workers to exit. :func:`skip_final_gc` freezes the heap at exit,
  so finalisation has nothing to traverse; the exit returns the memory anyway. Nothing of ours
  relies on that collection: files and WARC writers are closed explicitly, results are stored
  before a task returns.

- NumPy asks the kernel for transparent huge pages for every array of 4 MB or more; parse's text
  column buffer (~150 MB a partition, a fresh mapping each time) then paid 5-430 ms of system time per
  partition in huge-page faults, erratically (whole ``parse_bodies`` 0.396 vs 0.372 ms/page mean, max
  0.51 vs 0.40, bench/RESULTS.md "Parse walk and links (session 7)"): :func:`no_numpy_hugepages`, in
  every process that runs tasks (ordinary 4 KB pages; ``NUMPY_MADVISE_HUGEPAGE`` set by the user wins);
  pyarrow's allocator (mimalloc) asks the same for its whole arena, and the fresh huge pages' faults made
  round 1's WARC drains and the driver's steps erratically slow: since session 14 the CLI process, the
  forkserver and the workers (embedded, or compose's with ``--preload crawl.warmup``) and the DAG's steps
  have no transparent huge pages at all (:func:`no_transparent_hugepages`);

- the driver imported SciPy, scikit-learn, tldextract and pyarrow.dataset inside the first round's update and
  reprioritise, where nothing else runs; :func:`warm_driver` imports them while the workers fetch. Since
  session 8 the prior's fit needs no scikit-learn (:mod:`crawl.glm`): its import alone was ~0.7 s of
  CPU, which the warm-up, started when a worker is up, had not finished when a short first round's
  fetch was done (update then waited on it).

- after its exit handlers the CLI process still tore down its modules and native libraries' state, with
  nothing left to write: ``python -m crawl`` ends right after them (:func:`end_after_exit_handlers`).

Tried and reverted (same section): importing SciPy/matplotlib and starting the cluster in background
threads -- on 2 cores such overlap only competes with the workers. (Writing a round's report while the
next round runs was reverted then too, when a report took 1-3 s of matplotlib; at ~0.1-0.3 s of DuckDB
it now runs beside the next round's generate and fetch: ``crawl.cli._Reports``, session 8.)
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

#: What a fetch or parse task imports on a worker (crawl.tasks imports them lazily, per task).
TASK_MODULES = ("crawl.tasks", "crawl.fetch", "crawl.parse", "crawl.media", "crawl.warc")

_registered = False

#: What the driver first imports in a round's update, reprioritise and report: Parquet datasets (in a
#: ``crawl run`` without pandas: crawl.withhold), the Public Suffix List (tldextract: registered domains
#: for the index), SciPy's sparse matrices and optimiser (the prior's fit, :mod:`crawl.glm`), the report's
#: templates (Jinja2), and the step modules themselves. ~0.5 s of CPU on this box (~1.2 s while the prior
#: imported scikit-learn), paid inside the first round's steps where only the driver works; :func:`warm_driver`
#: pays it while the workers fetch instead.
DRIVER_MODULES = ("pyarrow.dataset", "tldextract", "scipy.sparse", "scipy.optimize", "crawl.update", "crawl.neardup",
                  "crawl.glm", "crawl.reporthtml")

#: The report's templates, compiled by :func:`import_driver_modules` (Jinja2 compiles a template at its
#: first use: ~0.04 s of the first round's report).
REPORT_TEMPLATES = ("crawl.html", "page.html", "base.html", "macros.html")

_driver_warm: threading.Thread | None = None

#: The thread-count variables of OpenMP, OpenBLAS and MKL, as Dask sets them for its workers.
MATH_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def single_threaded_math() -> None:
    """One OpenMP/BLAS thread for this process, unless the environment already says how many: the
    variables for libraries loaded later (SciPy's OpenBLAS, scikit-learn's OpenMP), threadpoolctl for
    those already loaded (NumPy's OpenBLAS)."""
    if any(v in os.environ for v in MATH_THREAD_VARS):
        return
    for v in MATH_THREAD_VARS:
        os.environ[v] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


#: ``prctl`` options (linux/prctl.h): the process's "no transparent huge pages" flag.
_PR_SET_THP_DISABLE, _PR_GET_THP_DISABLE = 41, 42

#: mimalloc's own switch for the huge pages it asks for (pyarrow's default memory pool): when the user sets it,
#: :func:`no_transparent_hugepages` leaves the process alone.
MIMALLOC_THP_VAR = "MIMALLOC_ALLOW_THP"


def no_transparent_hugepages() -> bool:
    """No transparent huge pages for this process's memory (``prctl(PR_SET_THP_DISABLE)``: checked at each
    page fault, so also for regions already advised; inherited by forked and exec'd children), unless the
    environment sets :data:`MIMALLOC_THP_VAR`. Returns whether the flag is set. Linux only; elsewhere (or
    when the call fails) a no-op.

    Why: the system runs transparent huge pages only where a library asks (``madvise``), and pyarrow's
    mimalloc asks for its whole 1 GiB arena. On this box (a VM that hands freed 2 MB blocks back to its host:
    virtio-balloon free page reporting, order 9) a fresh huge page's fault zeroes 2 MB the host must first
    supply again: 6-14 ms a fault against ~0.25 ms for a recently used one, and 128 MB touched in 4 KB
    pages cost 0.05 s where cold huge pages cost 0.2-0.9 s. Which blocks a fault gets is chance, so the cost
    was erratic: round 1's WARC drains and checkpoints (the writer thread's first Arrow allocations) ran
    0.2-0.6 s instead of 0.02-0.05 in about a third of runs, and the driver spent 0.4-0.8 s of a 1-round
    run zeroing huge pages (bench/RESULTS.md, "Round-1 drains (session 14, helper drain14)"). NumPy's own
    requests were already off in the workers for the same reason (:func:`no_numpy_hugepages`)."""
    if MIMALLOC_THP_VAR in os.environ or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
            return False
        return libc.prctl(_PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1
    except (OSError, AttributeError):
        return False


def no_numpy_hugepages() -> None:
    """No ``madvise(MADV_HUGEPAGE)`` from NumPy for the arrays this process allocates, unless the
    environment says ``NUMPY_MADVISE_HUGEPAGE`` (NumPy's own switch, read at its import; this is the
    runtime form its documentation names). Process-wide; a forkserver's setting is its workers'."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    try:  # NumPy 2 (the lock's); an older or newer NumPy without it keeps its default
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        return
    _set_madvise_hugepage(False)


def skip_final_gc() -> None:
    """At interpreter exit (after the other exit handlers), freeze every object so the final
    garbage collection skips them; and once :func:`end_after_exit_handlers` gave the exit status, end
    the process right there. Idempotent."""
    global _registered
    if not _registered:
        atexit.register(_last_exit_handler)  # registered first, runs last: after every other exit handler
        _registered = True


_exit_status: int | None = None


def _last_exit_handler() -> None:
    gc.freeze()
    if _exit_status is not None:
        import sys

        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(_exit_status)


def end_after_exit_handlers(status: int | None) -> None:
    """Make the process end with ``status`` as soon as its exit handlers have run (the last one
    registered by :func:`skip_final_gc`, which must have been called first), skipping the interpreter's
    own finalization. ``python -m crawl`` calls it with :func:`crawl.cli.main`'s status.

    Why: after the exit handlers (non-daemon threads already joined, then multiprocessing's cleanup,
    logging's flush, ...) the interpreter still tore down its modules and the native libraries'
    state (DuckDB's in-memory database, Arrow's memory pool, ...): 0.1-0.2 s at the end of every
    ``crawl run`` on this box with nothing left to write (bench/RESULTS.md, "Between rounds (session 8,
    helper gaps)"). Nothing of ours needs it: every output is written and closed (``Store`` writes
    atomically) before ``main`` returns, and the only open files then are stdout and stderr, flushed here.
    """
    global _exit_status
    _exit_status = 0 if status is None else int(status)


_collector_off = False


def collector_off_for_start() -> None:
    """Turn the garbage collector off for the CLI process's start (``python -m crawl`` calls this first):
    :func:`collector_back_on` freezes what the start imported and turns it back on. Why: the ~220 automatic
    collections over the growing heap of a ``crawl run``'s imports (config, the round's modules, distributed)
    were ~0.1 s of the ~0.9 s of CPU before round 1's submits, with nothing to free; the forkserver preloads
    the same way (:mod:`crawl.forkserver`). A no-op when the collector is already off."""
    global _collector_off
    if gc.isenabled():
        gc.disable()
        _collector_off = True


def collector_back_on() -> None:
    """Undo :func:`collector_off_for_start`: freeze the objects made so far (modules and start-up state that
    live as long as the process; the few unreachable ones the imports left are frozen with them) and turn the
    collector on. A no-op unless that call turned it off, so ``crawl.cli.main`` called from another program
    neither freezes its heap nor touches its collector. Idempotent."""
    global _collector_off
    if _collector_off:
        _collector_off = False
        gc.freeze()
        gc.enable()


def import_task_modules() -> None:
    """Import what a fetch or parse task needs (a task that arrives meanwhile waits on the import lock),
    then load parse's compiled kernels (:func:`crawl.parse.warm_up`: numba's import
    and its on-disk cache, ~1 s of CPU in a fresh process, a few seconds when it must compile). Also
    turns NumPy's huge-page requests off (:func:`no_numpy_hugepages`) and the process's transparent huge
    pages (:func:`no_transparent_hugepages`)."""
    no_transparent_hugepages()
    no_numpy_hugepages()
    for name in TASK_MODULES:
        importlib.import_module(name)
    from crawl.parse import warm_up

    warm_up()


def import_driver_modules() -> None:
    """Import :data:`DRIVER_MODULES`, build the Public Suffix List trie and compile
    :data:`REPORT_TEMPLATES` (each done at its first use otherwise)."""
    for name in DRIVER_MODULES:
        importlib.import_module(name)
    from crawl.reporthtml import environment
    from crawl.url.surt import _extractor

    _extractor()("example.com")  # the trie is built at the first lookup, not with the extractor
    env = environment()
    for name in REPORT_TEMPLATES:
        env.get_template(name)


def warm_driver(after: Callable[[], object] | None = None) -> threading.Thread:
    """Start :func:`import_driver_modules` in a background thread, once per process (``crawl.round``
    calls it as a round's fetch+parse starts: the driver then only waits on the workers, and the
    simulated web or the network leaves CPU idle while both workers fetch). The thread first calls
    ``after`` (its errors ignored): ``crawl.round`` waits there for a worker, so that on an embedded
    cluster still starting the imports do not compete with its forkserver's (``crawl run``)."""
    global _driver_warm
    if _driver_warm is None:
        _driver_warm = threading.Thread(target=_warm_after, args=(after,), name="crawl-driver-warmup", daemon=True)
        _driver_warm.start()
    return _driver_warm


def _warm_after(after: Callable[[], object] | None) -> None:
    if after is not None:
        with contextlib.suppress(Exception):
            after()
    import_driver_modules()


def dask_setup(worker: Any = None) -> None:
    """Dask's preload hook, for the embedded cluster's workers (:func:`crawl.cluster.dask_client`) and
    docker-compose's ``dask worker --preload crawl.warmup``. Huge pages go off here, before the worker
    takes any task, not only in the warm-up thread."""
    skip_final_gc()
    no_transparent_hugepages()
    threading.Thread(target=import_task_modules, name="crawl-warmup", daemon=True).start()
