"""Name resolution for the fetcher, and the SSRF guard at the socket.

Why at the socket: a URL's host says little about where a connection goes (``user@127.0.0.1``,
``2130706433``, ``[::ffff:7f00:1]``, a name whose DNS points into a private network, a redirect hop).
The one place that sees the address a connection is really made to is the socket itself, so
:meth:`AddressGuard.check` runs on the very address each socket connects to: the fetcher's client
(:mod:`crawl.fetch.h1`) calls it before every connect, for IP-literal URLs and resolved names alike,
for pages, robots.txt, sitemaps and every redirect hop; for aiohttp sessions (the renderer's)
:class:`AddressGuard` is the connector's ``socket_factory`` (aiohappyeyeballs calls it with the
``sockaddr`` it is about to connect to). A blocked address raises :class:`PrivateAddressError`
before any socket exists. :class:`GuardedResolver` additionally drops
blocked addresses from DNS answers, so a name with one public and one private address still connects
to the public one.

The only ways past the guard: a ``--resolve`` target (the exact ``IP:PORT`` the user named) or
``allow_private_networks`` in config.

Resolve rules work like curl's ``--connect-to``: ``'*.sim.test=127.0.0.1:8800'`` sends connections
for every matching host to 127.0.0.1:8800 whatever the URL's port, and allowlists that target past
the guard (that is how the crawler reaches the simulated web on loopback).
"""

from __future__ import annotations

import asyncio
import errno
import fnmatch
import ipaddress
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.ip_network(n), why) for n, why in pairs)


# Cloud metadata services: inside blocked ranges anyway, named so a refusal says what it was.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
    "169.254.170.2",    # AWS ECS task metadata
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",      # Oracle Cloud
    "fd00:ec2::254",    # AWS over IPv6
))

# IPv4 ranges a crawler must never be talked into connecting to (RFC 6890 special-purpose registry;
# written out rather than taken from ``ipaddress.is_private``, whose lists change between Pythons).
_V4_BLOCKED = _nets(
    ("0.0.0.0/8", "unspecified"),       # "this network", includes 0.0.0.0 (reaches the local host)
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "cgnat"),         # carrier-grade NAT (RFC 6598)
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),       # IETF protocol assignments
    ("192.0.2.0/24", "reserved"),       # documentation
    ("192.88.99.0/24", "reserved"),     # 6to4 relay anycast (deprecated)
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "reserved"),      # benchmarking
    ("198.51.100.0/24", "reserved"),    # documentation
    ("203.0.113.0/24", "reserved"),     # documentation
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),        # includes 255.255.255.255
)
# IPv6: only global unicast (2000::/3) can be public, plus NAT64 judged by its IPv4; inside 2000::/3
# these are not. 6to4, Teredo and NAT64 are judged by the IPv4 address they embed.
_V6_BLOCKED = _nets(
    ("2001::/23", "reserved"),          # IETF protocol assignments (Teredo handled before)
    ("2001:db8::/32", "reserved"),      # documentation
    ("3fff::/20", "reserved"),          # documentation (RFC 9637)
)
_V6_GLOBAL = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TEREDO = ipaddress.ip_network("2001::/32")
_V6_SPECIAL = _nets(
    ("::ffff:0:0/96", "ipv4-mapped"),
    ("::/96", "ipv4-compatible"),       # includes :: (unspecified) and ::1 (loopback)
    ("64:ff9b:1::/48", "nat64-local"),
    ("100::/64", "reserved"),           # discard prefix
    ("fc00::/7", "ula"),                # unique local, includes fd00:ec2::254
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)


def parse_ip(text: str) -> _IPAddress:
    """An address from a socket address or URL host: brackets and a zone (``%eth0``) are stripped.

    Only canonical text forms are accepted (dotted-quad IPv4, RFC 4291 IPv6); the legacy IPv4 forms
    (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``) raise :class:`ValueError`: the URL model
    normalises them before they get here, and anything else that still looks like that is refused.
    """
    bare = text.strip()
    if bare.startswith("[") and bare.endswith("]"):
        bare = bare[1:-1]
    return ipaddress.ip_address(bare.split("%", 1)[0])


