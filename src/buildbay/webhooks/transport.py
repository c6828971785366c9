"""Where a webhook may be sent: the URL rules checked when an endpoint is saved, and the guard
that checks the address actually connected to, at connect time.

A hostname is resolved once per connection, here, and the connection goes to an address that
passed the check: a name that resolves to a public address when the endpoint is saved and to
127.0.0.1 later (DNS rebinding) is refused at that later connect. httpx has no hook for name
resolution, so the guard is an httpcore network backend (httpcore's public interface for it),
under an httpx transport that hands requests to an httpcore connection pool.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import socket
import ssl
import unicodedata
from collections.abc import AsyncIterable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Addresses Python calls global (some Python versions) but that no webhook should reach: cloud
# metadata services outside the link-local range (Alibaba's; AWS's IPv6 one is in fd00::/8,
# already private), IETF protocol assignments, the deprecated 6to4 relays, documentation.
_ALSO_REFUSED = tuple(
    ipaddress.ip_network(n)
    for n in ("100.100.100.200/32", "192.0.0.0/24", "192.88.99.0/24", "3fff::/20")
)
# IPv6 prefixes that carry an IPv4 address in their last 32 bits, which a translator (NAT64,
# RFC 6052) reaches: the IPv4 address is the one checked.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# What a delivery's log says when the address a name or URL leads to is not public, and when a
# name does not resolve at all: the same words, so that the log tells no user what the
# server's own resolver knows about internal names.
NOT_PUBLIC = "refused: not a public address"
# A host name: letters, digits, hyphens (and underscores, which some internal names have) in
# dot-separated labels of at most 63 characters; a trailing dot is the root's.
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")


def refused_address(address: IpAddress) -> bool:
    """Private, loopback, link-local (169.254.169.254, the metadata service), multicast,
    reserved, shared (100.64/10) or unspecified: anything not on the public Internet. An IPv6
    address that carries an IPv4 one (mapped, NAT64, 6to4) is judged by the IPv4 one."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in _NAT64:
            address = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        elif address.sixtofour is not None:
            address = address.sixtofour
    if any(address in network for network in _ALSO_REFUSED):
        return True
    return not address.is_global or address.is_multicast or address.is_reserved


class UrlRefused(ValueError):
    """Why a URL cannot be a webhook endpoint: the rest of a sentence that begins with "The
    URL" ("must be an https:// URL")."""


class AddressRefused(UrlRefused):
    """The URL writes an address that is not public."""


