"""crawl.net: the address classifier over every blocked range, and the guard against a real aiohttp
server on loopback (overrides, refusals judged by what the server saw, DNS errors)."""

from __future__ import annotations

import asyncio
import ipaddress
import random

import aiohttp
import pytest
from aiohttp import web

from crawl.net import (
    AddressGuard,
    DnsError,
    GuardedResolver,
    PrivateAddressError,
    ResolverMap,
    ResolveRule,
    blocked_reason,
    classify_error,
    guarded_connector,
    is_blocked_ip,
    parse_ip,
)

# every blocked range, by the reason the guard gives (first and last address where it matters)
BLOCKED = {
    "0.0.0.0": "unspecified", "0.255.255.255": "unspecified",
    "10.0.0.0": "private", "10.255.255.255": "private",
    "100.64.0.1": "cgnat", "100.127.255.254": "cgnat",
    "127.0.0.1": "loopback", "127.8.9.10": "loopback",
    "169.254.1.1": "link-local", "169.254.169.254": "metadata", "169.254.170.2": "metadata",
    "100.100.100.200": "metadata", "192.0.0.192": "metadata", "fd00:ec2::254": "metadata",
    "172.16.0.1": "private", "172.31.255.255": "private",
    "192.0.0.8": "reserved", "192.0.2.1": "reserved", "192.88.99.1": "reserved",
    "192.168.0.1": "private", "192.168.255.255": "private",
    "198.18.0.1": "reserved", "198.19.255.255": "reserved",
    "198.51.100.7": "reserved", "203.0.113.9": "reserved",
    "224.0.0.1": "multicast", "239.255.255.250": "multicast",
    "240.0.0.1": "reserved", "255.255.255.255": "reserved",
    "::": "unspecified", "::1": "loopback", "[::1]": "loopback", "fe80::1%eth0": "link-local",
    "::ffff:127.0.0.1": "ipv4-mapped", "::ffff:7f00:1": "ipv4-mapped", "::ffff:a9fe:a9fe": "ipv4-mapped",
    "::ffff:8.8.8.8": "ipv4-mapped", "::127.0.0.1": "ipv4-compatible", "::8.8.8.8": "ipv4-compatible",
    "64:ff9b::7f00:1": "nat64:loopback", "64:ff9b::a9fe:a9fe": "nat64:metadata",
    "64:ff9b::a00:1": "nat64:private", "64:ff9b:1::1": "nat64-local",
    "2002:7f00:1::": "6to4:loopback", "2002:a9fe:a9fe::1": "6to4:metadata", "2002:c0a8:101::": "6to4:private",
    # Teredo: client 127.0.0.1 (stored inverted: 80ff:fffe), server 65.54.227.120
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "teredo:loopback",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2": "teredo:reserved",  # client 192.0.2.45 (documentation)
    "2001:0:7f00:1::f7f7:f7f7": "teredo:loopback",  # server 127.0.0.1, client 8.8.8.8
    "100::1": "reserved", "2001:db8::1": "reserved", "2001:2::1": "reserved", "3fff::1": "reserved",
    "fc00::1": "ula", "fdff:ffff::1": "ula", "fe80::1": "link-local", "fec0::1": "site-local",
    "ff02::1": "multicast", "ff0e::1": "multicast", "4000::1": "reserved", "1::1": "reserved",
    # legacy IPv4 spellings and garbage never parse: refused
    "2130706433": "unparsable", "0x7f000001": "unparsable", "0177.0.0.1": "unparsable",
    "127.1": "unparsable", "0x7f.1": "unparsable", "": "unparsable", "localhost": "unparsable",
    "1.2.3.4.5": "unparsable", "[::1": "unparsable",
}


@pytest.mark.parametrize("ip,why", sorted(BLOCKED.items()))
def test_blocked_addresses(ip: str, why: str) -> None:
    assert blocked_reason(ip) == why
    assert is_blocked_ip(ip)
    with pytest.raises(PrivateAddressError) as ei:
        AddressGuard().check(ip, 80)
    assert why in str(ei.value) and classify_error(ei.value) == "private_address"


