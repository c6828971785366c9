"""A tester's devices: recording one that enrolled (by its UDID, one row on the whole server),
and the account's own list, rename and delete; and who hears of an enrollment (the projects'
webhooks, and their developers who asked for a mail).

Services never commit: each runs in the request's unit of work, and the webhook deliveries and
mails it writes to the outbox commit (or not) with the device itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.auth.reads import user_by_id
from buildbay.console_urls import project_url
from buildbay.db.reads import Reads
from buildbay.devices.enums import DevicePlatform, platform_of_product
from buildbay.devices.models import Device
from buildbay.devices.reach import DEVICE
from buildbay.devices.records import DeviceRecord
from buildbay.devices.schemas import device_schema
from buildbay.distribution.membership import insert_of
from buildbay.errors import Conflict, NotFound
from buildbay.ids import new_id
from buildbay.mail.headers import UnmailableAddress
from buildbay.mail.message import render
from buildbay.mail.outbox import MailOutbox
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.webhooks import events as webhook_events
from buildbay.words import platform_word


@dataclass(frozen=True, slots=True)
class DeviceDescription:
    """What a device said about itself in its profile service answer, checked
    (devices/enrollment.py)."""

    udid: str  # normalised (devices/enums.normalise_udid)
    product: str  # PRODUCT: iPhone14,2
    version: str  # VERSION: the system's build, 21E236
    serial: str | None
    name: str  # DEVICE_NAME, made fit to show

    @property
    def platform(self) -> DevicePlatform:
        return platform_of_product(self.product)


@dataclass(frozen=True, slots=True)
class Enrolled:
    device: DeviceRecord
    # The same person had enrolled this UDID before: told to webhooks (`reenrolled`), and not
    # mailed to developers again.
    reenrolled: bool


def _not_found() -> NotFound:
    return NotFound("You have no device with this id", code="device_not_found")


_OWN_DEVICES = (
    select(*DEVICE.columns).where(Device.user_id == bindparam("user_id")).order_by(Device.id)
)
_DEVICE = select(*DEVICE.columns).where(Device.id == bindparam("device_id"))
_DEVICE_BY_UDID = select(*DEVICE.columns).where(Device.udid == bindparam("udid"))
_DEVICE_MAIL = select(ProjectMember.device_mail).where(
    ProjectMember.project_id == bindparam("project_id"),
    ProjectMember.user_id == bindparam("user_id"),
)
# The projects of the person who enrolled: each is told (its webhooks, its developers).
_PROJECTS_OF = (
    select(Project.id, Project.name)
    .join(ProjectMember, ProjectMember.project_id == Project.id)
    .where(ProjectMember.user_id == bindparam("user_id"))
    .order_by(Project.id)
)
_DEVELOPERS = (ProjectRole.DEVELOPER, ProjectRole.ADMIN, ProjectRole.OWNER)
# Who asked for a mail per enrolled device, in those projects (the one who enrolled aside).
_MAILED = (
    select(User.email, Project.id.label("project_id"), Project.name.label("project_name"))
    .join(ProjectMember, ProjectMember.user_id == User.id)
    .join(Project, Project.id == ProjectMember.project_id)
    .where(
        ProjectMember.project_id.in_(
            select(ProjectMember.project_id)
            .where(ProjectMember.user_id == bindparam("user_id"))
            .scalar_subquery()
        ),
        ProjectMember.device_mail.is_(True),
        ProjectMember.role.in_(_DEVELOPERS),
        ProjectMember.user_id != bindparam("user_id"),
    )
    .order_by(User.email, Project.name)
)


async def own_devices(reads: Reads, user_id: str) -> list[DeviceRecord]:
    """A person's devices, in the order they first enrolled."""
    return [DEVICE.of(row) for row in await reads.all(_OWN_DEVICES, {"user_id": user_id})]


async def device_by_id(reads: Reads, device_id: str) -> DeviceRecord | None:
    row = await reads.first(_DEVICE, {"device_id": device_id})
    return DEVICE.of(row) if row is not None else None


async def device_mail_of(reads: Reads, access: ProjectAccess) -> bool:
    """Whether the caller of `access` gets a mail per device enrolled in its project."""
    params = {"project_id": access.project.id, "user_id": access.caller.user.id}
    return bool(await reads.scalar(_DEVICE_MAIL, params))


