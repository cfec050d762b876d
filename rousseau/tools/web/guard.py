"""What the web tools may reach: http(s) only, and no address on this machine's own networks
(loopback, private, link-local, CGNAT, cloud metadata...) unless the owner allows it.

The check is made where the connection is made: a host name is resolved once, every address
it gives is checked, and the connection goes to an address that passed. A name that
resolves differently the second time (DNS rebinding) cannot slip past, and every redirect's
host goes through the same door.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a cloud metadata address", ("169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32")),
    ("a loopback address", ("127.0.0.0/8", "::1/128")),
    ("an unspecified address", ("0.0.0.0/8", "::/128")),
    ("a private address", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")),
    ("a link-local address", ("169.254.0.0/16", "fe80::/10")),
    ("a carrier-grade NAT address", ("100.64.0.0/10",)),
    ("a multicast address", ("224.0.0.0/4", "ff00::/8")),
)
"""Why an address is refused, by range; anything else that is not global is 'reserved'."""
_NETWORKS = [(why, ipaddress.ip_network(n)) for why, nets in _KINDS for n in nets]


class Refused(Exception):
    """An address the rules refuse; the message says which and why, for the model to read."""


@dataclass(frozen=True, slots=True)
class AddressRules:
    """The owner's rules: `allow_private` opens every address, `allow_hosts` some hosts."""

    allow_private: bool = False
    allow_hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, allow_private: bool, allow_hosts: Iterable[str]) -> AddressRules:
        return cls(allow_private, frozenset(h.strip().lower().strip("[]") for h in allow_hosts))

    def check_url(self, url: str) -> str:
        """The URL's host, once its scheme is http(s) and it names one; else Refused."""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (a port that is not a number raises here)
        except ValueError as exc:
            raise Refused(f"{url[:200]!r} is not a valid URL ({exc})") from None
        if parts.scheme not in ("http", "https"):
            shown = parts.scheme or "a URL without a scheme"
            raise Refused(f"only http and https addresses are fetched, not {shown}")
        if not parts.hostname:
            raise Refused(f"{url[:200]!r} names no host")
        return parts.hostname

    def why_not(self, host: str, address: IPAddress) -> str | None:
        """Why `address` (of `host`) may not be reached, or None when it may."""
        if self.allow_private or host.lower() in self.allow_hosts:
            return None
        if str(address) in self.allow_hosts:
            return None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        for why, network in _NETWORKS:
            if address.version == network.version and address in network:
                return why
        return None if address.is_global else "a reserved address"

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses of `host` that may be reached (in the resolver's order); Refused,
        naming the first refused one, when none may."""
        import anyio

        try:
            literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            found = [literal]
        else:
            try:
                infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise Refused(f"{host} could not be resolved ({exc.strerror or exc})") from None
            found = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
        allowed: list[tuple[IPAddress, str | None]] = []
        refused: list[tuple[IPAddress, str | None]] = []
        for address in found:
            why = self.why_not(host, address)
            (refused if why else allowed).append((address, why))
        if not allowed:
            address, why = refused[0]
            named = str(address) if literal is not None else f"{host} resolves to {address}"
            raise Refused(
                f"{named}, {why}: refused (web_tools.fetch.allow_private or allow_hosts would "
                "allow it)"
            )
        return [str(a) for a, _ in allowed]
