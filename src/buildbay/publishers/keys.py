"""The signing keys of the issuers that trusted publishers name: each issuer's discovery
document (`/.well-known/openid-configuration`) gives its `jwks_uri`, and the JWKS there its keys.

Kept per issuer in the process for `ttl` (keys are public; a process of its own reads them
again, nothing is shared). A token signed with a key (`kid`) not in the kept set makes one
fetch at once (the issuer rotated its key), but at most one per issuer each `refetch_floor`:
tokens naming made-up `kid`s cannot make the server hammer an issuer.

Where they are fetched from follows the webhooks' rules (webhooks/transport.py): https:// and a
public address, checked at connect time as well (a name that resolves to 127.0.0.1 is refused).
The one exception: in development (BUILDBAY_ENV=development, the tests' and a laptop's), an
issuer on a loopback address (127.0.0.1, ::1, localhost) over http://, as a provider run on the
same machine is.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt

from buildbay.clock import Clock
from buildbay.errors import ServiceUnavailable
from buildbay.webhooks.transport import GuardedTransport, UrlRefused, endpoint_url

# Asymmetric signatures only: never `none`, never HS* (whose "key" would be public).
ALGORITHMS = ("RS256", "ES256")
_KEY_TYPE = {"RS256": "RSA", "ES256": "EC"}
_MAX_DOCUMENT = 256 * 1024
_TIMEOUT = httpx.Timeout(10.0)


class IssuerRefused(ValueError):
    """Why an issuer's URL cannot be trusted (the rest of a sentence: "must be https://")."""


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_issuer(issuer: str, *, development: bool) -> str:
    """`issuer` if a trusted publisher may name it, else IssuerRefused: an https:// URL of a
    public host (in development, also http:// on a loopback address), no query or fragment,
    no trailing slash (an ID token's `iss` is compared with it exactly)."""
    if len(issuer) > 255:
        raise IssuerRefused("has at most 255 characters")
    if issuer.endswith("/"):
        raise IssuerRefused("must not end with `/` (it is compared with the tokens' `iss`)")
    loopback = development and is_loopback_host(httpx.URL(issuer).host if _parses(issuer) else "")
    try:
        parsed = endpoint_url(issuer, allow_http=loopback, allow_private=loopback)
    except UrlRefused as refused:
        raise IssuerRefused(str(refused)) from None
    if parsed.query:
        raise IssuerRefused("cannot hold a query (?...)")
    return issuer


def _parses(url: str) -> bool:
    try:
        httpx.URL(url)
    except httpx.InvalidURL:
        return False
    return True


@dataclass
class _KeySet:
    keys: list[jwt.PyJWK]
    fetched_at: float  # the clock's monotonic seconds


@dataclass
class IssuerKeys:
    """The kept keys of each issuer, fetched when needed (see the module)."""

    clock: Clock
    development: bool
    ttl: float = 3600.0
    refetch_floor: float = 60.0
    _sets: dict[str, _KeySet] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _public: httpx.AsyncClient | None = None
    _loopback: httpx.AsyncClient | None = None

    async def key_for(self, issuer: str, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """The issuer's key that signs with `alg` under `kid` (with no `kid`: its only such
        key), fetching the issuer's keys when none are kept, when they are `ttl` old, or once
        (but no more often than `refetch_floor`) when `kid` is not among them. None if the
        issuer has no such key."""
        lock = self._locks.setdefault(issuer, asyncio.Lock())
        async with lock:
            kept = self._sets.get(issuer)
            now = self.clock.monotonic()
            if kept is None or now - kept.fetched_at >= self.ttl:
                kept = await self._fetch(issuer)
            key = _pick(kept.keys, kid, alg)
            if key is None and now - kept.fetched_at >= self.refetch_floor:
                kept = await self._fetch(issuer)
                key = _pick(kept.keys, kid, alg)
            return key

    async def refreshed_key(self, issuer: str, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """After a signature failed with the kept key: the issuer's keys read again (once
        `refetch_floor` has passed since they were last read; an issuer that rotated its key
        without naming keys by `kid`) and the key picked from them, or None."""
        async with self._locks.setdefault(issuer, asyncio.Lock()):
            kept = self._sets.get(issuer)
            if kept is not None and self.clock.monotonic() - kept.fetched_at < self.refetch_floor:
                return None
            return _pick((await self._fetch(issuer)).keys, kid, alg)

    async def _fetch(self, issuer: str) -> _KeySet:
        discovery = await self._get_json(issuer, f"{issuer}/.well-known/openid-configuration")
        if discovery.get("issuer") != issuer:
            raise _unreachable(issuer, "its discovery document names another issuer")
        jwks_uri = discovery.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise _unreachable(issuer, "its discovery document has no jwks_uri")
        document = await self._get_json(issuer, jwks_uri)
        keys = []
        for entry in document.get("keys") or []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                keys.append(jwt.PyJWK.from_dict(entry))
            except jwt.PyJWTError:
                continue  # a key of a type or algorithm we do not take
        kept = _KeySet(keys, self.clock.monotonic())
        self._sets[issuer] = kept
        return kept

    async def _get_json(self, issuer: str, url: str) -> dict[str, Any]:
        loopback = self._loopback_ok(url)
        try:
            target = endpoint_url(url, allow_http=loopback, allow_private=loopback)
        except UrlRefused:
            raise _unreachable(issuer, "its keys' address is not a public https:// URL") from None
        client = self._client(loopback=loopback)
        try:
            async with client.stream("GET", target, headers={"Accept": "application/json"}) as r:
                if r.status_code != 200:
                    raise _unreachable(issuer, f"{target.host} answered {r.status_code}")
                body = b""
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > _MAX_DOCUMENT:
                        raise _unreachable(issuer, "a document of its is too large")
        except httpx.HTTPError:
            raise _unreachable(issuer, f"{target.host} could not be reached") from None
        try:
            found = json.loads(body)
        except ValueError:
            raise _unreachable(issuer, "a document of its is not JSON") from None
        if not isinstance(found, dict):
            raise _unreachable(issuer, "a document of its is not a JSON object")
        return found

    def _loopback_ok(self, url: str) -> bool:
        return self.development and _parses(url) and is_loopback_host(httpx.URL(url).host)

    def _client(self, *, loopback: bool) -> httpx.AsyncClient:
        if loopback:
            if self._loopback is None:
                self._loopback = httpx.AsyncClient(timeout=_TIMEOUT, trust_env=False)
            return self._loopback
        if self._public is None:
            self._public = httpx.AsyncClient(
                timeout=_TIMEOUT,
                transport=GuardedTransport(allow_private=False, max_connections=20),
            )
        return self._public

    async def aclose(self) -> None:
        for client in (self._public, self._loopback):
            if client is not None:
                await client.aclose()


def _pick(keys: list[jwt.PyJWK], kid: str | None, alg: str) -> jwt.PyJWK | None:
    fitting = [
        key
        for key in keys
        if key.key_type == _KEY_TYPE[alg]
        and key.algorithm_name == alg  # the JWK's `alg`, or its type's (EC: its curve's)
        and (kid is None or key.key_id == kid)
    ]
    return fitting[0] if len(fitting) == 1 else None


def _unreachable(issuer: str, why: str) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"The keys of the issuer {issuer} could not be read: {why}. Try again later",
        code="issuer_unreachable",
    )
