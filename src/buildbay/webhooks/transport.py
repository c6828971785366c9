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
import socket
import ssl
from collections.abc import AsyncIterable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Addresses Python calls global but that no webhook should reach: cloud metadata services that
# live outside the link-local range (Alibaba's; AWS's IPv6 one is in fd00::/8, already private).
_METADATA = (ipaddress.ip_network("100.100.100.200/32"),)


def refused_address(address: IpAddress) -> bool:
    """Private, loopback, link-local (169.254.169.254, the metadata service), multicast,
    reserved, shared (100.64/10) or unspecified: anything not on the public Internet."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in _METADATA):
        return True
    return not address.is_global or address.is_multicast


def url_problem(url: str, *, allow_http: bool, allow_private: bool) -> str | None:
    """Why `url` cannot be a webhook endpoint, or None. A hostname is only resolved when a
    delivery connects (see the module's docstring); an address written in the URL is checked
    now."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (raises for a port out of range)
    except ValueError:
        return "is not a valid URL"
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes:
        if parts.scheme == "http":
            return "must be https:// (this server refuses http:// endpoints)"
        return "must be an https:// URL"
    if not host:
        return "has no host"
    if parts.username is not None or parts.password is not None:
        return "cannot hold a user name or password"
    if parts.fragment:
        return "cannot hold a fragment (#...)"
    if not allow_private:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None
        if refused_address(address):
            return "points to a private, loopback or link-local address"
    return None


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses that `refused_address` lets through (all of them with
    `allow_private`), resolving the name itself so the address checked is the one used."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._backend = httpcore.AnyIOBackend()

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
            raise httpcore.ConnectError(
                f"{host} resolves to a private, loopback or link-local address "
                f"({', '.join(map(str, addresses))}); webhooks are not sent there"
            )
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

    def __init__(self, *, allow_private: bool, max_connections: int = 100) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=GuardedBackend(allow_private=allow_private),
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
