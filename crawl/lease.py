"""One round at a time per crawl: a lease under the crawl root, with a fencing token.

Why: a CLI round and a DAG round (or a retry while a killed attempt's workers still run) must not
run the same round at once -- they would fetch the same hosts twice as fast and race the same files.

How. The lease is a folder of small JSON objects, one per acquisition::

    state/crawl=ID/lease/token=0000000007.json
      {"token": 7, "owner": "host:pid:uuid", "run": "...", "heartbeat": 1764590000.1,
       "expires_at": 1764590060.1, "released": false, "clean": false, "phase": "fetch", ...}

The highest token is the current lease. To take the lease, a process reads the highest token N; if
that lease is live (not released, not expired) and belongs to another *run*, it refuses at once
(:class:`~crawl.errors.LeaseHeld`, exit code 3 in the CLI). Otherwise it creates ``token=N+1``
with a create-only write, so of two processes racing for N+1 exactly one succeeds; the token is the
fencing token, monotonic by construction. The owner renews its object's ``heartbeat`` and
``expires_at`` from a background thread every ``expiry / 4`` seconds; an owner that died stops
renewing and its lease is taken over once ``expires_at`` has passed. A *run* is one logical round:
a CLI invocation (a fresh uuid) or an Airflow DAG run (its run id), whose steps are separate
processes: a step of the same run takes a new token over its own run's lease even while it is
live, which fences out a previous attempt of that step (a zombie ``fetch_parse`` whose Airflow
task was retried).

Fencing. ``publish`` checks :meth:`Lease.check` (my token is still the highest and not expired)
just before it writes the manifest and flips ``CURRENT.json``, and fetch tasks check
:func:`token_is_current` between requests (:mod:`crawl.tasks`), so the holder of a superseded token
stops fetching within :data:`CHECK_INTERVAL_S` and cannot publish.

Guarantees, honestly:
- Local disk: the create-only write is ``link(2)`` of a fully written temp file, atomic on POSIX
  filesystems; mutual exclusion of acquisitions is exact (on NFS it is as good as NFS's link).
- ``s3://`` through s3fs: ``PutObject`` with ``If-None-Match: *`` (S3 conditional writes, also
  served by moto); exact as well, since S3 is strongly consistent for reads and lists.
- Other fsspec filesystems without an exclusive create: exists-check, write, then read back after a
  short pause and keep the lease only if the object still names this owner. Two writers can both
  win only if their writes interleave within that pause; the fence at publish then still lets at
  most the later token commit.
- The check-then-write at publish is not atomic with the ``CURRENT.json`` write (no object store
  offers compare-and-swap on another key), so a holder that stalls for longer than the lease expiry
  *between* the check and the write could still flip the pointer; the window is one small write.
- Expiry compares wall clocks of different machines: keep them NTP-synchronised to well under the
  expiry.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from crawl.errors import LeaseHeld, LeaseLost
from crawl.store import Store, atomic_write, place_local

#: How often a fetch task re-checks that it may go on (worker connected, token current); a dead
#: attempt's fetchers stop issuing requests at most this long after their lease ended.
CHECK_INTERVAL_S = 1.0
FETCH_PHASE = "fetch_parse"
_KEEP_TOKENS = 16  # older token objects are pruned by the next acquisition
_READBACK_PAUSE_S = 0.2
_QUIET_MARGIN_S = 0.5  # added to a quiet period: clock reading and scheduling slack


@dataclass(frozen=True)
class LeaseRecord:
    token: int
    owner: str  # host:pid:uuid of the process holding it
    run: str  # the logical round: a CLI invocation or a DAG run
    acquired_at: float
    heartbeat: float
    expires_at: float
    released: bool = False
    clean: bool = False  # released after success (False: it ended by a failure or a kill)
    phase: str = "start"  # what the owner is doing ("fetch" makes a successor wait, see quiet_until)
    round: int | None = None

    def live(self, now: float | None = None) -> bool:
        return not self.released and self.expires_at > (time.time() if now is None else now)

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        return (f"lease held by {self.owner} (run {self.run}, token {self.token}, phase {self.phase}, "
                f"expires in {max(0.0, self.expires_at - now):.0f} s)")


def _lease_dir(store: Store) -> str:
    return store.abs(store.state("lease"))


def _token_path(store: Store, token: int) -> str:
    return f"{_lease_dir(store)}/token={token:010d}.json"


def _tokens(store: Store) -> list[int]:
    fs, d = store.fs, _lease_dir(store)
    with contextlib.suppress(Exception):
        fs.invalidate_cache(d)
    try:
        names = fs.ls(d, detail=False)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        base = (n if isinstance(n, str) else n["name"]).rsplit("/", 1)[-1]
        if base.startswith("token=") and base.endswith(".json"):
            with contextlib.suppress(ValueError):
                out.append(int(base[6:-5]))
    return sorted(out)


def _read(store: Store, token: int) -> LeaseRecord | None:
    try:
        data = json.loads(store.fs.cat_file(_token_path(store, token)))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return LeaseRecord(**{k: v for k, v in data.items() if k in LeaseRecord.__dataclass_fields__})


def current(store: Store) -> LeaseRecord | None:
    """The lease with the highest token (live or not); None before any round took one."""
    for token in reversed(_tokens(store)):
        rec = _read(store, token)
        if rec is not None:
            return rec
    return None


def token_is_current(store: Store, token: int) -> bool:
    """Whether ``token`` is still the crawl's live lease (what fetch tasks check between requests)."""
    rec = current(store)
    return rec is not None and rec.token == token and rec.live()


