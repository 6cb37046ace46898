"""Name resolution for the fetcher: the ``--resolve`` override map, a TTL DNS cache and the SSRF guard.

Why here and not in the fetcher: the private-address check must run on the *resolved* IP, at the
moment aiohttp opens a connection, so it also covers redirect targets and hosts whose DNS points into
a private network. aiohttp hands every non-literal host to the connector's resolver, so an
:class:`aiohttp.abc.AbstractResolver` is the one place that sees every name. IP-literal URL hosts
bypass resolvers in aiohttp, so :meth:`GuardedResolver.check_literal` covers them (the fetcher calls
it before each request).

Resolve rules work like curl's ``--connect-to``: ``'*.sim.test=127.0.0.1:8800'`` sends connections
for every matching host to 127.0.0.1:8800 whatever the URL's port, and allowlists that target past
the guard (that is how the crawler reaches the simulated web on loopback).
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

# Positive DNS answers are cached this long. A fetch task lasts at most one round, so this only
# avoids re-resolving a host for every request; it is not a config field because no test or user
# needs to tune it (report says so).
DNS_TTL_S = 300.0
# Failed lookups are cached shorter, so a transient resolver hiccup does not kill a host for long.
DNS_NEGATIVE_TTL_S = 30.0

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Ranges a crawler must never be talked into connecting to (SSRF): beyond what ``is_private``
# already covers we name CGNAT and the cloud metadata endpoints explicitly, so the intent is visible.
_BLOCKED_NETS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8",          # "this network", includes the unspecified address
    "10.0.0.0/8",
    "100.64.0.0/10",      # carrier-grade NAT (RFC 6598)
    "127.0.0.0/8",
    "169.254.0.0/16",     # link-local, includes 169.254.169.254 (cloud metadata)
    "172.16.0.0/12",
    "192.0.0.0/24",       # IETF protocol assignments
    "192.168.0.0/16",
    "198.18.0.0/15",      # benchmarking
    "224.0.0.0/4",        # multicast
    "240.0.0.0/4",        # reserved, includes broadcast
    "::/128",
    "::1/128",
    "fc00::/7",           # unique local (ULA), includes fd00:ec2::254 (AWS metadata over IPv6)
    "fe80::/10",          # link-local
    "ff00::/8",           # multicast
))


class NetError(Exception):
    """Base of the fetch-time network refusals raised by this module."""

    code = "net"


class PrivateAddressError(NetError):
    """The host resolves to (or is) an address the guard refuses; recorded as ``private_address``."""

    code = "private_address"


class DnsError(NetError):
    """The host does not resolve; recorded as ``dns`` (status ``retry``: DNS failures are often
    transient, the update step turns repeated ones into ``gone`` via ``retry_schedule_s``)."""

    code = "dns"


def is_blocked_ip(ip: str | _IPAddress) -> bool:
    """True for loopback, private, ULA, link-local, CGNAT, unspecified, multicast, metadata addresses.

    IPv4-mapped IPv6 (``::ffff:127.0.0.1``) is judged by its IPv4 address, so it cannot sneak past.
    """
    addr = ipaddress.ip_address(ip.split("%", 1)[0]) if isinstance(ip, str) else ip
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_loopback or addr.is_link_local or addr.is_multicast or addr.is_unspecified:
        return True
    if addr.is_private or addr.is_reserved:
        return True
    return any(addr in net for net in _BLOCKED_NETS if net.version == addr.version)


@dataclass(frozen=True)
class ResolveRule:
    """One ``PATTERN=IP:PORT`` override; the pattern is an fnmatch glob on the host, case-insensitive."""

    pattern: str
    ip: str
    port: int

    @classmethod
    def parse(cls, rule: str) -> ResolveRule:
        pattern, sep, target = rule.partition("=")
        ip, colon, port = target.rpartition(":")
        if not sep or not colon or not pattern or not port.isdigit():
            raise ValueError(f"resolve: expected 'PATTERN=IP:PORT', got {rule!r}")
        ip = ip.strip("[]")
        ipaddress.ip_address(ip)  # raises ValueError for a non-IP target
        return cls(pattern.lower(), ip, int(port))

    def matches(self, host: str) -> bool:
        return fnmatch.fnmatchcase(host.lower().rstrip("."), self.pattern)


@dataclass(frozen=True)
class ResolverMap:
    """The ordered override rules; the first matching rule wins (as with curl)."""

    rules: tuple[ResolveRule, ...] = ()

    @classmethod
    def from_rules(cls, rules: Iterable[str]) -> ResolverMap:
        return cls(tuple(ResolveRule.parse(r) for r in rules))

    def lookup(self, host: str) -> ResolveRule | None:
        for rule in self.rules:
            if rule.matches(host):
                return rule
        return None


class GuardedResolver(AbstractResolver):
    """aiohttp resolver: override rules first, else a TTL-cached default lookup, then the guard.

    Overridden hosts are allowlisted (the user named the target). For other hosts every resolved
    address must pass :func:`is_blocked_ip` unless ``allow_private``; blocked addresses are dropped
    and, if none is left, :class:`PrivateAddressError` is raised so the request fails before any
    byte is sent.
    """

    def __init__(
        self,
        rules: ResolverMap | Iterable[str] = (),
        *,
        allow_private: bool = False,
        inner: AbstractResolver | None = None,
        ttl_s: float = DNS_TTL_S,
        negative_ttl_s: float = DNS_NEGATIVE_TTL_S,
    ) -> None:
        self.map = rules if isinstance(rules, ResolverMap) else ResolverMap.from_rules(rules)
        self.allow_private = allow_private
        self._inner = inner
        self._ttl = ttl_s
        self._neg_ttl = negative_ttl_s
        # (host, port, family) -> (expires_monotonic, results or the DnsError to re-raise)
        self._cache: dict[tuple[str, int, int], tuple[float, list[ResolveResult] | DnsError]] = {}
        self._pending: dict[tuple[str, int, int], asyncio.Future[list[ResolveResult]]] = {}
        self.lookups = 0  # real lookups done (cache misses), for stats and tests

    def check_literal(self, host: str) -> None:
        """Guard for URL hosts that are IP literals (aiohttp does not resolve those)."""
        bare = host.strip("[]")
        try:
            addr = ipaddress.ip_address(bare.split("%", 1)[0])
        except ValueError:
            return
        if self.allow_private or self.map.lookup(bare) is not None:
            return
        if is_blocked_ip(addr):
            raise PrivateAddressError(f"{host}: refusing private/reserved address")

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        rule = self.map.lookup(host)
        if rule is not None:
            fam = socket.AF_INET6 if ":" in rule.ip else socket.AF_INET
            return [ResolveResult(hostname=host, host=rule.ip, port=rule.port, family=fam,
                                  proto=0, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)]
        results = await self._cached(host, port, family)
        if self.allow_private:
            return results
        allowed = [r for r in results if not is_blocked_ip(r["host"])]
        if not allowed:
            raise PrivateAddressError(f"{host}: resolves only to private/reserved addresses")
        return allowed

    async def _cached(self, host: str, port: int, family: int) -> list[ResolveResult]:
        key = (host.lower(), port, int(family))
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            if isinstance(hit[1], DnsError):
                raise hit[1]
            return hit[1]
        pending = self._pending.get(key)
        if pending is not None:  # one lookup per name even when many requests ask at once
            return await asyncio.shield(pending)
        fut: asyncio.Future[list[ResolveResult]] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            if self._inner is None:
                self._inner = DefaultResolver()
            self.lookups += 1
            try:
                results = await self._inner.resolve(host, port, family=family)  # type: ignore[arg-type]
                if not results:
                    raise DnsError(f"{host}: no addresses")
            except (OSError, DnsError) as exc:
                err = exc if isinstance(exc, DnsError) else DnsError(f"{host}: {exc}")
                self._cache[key] = (time.monotonic() + self._neg_ttl, err)
                fut.set_exception(err)
                fut.exception()  # mark retrieved: waiters re-raise it themselves
                raise err from None
            self._cache[key] = (time.monotonic() + self._ttl, results)
            fut.set_result(results)
            return results
        finally:
            self._pending.pop(key, None)

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()


def classify_error(exc: BaseException) -> str:
    """Map an exception from a request to the short ``error`` code written in fetch rows.

    aiohttp wraps resolver exceptions (ours included) in ``ClientConnectorError`` subclasses, so the
    cause chain is searched for our own :class:`NetError` first.
    """
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, NetError):
            return seen.code
        if isinstance(seen, aiohttp.ClientConnectorError) and isinstance(seen.os_error, NetError):
            return seen.os_error.code
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "dns"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect_timeout"
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                        ConnectionResetError, aiohttp.ClientOSError)):
        return "reset"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "protocol"
    if isinstance(exc, aiohttp.InvalidURL):
        return "invalid_url"
    return type(exc).__name__


__all__ = [
    "DNS_NEGATIVE_TTL_S", "DNS_TTL_S", "DnsError", "GuardedResolver", "NetError",
    "PrivateAddressError", "ResolveRule", "ResolverMap", "classify_error", "is_blocked_ip",
]