def endpoint_url(url: str, *, allow_http: bool, allow_private: bool) -> httpx.URL:
    """`url` as a delivery sends to it, or UrlRefused. The one reading of a webhook's URL: the
    check when an endpoint is saved and the sender before each attempt both call this, and the
    sender sends to the URL it answers, so what was checked is what is connected to.

    It is httpx's parser (the sender's own), then these rules on its result: a host that ends
    in a number is an IPv4 address, and must be written as one is printed (four decimal
    numbers: not `0177.0.0.1`, `0x7f.1`, `127.1` or `2130706433`, which resolvers read each
    their own way); other hosts are names (non-ASCII ones in their IDNA form), resolved when a
    delivery connects and checked then (`GuardedBackend`); an address written in the URL is
    checked now."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise UrlRefused(_invalid(url)) from None
    schemes = ("https", "http") if allow_http else ("https",)
    if parsed.scheme not in schemes:
        if parsed.scheme == "http":
            raise UrlRefused("must be https:// (this server refuses http:// endpoints)")
        raise UrlRefused("must be an https:// URL")
    host = parsed.raw_host.decode("ascii", "replace")  # a name in its IDNA form, as resolved
    if not host:
        raise UrlRefused("has no host")
    if parsed.userinfo:
        raise UrlRefused("cannot hold a user name or password")
    if parsed.fragment:
        raise UrlRefused("cannot hold a fragment (#...)")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise UrlRefused("has a port outside 1 to 65535")
    address = _address(host)
    if address is not None and not allow_private and refused_address(address):
        raise AddressRefused("points to a private, loopback or link-local address")
    return parsed


def url_problem(url: str, *, allow_http: bool, allow_private: bool) -> str | None:
    """Why `url` cannot be a webhook endpoint (endpoint_url's refusal), or None."""
    try:
        endpoint_url(url, allow_http=allow_http, allow_private=allow_private)
    except UrlRefused as refused:
        return str(refused)
    return None


def _address(host: str) -> IpAddress | None:
    """The address `host` (httpx's, ASCII and lower case) writes, None for a name; UrlRefused
    for what is neither, or an address in a spelling of its own."""
    if ":" in host:  # httpx keeps brackets off an IPv6 address
        try:
            v6 = ipaddress.IPv6Address(host)
        except ValueError:
            v6 = None
        if v6 is None or v6.scope_id is not None:
            raise UrlRefused("has a host that is not a valid IPv6 address")
        return v6
    labels = host.removesuffix(".").split(".")
    if _NUMBER.fullmatch(labels[-1]):
        # What a URL parser or resolver reads as an IPv4 address (the WHATWG URL standard:
        # a host that ends in a number is one); only its usual spelling is taken.
        try:
            v4 = ipaddress.IPv4Address(host)
        except ValueError:
            v4 = None
        if v4 is None or str(v4) != host:
            raise UrlRefused(_NOT_DOTTED_QUAD)
        return v4
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise UrlRefused("has a host that is not a valid domain name")
    return None


_NOT_DOTTED_QUAD = (
    "has a host that is an IP address written other than as four decimal numbers; "
    "write it as they are usually written, like 192.0.2.1"
)


def _invalid(url: str) -> str:
    """httpx's parser refused `url`: why, in words. (Where the host is, read here only to
    choose the words: the decision was httpx's.)"""
    normal = unicodedata.normalize("NFKC", url)
    try:
        host = urlsplit(normal).hostname or ""
    except ValueError:
        host = ""
    if host and _NUMBER.fullmatch(host.removesuffix(".").split(".")[-1]):
        if normal != url:
            return (
                "has a host that spells an IP address in characters other than ASCII "
                "digits; write it as IP addresses are usually written, like 192.0.2.1"
            )
        return _NOT_DOTTED_QUAD
    return (
        "is not a valid URL: write the host as a domain name or as an IP address "
        "like 192.0.2.1 or [2001:db8::1], and the port as a number"
    )


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses that `refused_address` lets through (all of them with
    `allow_private`), resolving the name itself so the address checked is the one used."""

    def __init__(
        self, *, allow_private: bool, network: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self.allow_private = allow_private
        # What connects to an address once it passed (a test may watch what is connected to).
        self._backend = network or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._resolve(host, port, timeout)
        allowed = [a for a in addresses if self.allow_private or not refused_address(a)]
        if not allowed:
            # Neither the addresses nor which of them: the log is any admin's to read.
            raise httpcore.ConnectError(NOT_PUBLIC)
        error: Exception | None = None
        for address in allowed:
            try:
                return await self._backend.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def _resolve(self, host: str, port: int, seconds: float | None) -> list[IpAddress]:
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(seconds):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} took too long") from None
        except OSError as exc:
            if not self.allow_private:
                # A name the server's resolver does not know reads as one it knows to be
                # private: otherwise the log would tell which internal names exist.
                raise httpcore.ConnectError(NOT_PUBLIC) from None
            raise httpcore.ConnectError(f"{host} could not be resolved: {exc}") from None
        seen: dict[IpAddress, None] = {}
        for _family, _type, _proto, _name, sockaddr in infos:
            # The zone of a scoped IPv6 address (`fe80::1%eth0`) is no part of what is checked.
            seen[ipaddress.ip_address(str(sockaddr[0]).split("%")[0])] = None
        return list(seen)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are not sent to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The process's TLS settings for webhooks (httpx's defaults: certifi's authorities).
    Loading the authorities keeps the event loop busy for 10-20 ms: once a process, and before
    it serves (`buildbay.app.served`) rather than in the middle of its first delivery."""
    return httpx.create_ssl_context()


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore connection pool that connects through
    `GuardedBackend`. No proxy (one would connect for us, unchecked)."""

    def __init__(
        self,
        *,
        allow_private: bool,
        max_connections: int = 100,
        network: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=GuardedBackend(allow_private=allow_private, network=network),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except httpcore.TimeoutException as exc:
            raise httpx.TimeoutException(str(exc) or type(exc).__name__, request=request) from exc
        except httpcore.ConnectError as exc:
            raise httpx.ConnectError(str(exc) or "connection failed", request=request) from exc
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise httpx.TransportError(str(exc) or type(exc).__name__, request=request) from exc
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Stream(response.stream, request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _Stream(httpx.AsyncByteStream):
    def __init__(self, stream: Any, request: httpx.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> Any:
        try:
            async for part in self._stream:
                yield part
        except httpcore.TimeoutException as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=self._request) from exc
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()
