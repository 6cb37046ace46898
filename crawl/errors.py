"""Errors the engine raises for bad input: specific, and raised before anything is written."""

from __future__ import annotations


class SeedError(ValueError):
    """One or more seeds are invalid; ``bad`` lists (seed, reason) for each of them."""

    def __init__(self, bad: list[tuple[str, str]]):
        self.bad = bad
        lines = "; ".join(f"{seed!r}: {reason}" for seed, reason in bad)
        super().__init__(f"{len(bad)} invalid seed(s), nothing was written: {lines}")
