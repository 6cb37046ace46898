"""Imported once by the embedded cluster's forkserver (:func:`crawl.cluster.dask_client`; ``crawl run`` starts
it before anything else, :mod:`crawl.prestart`): the task modules and parse's compiled fingerprint kernel are
loaded there, before any worker is forked, so every worker starts with them instead of importing and loading
them itself (:mod:`crawl.warmup`).

This preload is the critical path of a ``crawl run``'s start (the driver has injected, generated and
submitted round 1 before it ends: bench/RESULTS.md, "(session 8, helper start)"), so it imports nothing the
workers never use. Two libraries are *withheld* while it runs (:func:`crawl.withhold.withheld`: their
import fails), ~0.5 s of its ~2 s of CPU:

- SciPy: numba's first kernel load registers numba's NumPy implementations, and ``numba.np.arraymath`` imports
  ``scipy.linalg`` only to learn whether ``np.dot`` & co. can use SciPy's BLAS. Our kernels use none; the
  workers never import SciPy (the driver's update and reprioritise do). So numba in the workers has no BLAS:
  a future kernel with ``np.dot``/``np.linalg`` must be loaded after the withholding, or import
  ``scipy.linalg.cython_blas`` here first;
- pandas: pyarrow imports it at a process's first ``pa.array`` only to ask whether the argument is a pandas
  object (its lazy pandas shim); no worker code uses pandas. ``pa.array([0])`` under the withholding makes
  the shim record "no pandas" once, in the forkserver; an explicit ``Table.to_pandas()`` still imports it
  when called (the shim tries again when pandas is required).

Then one cost of a worker's whole life is paid here, once: the full garbage collections that traverse the
~170 k objects of all those imports, again and again during the round: ``gc.freeze()`` moves them to the
permanent generation, which forked workers inherit (and which keeps their pages shared with the
forkserver's). A one-row Parquet write and read in memory first loads pyarrow's Parquet paths.

The collector is off while all this is imported (distributed too: this module is the forkserver's whole
preload, :data:`crawl.prestart.FORKSERVER_PRELOAD`) and back on before the first fork. Its ~420 automatic
collections over the growing heap were ~0.4 s of the preload's ~1.45 s of CPU, on the critical path of a
``crawl run``'s start, and the collection before the freeze found nothing to free (bench/RESULTS.md,
"(session 9, helper start9)"). What the imports leave unreachable without it, ~2.8 k objects of ~180 k,
is frozen with the rest: a fixed few hundred KB shared by the forkserver and its workers.

Only this process runs it: nothing here runs a thread, and the frozen objects are modules and start-up state
that live as long as the process anyway.
"""

import gc

gc.disable()  # until the heap is frozen, just before the first fork (see the module's docstring)
try:
    import distributed  # noqa: F401 - what a worker runs (the preload's first and largest import)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from crawl.warmup import import_task_modules
    from crawl.withhold import pyarrow_without_pandas, withheld

    #: Libraries whose import fails while the forkserver preloads (see the module's docstring).
    WITHHELD = ("scipy", "pandas")

    with withheld(*WITHHELD):
        import_task_modules()
    pyarrow_without_pandas()  # pyarrow's pandas shim tries its import here, once, and finds none

    _sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"warm": [1]}), _sink)
    pq.read_table(pa.BufferReader(_sink.getvalue()))
    del _sink

    gc.freeze()
finally:
    gc.enable()  # the workers inherit the collector's state: on, with nothing but their own objects to scan