@pytest.mark.parametrize("ip", [
    "8.8.8.8", "93.184.216.34", "1.1.1.1", "100.63.255.255", "100.128.0.1", "172.32.0.1",
    "192.169.0.1", "223.255.255.254", "2606:4700::1111", "2a00:1450:4001::200e",
    "2002:808:808::1",                         # 6to4 of 8.8.8.8
    "64:ff9b::808:808",                        # NAT64 of 8.8.8.8
    "2001:0:4136:e378:8000:63bf:f7f7:f7f7",    # Teredo: server 65.54.227.120, client 8.8.8.8
])
def test_public_addresses_pass(ip: str) -> None:
    assert blocked_reason(ip) is None
    AddressGuard().check(ip, 443)


def test_guard_allows_exact_resolve_targets_and_the_config_switch() -> None:
    g = AddressGuard([("127.0.0.1", 8800), ("::1", 9000)])
    g.check("127.0.0.1", 8800)
    g.check("::1", 9000)
    for ip, port in (("127.0.0.1", 8801), ("127.0.0.2", 8800), ("::ffff:127.0.0.1", 8800), ("::1", 8800)):
        with pytest.raises(PrivateAddressError):
            g.check(ip, port)
    assert g.refused == 4
    AddressGuard(allow_private_networks=True).check("169.254.169.254", 80)


def test_check_literal_answers_the_literal_address_or_none_for_a_name() -> None:
    # the h1 client's connect tells a literal from a name by this answer (no second parse of the host)
    r = GuardedResolver(["a.test=127.0.0.1:8800"])
    assert r.check_literal("a.test", 80) is None
    assert r.check_literal("a.test", 80) is None  # a known name: the set, no parse
    assert r.check_literal("93.184.216.34", 80) == ipaddress.IPv4Address("93.184.216.34")
    assert r.check_literal("[2606:4700::1]", 443) == ipaddress.IPv6Address("2606:4700::1")
    with pytest.raises(PrivateAddressError):
        r.check_literal("[::1]", 80)
    free = GuardedResolver(allow_private_networks=True)  # nothing refused, the same answers
    assert free.check_literal("[::1]", 80) == ipaddress.IPv6Address(1)
    assert free.check_literal("127.0.0.1", 80) == ipaddress.IPv4Address("127.0.0.1")
    assert free.check_literal("a.test", 80) is None
    # names are told without a parse where they end in a letter or "."; the answer is parse_ip's all the same
    rng = random.Random(7)
    for _ in range(20_000):
        host = "".join(rng.choice("0123456789abcdefXYZ.:%[] -") for _ in range(rng.randint(0, 10)))
        if rng.random() < 0.3:
            host = ".".join(str(rng.randint(0, 255)) for _ in range(4)) + host[:rng.randint(0, 2)]
        try:
            want = parse_ip(host)
        except ValueError:
            want = None
        assert free.check_literal(host, 80) == want, host


def test_rule_parsing_and_matching() -> None:
    m = ResolverMap.from_rules(["*.sim.test=127.0.0.1:8800", "exact.example=[::1]:9000"])
    assert m.lookup("News-007.SIM.test") == ResolveRule("*.sim.test", "127.0.0.1", 8800)
    assert m.lookup("sim.test") is None  # the glob needs a label before .sim.test, like curl's
    assert m.lookup("exact.example") == ResolveRule("exact.example", "::1", 9000)
    assert m.lookup("other.example") is None
    for bad in ["nohost", "*.x=notanip:80", "*.x=1.2.3.4", "=1.2.3.4:80"]:
        with pytest.raises(ValueError):
            ResolveRule.parse(bad)


async def _serve() -> tuple[web.AppRunner, int, list[str]]:
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.host)
        return web.Response(text=f"host={request.host}")

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, hits