def blocked_reason(ip: str | _IPAddress) -> str | None:
    """Why the guard refuses ``ip`` (``'loopback'``, ``'6to4:private'``, ...), or None when it is public.

    Text that is not a canonical address is refused as ``'unparsable'``: when in doubt, no connection.
    """
    try:
        addr = parse_ip(ip) if isinstance(ip, str) else ip
    except ValueError:
        return "unparsable"
    if addr in METADATA_ADDRESSES:
        return "metadata"
    if isinstance(addr, ipaddress.IPv4Address):
        for net, why in _V4_BLOCKED:
            if addr in net:
                return why
        return None if addr.is_global else "reserved"
    if addr.sixtofour is not None:  # 2002::/16
        inner = blocked_reason(addr.sixtofour)
        return f"6to4:{inner}" if inner else None
    if addr in _TEREDO:
        assert addr.teredo is not None
        server, client = addr.teredo
        inner = blocked_reason(client) or blocked_reason(server)
        return f"teredo:{inner}" if inner else None
    if addr in _NAT64:
        inner = blocked_reason(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
        return f"nat64:{inner}" if inner else None
    for net, why in _V6_SPECIAL:
        if addr in net:
            return "loopback" if addr == ipaddress.IPv6Address(1) else \
                "unspecified" if int(addr) == 0 else why
    if addr not in _V6_GLOBAL:
        return "reserved"
    for net, why in _V6_BLOCKED:
        if addr in net:
            return why
    return None


def is_blocked_ip(ip: str | _IPAddress) -> bool:
    """True when the guard refuses ``ip`` (see :func:`blocked_reason`)."""
    return blocked_reason(ip) is not None


# WHATWG "ends in a number": a host whose last label is digits or 0x-hex is an IPv4 literal in some
# legacy spelling, never a DNS name; handed to the resolver it would be refused (getaddrinfo would
# happily map it onto an address).
_NUMERIC_LAST_LABEL = re.compile(r"(?:^|\.)(?:[0-9]+|0[xX][0-9a-fA-F]*)\.?$")


# the last characters of a host that make it a name without a parse: parse_ip reads a literal only as a
# dotted quad (ends in a digit) or IPv6 (holds ":"), after stripping a "%zone" (so "%" must be absent)
_NAME_END = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.")


class NetError(Exception):
    """Base of the fetch-time network refusals raised by this module."""

    code = "net"


class PrivateAddressError(NetError, PermissionError):
    """The connection would go to an address the guard refuses; recorded as ``private_address``.

    A :class:`PermissionError` (``EACCES``) so that aiohappyeyeballs, which collects only
    ``OSError`` from a socket factory, hands it on and aiohttp wraps it in ``ClientConnectorError``.
    """

    code = "private_address"

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)

    def __str__(self) -> str:
        return f"{GUARD_PREFIX}{self.strerror}"


GUARD_PREFIX = "address guard: "


class DnsError(NetError):
    """The host does not resolve; recorded as ``dns`` (status ``retry``: DNS failures are often
    transient, the update step turns repeated ones into ``gone`` via ``retry_schedule_s``)."""

    code = "dns"


