from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.builds.enums import BuildStatus, RemovalReason
from buildbay.db.base import Base, EnumString


class Build(Base):
    __tablename__ = "builds"
    __table_args__ = (
        Index("ix_builds_application_id_id", "application_id", "id"),
        Index("ix_builds_status_expires_at", "status", "expires_at"),
        Index("ix_builds_application_id_version_code_id", "application_id", "version_code", "id"),
        # A ready build of the same bytes (a duplicate upload: builds/duplicates.py).
        Index("ix_builds_application_id_sha256", "application_id", "sha256"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    application_id: Mapped[str] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    file_name: Mapped[str] = mapped_column(String(255))
    file_size: Mapped[int] = mapped_column(BigInteger)
    expected_sha256: Mapped[str | None] = mapped_column(String(64))
    sha256: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[BuildStatus] = mapped_column(
        EnumString(BuildStatus), default=BuildStatus.PENDING
    )
    notes: Mapped[str | None] = mapped_column(Text)
    storage_key: Mapped[str] = mapped_column(String(512), unique=True)
    # The object's version that verify checked, where the storage keeps versions (ObjectInfo).
    storage_version: Mapped[str | None] = mapped_column(String(1024))
    uploaded_by: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), index=True
    )
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    metadata_error: Mapped[str | None] = mapped_column(String(500))
    # The build's version as a number, for ?sort=version: an APK's or AAB's versionCode, an
    # .ipa's CFBundleVersion when it is a whole number (null otherwise).
    version_code: Mapped[int | None] = mapped_column(BigInteger)
    has_icon: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # An update check that finds a newer mandatory build on its channel says the update is
    # mandatory, even when it offers a newer build past it (updates/).
    mandatory: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    verified_at: Mapped[datetime | None]
    # A multipart upload (storage's `start_multipart`): the size of each part but the last, and
    # the storage's id of the upload. Both null for a build uploaded in one PUT.
    part_size: Mapped[int | None] = mapped_column(BigInteger)
    upload_id: Mapped[str | None] = mapped_column(String(1024))
    # Why a build `failed` (the background check's problem code, e.g. `checksum_mismatch`).
    failure_code: Mapped[str | None] = mapped_column(String(40))
    # For the desktop updaters' feeds (builds/updaters.py): the SHA-512 (base64, as
    # electron-updater reads it), set at verify beside the SHA-256; the architecture (`x64`,
    # `arm64`, `universal`), from verify's field or the file; Sparkle's EdDSA signature of the
    # file (base64), as CI's `sign_update` made it.
    sha512: Mapped[str | None] = mapped_column(String(88))
    architecture: Mapped[str | None] = mapped_column(String(16))
    sparkle_ed_signature: Mapped[str | None] = mapped_column(String(88))
    # electron-builder's `<file>.blockmap` (gzipped JSON of the file's blocks), uploaded beside
    # the file for electron-updater's differential download: stored under the build's key +
    # BLOCKMAP_SUFFIX (builds/blockmap.py), its size (electron-updater's `blockMapSize`) and
    # SHA-256 (its ETag) here. Null: the build has none.
    blockmap_size: Mapped[int | None] = mapped_column(BigInteger)
    blockmap_sha256: Mapped[str | None] = mapped_column(String(64))


class BuildIcon(Base):
    """The app icon a build's file carries, as a PNG any browser shows (kept out of `builds`,
    whose rows every list reads)."""

    __tablename__ = "build_icons"

    build_id: Mapped[str] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True
    )
    png: Mapped[bytes] = mapped_column(LargeBinary)


class InstallLink(Base):
    """A public install page for one build, reached by a signed link until it expires or is
    revoked (builds/install.py)."""

    __tablename__ = "install_links"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    build_id: Mapped[str] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"), index=True)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # A personal link's person (a distribution mail's, or a tester's own from the console): it
    # opens only while they can open the build (distribution/visibility.py), and what is done
    # through it is theirs. None: a shared link, which anyone holding it may open.
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class Channel(Base):
    """A release channel of an application (`default`, `beta`, ...): the builds published to
    it are what an update check on it offers."""

    __tablename__ = "channels"
    __table_args__ = (
        UniqueConstraint("application_id", "name", name="uq_channels_application_name"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    application_id: Mapped[str] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime]


class BuildChannel(Base):
    """A build published to a channel."""

    __tablename__ = "build_channels"

    channel_id: Mapped[str] = mapped_column(
        ForeignKey("channels.id", ondelete="CASCADE"), primary_key=True
    )
    build_id: Mapped[str] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    # The share of the channel's installs the build is offered to (staged rollout): 1-100.
    rollout_percent: Mapped[int] = mapped_column(SmallInteger, default=100, server_default="100")


class BuildEvent(Base):
    """Something done to a build, for its history (the console's build page): who did it
    (None: the server, or a member since deleted), when, what (`kind`, builds/history.py
    EventKind) and its facts (`detail`). Deleted with its build."""

    __tablename__ = "build_events"
    __table_args__ = (Index("ix_build_events_build_id_id", "build_id", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    build_id: Mapped[str] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"))
    at: Mapped[datetime]
    actor_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(40))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class RemovedBuild(Base):
    """A ready build that was deleted, remembered for REMOVED_BUILDS_KEPT_DAYS (builds/removed.py):
    the application's page lists the recent ones (what retention took, and who deleted what),
    and an install link of it still finds its application, to offer the tester a newer build."""

    __tablename__ = "removed_builds"
    __table_args__ = (
        Index("ix_removed_builds_application_id_removed_at", "application_id", "removed_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # the build's id
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    application_id: Mapped[str] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    file_name: Mapped[str] = mapped_column(String(255))
    version: Mapped[str | None] = mapped_column(String(255))  # as people read it
    reason: Mapped[RemovalReason] = mapped_column(EnumString(RemovalReason))
    removed_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    removed_at: Mapped[datetime]
    # Distributed to a group or a person: in testers' hands when it went.
    distributed: Mapped[bool] = mapped_column(Boolean)


class RemovedInstallLink(Base):
    """An install link of a removed build (its row went with the build): which build it was."""

    __tablename__ = "removed_install_links"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # the link's id
    build_id: Mapped[str] = mapped_column(
        ForeignKey("removed_builds.id", ondelete="CASCADE"), index=True
    )
