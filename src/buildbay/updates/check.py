"""The update check: which build of its channel an app should update to, if any.

Read-only but for one thing: the install page it points to is a live install link of the build
(builds/install.py), created in the request's unit of work the first time a build is offered,
and again when its link has less than LINK_MIN_LEFT to live.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from packaging.version import Version
from sqlalchemy import bindparam, or_, select

from buildbay.applications.models import Application, UpdateKey
from buildbay.builds.extras import LIVE_LINK_COLUMNS, live_link_of
from buildbay.builds.install import InstallLinkReads, InstallLinks
from buildbay.builds.metadata import PLATFORM_FILES, platform_of_name, suffix_of
from buildbay.builds.models import Build, BuildChannel, Channel
from buildbay.builds.reads import BUILD
from buildbay.builds.records import BuildRecord
from buildbay.db.reads import Reads
from buildbay.distribution.visibility import DISTRIBUTED_TO_EVERYONE
from buildbay.errors import NotFound, ValidationFailed
from buildbay.storage.base import Storage
from buildbay.updates.published import CHANNEL, offered_on_channel
from buildbay.updates.versions import app_version, os_version

MAX_CANDIDATES = 500  # the newest ready builds of a channel that a check looks at
LINK_HOURS = 24 * 7  # the life of an install link the check creates
LINK_MIN_LEFT = timedelta(days=1)  # a link offered lives at least this long after the check
# Signed file addresses are made per time slot, so that the answer (and its ETag) stays the same
# within one: revalidating clients get 304s, and an address given is good for the whole TTL.
URL_SLOT_SECONDS = 300


@dataclass(frozen=True, slots=True)
class KeyOwner:
    application_id: str
    project_id: str
    platform: str  # the application's (applications/enums.py `Platform`)


@dataclass(frozen=True, slots=True)
class Caller:
    """What the app says about itself."""

    channel: str
    version_code: int | None
    version_name: str | None
    platform: str | None
    os: str | None
    # A stable id of the installed copy (its own, random, kept across updates): what puts it
    # in or out of a build's staged rollout. None: only builds rolled out to every install.
    install_id: str | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ready build of the channel, as far as choosing among them needs it (the offer reads
    the chosen one in full)."""

    build_id: str
    file_name: str
    metadata: dict[str, Any]
    mandatory: bool
    version_code: int | None
    version: Version | None
    rollout_percent: int = 100  # on the caller's channel

    @property
    def version_name(self) -> str | None:
        name = self.metadata.get("versionName") or self.metadata.get("shortVersion")
        return name if isinstance(name, str) else None


@dataclass(frozen=True, slots=True)
class Offer:
    build: BuildRecord
    version_name: str | None
    version_code: int | None
    install_url: str
    download_url: str


@dataclass(frozen=True, slots=True)
class Answer:
    offer: Offer | None
    mandatory: bool


_KEY = (
    select(
        UpdateKey.application_id, UpdateKey.expires_at, Application.project_id, Application.platform
    )
    .join(Application, Application.id == UpdateKey.application_id)
    .where(UpdateKey.key == bindparam("key"))
)
# The channel's offered builds (updates/published.py: the feeds read by the same rule).
_CANDIDATES = (
    offered_on_channel(
        Build.id,
        Build.file_name,
        Build.metadata_,
        Build.mandatory,
        Build.version_code,
        BuildChannel.rollout_percent,
    )
    .order_by(Build.id.desc())
    .limit(MAX_CANDIDATES)
)
# A caller that sends its versionCode is offered only builds with a higher one, or without one
# (compared by version name): the others need not be read. Most checks find their app up to
# date, and then read nothing.
_CANDIDATES_NEWER_BY_CODE = _CANDIDATES.where(
    or_(Build.version_code > bindparam("version_code"), Build.version_code.is_(None))
)
# The offered build with its live link, in one statement (`now` bound).
_BUILD = select(*BUILD.columns, *LIVE_LINK_COLUMNS).where(Build.id == bindparam("build_id"))


@dataclass(frozen=True, slots=True)
class Release:
    """Where a build is published and whether update checks offer it there (the console's
    build page says so)."""

    channels: list[str]  # by name
    to_everyone: bool  # distributed to `everyone`: the check offers it on its channels
    rollouts: dict[str, int] = field(default_factory=dict)  # each channel's percentage

    @property
    def offered_on(self) -> list[str]:
        return self.channels if self.to_everyone else []


_CHANNELS_OF_BUILD = (
    select(Channel.name, BuildChannel.rollout_percent)
    .join(BuildChannel, BuildChannel.channel_id == Channel.id)
    .where(BuildChannel.build_id == bindparam("build_id"))
    .order_by(Channel.name)
)
_TO_EVERYONE = select(DISTRIBUTED_TO_EVERYONE).where(Build.id == bindparam("build_id"))


