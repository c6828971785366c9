"""The builds a feed lists: those the update check offers on the channel (one rule,
updates/published.py), with what the desktop updaters need of them."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from packaging.version import Version
from sqlalchemy import bindparam, null, select

from buildbay.applications.models import Application
from buildbay.builds.metadata import DESKTOP_FILES, suffix_of
from buildbay.builds.models import Build, BuildChannel
from buildbay.db.reads import Reads
from buildbay.errors import NotFound
from buildbay.updates.check import KeyOwner, unknown_channel
from buildbay.updates.published import CHANNEL, offered_on_channel
from buildbay.updates.versions import app_version

MAX_BUILDS = 500  # the newest offered builds of a channel that a feed looks at
DEFAULT_CHANNEL = "default"

_PLATFORM_NAMES = {"macos": "macOS", "windows": "Windows", "linux": "Linux"}


@dataclass(frozen=True, slots=True)
class FeedBuild:
    id: str
    file_name: str
    file_size: int
    sha512: str | None
    notes: str | None
    metadata: dict[str, Any]
    mandatory: bool
    version_code: int | None
    verified_at: datetime | None
    architecture: str | None
    sparkle_ed_signature: str | None
    rollout_percent: int

    @property
    def suffix(self) -> str:
        return suffix_of(self.file_name)

    @property
    def version(self) -> str | None:
        """As people read it (CFBundleShortVersionString, the package's version)."""
        value = self.metadata.get("shortVersion") or self.metadata.get("versionName")
        return value if isinstance(value, str) else None

    @property
    def build_number(self) -> str | None:
        """CFBundleVersion where the file says it, else the version code, else the version."""
        value = self.metadata.get("buildNumber")
        if isinstance(value, str):
            return value
        return str(self.version_code) if self.version_code is not None else self.version


_COLUMNS = (
    Build.id, Build.file_name, Build.file_size, Build.sha512, Build.metadata_,
    Build.mandatory, Build.version_code, Build.architecture, Build.sparkle_ed_signature,
    BuildChannel.rollout_percent,
)  # fmt: skip


def _statement(limit: int, full: bool) -> Any:
    # A feed that describes one version (electron-updater's) reads the channel's builds
    # without their notes and dates, and those of the one build it describes alone
    # (`release_of`): not a channel's worth of text, nor a date parsed per row.
    extra = (
        (Build.notes, Build.verified_at)
        if full
        else (null().label("notes"), null().label("verified_at"))
    )
    return offered_on_channel(*_COLUMNS, *extra).order_by(Build.id.desc()).limit(limit)


_NEWEST = {
    (limit, full): _statement(limit, full) for limit in (20, MAX_BUILDS) for full in (True, False)
}
_RELEASE = select(Build.verified_at, Build.notes).where(Build.id == bindparam("build_id"))


async def release_of(reads: Reads, build: FeedBuild) -> FeedBuild:
    """`build` with its notes and publication date (read without them: `full=False`)."""
    row = await reads.first(_RELEASE, {"build_id": build.id})
    if row is None:  # deleted since it was read: described without them
        return build
    return dataclasses.replace(build, verified_at=row["verified_at"], notes=row["notes"])


_NAME = select(Application.name).where(Application.id == bindparam("application_id"))


async def application_name(reads: Reads, owner: KeyOwner) -> str:
    return str(await reads.scalar(_NAME, {"application_id": owner.application_id}) or "")


def channel_name(name: str) -> str:
    """The channel a feed's name means: electron-updater's `latest` is the `default` one."""
    return DEFAULT_CHANNEL if name == "latest" else name


async def offered_builds(
    reads: Reads, owner: KeyOwner, channel: str, limit: int = MAX_BUILDS, *, full: bool = True
) -> list[FeedBuild]:
    """The channel's offered builds, newest upload first (404 `unknown_channel` for a channel
    the application does not have); without `full`, their `notes` and `verified_at` None."""
    params = {"application_id": owner.application_id, "channel": channel}
    known = _NEWEST.get((limit, full))
    statement = known if known is not None else _statement(limit, full)
    rows = await reads.all(statement, params)
    if not rows and await reads.first(CHANNEL, params) is None:
        raise unknown_channel(channel)
    return [
        FeedBuild(
            row["id"], row["file_name"], row["file_size"], row["sha512"], row["notes"],
            row["metadata"] or {}, row["mandatory"], row["version_code"], row["verified_at"],
            row["architecture"], row["sparkle_ed_signature"], row["rollout_percent"],
        )
        for row in rows
    ]  # fmt: skip


def platform_name(platform: str) -> str:
    return _PLATFORM_NAMES.get(platform, platform)


def require_desktop(owner: KeyOwner) -> None:
    """404 `not_a_desktop_application` for a phone's (or an `other`) application's key."""
    if owner.platform not in DESKTOP_FILES:
        raise NotFound(
            f"This update key belongs to {_a(owner.platform)} application: the feeds are for "
            "macOS, Windows and Linux applications (an app on a phone asks "
            "GET /api/updates/check)",
            code="not_a_desktop_application",
        )


def require_platform(owner: KeyOwner, platform: str, feed: str) -> None:
    """404 `wrong_feed` when `feed` (Sparkle's, App Installer's) is not one for the
    application's platform."""
    require_desktop(owner)
    if owner.platform != platform:
        raise NotFound(
            f"{feed} feeds are for {platform_name(platform)} applications; this update key "
            f"belongs to a {platform_name(owner.platform)} one",
            code="wrong_feed",
        )


def _a(platform: str) -> str:
    names = {"android": "an Android", "ios": "an iOS", "other": "an `other`"}
    return names.get(platform, f"a {platform_name(platform)}")


def newest(builds: list[FeedBuild]) -> FeedBuild | None:
    """The newest by version (a later upload where versions are equal; a build whose version
    reads as one before any whose does not)."""
    return max(builds, key=_newness, default=None)


_NO_VERSION = Version("0")


def _newness(build: FeedBuild) -> tuple[bool, Version, str]:
    version = _version(build.version)
    return (version is not None, version or _NO_VERSION, build.id)


@functools.lru_cache(maxsize=4096)
def _version(name: str | None) -> Version | None:
    """app_version, remembered: a feed compares a channel's versions on every request, and
    they are the same from one request to the next."""
    return app_version(name)