def _create_only(store: Store, path: str, data: bytes) -> bool:
    """Write ``path`` only if it does not exist; False when another writer got there first."""
    fs = store.fs
    if fs.__class__.__name__ == "LocalFileSystem":
        try:
            place_local(path, data, os.link)  # atomic create-only of a complete file
        except FileExistsError:
            return False
        return True
    with contextlib.suppress(Exception):
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    if fs.__class__.__name__ == "S3FileSystem":
        try:
            fs.pipe_file(path, data, mode="create")  # PutObject If-None-Match: *
        except FileExistsError:
            return False
        except OSError as exc:  # some S3 servers answer 412 without naming the condition
            if "Precondition" in str(exc) or "412" in str(exc):
                return False
            raise
        return True
    # no exclusive create on this filesystem: check, write, then read back after a pause
    if fs.exists(path):
        return False
    fs.pipe_file(path, data)
    time.sleep(_READBACK_PAUSE_S)
    return True


class Lease:
    """A held lease: renew it (a heartbeat thread), check it (fencing), release it."""

    def __init__(self, store: Store, record: LeaseRecord, expiry_s: float, quiet_until: float = 0.0) -> None:
        self.store = store
        self.record = record
        self.expiry_s = expiry_s
        self.quiet_until = quiet_until
        self.lost = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def token(self) -> int:
        return self.record.token

    # -- acquire ------------------------------------------------------------------------------
    @classmethod
    def acquire(cls, store: Store, run: str | None = None, expiry_s: float = 60.0, quiet_s: float = 0.0,
                phase: str = "start", round_no: int | None = None) -> Lease:
        """Take the crawl's lease for ``run`` (a fresh run id when None) or raise :class:`LeaseHeld`.

        ``quiet_s``: when the previous holder ended without a clean release while it was fetching,
        :attr:`quiet_until` is when its fetchers are known to have stopped (they check every
        :data:`CHECK_INTERVAL_S`) plus ``quiet_s`` (the largest per-host delay), so a rerun never
        sends a request to a host sooner than that after the dead attempt's last one.
        """
        run = run or f"cli:{uuid.uuid4().hex}"
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        for _ in range(8):
            prev = current(store)
            now = time.time()
            if prev is not None and prev.live(now) and prev.run != run:
                raise LeaseHeld(prev.owner, prev.describe(now))
            token = (prev.token if prev else 0) + 1
            rec = LeaseRecord(token=token, owner=owner, run=run, acquired_at=now, heartbeat=now,
                              expires_at=now + expiry_s, phase=phase, round=round_no)
            if not _create_only(store, _token_path(store, token), json.dumps(asdict(rec)).encode()):
                continue  # someone took this token first: look again
            back = _read(store, token)
            if back is None or back.owner != owner:
                continue
            if _tokens(store)[-1] != token:  # only without exclusive create: a later writer won
                continue
            quiet_until = 0.0
            if prev is not None and _was_fetching(prev):
                quiet_until = quiet_after(prev, quiet_s, superseded_at=now)
            lease = cls(store, rec, expiry_s, quiet_until)
            lease._prune()
            return lease
        rec = current(store)
        raise LeaseHeld(rec.owner if rec else "?", rec.describe() if rec else "lease contended, try again")

    def _prune(self) -> None:
        for t in _tokens(self.store)[:-_KEEP_TOKENS]:
            with contextlib.suppress(Exception):
                self.store.fs.rm(_token_path(self.store, t))

    # -- keep ---------------------------------------------------------------------------------
    def is_current(self) -> bool:
        """My token is the highest and my lease has not expired (the fencing test)."""
        if self.lost:
            return False
        rec = current(self.store)
        ok = rec is not None and rec.token == self.token and rec.owner == self.record.owner and rec.live()
        if not ok:
            self.lost = True
        return ok

    def check(self, what: str) -> None:
        """Raise :class:`LeaseLost` unless the lease is still mine (called before a commit)."""
        if not self.is_current():
            rec = current(self.store)
            raise LeaseLost(f"{what} refused: the lease (token {self.token}, owner {self.record.owner}) is no "
                            f"longer current" + (f"; now {rec.describe()}" if rec else ""))

    def renew(self, phase: str | None = None, round_no: int | None = None, **end: Any) -> bool:
        """Push the expiry forward (and record the phase); False once the lease was taken over."""
        with self._lock:
            if not self.is_current():
                return False
            now = time.time()
            self.record = replace(self.record, heartbeat=now, expires_at=now + self.expiry_s,
                                  phase=phase or self.record.phase,
                                  round=self.record.round if round_no is None else round_no, **end)
            atomic_write(self.store.fs, _token_path(self.store, self.token),
                         json.dumps(asdict(self.record)).encode())
            return True

    def start_heartbeat(self) -> Lease:
        def beat() -> None:
            period = max(0.2, self.expiry_s / 4)
            while not self._stop.wait(period):
                try:
                    if not self.renew():
                        return
                except Exception:  # storage hiccup: try again next period; expiry is the backstop
                    continue

        self._thread = threading.Thread(target=beat, name=f"lease-heartbeat-{self.token}", daemon=True)
        self._thread.start()
        return self

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def release(self, clean: bool = True) -> None:
        """Stop renewing and mark the lease released (a no-op when it was already taken over)."""
        self.stop_heartbeat()
        with contextlib.suppress(Exception):
            self.renew(released=True, clean=clean)

    def wait_quiet(self, progress: Callable[[str], None] | None = None) -> float:
        """Sleep until a dead predecessor's fetchers are known to have stopped; returns seconds slept."""
        wait = self.quiet_until - time.time()
        if wait <= 0:
            return 0.0
        if progress:
            progress(f"lease: previous attempt ({self.token - 1}) ended while fetching; waiting {wait:.1f} s "
                     f"so its last requests and ours keep the politeness gap")
        time.sleep(wait)
        return wait


