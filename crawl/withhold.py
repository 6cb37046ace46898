"""Keep libraries that a dependency imports only to probe for them out of a process.

Two of our dependencies import a large library only to ask whether it is there: numba's first kernel load
imports ``scipy.linalg`` to learn whether ``np.dot`` can use SciPy's BLAS, pyarrow's first ``pa.array``
imports pandas to learn whether its argument is a pandas object (its lazy pandas shim), and distributed's
``get_mp_context`` imports pandas (with its other "optional packages") to choose a forkserver preload list
that :mod:`crawl.cluster` replaces. Nothing in ``crawl/`` uses pandas, and the workers never use SciPy, yet
these probes cost ~0.25 s (pandas) and ~0.3 s (SciPy) of CPU at the start of every ``crawl run``, in the
forkserver and in the CLI process, both on the way to the first request (bench/RESULTS.md, "(session 8,
helper start)" and "(session 9, helper start9)"). While :func:`withheld` is in force their import fails as if
they were not installed, so each probe answers "no" once and remembers it.

Only the probes are affected: pyarrow's shim tries again when pandas is *required* (``Table.to_pandas()``
imports it then), and an explicit ``import pandas`` after the block works.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


class Withheld:
    """A ``sys.meta_path`` finder under which ``import NAME`` (or a submodule) of ``names`` raises
    ModuleNotFoundError, as if the library were not installed."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (withheld while probed: crawl.withhold)",
                                      name=fullname)


@contextlib.contextmanager
def withheld(*names: str) -> Iterator[None]:
    """Within the block, importing any of ``names`` (top-level packages) fails (:class:`Withheld`); a library
    already imported stays usable."""
    finder = Withheld(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def pyarrow_without_pandas() -> None:
    """Make pyarrow's pandas shim record "no pandas" now, without importing pandas (~0.25 s of CPU): its
    first probe is the one a process pays for. A no-op when it has already probed (or pandas is loaded)."""
    import pyarrow as pa

    with withheld("pandas"):
        pa.array([0])
