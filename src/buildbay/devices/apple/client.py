"""App Store Connect's API, as far as registering a device: the token Apple documents
("Generating Tokens for API Requests"), `POST /v1/devices` ("Register a new device"), and
Apple's answers turned into the domain's errors.

The token: a JWT signed ES256 (PyJWT, with `cryptography`) by the project's key, its header
`{"alg": "ES256", "kid": <key id>, "typ": "JWT"}`, its claims `iss` (the issuer id), `iat`,
`exp` (20 minutes after `iat`: Apple refuses a longer one) and `aud` `appstoreconnect-v1`.

Apple's answers (JSON:API `{"errors": [{"status", "code", "title", "detail"}]}`), as Apple
documents its status codes and as they are seen in the field:

- 201: registered; its `data.id` is Apple's id of the device.
- 409 whose detail says the device "already exists on this team": registered before (by hand,
  another tool or another project); a success.
- the yearly device limit: 403 `FORBIDDEN_ERROR` "Your development team has reached the maximum
  number of registered iPhone devices." (also accepted as a 409): 409 `apple_device_limit`.
- 401 (`NOT_AUTHORIZED`): the key is wrong, revoked, or its token refused: 409
  `apple_key_rejected`. Any other 403: the key's role may not register devices: 409
  `apple_key_forbidden`.
- 429 (`RATE_LIMIT_EXCEEDED`, the key's hourly quota): 429 `apple_rate_limited` with a
  Retry-After.
- another 400, 409 or 422 (an invalid UDID, a name Apple refuses): 422 `apple_device_refused`,
  with Apple's words; a batch goes on with the next device.
- no answer in time, a connection that fails, a 5xx, or anything else: 502 `apple_unavailable`.

Apple's own words reach the problem's `detail` as one line of at most DETAIL_LIMIT characters,
control characters replaced; the token never reaches an answer or a log.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import jwt

from buildbay import __version__
from buildbay.devices.apple.keys import AppleKey
from buildbay.devices.records import DeviceRecord
from buildbay.errors import BuildbayError, Conflict, RateLimited
from buildbay.text import BIDI_CLASS, CONTROL_CLASS

log = logging.getLogger("buildbay.apple")

AUDIENCE = "appstoreconnect-v1"
TOKEN_LIFETIME = timedelta(minutes=20)  # Apple's longest for this endpoint
NAME_LIMIT = 50  # Apple's longest device name
DETAIL_LIMIT = 300  # characters of Apple's words repeated in a problem
ANSWER_LIMIT = 64 * 1024  # bytes of an answer read
RATE_LIMIT_WAIT = 600  # seconds to wait after a 429 that says none (Apple's quota is hourly)
RATE_LIMIT_WAIT_MAX = 3600


class AppleError(BuildbayError):
    """An answer of Apple's (or none) that stops a registration."""


class AppleStop(AppleError):
    """One that would stop every registration after it as well: a batch ends there."""


class AppleKeyRejected(AppleStop, Conflict):
    code = "apple_key_rejected"


class AppleKeyForbidden(AppleStop, Conflict):
    code = "apple_key_forbidden"


class AppleDeviceLimit(AppleStop, Conflict):
    code = "apple_device_limit"


class AppleRateLimited(AppleStop, RateLimited):
    code = "apple_rate_limited"


class AppleUnavailable(AppleStop):
    status = 502
    code = "apple_unavailable"
    title = "Bad Gateway"


class AppleRefusedDevice(AppleError):
    """Apple refused this device (its UDID, its name): the next one may go through."""

    status = 422
    code = "apple_device_refused"


@dataclass(frozen=True, slots=True)
class DeviceEntry:
    """A device as Apple is sent it."""

    name: str
    platform: str  # IOS (iPadOS too) or MAC_OS
    udid: str


@dataclass(frozen=True, slots=True)
class Registered:
    apple_device_id: str | None  # Apple's id, when its answer gave it
    existing: bool  # Apple had the device already (409)


_NOT_SHOWN = re.compile(f"[{CONTROL_CLASS}{BIDI_CLASS}\\s]+")


def one_line(text: str, limit: int) -> str:
    """`text` on one line, control and bidirectional-control characters made spaces, cut to
    `limit` characters."""
    line = _NOT_SHOWN.sub(" ", text).strip()
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def entry_of(device: DeviceRecord) -> DeviceEntry:
    """The device as Apple takes it: its name on one line within Apple's 50 characters (its
    model when the name is blank), its platform in Apple's words, its UDID."""
    name = one_line(device.name, NAME_LIMIT) or one_line(device.model, NAME_LIMIT) or "Device"
    return DeviceEntry(name, device.platform.apple_name, device.udid)


def apple_token(key: AppleKey, now: datetime) -> str:
    """The bearer token App Store Connect takes from this key, valid from `now` for 20 minutes."""
    issued = int(now.timestamp())
    claims = {
        "iss": key.issuer_id,
        "iat": issued,
        "exp": issued + int(TOKEN_LIFETIME.total_seconds()),
        "aud": AUDIENCE,
    }
    return jwt.encode(
        claims, key.private_key, algorithm="ES256", headers={"kid": key.key_id, "typ": "JWT"}
    )


