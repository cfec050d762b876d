"""Who a client is, as the web face's limits count it: the address it connects from (for
IPv6 its /64, which one machine commonly holds whole), and whether it is a proxy the config
trusts to say who is behind it."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

IPV6_PREFIX = 64
"""The IPv6 network counted as one client."""


def networks(proxies: Iterable[str]) -> list[Network]:
    """The networks of `web.trusted_proxies` (checked when the config was read)."""
    return [ipaddress.ip_network(p, strict=False) for p in proxies]


def key(host: str) -> str:
    """The client `host` is counted as: an IPv4 address as it is (also when it comes
    IPv4-mapped, on a dual-stack socket), an IPv6 address by its /64; anything else (a
    Unix socket's name) as it is."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    return str(address)


def trusted(host: str, proxies: Sequence[Network]) -> bool:
    """Whether `host` is one of the trusted proxies (compared as uvicorn compares it when it
    reads their headers: the daemon's listeners are IPv6-only, so no address comes mapped)."""
    if not proxies:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in proxies)