async def _get(resolver: GuardedResolver, url: str) -> str:
    async with aiohttp.ClientSession(connector=guarded_connector(resolver)) as s:
        async with s.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return await r.text()


def test_override_sends_any_port_to_target_and_guard_refuses_private() -> None:
    async def main() -> None:
        runner, port, hits = await _serve()
        try:
            res = GuardedResolver([f"*.sim.test=127.0.0.1:{port}"])
            # URL port 1 is ignored: the rule sends the connection to the server's port (--connect-to)
            assert await _get(res, "http://A.sim.test:1/") == "host=a.sim.test:1"
            assert await _get(res, "http://b.sim.test/") == "host=b.sim.test"
            n = len(hits)
            # localhost resolves to loopback: refused without a rule; literals are refused at the
            # socket (aiohttp does not resolve them), also the rule's own IP on another port
            for url in (f"http://localhost:{port}/", f"http://127.0.0.1:{port + 1 if port < 65535 else 1}/",
                        f"http://[::1]:{port}/", f"http://[::ffff:7f00:1]:{port}/",
                        f"http://0.0.0.0:{port}/", f"http://2130706433:{port}/", f"http://0x7f.1:{port}/"):
                with pytest.raises(aiohttp.ClientError) as ei:
                    await _get(res, url)
                assert classify_error(ei.value) in ("private_address", "invalid_url"), (url, ei.value)
            assert len(hits) == n  # the server saw none of them
            # even the rule's own target, spelled as a literal, needs a rule naming that literal
            with pytest.raises(aiohttp.ClientError):
                await _get(res, f"http://127.0.0.1:{port}/")
            assert len(hits) == n
            named = GuardedResolver([f"127.0.0.1=127.0.0.1:{port}"])
            assert await _get(named, f"http://127.0.0.1:{port}/") == f"host=127.0.0.1:{port}"
            with pytest.raises(aiohttp.ClientError):  # a literal is not redirected: other port refused
                await _get(named, f"http://127.0.0.1:{port + 1 if port < 65535 else 1}/")
            # allow_private_networks lifts the guard
            free = GuardedResolver(allow_private_networks=True)
            assert await _get(free, f"http://localhost:{port}/") == f"host=localhost:{port}"
            assert await _get(free, f"http://[::ffff:7f00:1]:{port}/") == f"host=[::ffff:7f00:1]:{port}"
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_unresolvable_host_is_dns_error_and_cached() -> None:
    async def main() -> None:
        res = GuardedResolver()
        for _ in range(3):
            with pytest.raises(DnsError) as ei:
                await _get(res, "http://no-such-host.invalid/")
            assert classify_error(ei.value) == "dns"
        assert res.lookups == 1  # negative answers are cached too
        await res.close()

    asyncio.run(main())


def test_tls_certificates_are_verified_unless_configured_off(tmp_path) -> None:
    """A self-signed server on loopback: refused by default (the server never sees a request),
    fetched with ``verify_tls=False``."""
    import ssl
    import subprocess

    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=tls.sim.test"], check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def main() -> None:
        hits: list[str] = []

        async def handler(request: web.Request) -> web.Response:
            hits.append(request.path)
            return web.Response(text="secret")

        app = web.Application()
        app.router.add_get("/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        rules = [f"tls.sim.test=127.0.0.1:{port}"]
        try:
            async with aiohttp.ClientSession(connector=guarded_connector(GuardedResolver(rules))) as s:
                with pytest.raises(aiohttp.ClientConnectorCertificateError):
                    await s.get("https://tls.sim.test/verified", timeout=aiohttp.ClientTimeout(total=5))
            assert hits == []
            conn = guarded_connector(GuardedResolver(rules), verify_tls=False)
            async with aiohttp.ClientSession(connector=conn) as s:
                async with s.get("https://tls.sim.test/unverified", timeout=aiohttp.ClientTimeout(total=5)) as r:
                    assert await r.text() == "secret"
            assert hits == ["/unverified"]
        finally:
            await runner.cleanup()

    asyncio.run(main())