class AppStoreConnect:
    """Registers devices with Apple through one key, on one client (its connection kept
    from one device to the next). Made by `conversation`."""

    def __init__(self, http: httpx.AsyncClient, token: str, timeout: float) -> None:
        self._http = http
        self._authorization = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout

    async def register(self, device: DeviceEntry) -> Registered:
        """`POST /v1/devices` for the device; Apple's answer, or its refusal as an AppleError."""
        body = {
            "data": {
                "type": "devices",
                "attributes": {
                    "name": device.name,
                    "platform": device.platform,
                    "udid": device.udid,
                },
            }
        }
        try:
            async with self._http.stream(
                "POST", "/v1/devices", json=body, headers=self._authorization
            ) as response:
                answer = await _read_at_most(response, ANSWER_LIMIT)
        except httpx.TimeoutException:
            log.warning("App Store Connect did not answer within %g s", self._timeout)
            raise AppleUnavailable(
                f"App Store Connect did not answer within {self._timeout:g} seconds; "
                "try again later"
            ) from None
        except httpx.HTTPError as exc:
            log.warning("App Store Connect could not be reached: %s", type(exc).__name__)
            raise AppleUnavailable(
                "App Store Connect could not be reached; try again later"
            ) from None
        return outcome(response.status_code, response.headers, answer)


@asynccontextmanager
async def conversation(
    base_url: str, key: AppleKey, now: datetime, *, answer_within: float
) -> AsyncIterator[AppStoreConnect]:
    """An App Store Connect client for `key`, with one token (good for 20 minutes from `now`)
    for every device registered through it; each of Apple's answers must come within
    `answer_within` seconds (connecting included)."""
    async with httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        timeout=httpx.Timeout(answer_within),
        follow_redirects=False,
        headers={"User-Agent": f"Buildbay/{__version__}", "Accept": "application/json"},
    ) as http:
        yield AppStoreConnect(http, apple_token(key, now), answer_within)


async def _read_at_most(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= limit:
            break
    return bytes(body[:limit])


# -- Apple's answer --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppleSays:
    """One of the `errors` of Apple's answer."""

    code: str
    title: str
    detail: str

    def __str__(self) -> str:
        said = " - ".join(part for part in (self.title, self.detail) if part)
        return one_line(said, DETAIL_LIMIT)


def outcome(status: int, headers: Mapping[str, str], body: bytes) -> Registered:
    """What Apple's answer to `POST /v1/devices` means (see the module's docstring)."""
    if status in (200, 201):
        return Registered(_device_id(body), existing=False)
    errors = _errors(body)
    said = "; ".join(str(e) for e in errors[:2]) or f"HTTP {status}"
    words = " ".join(f"{e.title} {e.detail}" for e in errors).lower()
    if status == 409 and "already exists" in words:
        return Registered(None, existing=True)
    if status in (403, 409) and "maximum number" in words:
        raise AppleDeviceLimit(
            "Apple refused the device: the team has registered as many devices of this kind as "
            f"its membership allows this year. Apple says: {said}"
        )
    if status == 401:
        raise AppleKeyRejected(
            "App Store Connect did not accept the project's API key: it is wrong or was "
            f"revoked; an admin must put a valid one. Apple says: {said}"
        )
    if status == 403:
        raise AppleKeyForbidden(
            "The project's App Store Connect API key may not register devices: give it the "
            f"Admin, App Manager or Developer role in App Store Connect. Apple says: {said}"
        )
    if status == 429:
        wait = _retry_after(headers.get("retry-after", ""))
        raise AppleRateLimited(
            "App Store Connect's request limit for the project's key is used up; try again "
            f"in {wait} seconds. Apple says: {said}",
            headers={"Retry-After": str(wait)},
        )
    if status in (400, 409, 422):
        raise AppleRefusedDevice(f"Apple refused the device. Apple says: {said}")
    log.warning("App Store Connect answered %d to a device's registration", status)
    raise AppleUnavailable(
        f"App Store Connect answered HTTP {status}; try again later. Apple says: {said}"
        if errors
        else f"App Store Connect answered HTTP {status}; try again later"
    )


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # not JSON, not UTF-8, cut short
        return None


def _device_id(body: bytes) -> str | None:
    answer = _json(body)
    data = answer.get("data") if isinstance(answer, dict) else None
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, str) and 0 < len(found) <= 64 else None


def _errors(body: bytes) -> Sequence[AppleSays]:
    answer = _json(body)
    listed = answer.get("errors") if isinstance(answer, dict) else None
    if not isinstance(listed, list):
        return []
    return [
        AppleSays(*(str(e.get(k) or "") for k in ("code", "title", "detail")))
        for e in listed
        if isinstance(e, dict)
    ]


def _retry_after(value: str) -> int:
    value = value.strip()
    seconds = int(value) if value.isdigit() and len(value) < 10 else RATE_LIMIT_WAIT
    return min(max(seconds, 1), RATE_LIMIT_WAIT_MAX)