async def release_of(reads: Reads, build_id: str) -> Release:
    rows = await reads.all(_CHANNELS_OF_BUILD, {"build_id": build_id})
    to_everyone = await reads.scalar(_TO_EVERYONE, {"build_id": build_id})
    rollouts = {row["name"]: row["rollout_percent"] for row in rows}
    return Release(list(rollouts), bool(to_everyone), rollouts)


def unknown_key() -> NotFound:
    return NotFound(
        "No application has this update key (a rotated key answers for 7 days)",
        code="unknown_update_key",
    )


async def key_owner(reads: Reads, key: str, now: datetime) -> KeyOwner:
    """The application a key names: its current key, or one rotated less than 7 days ago."""
    owner, _ = await key_owner_until(reads, key, now)
    return owner


async def key_owner_until(
    reads: Reads, key: str, now: datetime
) -> tuple[KeyOwner, datetime | None]:
    """`key_owner`, and when the key stops naming it (a rotated key's expiry; None: never)."""
    row = await reads.first(_KEY, {"key": key})
    if row is None or (row["expires_at"] is not None and row["expires_at"] <= now):
        raise unknown_key()
    owner = KeyOwner(row["application_id"], row["project_id"], str(row["platform"]))
    return owner, row["expires_at"]


def unknown_channel(channel: str) -> NotFound:
    return NotFound(
        f'The application has no release channel named "{channel}": check the channel the app '
        "sends (its channels are listed on the application's page)",
        code="unknown_channel",
    )


# No device installs an app bundle: Google Play makes APKs of it.
NOT_INSTALLABLE = frozenset({"aab"})
MOBILE = frozenset(PLATFORM_FILES)


def device_platform(caller: Caller, owner: KeyOwner) -> str | None:
    """The platform of the device asking: the one it says, else its application's, if that is
    one platform (not `other`, whose builds are all of one unknown kind: an application of
    platform `other` becomes `android` or `ios` with its first .apk or .ipa)."""
    if caller.platform:
        return caller.platform.strip().lower()
    return owner.platform if owner.platform != "other" else None


def build_platform(candidate: Candidate, owner: KeyOwner) -> str | None:
    """The platform a build's file installs on: by its name (.apk, .ipa), else its
    application's when that is a platform of its own (a macOS application's .dmg); None for a
    file of unknown kind in an application of platform `other`."""
    by_name = platform_of_name(candidate.file_name)
    if by_name is not None or owner.platform in MOBILE or owner.platform == "other":
        return by_name
    return owner.platform


def installable(candidate: Candidate, owner: KeyOwner, device: str | None) -> bool:
    """The file installs on the device, as far as its platform is known: never an app bundle;
    an .apk only on Android, an .ipa only on iOS, a file of another kind on no phone."""
    if suffix_of(candidate.file_name) in NOT_INSTALLABLE:
        return False
    if device is None:
        return True
    platform = build_platform(candidate, owner)
    if platform is None:
        return device not in MOBILE
    return platform == device


def compatible(candidate: Candidate, caller: Caller) -> bool:
    """The build installs on the caller's OS version, as far as it is known: an Android
    build's minSdk against the API level, an iOS build's MinimumOSVersion against the iOS
    version."""
    metadata = candidate.metadata
    running = os_version(caller.os)
    if running is None:
        return True
    min_sdk, min_os = metadata.get("minSdk"), metadata.get("minOs")
    if isinstance(min_sdk, int):
        return running >= Version(str(min_sdk))
    if isinstance(min_os, str) and (needed := os_version(min_os)) is not None:
        return running >= needed
    return True


