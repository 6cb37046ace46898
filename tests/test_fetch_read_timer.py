"""The fetcher's sock_read timer (crawl.fetch.http._ReadTimerHandler) against aiohttp's own, on a real
loopback server that trickles a body and then stalls: with either protocol every chunk that comes
within ``sock_read`` of the last one is read, and the timeout fires once no data came for
``sock_read`` seconds, not earlier; the same error, on a fresh and on a reused connection."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from crawl.fetch.http import use_read_timer

READ_S = 0.3
GAP_S = 0.1  # between chunks: well inside READ_S
CHUNKS = 8  # 0.8 s of trickle: the timer must have been moved past its first deadline


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``/first``: a short complete answer (keep-alive); anything else trickles ``CHUNKS`` chunks of
    a longer body, then stalls until the client goes away."""
    n = 0
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                return
            n += 1
            if b"GET /first" in head:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            await writer.drain()
            for _ in range(CHUNKS):
                await asyncio.sleep(GAP_S)
                writer.write(b"x" * 10)
                await writer.drain()
            await reader.read()  # stall: nothing more until the client closes
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _trickle(lazy: bool, reuse: bool, idle: float = 0.0) -> tuple[int, float, float, type[BaseException]]:
    """(chunks read, seconds from the request to the error, seconds from the last chunk to it, error type).
    ``idle``: seconds the reused connection sits in the pool before the trickled request."""
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connector = aiohttp.TCPConnector(limit=1)
    if lazy:
        use_read_timer(connector)
    got, last, err = 0, 0.0, None
    try:
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(sock_read=READ_S)) as session:
            if reuse:
                async with session.get(f"http://127.0.0.1:{port}/first") as r:
                    assert await r.read() == b"ok"
                await asyncio.sleep(idle)
            start = time.monotonic()
            async with session.get(f"http://127.0.0.1:{port}/trickle") as r:
                last = time.monotonic()
                try:
                    while True:
                        chunk = await r.content.read(100_000)
                        if not chunk:
                            break
                        got += 1
                        last = time.monotonic()
                except Exception as exc:  # noqa: BLE001 - the error is what is compared
                    err = exc
            end = time.monotonic()
    finally:
        server.close()
    assert err is not None, "the body ended without a read timeout"
    return got, end - start, end - last, type(err)


@pytest.mark.parametrize(("reuse", "idle"), [(False, 0.0), (True, 0.0), (True, 0.15), (True, 2 * READ_S)])
def test_read_timeout_fires_after_the_last_chunk_like_aiohttps(reuse: bool, idle: float) -> None:
    """Also on a connection whose previous response's timer is still armed when the next request
    starts (idle 0.15 s < READ_S) or lapsed in the pool (idle 2 x READ_S)."""
    ours = asyncio.run(asyncio.wait_for(_trickle(lazy=True, reuse=reuse, idle=idle), 20))
    theirs = asyncio.run(asyncio.wait_for(_trickle(lazy=False, reuse=reuse, idle=idle), 20))
    for got, total, idle, kind in (ours, theirs):
        assert got == CHUNKS  # no timeout while data came within READ_S
        assert idle >= READ_S - 0.02  # ...and none before READ_S without data (timer granularity: 1 ms)
        assert total >= CHUNKS * GAP_S + READ_S - 0.02
        assert issubclass(kind, aiohttp.ServerTimeoutError)
    assert ours[0] == theirs[0] and ours[3] is theirs[3]


async def _idle_then_ask(lazy: bool) -> tuple[list[bytes], int]:
    """Two short answers on one keep-alive connection with 3 x READ_S in the pool between them:
    (bodies, connections the server saw)."""
    conns = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        await _serve(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connector = aiohttp.TCPConnector(limit=1)
    if lazy:
        use_read_timer(connector)
    bodies = []
    try:
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(sock_read=READ_S)) as session:
            for i in range(2):
                if i:
                    await asyncio.sleep(3 * READ_S)
                async with session.get(f"http://127.0.0.1:{port}/first") as r:
                    bodies.append(await r.read())
    finally:
        server.close()
    return bodies, conns


@pytest.mark.parametrize("lazy", [True, False])
def test_no_read_timeout_on_an_idle_pooled_connection(lazy: bool) -> None:
    """A connection idle in the pool longer than ``sock_read`` is not timed out: its next request
    is answered on it (the lapsed timer of the earlier response does nothing)."""
    bodies, conns = asyncio.run(asyncio.wait_for(_idle_then_ask(lazy), 20))
    assert bodies == [b"ok", b"ok"]
    assert conns == 1
