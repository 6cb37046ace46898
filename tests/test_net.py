"""crawl.net against a real aiohttp server on loopback: overrides, the SSRF guard, DNS errors."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from crawl.net import (
    DnsError,
    GuardedResolver,
    PrivateAddressError,
    ResolverMap,
    ResolveRule,
    classify_error,
    is_blocked_ip,
)


@pytest.mark.parametrize("ip", [
    "127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
    "100.64.0.1", "100.127.255.254", "169.254.169.254", "169.254.1.1", "0.0.0.0", "224.0.0.1",
    "255.255.255.255", "::1", "::", "fd00:ec2::254", "fc00::1", "fe80::1", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1",
])
def test_blocked_addresses(ip: str) -> None:
    assert is_blocked_ip(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "93.184.216.34", "100.128.0.1", "172.32.0.1",
                                "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(ip: str) -> None:
    assert not is_blocked_ip(ip)


def test_rule_parsing_and_matching() -> None:
    m = ResolverMap.from_rules(["*.sim.test=127.0.0.1:8800", "exact.example=[::1]:9000"])
    assert m.lookup("News-007.SIM.test") == ResolveRule("*.sim.test", "127.0.0.1", 8800)
    assert m.lookup("sim.test") is None  # the glob needs a label before .sim.test, like curl's
    assert m.lookup("exact.example") == ResolveRule("exact.example", "::1", 9000)
    assert m.lookup("other.example") is None
    for bad in ["nohost", "*.x=notanip:80", "*.x=1.2.3.4", "=1.2.3.4:80"]:
        with pytest.raises(ValueError):
            ResolveRule.parse(bad)


async def _serve() -> tuple[web.AppRunner, int]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=f"host={request.host}")

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


async def _get(resolver: GuardedResolver, url: str) -> str:
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return await r.text()


def test_override_sends_any_port_to_target_and_guard_refuses_private() -> None:
    async def main() -> None:
        runner, port = await _serve()
        try:
            res = GuardedResolver([f"*.sim.test=127.0.0.1:{port}"])
            # URL port 1 is ignored: the rule sends the connection to the server's port (--connect-to)
            assert await _get(res, "http://A.sim.test:1/") == "host=a.sim.test:1"
            assert await _get(res, "http://b.sim.test/") == "host=b.sim.test"
            # localhost resolves to loopback: refused without a rule
            with pytest.raises(PrivateAddressError) as ei:
                await _get(res, f"http://localhost:{port}/")
            assert classify_error(ei.value) == "private_address"
            # allow_private lifts the guard
            assert await _get(GuardedResolver(allow_private=True), f"http://localhost:{port}/") \
                == f"host=localhost:{port}"
            # literal IPs bypass aiohttp's resolver, so the fetcher asks check_literal
            with pytest.raises(PrivateAddressError):
                res.check_literal("127.0.0.1")
            with pytest.raises(PrivateAddressError):
                res.check_literal("[::1]")
            res.check_literal("8.8.8.8")
            GuardedResolver([f"127.0.0.1=127.0.0.1:{port}"]).check_literal("127.0.0.1")
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
