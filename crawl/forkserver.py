"""Imported once by the embedded cluster's forkserver (:func:`crawl.cluster.dask_client`): the task
modules and parse's compiled fingerprint kernel are loaded there, before any worker is forked, so every
worker starts with them instead of importing and loading them itself (:mod:`crawl.warmup`)."""

from crawl.warmup import import_task_modules

import_task_modules()
