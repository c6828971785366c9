"""Registering a project's devices with Apple: one device, or every device of the project's
members not yet registered through it ("register all missing"), through the project's key.

A request reads what it needs in its unit of work, gives its database connection back for the
time Apple takes to answer (db/engine.py `connection_released`: no connection or transaction
waits on Apple), then records what Apple registered, each row inserted unless a concurrent
request did so first (and only if its device still exists). A device registered through the
project before is answered as it is, without asking Apple again.

"Register all missing" registers at most BATCH devices one after the other, within
BATCH_SECONDS, and says how many remain and the last device it sent: a client calls again after
that device until a call sends none. After it, not from the start: the devices Apple refuses
stay missing, and BATCH of them at the head would otherwise be all that every call sends.

An answer of Apple's that would refuse every device after it (the key refused, the yearly
limit, the hourly quota, Apple unreachable) ends the batch: that problem is the answer, what was
registered before it stands (`registered`, `remaining` in the problem). Apple refusing one
device (its UDID) does not: it is listed under `refused` and the next device goes.

Whoever calls, Buildbay sends Apple at most REQUESTS_PER_HOUR registrations of a project's
devices in an hour (counted as the request budgets are, ratelimit/limiter.py): the project's key
has an hourly quota at Apple that the team's other tools share, and the devices Apple refuses
stay missing, so that each call would send them again. Apple registers at most 100 devices of a
kind a year, so no team needs more; past it, 429 `apple_requests_throttled` ends the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime

from limits import RateLimitItemPerHour
from sqlalchemy import and_, bindparam, exists, func, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.clock import Clock
from buildbay.db.engine import connection_released
from buildbay.db.reads import Reads, RecordOf
from buildbay.devices.apple.client import (
    AppleRefusedDevice,
    AppleStop,
    AppStoreConnect,
    DeviceEntry,
    Registered,
    conversation,
    entry_of,
)
from buildbay.devices.apple.enums import Outcome
from buildbay.devices.apple.keys import AppleKey, KeySeal, usable_key
from buildbay.devices.models import AppleDeviceRegistration, Device
from buildbay.devices.records import DeviceRecord
from buildbay.errors import NotFound, RateLimited
from buildbay.ids import split_page
from buildbay.projects.models import ProjectMember
from buildbay.ratelimit.limiter import RateLimiter

BATCH = 20  # devices a "register all missing" sends at most
BATCH_SECONDS = 30.0  # and for at most this long (a device under way is finished)
REQUESTS_PER_HOUR = RateLimitItemPerHour(100)  # devices sent to Apple, per project


class RequestsThrottled(AppleStop, RateLimited):
    """The project's budget of registrations sent to Apple is spent for the hour."""

    code = "apple_requests_throttled"


@dataclass(frozen=True, slots=True)
class RegistrationRecord:
    """A device registered with Apple through the project."""

    device: DeviceRecord
    apple_device_id: str | None
    registered_at: datetime
    registered_by: str | None  # the member who sent it (None: their account is gone)
    registered_by_email: str | None


@dataclass(frozen=True, slots=True)
class Registration:
    record: RegistrationRecord
    entry: DeviceEntry  # the device as Apple was (or would be) sent it
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Refused:
    """A device Apple refused (its UDID, its name), with Apple's words."""

    device: DeviceRecord
    entry: DeviceEntry
    code: str
    detail: str


@dataclass(frozen=True, slots=True)
class Batch:
    registrations: list[Registration]
    refused: list[Refused]
    remaining: int  # devices of the project's members not registered through it, after this
    last_sent: str | None  # the last device Apple was sent (None: none was)


DEVICE = RecordOf(DeviceRecord, Device)

