"""What the console's device tests share: ad-hoc .ipa files whose profile lists the UDIDs a test
names, and devices enrolled by writing their rows (the enrollment itself is
test_enrollment*.py's)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.db.engine import create_engine
from buildbay.devices.enums import platform_of_product
from buildbay.devices.models import BuildProfileDevice, Device
from buildbay.ids import new_id
from tests.builds.test_metadata import INFO, ipa, profile

# UDIDs as devices give them: an iPhone since the XS (8-16), an older iPad (40 hex digits).
TESS_IPHONE = "00008110-000A1C2E3F44801E"
TESS_IPAD = "0123456789ABCDEF0123456789ABCDEF01234567"
DAN_IPHONE = "00008030-001A35E22E88802E"
OLGA_IPHONE = "00008120-0011223344556677"
ENROLLED_AT = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


def adhoc_ipa(udids: list[str], version: str = "2.4.0", number: str = "812",
              kind: str = "ad-hoc") -> bytes:  # fmt: skip
    """An .ipa whose embedded profile is ad-hoc or development for `udids` (enterprise or
    app-store: for any device, `udids` unused)."""
    fields: dict[str, Any] = {"Entitlements": {"get-task-allow": kind == "development"}}
    if kind == "enterprise":
        fields["ProvisionsAllDevices"] = True
    elif kind != "app-store":
        fields["ProvisionedDevices"] = udids
    info = INFO | {"CFBundleShortVersionString": version, "CFBundleVersion": number}
    return ipa(info, extra={"embedded.mobileprovision": profile(**fields)}).getvalue()


def device_row(user_id: str, udid: str, name: str, model: str = "iPhone15,2") -> Device:
    return Device(
        id=new_id("dev"), user_id=user_id, udid=udid, name=name, model=model,
        os_version="21F90", platform=platform_of_product(model), serial=None,
        enrolled_at=ENROLLED_AT, last_seen_at=ENROLLED_AT,
    )  # fmt: skip


async def enroll(db: AsyncSession, user_id: str, udid: str, name: str,
                 model: str = "iPhone15,2") -> str:  # fmt: skip
    """A device of `user_id`'s, as an enrollment would have recorded it; its id."""
    row = device_row(user_id, udid, name, model)
    db.add(row)
    await db.flush()
    return row.id


async def enroll_at(database_url: str, user_id: str, udid: str, name: str,
                    model: str = "iPhone15,2") -> None:  # fmt: skip
    """`enroll`, on the database of a server the test reaches over HTTP only."""
    engine = create_engine(database_url)
    try:
        async with AsyncSession(engine) as db:
            await enroll(db, user_id, udid, name, model)
            await db.commit()
    finally:
        await engine.dispose()


async def forget_profile(db: AsyncSession, build_id: str) -> None:
    """The build as verified before profiles' UDIDs were kept (issue 37): none stored."""
    await db.execute(delete(BuildProfileDevice).where(BuildProfileDevice.build_id == build_id))


async def rename(db: AsyncSession, device_id: str, name: str) -> None:
    await db.execute(update(Device).where(Device.id == device_id).values(name=name))