class DeviceService:
    def __init__(self, db: AsyncSession, now: datetime, mail: MailOutbox, public_url: str) -> None:
        self.db = db
        self.now = now
        self.mail = mail
        self.public_url = public_url
        self.reads = Reads.within(db)

    async def enroll(self, owner_id: str, described: DeviceDescription) -> Enrolled:
        """Record the device as `owner_id`'s: a new row, or the UDID's row updated. Its name
        stays the one its owner gave it if they enroll it again. Then every project of the owner
        hears of it.

        A device someone else enrolled moves to `owner_id` (a phone handed on) only if the
        answer names the serial number it was recorded with (or none was recorded): the
        answer's signature proves nothing of the device (devices/cms.py), and UDIDs are no
        secret (every ad-hoc build's profile lists them to whoever downloads it), while a serial
        number is shown only to the device's holder and the developers of their projects.
        409 `device_enrolled_elsewhere` otherwise."""
        before = await self.reads.first(_DEVICE_BY_UDID, {"udid": described.udid})
        statement = insert_of(self.db, Device).values(
            id=new_id("dev"),
            user_id=owner_id,
            udid=described.udid,
            name=described.name,
            model=described.product,
            os_version=described.version,
            platform=described.platform,
            serial=described.serial,
            enrolled_at=self.now,
            last_seen_at=self.now,
        )
        new: Any = statement.excluded  # type: ignore[attr-defined]
        same_owner = Device.user_id == new.user_id
        # One statement, whoever enrolls the same UDID at the same moment: the row is updated,
        # never a second one inserted (nor a unique-constraint error answered); or left as it
        # is, someone else's, for an answer that does not show the device's serial number.
        await self.db.execute(
            statement.on_conflict_do_update(  # type: ignore[attr-defined]
                index_elements=[Device.udid],
                where=or_(same_owner, Device.serial.is_(None), Device.serial == new.serial),
                set_={
                    "user_id": new.user_id,
                    "name": case((same_owner, Device.name), else_=new.name),
                    "model": new.model,
                    "os_version": new.os_version,
                    "platform": new.platform,
                    "serial": new.serial,
                    "enrolled_at": case((same_owner, Device.enrolled_at), else_=new.enrolled_at),
                    "last_seen_at": new.last_seen_at,
                },
            )
        )
        row = await self.reads.first(_DEVICE_BY_UDID, {"udid": described.udid})
        assert row is not None  # written just now, in this transaction
        if row["user_id"] != owner_id:
            raise Conflict(
                "This device is registered to another account on this server, and its answer "
                "does not name the serial number it was registered with. If the device is yours "
                "now, whoever registered it first removes it from their account (their "
                "devices, on their account page); then register it again",
                code="device_enrolled_elsewhere",
            )
        device = DEVICE.of(row)
        reenrolled = before is not None and before["user_id"] == owner_id
        await self._tell(device, reenrolled=reenrolled)
        return Enrolled(device, reenrolled)

    async def _tell(self, device: DeviceRecord, *, reenrolled: bool) -> None:
        """A `device.enrolled` event to each project of the owner, and a mail to each of their
        developers who asked for one (for a device new to its owner)."""
        tester = await user_by_id(self.reads, device.user_id)
        assert tester is not None  # the challenge's user, whose deletion deletes the challenge
        shown = device_schema(device).model_dump(mode="json", by_alias=True)
        data = {
            **shown,
            "tester": {"id": tester.id, "name": tester.name, "email": tester.email},
            "reenrolled": reenrolled,
        }
        projects = await self.reads.all(_PROJECTS_OF, {"user_id": device.user_id})
        for project in projects:
            await webhook_events.device_enrolled(self.db, project["id"], data, self.now)
        if reenrolled:
            return
        url = self.public_url
        by_address: dict[str, list[dict[str, str]]] = {}
        for row in await self.reads.all(_MAILED, {"user_id": device.user_id}):
            named = {"name": row["project_name"], "url": project_url(url, row["project_id"])}
            by_address.setdefault(row["email"], []).append(named)
        who = tester.name or tester.email
        for address, projects_named in by_address.items():
            message = render(
                "device_enrolled",
                address,
                f"{who} enrolled a device: {device.name}",
                tester=who,
                tester_email=tester.email,
                device=device,
                platform=platform_word(device.platform),
                projects=projects_named,
            )
            try:
                self.mail.send(self.db, message, self.now)
            except UnmailableAddress:
                continue  # an address stored before today's rules: the others are told

    async def rename(self, owner_id: str, device_id: str, name: str) -> DeviceRecord:
        """404 for a device that is not the caller's (someone else's included)."""
        changed = await self.db.execute(
            update(Device)
            .where(Device.id == device_id, Device.user_id == owner_id)
            .values(name=name)
            .execution_options(synchronize_session=False)
        )
        if not changed.rowcount:  # type: ignore[attr-defined]
            raise _not_found()
        device = await device_by_id(self.reads, device_id)
        assert device is not None
        return device

    async def delete(self, owner_id: str, device_id: str) -> None:
        """The device is forgotten (its registrations with Apple in projects' records too); it
        can enroll again. 404 for a device that is not the caller's."""
        deleted = await self.db.execute(
            delete(Device)
            .where(Device.id == device_id, Device.user_id == owner_id)
            .execution_options(synchronize_session=False)
        )
        if not deleted.rowcount:  # type: ignore[attr-defined]
            raise _not_found()

    async def set_device_mail(self, access: ProjectAccess, wanted: bool) -> bool:
        """The caller's wish for a mail per device enrolled in the project (a developer or
        higher: checked by the route's access)."""
        await self.db.execute(
            update(ProjectMember)
            .where(
                ProjectMember.project_id == access.project.id,
                ProjectMember.user_id == access.caller.user.id,
            )
            .values(device_mail=wanted)
            .execution_options(synchronize_session=False)
        )
        return wanted
