"""Imported once by the embedded cluster's forkserver (:func:`crawl.cluster.dask_client`; ``crawl run`` starts
it before anything else, :func:`crawl.cluster.start_forkserver`): the task
modules and parse's compiled fingerprint kernel are loaded there, before any worker is forked, so every
worker starts with them instead of importing and loading them itself (:mod:`crawl.warmup`).

Then two one-off costs of a worker's first round are paid here, once, instead of in every worker
(bench/RESULTS.md, "Where the workers' CPU goes after session 6"):

- pyarrow imports pandas at a process's first Parquet read (its pandas-metadata shim), ~0.6 s of
  CPU: a one-row Parquet write and read in memory does that import now;
- the full garbage collections that then traverse the ~200 k objects of all those imports, again and
  again during the round: ``gc.collect()`` then ``gc.freeze()`` moves them to the permanent generation,
  which forked workers inherit (and which keeps their pages shared with the forkserver's).

Only this process runs it: nothing here runs a thread, and the frozen objects are modules and
start-up state that live as long as the process anyway.
"""

import gc

import pyarrow as pa
import pyarrow.parquet as pq

from crawl.warmup import import_task_modules

import_task_modules()

_sink = pa.BufferOutputStream()
pq.write_table(pa.table({"warm": [1]}), _sink)
pq.read_table(pa.BufferReader(_sink.getvalue()))
del _sink

gc.collect()
gc.freeze()
