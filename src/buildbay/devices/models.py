from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString
from buildbay.devices.enums import DevicePlatform


class Device(Base):
    """A tester's iPhone, iPad or Mac, as it described itself when it enrolled.

    A UDID is one row on the whole server: enrolling it again (by its owner, or by someone it
    was handed to, who must hold it to enroll it) updates the row, owner included, so a
    project's device list never shows one phone twice."""

    __tablename__ = "devices"
    __table_args__ = (Index("ix_devices_user_id_id", "user_id", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    udid: Mapped[str] = mapped_column(String(40), unique=True)  # devices/enums.normalise_udid
    name: Mapped[str] = mapped_column(String(100))  # DEVICE_NAME, or the tester's own
    model: Mapped[str] = mapped_column(String(64))  # PRODUCT: iPhone14,2
    os_version: Mapped[str] = mapped_column(String(32))  # VERSION: the build, 21E236
    platform: Mapped[DevicePlatform] = mapped_column(EnumString(DevicePlatform))
    serial: Mapped[str | None] = mapped_column(String(64))
    enrolled_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]


class DeviceChallenge(Base):
    """A profile service's challenge: the one enrollment it allows, for one person, within an
    hour. Stored as the token's hash; `used_at` is set by the enrollment that took it."""

    __tablename__ = "device_challenges"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # The build whose install page the tester came from, to lead them back to it.
    build_id: Mapped[str | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None] = mapped_column(default=None)


class BuildProfileDevice(Base):
    """A UDID in an ad-hoc or development .ipa's provisioning profile (`ProvisionedDevices`),
    stored at verify, upper case: which enrolled devices a build installs on is a join."""

    __tablename__ = "build_profile_devices"

    build_id: Mapped[str] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True
    )
    udid: Mapped[str] = mapped_column(String(40), primary_key=True)


class AppleApiKey(Base):
    """A project's App Store Connect API key, to register its testers' devices with Apple.
    The .p8 private key is encrypted at rest (a key derived from BUILDBAY_SECRET_KEY) and never
    returned by any API."""

    __tablename__ = "apple_api_keys"

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    key_id: Mapped[str] = mapped_column(String(32))
    issuer_id: Mapped[str] = mapped_column(String(64))
    private_key_encrypted: Mapped[bytes] = mapped_column(LargeBinary)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]


class AppleDeviceRegistration(Base):
    """A device registered with Apple through a project's key (`POST /v1/devices` answered
    201, or 409: already registered)."""

    __tablename__ = "apple_device_registrations"

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    device_id: Mapped[str] = mapped_column(
        ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True
    )
    apple_device_id: Mapped[str | None] = mapped_column(String(64))  # Apple's id, when it said
    registered_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    registered_at: Mapped[datetime]
