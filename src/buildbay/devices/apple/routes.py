"""The App Store Connect API key of a project, and registering its devices with Apple.

Who may: the key is a secret of the project's, as its webhooks are, so admins put and remove it;
developers (who make the ad-hoc builds its devices go into) see which key is set, register
devices and list what was registered. An API token needs no scope to manage the key, and
`builds:write` to register devices (a CI job that makes an ad-hoc build may send the devices
first).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response, status

from buildbay.auth.enums import TokenScope
from buildbay.deps import Page, ReadsDep, TransactionRoute
from buildbay.devices.apple import schemas
from buildbay.devices.apple.dependencies import KeyService, RegistrationService
from buildbay.devices.apple.keys import AppleKeyRecord, apple_key_of
from buildbay.devices.apple.registrations import (
    Refused,
    Registration,
    RegistrationRecord,
    registrations_of,
)
from buildbay.ids import ID_PATTERN
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectAdmin, project_access
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.schemas import PAGE_QUERY

router = APIRouter(prefix="/api/projects/{id}", tags=["devices"], route_class=TransactionRoute)

DeviceId = Annotated[str, Path(alias="deviceId")]
# A device's id, as `?after=` takes it.
ID_QUERY_PATTERN = f"^{ID_PATTERN.pattern}$"

# Developers read which key is set and what was registered (read-only requests), and register
# devices (a unit of work, whose connection is given back while Apple answers).
DeveloperReader = Annotated[
    ProjectAccess,
    Depends(project_access(ProjectRole.DEVELOPER, read_only=True, scope=TokenScope.READ)),
]
Registrar = Annotated[
    ProjectAccess,
    Depends(project_access(ProjectRole.DEVELOPER, read_only=False, scope=TokenScope.BUILDS_WRITE)),
]


def _actor(user_id: str | None, email: str | None) -> schemas.AppleActor | None:
    return schemas.AppleActor(id=user_id, email=email) if user_id and email else None


def key_schema(key: AppleKeyRecord) -> schemas.AppleKeyInfo:
    return schemas.AppleKeyInfo(
        key_id=key.key_id,
        issuer_id=key.issuer_id,
        created_at=key.created_at,
        created_by=_actor(key.created_by, key.created_by_email),
    )


def _registered(record: RegistrationRecord) -> schemas.RegisteredWithApple:
    return schemas.RegisteredWithApple(
        at=record.registered_at, by=_actor(record.registered_by, record.registered_by_email)
    )


def registration_schema(registration: Registration) -> schemas.AppleRegistration:
    record, entry = registration.record, registration.entry
    return schemas.AppleRegistration(
        device_id=record.device.id,
        udid=entry.udid,
        name=entry.name,
        platform=entry.platform,
        apple_device_id=record.apple_device_id,
        outcome=registration.outcome,
        registered_with_apple=_registered(record),
    )


def refusal_schema(refused: Refused) -> schemas.AppleRefusal:
    return schemas.AppleRefusal(
        device_id=refused.device.id,
        udid=refused.entry.udid,
        name=refused.entry.name,
        platform=refused.entry.platform,
        code=refused.code,
        detail=refused.detail,
    )


@router.put(
    "/apple-api-key",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Set the project's App Store Connect API key, replacing any (admin+)",
)
async def put_apple_key(
    body: schemas.AppleKeyPut, access: ProjectAdmin, service: KeyService
) -> schemas.AppleKeyInfo:
    user = access.caller.user
    key = await service.put(
        access.project.id, body.key_id, body.issuer_id, body.private_key, (user.id, user.email)
    )
    return key_schema(key)


@router.get(
    "/apple-api-key",
    responses=problem_responses(401, 403, 404, 429),
    summary="Which App Store Connect API key the project has (never its private key) (developer+)",
)
async def get_apple_key(access: DeveloperReader, reads: ReadsDep) -> schemas.AppleKeyInfo:
    return key_schema(await apple_key_of(reads, access.project.id))


@router.delete(
    "/apple-api-key",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 429),
    summary="Remove the project's App Store Connect API key (admin+)",
)
async def delete_apple_key(access: ProjectAdmin, service: KeyService) -> Response:
    await service.delete(access.project.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/devices/{deviceId}/register-with-apple",
    responses=problem_responses(401, 403, 404, 409, 422, 429, 502),
    summary="Register a device of a member with Apple, through the project's key (developer+)",
)
async def register_device_with_apple(
    device_id: DeviceId, access: Registrar, service: RegistrationService
) -> schemas.AppleRegistration:
    registration = await service.register_device(
        access.project.id, device_id, access.caller.user.id
    )
    return registration_schema(registration)


@router.post(
    "/devices/register-with-apple",
    responses=problem_responses(401, 403, 404, 409, 422, 429, 502),
    summary="Register the members' devices not yet registered with Apple through the project, "
    "20 at a time (developer+)",
)
async def register_missing_with_apple(
    access: Registrar,
    service: RegistrationService,
    after: Annotated[
        str | None,
        Query(
            pattern=ID_QUERY_PATTERN,
            description="Only the devices after this one (the last call's `lastSent`), so "
            "that the devices Apple refused are not sent again and again",
        ),
    ] = None,
) -> schemas.AppleRegistrationBatch:
    batch = await service.register_missing(access.project.id, access.caller.user.id, after)
    return schemas.AppleRegistrationBatch(
        registrations=[registration_schema(r) for r in batch.registrations],
        refused=[refusal_schema(r) for r in batch.refused],
        remaining=batch.remaining,
        last_sent=batch.last_sent,
    )


@router.get(
    "/devices/apple-registrations",
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="The devices registered with Apple through the project, by device id (developer+)",
    openapi_extra=PAGE_QUERY,
)
async def list_apple_registrations(
    access: DeveloperReader, reads: ReadsDep, page: Page
) -> schemas.AppleRegistrationList:
    records, next_cursor = await registrations_of(
        reads, access.project.id, page.limit, page.after_id
    )
    return schemas.AppleRegistrationList(
        registrations=[
            schemas.AppleRegisteredDevice(
                device_id=r.device.id,
                udid=r.device.udid,
                name=r.device.name,
                platform=r.device.platform,
                tester_id=r.device.user_id,
                apple_device_id=r.apple_device_id,
                registered_with_apple=_registered(r),
            )
            for r in records
        ],
        next_cursor=next_cursor,
    )