# A device of one of the project's members (any role).
_MEMBERS = and_(
    ProjectMember.user_id == Device.user_id, ProjectMember.project_id == bindparam("project_id")
)
_REGISTERED = exists().where(
    AppleDeviceRegistration.project_id == bindparam("project_id"),
    AppleDeviceRegistration.device_id == Device.id,
)
_MEMBERS_DEVICE = (
    select(*DEVICE.columns).join(ProjectMember, _MEMBERS).where(Device.id == bindparam("device_id"))
)
_MISSING = (
    select(*DEVICE.columns)
    .join(ProjectMember, _MEMBERS)
    .where(~_REGISTERED, Device.id > bindparam("after"))
    .order_by(Device.id)
    .limit(bindparam("limit"))
)
_MISSING_COUNT = (
    select(func.count()).select_from(Device).join(ProjectMember, _MEMBERS).where(~_REGISTERED)
)
_REGISTRATIONS = (
    select(
        *DEVICE.columns,
        AppleDeviceRegistration.apple_device_id,
        AppleDeviceRegistration.registered_at,
        AppleDeviceRegistration.registered_by,
        User.email.label("registered_by_email"),
    )
    .join(Device, Device.id == AppleDeviceRegistration.device_id)
    .outerjoin(User, User.id == AppleDeviceRegistration.registered_by)
    .where(AppleDeviceRegistration.project_id == bindparam("project_id"))
)
_REGISTRATION = _REGISTRATIONS.where(AppleDeviceRegistration.device_id == bindparam("device_id"))
_PAGE = (
    _REGISTRATIONS.where(AppleDeviceRegistration.device_id > bindparam("after_id"))
    .order_by(AppleDeviceRegistration.device_id)
    .limit(bindparam("limit"))
)


def device_not_found() -> NotFound:
    return NotFound(
        "No device with this id belongs to a member of this project", code="device_not_found"
    )


def _record_of(row: RowMapping) -> RegistrationRecord:
    return RegistrationRecord(
        DEVICE.of(row),
        row["apple_device_id"],
        row["registered_at"],
        row["registered_by"],
        row["registered_by_email"],
    )


async def registration_of(
    reads: Reads, project_id: str, device_id: str
) -> RegistrationRecord | None:
    row = await reads.first(_REGISTRATION, {"project_id": project_id, "device_id": device_id})
    return _record_of(row) if row is not None else None


async def registrations_by_device(
    reads: Reads, project_id: str, device_ids: Sequence[str]
) -> dict[str, RegistrationRecord]:
    """Which of these devices were registered with Apple through the project (for a list of
    devices to show `registeredWithApple`), by device id."""
    if not device_ids:
        return {}
    rows = await reads.all(
        _REGISTRATIONS.where(
            AppleDeviceRegistration.device_id.in_(bindparam("ids", expanding=True))
        ),
        {"project_id": project_id, "ids": list(device_ids)},
    )
    return {row["id"]: _record_of(row) for row in rows}


async def registrations_of(
    reads: Reads, project_id: str, limit: int, after_id: str | None
) -> tuple[list[RegistrationRecord], str | None]:
    """A page of the devices registered with Apple through the project, by device id."""
    rows = await reads.all(
        _PAGE, {"project_id": project_id, "after_id": after_id or "", "limit": limit + 1}
    )
    return split_page([_record_of(r) for r in rows], limit, lambda r: r.device.id)


@dataclass(frozen=True, slots=True)
class AppleApi:
    """Where App Store Connect is (BUILDBAY_APPLE_API_URL) and how long it may take."""

    base_url: str
    timeout: float


