"""A SYN blackhole on loopback: an address and port whose connects hang (no SYN-ACK ever comes).

How: a listening socket with backlog 0 that never accepts, its accept queue filled by our own
connection first; Linux then drops further SYNs (``net.ipv4.tcp_abort_on_overflow`` = 0, the default)
and the client's ``connect`` waits until its own timeout, as with a firewalled or dead host. The
constructor checks that a probe connect really hangs on this box (else :class:`RuntimeError`).

The oracle is outside the client: :meth:`attempts` samples ``/proc/net/tcp`` (every ``sample_s``)
for sockets in ``SYN_SENT`` towards the blackhole, so a test sees each connect attempt the crawler
made, when it started and when it was given up, whatever the crawler recorded. Our own filler and
probe sockets are left out. Use ``with SynBlackhole("127.0.0.2") as bh:`` and map a host to
``bh.addr:bh.port`` (a resolve rule placed before ``*.sim.test``).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time

SYN_SENT = "02"  # /proc/net/tcp state


def _hex_addr(ip: str, port: int) -> str:
    """An IPv4 address and port as /proc/net/tcp spells them (address little-endian)."""
    return f"{int.from_bytes(socket.inet_aton(ip), 'little'):08X}:{port:04X}"


class SynBlackhole:
    """``with SynBlackhole(addr) as bh``: connects to ``bh.addr:bh.port`` hang until closed."""

    def __init__(self, addr: str = "127.0.0.2", probe_s: float = 0.5, sample_s: float = 0.02,
                 max_fillers: int = 4) -> None:
        self.addr = addr
        self.sample_s = sample_s
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((addr, 0))
        self.listener.listen(0)
        self.port: int = self.listener.getsockname()[1]
        self.own: list[socket.socket] = []
        self._seen: dict[int, list[float]] = {}  # local port -> [first seen, last seen] in SYN_SENT
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="syn-blackhole", daemon=True)
        try:
            for _ in range(max_fillers):
                if self._probe_hangs(probe_s):
                    return
            raise RuntimeError(f"SynBlackhole: connects to {addr}:{self.port} do not hang on this box "
                               "(net.ipv4.tcp_abort_on_overflow?)")
        except BaseException:
            self.close()
            raise

    def _probe_hangs(self, probe_s: float) -> bool:
        """Connect once more: a connect that completes fills the queue (kept open); one that does
        not within ``probe_s`` shows the blackhole works (kept too: its SYNs keep being dropped)."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        self.own.append(s)
        with contextlib.suppress(BlockingIOError):
            s.connect((self.addr, self.port))
        _, w, _ = select.select([], [s], [], probe_s)
        return not w

    def _own_ports(self) -> set[int]:
        return {s.getsockname()[1] for s in self.own}

    def _sample(self) -> None:
        target = _hex_addr(self.addr, self.port)
        own = self._own_ports()
        while not self._stop.is_set():
            now = time.time()
            try:
                with open("/proc/net/tcp") as f:
                    lines = f.readlines()[1:]
            except OSError:
                lines = []
            for line in lines:
                parts = line.split()
                if len(parts) > 3 and parts[2] == target and parts[3] == SYN_SENT:
                    lport = int(parts[1].rsplit(":", 1)[1], 16)
                    if lport in own:
                        continue
                    with self._lock:
                        span = self._seen.setdefault(lport, [now, now])
                        span[1] = now
            self._stop.wait(self.sample_s)

    def attempts(self) -> list[tuple[float, float]]:
        """(first seen, last seen) in Unix time of every connect attempt of others, by start; an
        attempt still hanging has its last sample as its end."""
        with self._lock:
            return sorted((a, b) for a, b in self._seen.values())

    def hanging(self) -> int:
        """Connect attempts of others in SYN_SENT at the last sample (within ``sample_s``)."""
        cutoff = time.time() - 3 * self.sample_s - 0.05
        with self._lock:
            return sum(b >= cutoff for _, b in self._seen.values())

    def __enter__(self) -> SynBlackhole:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(1)
        for s in self.own:
            s.close()
        self.own.clear()
        self.listener.close()


__all__ = ["SynBlackhole"]