def quiet_after(rec: LeaseRecord, quiet_s: float, superseded_at: float) -> float:
    """When the fetchers of the attempt that held ``rec`` are known to have sent their last request at
    least ``quiet_s`` ago: they stop within :data:`CHECK_INTERVAL_S` of its lease ending (released,
    expired, or superseded by the next token at ``superseded_at``), plus a margin for clock reading."""
    ended = rec.heartbeat if rec.released else min(rec.expires_at, superseded_at)
    return ended + CHECK_INTERVAL_S + quiet_s + _QUIET_MARGIN_S


def quiet_since(store: Store, token: int, quiet_s: float) -> float | None:
    """:func:`quiet_after` for the attempt that held ``token``, read from the lease folder; None when it
    cannot be told (the record was pruned, or nothing has ended or superseded that lease yet).

    Why: a fetch task that finds an earlier, unfinished attempt of its partition (``crawl.tasks``)
    waits only until this time -- which the lease's :meth:`Lease.wait_quiet` has usually already
    waited out -- instead of a second full quiet period.
    """
    rec = _read(store, token)
    if rec is None:
        return None
    successor = _read(store, token + 1)
    if successor is None and not rec.released:
        return None
    return quiet_after(rec, quiet_s, successor.acquired_at if successor is not None else rec.expires_at)


def _was_fetching(rec: LeaseRecord) -> bool:
    """The holder ended (or may still be) in the middle of fetching: its fetchers may still run."""
    return rec.phase.split(" ")[0] == FETCH_PHASE and not rec.phase.endswith(" done") \
        and not (rec.released and rec.clean)


def quiet_s(cfg: Any) -> float:
    """The longest gap a host can be owed: the politeness delay or the largest honoured Crawl-delay."""
    return max(float(cfg.politeness_delay_s), float(cfg.max_crawl_delay_s))


@contextlib.contextmanager
def held(cfg: Any, lease: Lease | None = None, run: str | None = None, phase: str = "start",
         keep: bool = False) -> Iterator[Lease]:
    """Use ``lease`` if given (setting its phase), else take one for the block.

    A lease taken here is released when the block ends (``clean`` when it ended without an error),
    unless ``keep``: a DAG step leaves it to the run's next step (it expires if none comes).
    """
    if lease is not None:
        lease.check(phase)
        lease.renew(phase=phase)
        yield lease
        return
    store = Store(cfg.root, cfg.crawl_id)
    own = Lease.acquire(store, run, cfg.lease_expiry_s, quiet_s(cfg), phase=phase).start_heartbeat()
    try:
        yield own
    except BaseException:
        if keep:
            own.stop_heartbeat()
            with contextlib.suppress(Exception):
                own.renew(phase=f"{phase} failed")
        else:
            own.release(clean=False)
        raise
    if keep:
        own.stop_heartbeat()
        own.renew(phase=f"{phase} done")
    else:
        own.release(clean=True)


__all__ = ["CHECK_INTERVAL_S", "Lease", "LeaseRecord", "current", "held", "quiet_after", "quiet_s", "quiet_since",
           "token_is_current"]
