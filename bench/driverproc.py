"""This bench process set up as ``crawl run`` sets up its own (``crawl.cli.main``): one BLAS/OpenMP thread
and no transparent huge pages, so a round's driver steps run in a bench as they do in the product.

The flags stay on for the whole process, ceilings and bare loops included, so both sides of a ratio run
with them. Trees from before a flag existed (``--baseline-rev``) run without it, as that tree's
``crawl run`` did."""

from __future__ import annotations


def as_crawl_run_driver() -> None:
    from crawl import warmup

    warmup.single_threaded_math()
    no_thp = getattr(warmup, "no_transparent_hugepages", None)  # session 14 on
    if no_thp is not None:
        no_thp()
