"""A real FTP server for tests: pyftpdlib, anonymous and read-only, on loopback, as a subprocess.

Run as ``python tests/ftpserver.py ROOT LOG [--pasv-address A] [--busy-once NAME]``: serves ROOT on 127.0.0.1 (a free port, printed as
``PORT <n>`` on stdout once listening) and writes pyftpdlib's own log to LOG at DEBUG level, where it
logs every command and reply of every session, each line stamped with the server's wall clock. That
log is the tests' oracle (:func:`read_log`): who connected when, which commands, which transfers
completed, nothing taken from the crawler under test. With ``--pasv-address`` the server refuses
``EPSV`` and names that address in its ``PASV`` replies (a server aiming the client's data connection
elsewhere: the FTP bounce), while its data port still listens on 127.0.0.1. With ``--busy-once`` the
first ``RETR`` of that file is answered ``421`` and the session closed (an overloaded server).

:func:`make_tree` writes the test tree: text files, a binary, a nested directory, a name with a
space, and a file bigger than the test's body cap.
"""

from __future__ import annotations

import functools
import logging
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

# the over-the-cap file (tests use a cap of 100_000 bytes): far bigger than loopback's socket buffers
# (tcp_wmem/tcp_rmem up to 4 + 32 MB here), so a cut transfer is one the server sees cut, not one the
# kernel had already swallowed whole
BIG_SIZE = 48_000_000

TREE_TEXT = {
    "readme.txt": b"Welcome to the test FTP server.\n",
    "pub/notes.md": b"# Notes\n\nplain text in a nested directory\n",
    "pub/deep/leaf.txt": b"the deepest file\n",
    "pub/with space.txt": b"a name with a space\n",
    # an HTML page on FTP: its relative links resolve against its ftp:// URL
    "pub/index.html": b'<html><title>ftp page</title><a href="../readme.txt">up</a> <a href="deep/">down</a></html>',
}


@functools.cache
def _binaries() -> tuple[bytes, bytes]:
    """The binary file and the over-the-cap one: seeded random bytes, made once per process."""
    rng = random.Random(12)
    return rng.randbytes(5000), rng.randbytes(BIG_SIZE)


def make_tree(root: Path) -> dict[str, bytes]:
    """Write the test tree under ``root``; returns path (relative, ``/``-separated) -> content."""
    files = dict(TREE_TEXT)
    files["bin/blob.bin"], files["big.iso"] = _binaries()
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


@dataclass
class Session:
    """One control connection as the server logged it (keyed by the client's address:port)."""

    peer: str
    opened: float = 0.0
    closed: float | None = None
    commands: list[tuple[float, str]] = field(default_factory=list)
    transfers: list[tuple[str, bool, int]] = field(default_factory=list)  # (path, completed, bytes)


_LINE = re.compile(r"^(?P<t>\d+\.\d+) (?P<peer>\S+?)-\[[^\]]*\] (?P<msg>.*)$")
_TRANSFER = re.compile(r"^(?P<cmd>RETR|STOR|APPE|STOU) (?P<path>.+) completed=(?P<ok>[01]) bytes=(?P<n>\d+) ")


def read_log(path: Path, root: Path) -> list[Session]:
    """The sessions of a pyftpdlib DEBUG log, in the order they opened; transfer paths relative to
    ``root`` with a leading ``/``."""
    sessions: dict[str, Session] = {}
    order: list[Session] = []
    prefix = str(root.resolve())
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        t, peer, msg = float(m["t"]), m["peer"], m["msg"]
        if msg.startswith("FTP session opened"):
            s = sessions[peer] = Session(peer, opened=t)
            order.append(s)
            continue
        s = sessions.get(peer)
        if s is None:
            continue
        if msg.startswith("FTP session closed"):
            s.closed = t
        elif msg.startswith("<- "):
            s.commands.append((t, msg[3:]))
        elif (tm := _TRANSFER.match(msg)) is not None:
            p = tm["path"]
            rel = p[len(prefix):] if p.startswith(prefix) else p
            s.transfers.append((rel or "/", tm["ok"] == "1", int(tm["n"])))
    return order


def main() -> None:
    import argparse

    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import FTPServer

    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("log")
    ap.add_argument("--pasv-address")
    ap.add_argument("--busy-once")
    args = ap.parse_args()
    root, log = args.root, args.log
    logger = logging.getLogger("pyftpdlib")
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(created).6f %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    auth = DummyAuthorizer()
    auth.add_anonymous(root)  # read-only: perm "elr"
    busy = {args.busy_once} if args.busy_once else set()

    class TestHandler(FTPHandler):
        masquerade_address = args.pasv_address

        def ftp_EPSV(self, line):  # noqa: N802 - pyftpdlib's command method names
            if args.pasv_address:
                self.respond("502 EPSV not implemented here.")
            else:
                super().ftp_EPSV(line)

        def ftp_RETR(self, file):  # noqa: N802
            name = file.rsplit("/", 1)[-1]
            if name in busy:
                busy.discard(name)
                self.respond("421 Too busy, try again later.")
                self.close_when_done()
                return None
            return super().ftp_RETR(file)

    handler_cls = TestHandler
    handler_cls.authorizer = auth
    handler_cls.banner = "recrawl test FTP server"
    server = FTPServer(("127.0.0.1", 0), handler_cls)
    print(f"PORT {server.address[1]}", flush=True)
    server.serve_forever(timeout=0.2)


if __name__ == "__main__":
    main()
