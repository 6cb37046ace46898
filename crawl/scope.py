"""The ``allowed_hosts`` matcher: one definition of "this host is in the crawl's scope".

``allowed_hosts`` is a regular expression searched in the (lower-case) host; empty means any host.
It comes from users (the trigger form, ``POST /crawl/crawls``), so it must not be able to stall a
worker or the API server: patterns run on RE2 (``google-re2``), whose matching time is linear in the
host's length for every pattern. Python's ``re`` backtracks (``^(a+)+$`` on 30 a's and a dot takes
minutes). A pattern RE2 cannot run (look-arounds, backreferences) or one too large to compile is
refused by :func:`compile_allowed_hosts` with a message naming the reason, so it is refused where the
config is validated, before anything is stored or triggered.

Columns (``filter_reasons`` over a round's links) go through Arrow's ``match_substring_regex``, which
is RE2 as well (the same library, default options), so the scalar and the column path agree; the
URL filter tests check that on adversarial hosts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import re2

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

# numpy and pyarrow are imported by hosts_allowed only: crawl.config validates allowed_hosts with
# compile_allowed_hosts as every command starts, and `crawl run` starts its cluster's forkserver right
# after that (crawl.cluster.start_forkserver), ~0.1 s sooner without them.

MAX_PATTERN_LENGTH = 1000  # a host scope longer than this is a mistake, not a need
_MAX_MEM = 8 << 20  # RE2's compiled-program budget; bigger patterns are refused, not run


class ScopeError(ValueError):
    """``allowed_hosts`` cannot be used; the message says why (config validation names the key)."""


def _options() -> re2.Options:
    opts = re2.Options()
    opts.log_errors = False  # the error is raised to the caller, not printed by RE2 on stderr
    opts.max_mem = _MAX_MEM
    return opts


@lru_cache(maxsize=32)
def compile_allowed_hosts(pattern: str) -> re2._Regexp | None:
    """The compiled RE2 program of ``pattern`` (None for an empty pattern = any host).

    Raises :class:`ScopeError` for a pattern RE2 cannot run, e.g. ``(?!...)`` or ``\\1``.
    """
    if not pattern:
        return None
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ScopeError(f"longer than {MAX_PATTERN_LENGTH} characters")
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        msg = exc.args[0] if exc.args else exc
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        raise ScopeError(
            f"not a valid pattern for RE2, the linear-time regex engine (it has no look-arounds or "
            f"backreferences): {msg}"
        ) from None


def host_allowed(host: str, pattern: str) -> bool:
    """True when ``pattern`` is found in ``host`` (or ``pattern`` is empty)."""
    rx = compile_allowed_hosts(pattern)
    return rx is None or rx.search(host) is not None


def hosts_allowed(hosts: pa.Array, pattern: str) -> np.ndarray:
    """:func:`host_allowed` for every host of a string column (null = not allowed), as a bool array."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if compile_allowed_hosts(pattern) is None:
        return np.ones(len(hosts), bool)
    try:
        return pc.match_substring_regex(hosts, pattern).fill_null(False).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # not expected: Arrow's RE2 is RE2
        enc = pc.dictionary_encode(hosts)
        ok = np.array([h is not None and host_allowed(h, pattern) for h in enc.dictionary.to_pylist()], bool)
        idx = enc.indices
        if idx.null_count:
            ok = np.append(ok, False)
            idx = idx.fill_null(len(ok) - 1)
        return ok[idx.to_numpy(zero_copy_only=False)] if len(ok) else np.zeros(len(hosts), bool)


__all__ = ["MAX_PATTERN_LENGTH", "ScopeError", "compile_allowed_hosts", "host_allowed", "hosts_allowed"]
