"""Errors the engine raises for bad input: specific, and raised before anything is written."""

from __future__ import annotations


class SeedError(ValueError):
    """One or more seeds are invalid; ``bad`` lists (seed, reason) for each of them."""

    def __init__(self, bad: list[tuple[str, str]]):
        self.bad = bad
        lines = "; ".join(f"{seed!r}: {reason}" for seed, reason in bad)
        super().__init__(f"{len(bad)} invalid seed(s), nothing was written: {lines}")


class LeaseHeld(RuntimeError):
    """Another round of this crawl holds the lease (CLI exit code 3); ``owner`` names its holder."""

    def __init__(self, owner: str, message: str):
        self.owner = owner
        super().__init__(message)


class LeaseLost(RuntimeError):
    """This round's lease was taken over (its fencing token is no longer current): it must not commit."""


class FetchStopped(RuntimeError):
    """A fetch task stopped between requests: its worker lost the scheduler or its lease is gone."""


class ClusterError(RuntimeError):
    """The Dask cluster cannot run the round (unreachable scheduler, no workers); names the address."""