class AppleRegistrationService:
    def __init__(
        self, db: AsyncSession, clock: Clock, seal: KeySeal, apple: AppleApi, limiter: RateLimiter
    ) -> None:
        self.db = db
        self.clock = clock
        self.now = clock.now()
        self.seal = seal
        self.apple = apple
        self.limiter = limiter
        self.reads = Reads.within(db)

    async def register_device(self, project_id: str, device_id: str, by: str) -> Registration:
        """Register one device of a member of the project (404 `device_not_found` for any
        other); `by` is the member who asks."""
        row = await self.reads.first(
            _MEMBERS_DEVICE, {"project_id": project_id, "device_id": device_id}
        )
        if row is None:
            raise device_not_found()
        device = DEVICE.of(row)
        entry = entry_of(device)
        before = await registration_of(self.reads, project_id, device.id)
        if before is not None:
            return Registration(before, entry, Outcome.UNCHANGED)
        key = await usable_key(self.reads, self.seal, project_id)
        async with connection_released(self.db), self._conversation(key) as apple:
            await self._spend(project_id)
            answer = await apple.register(entry)
        record = await self._record(project_id, device, answer, by)
        if record is None:  # deleted while Apple answered
            raise device_not_found()
        return Registration(record, entry, _outcome_of(answer))

    async def register_missing(self, project_id: str, by: str, after: str | None = None) -> Batch:
        """Register the project's members' devices not yet registered through it, at most
        BATCH of them, those after the device `after` (see the module's docstring)."""
        key = await usable_key(self.reads, self.seal, project_id)
        rows = await self.reads.all(
            _MISSING, {"project_id": project_id, "limit": BATCH, "after": after or ""}
        )
        missing = int(await self.reads.scalar(_MISSING_COUNT, {"project_id": project_id}) or 0)
        devices = [DEVICE.of(row) for row in rows]
        answered: list[tuple[DeviceRecord, DeviceEntry, Registered]] = []
        refused: list[Refused] = []
        stop: AppleStop | None = None
        last_sent: str | None = None
        if devices:
            async with connection_released(self.db), self._conversation(key) as apple:
                deadline = self.clock.monotonic() + BATCH_SECONDS
                for device in devices:
                    if self.clock.monotonic() >= deadline:
                        break
                    entry = entry_of(device)
                    try:
                        await self._spend(project_id)
                        last_sent = device.id
                        answered.append((device, entry, await apple.register(entry)))
                    except AppleRefusedDevice as exc:
                        refused.append(Refused(device, entry, exc.code, exc.detail))
                    except AppleStop as exc:
                        stop = exc
                        break
        registrations = []
        for device, entry, answer in answered:
            record = await self._record(project_id, device, answer, by)
            if record is not None:
                registrations.append(Registration(record, entry, _outcome_of(answer)))
        remaining = max(missing - len(registrations), 0)
        if stop is not None:
            # What Apple registered before it stands, and the problem says what that was.
            stop.keeps_writes = True
            stop.extensions.update(
                registered=[r.record.device.id for r in registrations], remaining=remaining
            )
            raise stop
        return Batch(registrations, refused, remaining, last_sent)

    async def _spend(self, project_id: str) -> None:
        """Count one registration sent to Apple for the project; 429 once the hour's are."""
        wait = await self.limiter.throttle("apple-devices", project_id, REQUESTS_PER_HOUR)
        if wait is not None:
            raise RequestsThrottled(
                f"This project has sent Apple {REQUESTS_PER_HOUR.amount} device registrations "
                f"in the last hour, as many as Buildbay sends for a project (Apple registers at "
                f"most 100 devices of a kind a year); try again in {wait} seconds",
                headers={"Retry-After": str(wait)},
            )

    def _conversation(self, key: AppleKey) -> AbstractAsyncContextManager[AppStoreConnect]:
        return conversation(self.apple.base_url, key, self.now, answer_within=self.apple.timeout)

    async def _record(
        self, project_id: str, device: DeviceRecord, answer: Registered, by: str
    ) -> RegistrationRecord | None:
        """Record the registration, unless a concurrent request did first (then theirs is the
        record); None if the device was deleted meanwhile."""
        table = AppleDeviceRegistration.__table__
        insert = sqlite.insert if self.db.get_bind().dialect.name == "sqlite" else postgresql.insert
        values = select(
            literal(project_id, table.c.project_id.type),
            Device.id,
            literal(answer.apple_device_id, table.c.apple_device_id.type),
            literal(by, table.c.registered_by.type),
            literal(self.now, table.c.registered_at.type),
        ).where(Device.id == device.id)
        columns = ["project_id", "device_id", "apple_device_id", "registered_by", "registered_at"]
        await self.db.execute(
            insert(AppleDeviceRegistration).from_select(columns, values).on_conflict_do_nothing()
        )
        return await registration_of(self.reads, project_id, device.id)


def _outcome_of(answer: Registered) -> Outcome:
    return Outcome.EXISTING if answer.existing else Outcome.CREATED
