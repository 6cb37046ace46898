"""The embedded cluster's workers come up with the task modules imported, and our processes' exits
skip the final garbage collection (crawl.warmup)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from hugepages import ALLOW_CODE, THP_ENABLED_EXPR
from pyrun import python_c

from crawl.config import load_config
from crawl.store import Store


def test_embedded_workers_import_the_task_modules_before_any_task() -> None:
    from crawl.cluster import dask_client
    from crawl.warmup import TASK_MODULES

    cfg = load_config(overrides={"dask_workers": 1, "dask_dashboard": False}, use_env=False)
    with dask_client(cfg) as client:
        # client.run, not a task: nothing but the worker's preload imports crawl.fetch or crawl.parse
        def loaded() -> list[str]:
            return [m for m in TASK_MODULES if m in sys.modules]

        deadline = time.monotonic() + 120  # a bound against hanging, not a performance limit
        seen: list[str] = []
        while time.monotonic() < deadline:
            seen = next(iter(client.run(loaded).values()))
            if len(seen) == len(TASK_MODULES):
                break
            time.sleep(0.2)
        assert seen == list(TASK_MODULES)
        # and parse's compiled kernels are loaded (crawl.parse.warm_up) before any task
        while time.monotonic() < deadline and not next(iter(client.run(_kernel_signatures).values())):
            time.sleep(0.2)
        assert next(iter(client.run(_kernel_signatures).values())) >= 1
        # NumPy asks for no transparent huge pages there (crawl.warmup.no_numpy_hugepages)
        assert client.run(_numpy_hugepages) == {w: False for w in client.run(_numpy_hugepages)}
        # the exit hook is in place on the worker: its atexit handlers, run by hand, freeze the heap
        frozen = client.run(_run_exit_handlers_and_count_frozen)
        assert all(n > 0 for n in frozen.values()), frozen


def _numpy_hugepages() -> bool:
    """Whether NumPy madvises huge pages in this process (read by setting it back as it was)."""
    from numpy._core.multiarray import _set_madvise_hugepage

    on = _set_madvise_hugepage(False)
    _set_madvise_hugepage(on)
    return bool(on)


def test_embedded_workers_have_no_transparent_huge_pages(monkeypatch) -> None:
    """crawl.warmup.no_transparent_hugepages in the workers (pyarrow's mimalloc asks for huge pages). In a
    fresh interpreter that allows them, so the workers (forked from its forkserver) can only have the flag
    from our code (tests/hugepages.py says why)."""
    code = (ALLOW_CODE
            + "from crawl.cluster import dask_client\n"
            "from crawl.config import load_config\n"
            "cfg = load_config(overrides={'dask_workers': 1, 'dask_dashboard': False}, use_env=False)\n"
            f"print({THP_ENABLED_EXPR})\n"
            "with dask_client(cfg) as client:\n"
            f"    print(*client.run(lambda: {THP_ENABLED_EXPR}).values())\n")
    monkeypatch.delenv("MIMALLOC_ALLOW_THP", raising=False)  # the user's opt-out (the CLI test covers it)
    assert python_c(code).split()[-2:] == ["1", "0"]


def _kernel_signatures() -> int:
    module = sys.modules.get("crawl.fingerprint_kernel")
    kernels = [getattr(module, name, None) for name in ("fingerprint_batch", "collapse_batch", "utf8_valid",
                                                         "single_byte_to_utf8")]  # None while importing
    return min(len(k.signatures) if k is not None else 0 for k in kernels)


def _run_exit_handlers_and_count_frozen() -> int:
    import atexit
    import gc

    atexit._run_exitfuncs()
    return gc.get_freeze_count()


def test_the_cli_process_exit_freezes_the_heap() -> None:
    code = ("import atexit, gc, sys\n"
            "from crawl.cli import main\n"
            "main(['stats', '--root', sys.argv[1]])\n"
            "assert gc.get_freeze_count() == 0\n"
            "atexit._run_exitfuncs()\n"
            "print(gc.get_freeze_count())\n")
    out = subprocess.run([sys.executable, "-c", code, "/nonexistent-root-for-stats"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 0


def test_python_m_crawl_ends_after_its_exit_handlers_with_its_status_and_its_whole_output(tmp_path) -> None:
    # crawl/__main__.py as `python -m crawl` runs it (runpy), after an exit handler registered before the
    # command (it runs after crawl.warmup's last one: only if the process did not end there) and with one
    # registered while the command runs (it must run); stdout is a pipe, block-buffered without
    # PYTHONUNBUFFERED, and `-m` (like `-c`) does not flush it when its code ends
    code = ("import atexit, os, runpy, sys\n"
            "atexit.register(os.write, 2, b'interpreter went on\\n')\n"
            "import crawl.cli\n"
            "run = crawl.cli.main\n"
            "def main(argv=None):\n"
            "    status = run(argv)\n"
            "    atexit.register(os.write, 2, b'handler ran\\n')\n"
            "    return status\n"
            "crawl.cli.main = main\n"
            "sys.argv = ['crawl', *sys.argv[1:]]\n"
            "runpy.run_module('crawl', run_name='__main__', alter_sys=True)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    stats = subprocess.run([sys.executable, "-c", code, "stats", "--root", str(tmp_path / "none")],
                           capture_output=True, text=True, timeout=120, env=env)
    assert stats.returncode == 0, stats.stderr[-2000:]
    assert stats.stdout == "null\n", stats.stdout  # no crawl there; flushed before the process ended
    assert "handler ran" in stats.stderr
    assert "interpreter went on" not in stats.stderr  # ended right after crawl.warmup's handler
    bad = subprocess.run([sys.executable, "-c", code, "stats", "--root", str(tmp_path), "--set", "max_pages=-1"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "max_pages" in bad.stderr, (bad.returncode, bad.stderr[-2000:])
    assert "handler ran" in bad.stderr and "interpreter went on" not in bad.stderr


def test_the_cli_process_runs_one_math_thread_unless_told_otherwise() -> None:
    import os

    code = ("import sys\n"
            "from crawl.cli import main\n"
            "main(['stats', '--root', sys.argv[1]])\n"
            "import scipy.optimize, sklearn.linear_model, threadpoolctl\n"
            "print(sorted({d['num_threads'] for d in threadpoolctl.threadpool_info()}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                            "MKL_NUM_THREADS")}
    assert python_c(code, "/nonexistent-root-for-stats", timeout=120, env=env).split("\n")[-2] == "[1]"
    told = python_c(code, "/nonexistent-root-for-stats", timeout=120,
                    env={**env, "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"})
    assert "[1]" not in told.split("\n")[-2] or os.cpu_count() == 1  # the user's count stays


def test_the_cli_process_has_no_transparent_huge_pages_unless_mimalloc_is_told() -> None:
    code = (ALLOW_CODE  # as if started from a process with huge pages (tests/hugepages.py)
            + "import sys\n"
            "from crawl.cli import main\n"
            "main(['stats', '--root', sys.argv[1]])\n"
            f"print({THP_ENABLED_EXPR})\n")
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_ALLOW_THP"}
    for told, want in ((None, "0"), ("1", "1")):
        out = python_c(code, "/nonexistent-root-for-stats", timeout=120,
                       env=env if told is None else {**env, "MIMALLOC_ALLOW_THP": told})
        assert out.split("\n")[-2] == want, (told, out[-500:])


def test_warm_driver_imports_what_update_and_reprioritise_import_first() -> None:
    code = ("import sys\n"
            "from crawl.warmup import DRIVER_MODULES, warm_driver\n"
            "assert not any(m in sys.modules for m in DRIVER_MODULES), [m for m in DRIVER_MODULES if m in sys.modules]\n"
            "t = warm_driver()\n"
            "assert warm_driver() is t\n"  # once per process
            "t.join()\n"
            "from crawl.url.surt import _extractor\n"
            "from crawl.reporthtml import environment\n"
            "from crawl.warmup import REPORT_TEMPLATES\n"
            "print(all(m in sys.modules for m in DRIVER_MODULES), _extractor.cache_info().currsize,\n"
            "      _extractor()._extractor is not None,\n"  # the suffix trie is built (at the first lookup)
            "      sorted(k[1] for k in environment().cache) == sorted(REPORT_TEMPLATES))\n")
    assert python_c(code).split() == ["True", "1", "True", "True"]


def _forked_from_the_forkserver() -> tuple[bool, int]:
    import gc

    # the forkserver's one-offs: start-up objects frozen before the fork; SciPy and pandas, which numba's BLAS
    # probe and pyarrow's pandas shim would import, withheld (crawl.forkserver)
    warm = gc.get_freeze_count() > 100_000 and not any(m in sys.modules for m in ("pandas", "scipy"))
    # the preload ran without the collector; the workers must have it back
    return "crawl.forkserver" in sys.modules and warm and gc.isenabled(), os.getppid()


def test_the_forkserver_preload_imports_with_the_collector_off_then_freezes_and_turns_it_back_on() -> None:
    """crawl.forkserver (the forkserver's whole preload) imports distributed and the task modules without a
    single garbage collection (~420 of them, ~0.4 s of the preload's CPU, the critical path of a crawl run's
    start), freezes what it imported and leaves the collector on for the workers it forks. A fresh
    interpreter runs the real module."""
    code = ("import gc, sys\n"
            "before = sum(g['collections'] for g in gc.get_stats())  # the interpreter's own start made some\n"
            "import crawl.forkserver\n"
            "print(sum(g['collections'] for g in gc.get_stats()) - before, gc.isenabled(), gc.get_freeze_count() > 100_000,\n"
            "      'distributed' in sys.modules and 'crawl.fetch' in sys.modules)\n")
    stdout = python_c(code)
    collections, *rest = stdout.split()
    assert int(collections) <= 2 and rest == ["True", "True", "True"], stdout  # one young collection may
    # come while the crawl package is found, before the module's first line (~330 with the collector on)


def test_embedded_workers_are_forked_from_one_warm_forkserver_started_per_cluster() -> None:
    """Every worker inherits the task modules from the forkserver (crawl.forkserver, imported nowhere
    else), and the forkserver ends with its cluster: a second cluster gets a new one, also preloaded."""
    from crawl.cluster import dask_client

    cfg = load_config(overrides={"dask_workers": 2, "dask_dashboard": False}, use_env=False)
    parents = []
    for _ in range(2):
        with dask_client(cfg) as client:
            got = list(client.run(_forked_from_the_forkserver).values())
        assert len(got) == 2 and all(preloaded for preloaded, _ in got), got
        assert len({ppid for _, ppid in got}) == 1 and got[0][1] != os.getpid()  # one parent, not us
        parents.append(got[0][1])
        assert not _alive(parents[-1])  # stopped (and reaped) with the cluster
    assert parents[0] != parents[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_crawl_runs_cluster_forks_from_a_forkserver_started_early_and_yields_before_its_workers() -> None:
    """``crawl run`` starts the forkserver first (crawl.cluster.start_forkserver) and enters its cluster
    without waiting for the workers (inject and generate overlap the forkserver's preload): the client
    comes back with no worker yet, a task submitted then runs once they are up, every worker is forked
    by that same forkserver (preloaded and frozen), and the forkserver ends with the cluster."""
    import multiprocessing.forkserver as fs

    from crawl.cluster import dask_client, start_forkserver

    cfg = load_config(overrides={"dask_workers": 2, "dask_dashboard": False}, use_env=False)
    start_forkserver(cfg)
    pid = fs._forkserver._forkserver_pid  # type: ignore[attr-defined]
    assert pid is not None and _alive(pid)
    with dask_client(cfg, wait_for_embedded_workers=False) as client:
        # the forkserver is still importing (~1 s of CPU): no worker can have joined yet
        assert client.scheduler_info()["workers"] == {}
        assert client.submit(_forked_from_the_forkserver, pure=False).result(timeout=120) == (True, pid)
        client.wait_for_workers(2, timeout=120)
        assert list(client.run(_forked_from_the_forkserver).values()) == [(True, pid)] * 2
    assert not _alive(pid)


def test_an_external_scheduler_starts_no_forkserver() -> None:
    import multiprocessing.forkserver as fs

    from crawl.cluster import start_forkserver

    before = fs._forkserver._forkserver_pid  # type: ignore[attr-defined]
    start_forkserver(load_config(overrides={"dask_address": "tcp://127.0.0.1:1"}, use_env=False))
    assert fs._forkserver._forkserver_pid == before  # type: ignore[attr-defined]


def test_a_round_that_renders_nothing_leaves_the_render_module_out_of_the_driver(simweb, tmp_path) -> None:
    """The driver asks every round whether the crawl renders (crawl.config.render_enabled); importing
    crawl.render for that (aiohttp and its TLS contexts, ~0.2 s of CPU) delayed round 1's submits. A whole
    round on a real embedded cluster, in a fresh interpreter: neither module is in the driver after it."""
    code = ("import sys\n"
            "from crawl import round as rnd\n"
            "from crawl.cluster import dask_client\n"
            "from crawl.config import load_config\n"
            f"cfg = load_config(overrides={{'root': {str(tmp_path / 'root')!r}, 'crawl_id': 'norender',\n"
            f"    'resolve': [{simweb.resolve_rule!r}], 'politeness_delay_s': 0.0, 'max_pages': 20, 'partitions': 2,\n"
            "    'dask_workers': 1, 'dask_dashboard': False}, use_env=False)\n"
            "with dask_client(cfg) as client:\n"
            f"    s = rnd.run_round(cfg, {simweb.seed_urls(4)!r}, client=client)\n"
            "assert s['fetch_parse']['fetched'] > 0, s\n"
            "print('crawl.render' in sys.modules, 'aiohttp' in sys.modules)\n")
    assert python_c(code).split("\n")[-2] == "False False"


def test_a_rounds_workers_import_neither_update_nor_duckdb(simweb, tmp_path) -> None:
    """A worker fetches, parses, writes its partition's text files and runs update's link parts: none of
    that needs DuckDB, ``crawl.update`` or ``crawl.seen`` (crawl.linkparts, crawl.index's lazy DuckDB); DuckDB
    with crawl.index alone was 62-75 ms of a worker's CPU, at round 1's first parse. Nor does a recrawl
    round's fetch task read its known digests with it (crawl.digests.first_captures: importing DuckDB and
    opening a database were ~0.1-0.15 s of each worker's CPU before round 2's first request)."""
    from datetime import UTC, datetime, timedelta

    from crawl import round as rnd
    from crawl.cluster import dask_client

    cfg = load_config(overrides={
        "root": str(tmp_path / "root"), "crawl_id": "imports", "resolve": [simweb.resolve_rule],
        "politeness_delay_s": 0.0, "max_pages": 60, "dask_workers": 2, "dask_dashboard": False,
    }, use_env=False)
    now = datetime.now(UTC).replace(microsecond=0)
    with dask_client(cfg) as client:
        rnd.run_round(cfg, simweb.seed_urls(4), now, client=client)
        loaded = client.run(_heavy_modules_loaded)
        rnd.run_round(cfg, None, now + timedelta(days=30), client=client)  # revisits: known digests
        loaded_after_recrawl = client.run(_heavy_modules_loaded)
    store = Store(cfg.root, cfg.crawl_id)
    # the workers did parse (text files) and update's link parts had raw links to canonicalise
    assert store.part_files(1, "pages") and store.part_files(1, "rawlinks")
    assert len(loaded) == 2
    assert all(mods == [] for mods in loaded.values()), loaded
    # round 2 revisited pages whose digests round 1 stored: its fetch tasks preloaded their first captures
    fetchlists = [store.read_table(r) for r in store.part_files(2, "fetchlist")]
    assert sum(len(t.column("prev_digest").drop_null()) for t in fetchlists) > 0
    assert all(mods == [] for mods in loaded_after_recrawl.values()), loaded_after_recrawl


def _heavy_modules_loaded() -> list[str]:
    return [m for m in ("duckdb", "crawl.update", "crawl.seen") if m in sys.modules]
