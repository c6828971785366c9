"""Sending a project's enrolled devices to Apple: the project's App Store Connect API key and
the registrations, as ops (run by either client: `client.run(op)`) and the answers' models.

Kept apart from ops.py and models.py: the server's devices/apple/ is an area of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from urllib.parse import quote

from buildbay_client.models import Model
from buildbay_client.ops import Op


class Outcome(StrEnum):
    CREATED = "created"  # Apple registered the device now
    EXISTING = "existing"  # Apple had it already
    UNCHANGED = "unchanged"  # registered through the project before: Apple was not asked


@dataclass(frozen=True)
class AppleActor(Model):
    id: str
    email: str


@dataclass(frozen=True)
class AppleKeyInfo(Model):
    key_id: str
    issuer_id: str
    created_at: datetime
    created_by: AppleActor | None


@dataclass(frozen=True)
class RegisteredWithApple(Model):
    at: datetime
    by: AppleActor | None


@dataclass(frozen=True)
class AppleRegistration(Model):
    device_id: str
    udid: str
    name: str  # as Apple was sent it
    platform: str  # IOS or MAC_OS
    apple_device_id: str | None
    outcome: Outcome
    registered_with_apple: RegisteredWithApple


@dataclass(frozen=True)
class AppleRefusal(Model):
    device_id: str
    udid: str
    name: str
    platform: str
    code: str
    detail: str


@dataclass(frozen=True)
class AppleRegistrationBatch(Model):
    registrations: list[AppleRegistration]
    refused: list[AppleRefusal]
    remaining: int
    last_sent: str | None = None  # the last device sent to Apple: the next call's `after`


def _project(project_id: str) -> str:
    return f"/api/projects/{quote(project_id, safe='')}"


def put_apple_key(
    project_id: str, key_id: str, issuer_id: str, private_key: str
) -> Op[AppleKeyInfo]:
    """Set the project's App Store Connect API key (admin+); `private_key` is the text of its
    `.p8` file."""
    body = {"keyId": key_id, "issuerId": issuer_id, "privateKey": private_key}
    return Op("PUT", f"{_project(project_id)}/apple-api-key", AppleKeyInfo, body)


def get_apple_key(project_id: str) -> Op[AppleKeyInfo]:
    return Op("GET", f"{_project(project_id)}/apple-api-key", AppleKeyInfo)


def delete_apple_key(project_id: str) -> Op[None]:
    return Op("DELETE", f"{_project(project_id)}/apple-api-key")


def register_device_with_apple(project_id: str, device_id: str) -> Op[AppleRegistration]:
    # Safe to send again: a device registered through the project is answered as it is.
    path = f"{_project(project_id)}/devices/{quote(device_id, safe='')}/register-with-apple"
    return Op("POST", path, AppleRegistration)


def register_missing_with_apple(
    project_id: str, after: str | None = None
) -> Op[AppleRegistrationBatch]:
    """Register up to 20 of the devices not yet registered, after the device `after` (the last
    call's `last_sent`: the devices Apple refused are not sent again); `remaining` says how many
    are left."""
    path = f"{_project(project_id)}/devices/register-with-apple"
    params = {"after": after} if after else {}
    return Op("POST", path, AppleRegistrationBatch, params=params)
