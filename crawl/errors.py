"""Errors the engine raises for bad input: specific, and raised before anything is written."""

from __future__ import annotations

SEED_ECHO_CHARS = 100  # of a bad seed echoed in SeedError's message (its reason: twice that)
SEED_ECHO_MAX = 20  # bad seeds named in the message; the rest are counted


def shorten(text: str, limit: int, quote: bool = False) -> str:
    """``text`` (its repr when ``quote``) if at most ``limit`` characters, else its first ``limit``
    followed by "… (N chars)", its full length."""
    show = repr if quote else str
    return show(text) if len(text) <= limit else f"{show(text[:limit])}… ({len(text):,} chars)"


class SeedError(ValueError):
    """One or more seeds are invalid; ``bad`` lists (seed, reason) for each of them, in full.

    The message names each (up to :data:`SEED_ECHO_MAX`, then how many more), each seed cut to
    :data:`SEED_ECHO_CHARS` characters with its length (a 2,100-character seed filled the terminal, and
    its reason, which may quote it, did again)."""

    def __init__(self, bad: list[tuple[str, str]]):
        self.bad = bad
        lines = "; ".join(f"{shorten(seed, SEED_ECHO_CHARS, quote=True)}: {shorten(reason, 2 * SEED_ECHO_CHARS)}"
                          for seed, reason in bad[:SEED_ECHO_MAX])
        more = f"; and {len(bad) - SEED_ECHO_MAX} more" if len(bad) > SEED_ECHO_MAX else ""
        super().__init__(f"{len(bad)} invalid seed(s), nothing was written: {lines}{more}")


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


class StepOrder(RuntimeError):
    """A step asked for out of order (its round not generated, not fetched and parsed in full, not updated,
    already or not yet published): bad input for ``crawl step`` (CLI exit code 2), raised before the step
    writes anything; the message names the step to run."""


class PartitionFailed(RuntimeError):
    """A partition's fetch or parse failed for good (not retryable, or out of retries)."""


# errno values a retry cannot fix: the disk or quota is full, or the crawl root is not writable
_PERMANENT_ERRNOS = {28: "no space left on device", 122: "disk quota exceeded", 13: "permission denied",
                     1: "operation not permitted", 30: "read-only file system"}


def permanent_reason(exc: BaseException) -> str | None:
    """Why retrying ``exc`` cannot help (disk full, permissions, read-only root), or None if it might.

    Looks at the errno of any ``OSError`` in the cause chain, and at the message for libraries that
    re-wrap it without an errno (Arrow's ``OSError: ... No space left on device``).
    """
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, OSError):
            if seen.errno in _PERMANENT_ERRNOS:
                return _PERMANENT_ERRNOS[seen.errno]
            text = str(seen).lower()
            for reason in _PERMANENT_ERRNOS.values():
                if reason in text:
                    return reason
        seen = seen.__cause__ or seen.__context__
    return None