class AddressGuard:
    """The one check every outgoing TCP connection passes: the address it is about to connect to.

    Installed as ``aiohttp.TCPConnector(socket_factory=guard.socket_factory)``. Passes public
    addresses, the exact ``IP:PORT`` targets of resolve rules, and everything when
    ``allow_private_networks``; everything else raises :class:`PrivateAddressError`.
    """

    def __init__(self, targets: Iterable[tuple[str, int]] = (), *,
                 allow_private_networks: bool = False) -> None:
        self.targets = frozenset((parse_ip(ip), int(port)) for ip, port in targets)
        self.allow_private_networks = allow_private_networks
        self.refused = 0  # connections refused, for stats and tests

    def check(self, ip: str, port: int) -> None:
        """Raise :class:`PrivateAddressError` unless a connection to ``ip:port`` may be opened."""
        if self.allow_private_networks:
            return
        try:
            addr = parse_ip(ip)
        except ValueError:
            addr = None
        if addr is not None and (addr, port) in self.targets:
            return
        why = blocked_reason(addr) if addr is not None else "unparsable"
        if why is not None:
            self.refused += 1
            raise PrivateAddressError(f"refusing {ip} port {port} ({why})")

    def socket_factory(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """aiohappyeyeballs' socket factory: check the destination, then make the socket as it would."""
        family, type_, proto, _, sockaddr = addr_info
        self.check(str(sockaddr[0]), int(sockaddr[1]))
        return socket.socket(family=family, type=type_, proto=proto)


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

    Overridden hosts go to the rule's target (the user named it; :attr:`guard` lets exactly that
    ``IP:PORT`` through). For other hosts blocked addresses are dropped from the answer and, if none
    is left, :class:`PrivateAddressError` is raised. A host spelled like a legacy IPv4 literal
    (``2130706433``, ``0x7f.1``) is refused rather than handed to ``getaddrinfo``. The connection
    itself is checked again by :attr:`guard` at the socket, which also covers IP-literal URLs
    (aiohttp does not resolve those).
    """

    def __init__(
        self,
        rules: ResolverMap | Iterable[str] = (),
        *,
        allow_private_networks: bool = False,
        inner: AbstractResolver | None = None,
        ttl_s: float = DNS_TTL_S,
        negative_ttl_s: float = DNS_NEGATIVE_TTL_S,
    ) -> None:
        self.map = rules if isinstance(rules, ResolverMap) else ResolverMap.from_rules(rules)
        self.guard = AddressGuard(((r.ip, r.port) for r in self.map.rules),
                                  allow_private_networks=allow_private_networks)
        self._inner = inner
        self._ttl = ttl_s
        self._neg_ttl = negative_ttl_s
        # (host, port, family) -> (expires_monotonic, results or the DnsError to re-raise)
        self._cache: dict[tuple[str, int, int], tuple[float, list[ResolveResult] | DnsError]] = {}
        self._pending: dict[tuple[str, int, int], asyncio.Future[list[ResolveResult]]] = {}
        self.lookups = 0  # real lookups done (cache misses), for stats and tests
        # hosts check_literal found to be names: it runs before every request, kept-alive connection
        # or not, and telling a name from a literal costs a raised ValueError each time
        self._names: set[str] = set()

    def check_literal(self, host: str, port: int | None) -> _IPAddress | None:
        """Refuse an IP-literal host no rule names (a rule's target may be private; nothing else).

        Returns the literal's address, or None for a name, so a caller that must tell the two apart
        (the h1 client's connect: resolve a name, connect to a literal) does not parse the host again;
        with ``allow_private_networks`` nothing is refused but the answer is the same.
        Names are left to :meth:`resolve`; legacy IPv4 spellings are refused there.
        """
        if host in self._names or (host[-1:] in _NAME_END and ":" not in host and "%" not in host):
            return None  # a name: no IP literal ends in a letter, nor in "." without ":" (IPv6)
        try:
            addr = parse_ip(host)
        except ValueError:
            self._names.add(host)
            return None  # a name
        if self.guard.allow_private_networks:
            return addr
        why = blocked_reason(addr)
        if why is not None and self.map.lookup(host.strip("[]")) is None:
            self.guard.refused += 1
            raise PrivateAddressError(f"refusing {host} port {port} ({why})")
        return addr

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        rule = self.map.lookup(host)
        if rule is not None:
            fam = socket.AF_INET6 if ":" in rule.ip else socket.AF_INET
            return [ResolveResult(hostname=host, host=rule.ip, port=rule.port, family=fam,
                                  proto=0, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)]
        if _NUMERIC_LAST_LABEL.search(host) and not self.guard.allow_private_networks:
            self.guard.refused += 1
            raise PrivateAddressError(f"refusing {host}: an IP literal in a non-canonical form")
        results = await self._cached(host, port, family)
        if self.guard.allow_private_networks:
            return results
        # a DNS answer never unlocks a rule's target: only the rule itself does
        allowed = [r for r in results if blocked_reason(r["host"]) is None]
        if not allowed:
            raise PrivateAddressError(f"refusing {host}: resolves only to private/reserved addresses")
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


def is_ip_key(key: str) -> bool:
    """Is a politeness key an IP address (what :func:`politeness_ips` gives a resolved host)?"""
    try:
        ipaddress.ip_address(key.strip("[]"))
    except ValueError:
        return False
    return True


async def politeness_ips(resolver: GuardedResolver, hosts: Iterable[str], timeout_s: float,
                         concurrency: int = 32) -> dict[str, str]:
    """host -> the IP address politeness is keyed on with ``politeness_key=ip``: a resolve rule's
    target, an IP-literal host itself, else the first address the guarded lookup leaves. A host that
    does not resolve, or only to refused addresses, keeps its own name: polite on its own, and its
    requests fail later with the reason. Each host is looked up once (and the resolver caches)."""
    keys: dict[str, str] = {}
    sem = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        bare = name.strip("[]")
        rule = resolver.map.lookup(bare)
        if rule is not None:
            keys[name] = rule.ip
            return
        try:
            keys[name] = str(ipaddress.ip_address(bare))
            return
        except ValueError:
            pass
        try:
            async with sem, asyncio.timeout(timeout_s):
                res = await resolver.resolve(bare, 80)
            keys[name] = res[0]["host"] if res else name
        except Exception:  # noqa: BLE001 - unresolved or refused: its own key
            keys[name] = name

    await asyncio.gather(*(one(n) for n in dict.fromkeys(hosts)))
    return keys


def resolve_politeness_ips(hosts: Iterable[str], rules: Iterable[str], allow_private_networks: bool,
                           timeout_s: float) -> dict[str, str]:
    """:func:`politeness_ips` from synchronous code (the frontier's generate step)."""

    async def run() -> dict[str, str]:
        resolver = GuardedResolver(rules, allow_private_networks=allow_private_networks)
        try:
            return await politeness_ips(resolver, hosts, timeout_s)
        finally:
            await resolver.close()

    return asyncio.run(run())


def classify_error(exc: BaseException) -> str:
    """Map an exception from a request to the short ``error`` code written in fetch rows.

    Our own exceptions carry their code: :class:`NetError` subclasses here (``dns``,
    ``private_address``) and in :mod:`crawl.fetch.h1` (``connect``, ``connect_timeout``, ``timeout``,
    ``reset``, ``protocol``), the same codes the aiohttp exceptions below map to. aiohttp (the
    renderer's sessions) wraps resolver exceptions in ``ClientConnectorError`` subclasses, so the
    cause chain is searched for a :class:`NetError` first.
    """
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, NetError):
            return seen.code
        if isinstance(seen, aiohttp.ClientConnectorError):
            if isinstance(seen.os_error, NetError):
                return seen.os_error.code
            # aiohappyeyeballs merges several refused addresses into one plain OSError
            if GUARD_PREFIX in str(seen.os_error):
                return PrivateAddressError.code
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


class GuardedConnector(aiohttp.TCPConnector):
    """aiohttp's TCP connector with the guard at both ends of a connection attempt.

    :meth:`connect` refuses an IP-literal URL host (aiohttp does not hand literals to the resolver)
    unless a resolve rule names it; the :class:`AddressGuard` socket factory then checks the address
    the socket really connects to, for every host. Together with :class:`GuardedResolver` (which
    drops blocked DNS answers) a rule is the only way to a private address, and only to its target.
    """

    def __init__(self, resolver: GuardedResolver, **kwargs: Any) -> None:
        super().__init__(resolver=resolver, use_dns_cache=False,
                         socket_factory=resolver.guard.socket_factory, **kwargs)
        self.guarded_resolver = resolver

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        self.guarded_resolver.check_literal(req.host, req.port)
        return await super().connect(req, traces, timeout)


def guarded_connector(resolver: GuardedResolver, *, verify_tls: bool = True,
                      **kwargs: Any) -> GuardedConnector:
    """The crawler's connector (:class:`GuardedConnector`); ``verify_tls`` False skips certificate
    verification (config ``verify_tls``: only for test servers with self-signed certificates)."""
    return GuardedConnector(resolver, ssl=True if verify_tls else False, **kwargs)


__all__ = [
    "DNS_NEGATIVE_TTL_S", "DNS_TTL_S", "GUARD_PREFIX", "METADATA_ADDRESSES", "AddressGuard",
    "DnsError", "GuardedConnector", "GuardedResolver", "NetError", "PrivateAddressError", "ResolveRule", "ResolverMap",
    "blocked_reason", "classify_error", "guarded_connector", "is_blocked_ip", "parse_ip",
]
