"""The fetcher's HTTP/1.1 client (crawl.fetch.h1) against a real loopback server that answers byte for
byte what each test scripts: framing (chunked, Content-Length, read-to-close, 1xx, 204), keep-alive
reuse and its limits, the read timeout on a stalled body, a decoded-size cap on a gzip bomb, the
header field limit, garbage answers, the request bytes the WARC request record claims were sent,
and the SSRF guard refusing a private address before any connection (the server's accept count is
the oracle)."""

from __future__ import annotations

import asyncio
import gzip
import ssl
import subprocess
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any

import brotli
import pytest

from crawl.fetch.h1 import ConnectError, H1Client, ProtocolError, ReadTimeout, Response
from crawl.net import DnsError, GuardedResolver, PrivateAddressError, classify_error

# a step of a scripted answer: bytes are written, a float is slept, None closes the connection
Step = bytes | float | None


class Server:
    """A loopback server: each request (read up to its blank line) gets ``script(n)``'s steps, ``n``
    counting requests over all connections; ``accepted`` counts connections, ``requests`` keeps the
    raw request heads."""

    def __init__(self, script: Callable[[int], list[Step]], tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.accepted = 0
        self.requests: list[bytes] = []
        self.port = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                n = len(self.requests)
                self.requests.append(head)
                for step in self.script(n):
                    if step is None:
                        writer.close()
                        return
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                    else:
                        writer.write(step)
                        await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


def client(port: int, **kw: Any) -> H1Client:
    """A client whose resolver sends ``*.test`` to the server (a resolve rule, as the simulated web)."""
    res = GuardedResolver([f"*.test=127.0.0.1:{port}"])
    opts: dict[str, Any] = {"user_agent": "h1-test/1", "connect_timeout": 2.0, "read_timeout": 2.0,
                            "max_idle": 10, "max_idle_per_origin": 1}
    opts.update(kw)
    return H1Client(res, **opts)


async def fetch(c: H1Client, url: str, cap: int = 1_000_000, headers: dict[str, str] | None = None
                ) -> tuple[Response, bytes, str | None]:
    r = await c.get(url, headers or {}, cap)
    try:
        body, truncated = await r.read()
    finally:
        r.release()
    return r, body, truncated


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


def ok(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_chunked_body_in_pieces_and_keep_alive_reuse() -> None:
    def script(n: int) -> list[Step]:
        return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-N: " + str(n).encode() + b"\r\n\r\n",
                b"5\r\nhello\r\n", 0.05, b"6\r\n world\r\n", 0.05, b"0\r\n\r\n"]

    async def main() -> None:
        async with Server(script) as srv:
            c = client(srv.port)
            for i in range(3):
                r, body, truncated = await fetch(c, "http://a.test/x")
                assert (r.status, body, truncated) == (200, b"hello world", None)
                assert ("X-N", str(i)) in r.headers
            assert srv.accepted == 1 and c.connects == 1  # one connection for the three
            c.close()

    run(main())


def test_read_to_close_body_is_complete_and_the_connection_not_reused() -> None:
    def script(n: int) -> list[Step]:
        return [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", b"part one, ", 0.05, b"part two", None]

    async def main() -> None:
        async with Server(script) as srv:
            c = client(srv.port)
            for _ in range(2):
                r, body, truncated = await fetch(c, "http://a.test/")
                assert (r.status, body, truncated) == (200, b"part one, part two", None)
            assert srv.accepted == 2
            c.close()

    run(main())


def test_content_length_cut_short_is_a_disconnect() -> None:
    async def main() -> None:
        async with Server(lambda n: [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", None]) as srv:
            c = client(srv.port)
            r, body, truncated = await fetch(c, "http://a.test/")
            assert (r.status, body, truncated) == (200, b"0123456789", "disconnect")
            c.close()

    run(main())


def test_interim_answers_skipped_and_204_has_no_body() -> None:
    def script(n: int) -> list[Step]:
        if n == 0:
            return [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n", 0.02,
                    ok(b"final")]
        return [b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"]

    async def main() -> None:
        async with Server(script) as srv:
            c = client(srv.port)
            r, body, _ = await fetch(c, "http://a.test/")
            assert (r.status, r.reason, body, r.headers) == (200, "OK", b"final", [("Content-Length", "5")])
            r, body, truncated = await fetch(c, "http://a.test/")
            assert (r.status, body, truncated, r.headers) == (204, b"", None, [("X-A", "1")])
            r, body, _ = await fetch(c, "http://a.test/")  # the 204 left the connection usable
            assert srv.accepted == 1
            c.close()

    run(main())


def test_a_body_cut_at_the_cap_closes_its_connection() -> None:
    async def main() -> None:
        async with Server(lambda n: [ok(b"x" * 5000)]) as srv:
            c = client(srv.port)
            _, body, truncated = await fetch(c, "http://a.test/", cap=1000)
            assert (len(body), truncated) == (1000, "length")
            _, body, truncated = await fetch(c, "http://a.test/", cap=5000)  # exactly the cap: whole
            assert (len(body), truncated) == (5000, None)
            assert srv.accepted == 2  # the cut answer's rest never reached the second request
            c.close()

    run(main())


def test_idle_connections_expire_and_are_bounded() -> None:
    async def main() -> None:
        async with Server(lambda n: [ok(b"hi")]) as srv:
            c = client(srv.port, idle_timeout=0.2, max_idle=1)
            await fetch(c, "http://a.test/")
            await asyncio.sleep(0.4)
            await fetch(c, "http://a.test/")
            assert srv.accepted == 2  # the idle one had expired
            await fetch(c, "http://b.test/")  # a second origin: only one idle connection is kept
            assert len(c.lru) == 1 and list(c.idle) == [("http", "b.test", 80)]
            await fetch(c, "http://a.test/")
            assert srv.accepted == 4
            c.close()

    run(main())


def test_a_stalled_body_hits_the_read_timeout_and_keeps_what_came() -> None:
    def script(n: int) -> list[Step]:
        if n == 0:  # data keeps coming for longer than the timeout, then stops
            return [b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", *[b"x", 0.1] * 6, 30.0]
        return [30.0]  # nothing at all

    async def main() -> None:
        async with Server(script) as srv:
            c = client(srv.port, read_timeout=0.3)
            loop = asyncio.get_running_loop()
            t = loop.time()
            r, body, truncated = await fetch(c, "http://a.test/")
            took = loop.time() - t
            assert (r.status, body, truncated) == (200, b"x" * 6, "time")
            assert 0.8 < took < 2.0, took  # 0.6 s of trickle (a timer per request would fire at 0.3) + 0.3
            t = loop.time()
            with pytest.raises(ReadTimeout) as ei:
                await c.get("http://a.test/", {}, 1000)
            assert classify_error(ei.value) == "timeout" and 0.25 < loop.time() - t < 2.0
            c.close()

    run(main())


def test_a_gzip_bomb_stops_at_the_decoded_cap() -> None:
    bomb = gzip.compress(b"\0" * 50_000_000, 9)  # ~50 KB on the wire

    async def main() -> None:
        async with Server(lambda n: [ok(bomb, "Content-Encoding: gzip\r\n")]) as srv:
            c = client(srv.port)
            tracemalloc.start()
            try:
                r, body, truncated = await fetch(c, "http://a.test/", cap=100_000)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert (len(body), truncated) == (100_000, "length")
            assert peak < 5_000_000, peak  # never decoded far past the cap
            assert ("Content-Encoding", "gzip") in r.headers  # raw headers: the WARC writer renames it
            c.close()

    run(main())


@pytest.mark.parametrize("enc", ["gzip", "deflate", "deflate-raw", "br", "identity"])
def test_content_encodings_are_decoded(enc: str) -> None:
    text = b"<html>" + b"payload " * 2000 + b"</html>"
    wire = {"gzip": gzip.compress(text), "deflate": zlib.compress(text), "br": brotli.compress(text),
            "deflate-raw": zlib.compress(text)[2:-4], "identity": text}[enc]
    name = enc.split("-")[0]

    async def main() -> None:
        async with Server(lambda n: [ok(wire, f"Content-Encoding: {name}\r\n")]) as srv:
            c = client(srv.port)
            _, body, truncated = await fetch(c, "http://a.test/")
            assert (body, truncated) == (text, None)
            c.close()

    run(main())


def test_header_field_limit_and_garbage_answers_are_protocol_errors() -> None:
    def script(n: int) -> list[Step]:
        if n == 0:
            return [ok(b"fine", f"X-Big: {'a' * 16_000}\r\n")]
        if n == 1:
            return [ok(b"big", f"X-Big: {'a' * 16_400}\r\n")]
        if n == 2:
            return [b"HTTP/1.1 200 OK\r\nX-Endless: " + b"a" * 200_000, 1.0]
        return [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"]

    async def main() -> None:
        async with Server(script) as srv:
            c = client(srv.port)
            r, body, _ = await fetch(c, "http://a.test/")
            assert body == b"fine"
            for _ in range(3):
                with pytest.raises(ProtocolError) as ei:
                    await c.get("http://a.test/", {}, 1000)
                assert classify_error(ei.value) == "protocol"
            c.close()

    run(main())


def test_request_bytes_are_the_recorded_request_headers() -> None:
    async def main() -> None:
        async with Server(lambda n: [ok(b"ok")]) as srv:
            c = client(srv.port)
            hdrs = {"If-None-Match": '"e1"', "If-Modified-Since": "Tue, 01 Dec 2026 10:00:00 GMT"}
            r, _, _ = await fetch(c, "http://a.test/p?q=1", headers=hdrs)
            sent = "".join(f"{k}: {v}\r\n" for k, v in r.req_headers)
            assert srv.requests[0] == f"GET /p?q=1 HTTP/1.1\r\n{sent}\r\n".encode()
            # aiohttp's order, which the WARC request records of earlier crawls show
            assert [k for k, _ in r.req_headers] == ["Host", "User-Agent", "If-None-Match", "If-Modified-Since",
                                                     "Accept", "Accept-Encoding"]
            assert r.req_headers[0] == ("Host", "a.test") and r.ip == "127.0.0.1"
            r, _, _ = await fetch(c, "http://B.test:8080/a%20b")  # a port (the rule ignores it): in Host
            assert srv.requests[1].startswith(b"GET /a%20b HTTP/1.1\r\nHost: b.test:8080\r\n")
            c.close()

    run(main())


def test_private_addresses_are_refused_before_any_connection() -> None:
    async def main() -> None:
        async with Server(lambda n: [ok(b"secret")]) as srv:
            c = client(srv.port)
            for url in (f"http://127.0.0.1:{srv.port}/", f"http://[::ffff:7f00:1]:{srv.port}/",
                        f"http://localhost:{srv.port}/", f"http://2130706433:{srv.port}/"):
                with pytest.raises((PrivateAddressError, DnsError)) as ei:
                    await c.get(url, {}, 1000)
                assert classify_error(ei.value) in ("private_address", "dns"), (url, ei.value)
            assert srv.accepted == 0  # the server never saw a connection
            await fetch(c, "http://a.test/")  # the rule's target itself is reachable
            assert srv.accepted == 1
            c.close()
            # with the guard off the same literal connects: the refusals above were the guard's
            free = H1Client(GuardedResolver(allow_private_networks=True), user_agent="t", connect_timeout=2.0,
                            read_timeout=2.0)
            await fetch(free, f"http://127.0.0.1:{srv.port}/")
            assert srv.accepted == 2
            free.close()

    run(main())


def test_connect_failures_have_their_codes() -> None:
    async def main() -> None:
        async with Server(lambda n: [ok(b"")]) as srv:
            port = srv.port
        c = client(port)  # the server is gone: refused
        with pytest.raises(ConnectError) as ei:
            await c.get("http://a.test/", {}, 1000)
        assert classify_error(ei.value) == "connect"
        assert isinstance(ei.value.__cause__, ConnectionRefusedError)
        c.close()

    run(main())


def test_a_tls_handshake_that_never_ends_is_a_connect_timeout() -> None:
    async def main() -> None:
        async with Server(lambda n: []) as srv:  # accepts, never answers the TLS hello
            c = client(srv.port, connect_timeout=0.3)
            with pytest.raises(TimeoutError) as ei:
                await c.get("https://a.test/", {}, 1000)
            assert classify_error(ei.value) == "connect_timeout" and srv.accepted == 1
            c.close()

    run(main())


def test_tls_is_verified_unless_configured_off_and_sends_sni(tmp_path) -> None:
    """A self-signed server: refused by default before any request, fetched with ``verify_tls=False``;
    the server sees the URL's host name as SNI."""
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=tls.test"], check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    names: list[str | None] = []
    ctx.sni_callback = lambda sock, name, c: names.append(name)

    async def main() -> None:
        async with Server(lambda n: [ok(b"secret")], ctx) as srv:
            c = client(srv.port)
            with pytest.raises(ConnectError) as ei:
                await c.get("https://tls.test/verified", {}, 1000)
            assert classify_error(ei.value) == "connect"
            assert isinstance(ei.value.__cause__, ssl.SSLCertVerificationError)
            assert srv.requests == []
            c.close()
            c = client(srv.port, verify_tls=False)
            _, body, _ = await fetch(c, "https://tls.test/unverified")
            assert body == b"secret" and len(srv.requests) == 1
            assert names == ["tls.test", "tls.test"]
            c.close()

    run(main())


def test_a_reused_connection_closed_by_the_server_is_retried_once_on_a_new_one() -> None:
    # request 1 arrives on the kept-alive connection and the server drops it unanswered (its own
    # keep-alive timeout, in the race with our reuse): sent again on a new connection, answered there
    def script(n: int) -> list[Step]:
        return [None] if n == 1 else [ok(b"page %d" % n)]

    async def main() -> None:
        async with Server(script) as srv:
            c = client(srv.port)
            assert (await fetch(c, "http://a.test/1"))[1] == b"page 0"
            r, body, truncated = await fetch(c, "http://a.test/2")
            assert (r.status, body, truncated) == (200, b"page 2", None)
            assert srv.accepted == 2 and len(srv.requests) == 3
            c.close()

    run(main())


def test_a_new_connection_closed_before_an_answer_is_not_retried() -> None:
    async def main() -> None:
        async with Server(lambda n: [None]) as srv:
            c = client(srv.port)
            with pytest.raises(ConnectionError) as exc:
                await fetch(c, "http://a.test/1")
            assert classify_error(exc.value) == "reset"
            assert srv.accepted == 1 and len(srv.requests) == 1  # one GET, never repeated
            c.close()

    run(main())
