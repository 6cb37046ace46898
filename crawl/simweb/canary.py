"""A canary listener: one TCP port on both 127.0.0.1 and ::1 that logs every connection it gets.

Why: an SSRF test must be judged by what reached the private address, not by what the crawler
says it did. The bait URLs of :mod:`crawl.simweb.ssrf` all carry the canary's port, so any
connection a guard let through shows up here (peer, time, the first request bytes), whatever
the crawler recorded. Plain sockets in one thread: nothing of the crawler is involved.
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any


class Canary:
    """``with Canary(log_path) as c:`` listens on ``c.port`` (both loopback families) until exit."""

    def __init__(self, log_path: str | Path | None = None, attempts: int = 50) -> None:
        self.log_path = Path(log_path) if log_path else None
        self.hits: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._socks = self._bind_both(attempts)
        self.port: int = self._socks[0].getsockname()[1]
        self._thread = threading.Thread(target=self._loop, name="canary", daemon=True)

    @staticmethod
    def _bind_both(attempts: int) -> list[socket.socket]:
        """A free port that is free on 127.0.0.1 and ::1 alike (picked by the kernel, retried)."""
        for _ in range(attempts):
            v4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            v4.bind(("127.0.0.1", 0))
            port = v4.getsockname()[1]
            v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                v6.bind(("::1", port))
            except OSError:
                v4.close()
                v6.close()
                continue
            for s in (v4, v6):
                s.listen(64)
                s.setblocking(False)
            return [v4, v6]
        raise RuntimeError("canary: no port free on both 127.0.0.1 and ::1")

    def __enter__(self) -> Canary:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        for s in self._socks:
            s.close()

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        for s in self._socks:
            sel.register(s, selectors.EVENT_READ)
        while not self._stop.is_set():
            for key, _ in sel.select(timeout=0.1):
                try:
                    conn, peer = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue
                self._record(conn, peer, key.fileobj.getsockname())  # type: ignore[union-attr]
        sel.close()

    def _record(self, conn: socket.socket, peer: Any, local: Any) -> None:
        conn.settimeout(0.3)
        try:
            first = conn.recv(512)
        except OSError:
            first = b""
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ncanary")
        except OSError:
            pass
        conn.close()
        hit = {"time": time.time(), "peer": str(peer[0]), "local": str(local[0]),
               "first_line": first.split(b"\r\n", 1)[0].decode("latin-1")}
        with self._lock:
            self.hits.append(hit)
            if self.log_path is not None:
                with self.log_path.open("a") as fh:
                    fh.write(json.dumps(hit) + "\n")


__all__ = ["Canary"]
