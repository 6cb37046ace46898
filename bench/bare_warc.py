"""WARC records as a bare benchmark loop writes them: the format's cost without our fetcher.

Each answer becomes a WARC request record and a response record, each its own gzip member (ISA-L
deflate level 1, as ours), with block and payload SHA-1 digests, written to one file by a writer thread
that takes the answers from a queue (as our fetcher's writer thread does). Shared by the yardsticks
that measure what the outputs cost any fetcher on this box: ``ceilA+warc`` in
bench/fetch_only_parts.py and ceiling B + outputs in bench/crawl_bench.py (``same_outputs_loop``).
Not our writer (crawl/fetch/warcwriter.py): no warcinfo record, no file rotation, no backpressure.
"""

from __future__ import annotations

import base64
import hashlib
import queue
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from isal import isal_zlib


def _digest(*parts: bytes) -> bytes:
    h = hashlib.sha1()
    for p in parts:
        h.update(p)
    return b"sha1:" + base64.b32encode(h.digest())


def _record(kind: bytes, url: bytes, date: bytes, block_parts: tuple[bytes, ...], extra: bytes) -> bytes:
    block = b"".join(block_parts)
    head = (b"WARC/1.1\r\nWARC-Type: " + kind + b"\r\nWARC-Record-ID: <urn:uuid:" + str(uuid.uuid4()).encode()
            + b">\r\nWARC-Date: " + date + b"\r\nWARC-Target-URI: " + url + b"\r\nWARC-Block-Digest: "
            + _digest(block) + b"\r\n" + extra + b"Content-Length: " + str(len(block)).encode() + b"\r\n\r\n")
    return isal_zlib.compress(head + block + b"\r\n\r\n", 1, 31)


def request_bytes(host: str, path: str) -> bytes:
    """The request a bare loop's record stores for ``GET /path`` to ``host``."""
    return f"GET /{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


def response_head(r: Any) -> bytes:
    """Status line and headers of an aiohttp response, as the response record's block starts."""
    return (f"HTTP/1.1 {r.status} {r.reason}\r\n".encode()
            + b"".join(k + b": " + v + b"\r\n" for k, v in r.raw_headers) + b"\r\n")


async def get_and_store(session: Any, port: int, url: str, writer: RecordWriter) -> tuple[int, bytes]:
    """GET ``url`` from the simulated web on ``port`` (its Host header routes to the virtual host) and
    hand the answer to ``writer``: (status, body). The fetch step every bare WARC-writing loop shares."""
    host, _, path = url[len("http://"):].partition("/")
    async with session.get(f"http://127.0.0.1:{port}/{path}", headers={"Host": host}) as r:
        body = await r.read()
        head = response_head(r)
    writer.put(url.encode(), request_bytes(host, path), head, body)
    return r.status, body


class RecordWriter:
    """A thread writing each :meth:`put` answer to ``path`` as request + response records, in order.

    ``offsets[i]`` is the file offset of the i-th answer's response record once the thread has written
    it (all of them after the ``with`` block), what a page index points at."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets: list[int] = []
        self._q: queue.SimpleQueue[tuple[bytes, bytes, bytes, bytes] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="bare-warc")

    def put(self, url: bytes, req: bytes, head: bytes, body: bytes) -> None:
        self._q.put((url, req, head, body))

    def _run(self) -> None:
        pos = 0
        with open(self.path, "wb", buffering=256 * 1024) as out:
            while (item := self._q.get()) is not None:
                url, req, head, body = item
                date = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ").encode()
                request = _record(b"request", url, date, (req,), b"Content-Type: application/http; msgtype=request\r\n")
                response = _record(b"response", url, date, (head, body),
                                   b"WARC-Payload-Digest: " + _digest(body)
                                   + b"\r\nContent-Type: application/http; msgtype=response\r\n")
                out.write(request)
                out.write(response)
                self.offsets.append(pos + len(request))
                pos += len(request) + len(response)

    def __enter__(self) -> RecordWriter:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._q.put(None)
        self._thread.join()