def rollout_bucket(build_id: str, install_id: str) -> int:
    """The install's bucket (0-99) for the build's staged rollout: a build at p percent is
    offered to the installs whose bucket is below p. Stable (SHA-256, not Python's salted
    hash()), so raising p keeps every install already offered the build and adds others; and
    drawn afresh per build, so the installs that try one build first are not always the same."""
    digest = hashlib.sha256(f"{build_id}\n{install_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100


def reaches(candidate: Candidate, caller: Caller) -> bool:
    """The build's rollout on the caller's channel includes the caller: every install at 100
    percent, else those whose bucket is below its percentage (none without an installId)."""
    if candidate.rollout_percent >= 100:
        return True
    if caller.install_id is None:
        return False
    return rollout_bucket(candidate.build_id, caller.install_id) < candidate.rollout_percent


class UpdateCheck:
    def __init__(self, caller: Caller, owner: KeyOwner) -> None:
        if caller.version_code is None and app_version(caller.version_name) is None:
            raise ValidationFailed(
                "Send versionCode (a whole number) or versionName (a version such as 1.4.2): "
                "the check offers only builds newer than the caller's",
                code="version_required",
            )
        self.caller = caller
        self.owner = owner
        self.device = device_platform(caller, owner)
        self.caller_version = app_version(caller.version_name)

    def newer(self, candidate: Candidate) -> bool:
        """By versionCode when both sides have one, else by version name as a version."""
        if self.caller.version_code is not None and candidate.version_code is not None:
            return candidate.version_code > self.caller.version_code
        if self.caller_version is not None and candidate.version is not None:
            return candidate.version > self.caller_version
        return False

    def choose(self, candidates: list[Candidate]) -> tuple[Candidate | None, bool]:
        """The newest build newer than the caller that its device can install and whose
        rollout reaches it (else an older one that does: a build rolled out to part of the
        channel leaves the others with the build before it), and whether any newer one it
        could install (that one, or one it skips over) is mandatory. A mandatory build newer
        than the offer and out of the caller's rollout does not count: it has not reached it."""
        newer = [
            c for c in candidates
            if self.newer(c) and installable(c, self.owner, self.device)
        ]  # fmt: skip
        offered = [c for c in newer if reaches(c, self.caller) and compatible(c, self.caller)]
        if not offered:
            return None, False
        order = functools.partial(_order, self.caller.version_code is not None)
        best = max(offered, key=functools.cmp_to_key(order))
        mandatory = any(c.mandatory for c in newer if reaches(c, self.caller) or order(c, best) < 0)
        return best, mandatory


def _order(by_code: bool, a: Candidate, b: Candidate) -> int:
    """Which of two builds is the newer, compared as the caller was: by versionCode where
    both have one (if the caller sent one), else by version, else the later upload."""
    pairs: list[tuple[Any, Any]] = [(a.version, b.version)]
    if by_code:
        pairs.insert(0, (a.version_code, b.version_code))
    for x, y in pairs:
        if x is not None and y is not None and x != y:
            return 1 if x > y else -1
    return (a.build_id > b.build_id) - (a.build_id < b.build_id)


async def candidates(reads: Reads, application_id: str, caller: Caller) -> list[Candidate]:
    """The channel's ready builds distributed to `everyone` that may be newer than the caller,
    newest first."""
    params: dict[str, Any] = {"application_id": application_id, "channel": caller.channel}
    statement = _CANDIDATES
    if caller.version_code is not None:
        statement, params["version_code"] = _CANDIDATES_NEWER_BY_CODE, caller.version_code
    found = []
    for row in await reads.all(statement, params):
        metadata = row["metadata"] or {}
        name = metadata.get("versionName") or metadata.get("shortVersion")
        version = app_version(name if isinstance(name, str) else None)
        found.append(
            Candidate(
                row["id"], row["file_name"], metadata, row["mandatory"], row["version_code"],
                version, row["rollout_percent"],
            )
        )  # fmt: skip
    return found


def _channel_of(owner: KeyOwner, caller: Caller) -> dict[str, Any]:
    return {"application_id": owner.application_id, "channel": caller.channel}


def url_expiry(now: datetime, ttl_seconds: int) -> datetime:
    """The expiry of a file address made now: the end of the current slot plus the TTL."""
    stamp = int(now.timestamp())
    slot_end = stamp - stamp % URL_SLOT_SECONDS + URL_SLOT_SECONDS
    return datetime.fromtimestamp(slot_end, tz=now.tzinfo) + timedelta(seconds=ttl_seconds)


async def answer(
    reads: Reads,
    owner: KeyOwner,
    caller: Caller,
    links: InstallLinkReads,
    new_links: Callable[[], InstallLinks],
    storage: Storage,
    url_ttl_seconds: int,
) -> Answer:
    """The offer for `caller`. `new_links` gives install links on the request's unit of work,
    which the check uses only when the offered build needs a new one (and never commits);
    `url_ttl_seconds`: the life of the file address offered, past its time slot."""
    rule = UpdateCheck(caller, owner)
    found = await candidates(reads, owner.application_id, caller)
    # A channel with candidates exists: only an empty answer (the usual one) asks.
    if not found and await reads.first(CHANNEL, _channel_of(owner, caller)) is None:
        raise unknown_channel(caller.channel)
    best, mandatory = rule.choose(found)
    if best is None:
        return Answer(None, False)
    now = links.now
    row = await reads.first(_BUILD, {"build_id": best.build_id, "now": now})
    if row is None:
        return Answer(None, False)  # deleted since it was read
    build = BUILD.of(row)
    link = live_link_of(row)
    if link is None or link.expires_at - now < LINK_MIN_LEFT:
        link_url = await _new_link(new_links(), build)
        if link_url is None:
            return Answer(None, False)  # deleted since it was read
    else:
        link_url = links.url(link)
    download_url = await storage.download_url(
        build.storage_key,
        build.file_name,
        url_expiry(now, url_ttl_seconds),
        build.storage_version,
    )
    offer = Offer(build, best.version_name, best.version_code, link_url, download_url)
    return Answer(offer, mandatory)


async def _new_link(links: InstallLinks, build: BuildRecord) -> str | None:
    """A live install link of the build with LINK_MIN_LEFT to live at least (the reuse rule
    of `InstallLinks.share`). None if the build is gone."""
    try:
        link = await links.share(build, None, LINK_HOURS, min_left=LINK_MIN_LEFT)
    except NotFound:
        return None  # deleted since it was read
    return links.reads.url(link)
