"""Step 3 of an upload as the API offers it: verify, then what the verify asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from buildbay.audit.record import actor_of
from buildbay.builds.enums import BuildStatus
from buildbay.builds.install import InstallLinks
from buildbay.builds.records import BuildRecord
from buildbay.builds.service import BuildService
from buildbay.builds.source import BuildSource
from buildbay.builds.updaters import UpdaterFields
from buildbay.distribution.service import Distributor
from buildbay.invitations.caps import InvitationsLimited
from buildbay.projects.authorization import ApplicationAccess


@dataclass(frozen=True, slots=True)
class Verify:
    """What a verify asks: the build, its notes, channels and mandatory flag, and then an
    install link for `link_hours` (None: none) and a distribution (None: none)."""

    build_id: str
    notes: str | None
    channels: list[str] | None
    mandatory: bool
    link_hours: int | None = None
    distribute: Distribution | None = None
    updater: UpdaterFields | None = None  # what the desktop updaters need of CI
    source: BuildSource | None = None  # where the build came from


@dataclass(frozen=True, slots=True)
class Distribution:
    groups: Sequence[str]
    emails: Sequence[str]
    notify: bool


async def verify_and_release(
    builds: BuildService,
    links: InstallLinks,
    distributor: Distributor,
    access: ApplicationAccess,
    asked: Verify,
) -> BuildRecord:
    """Verify the upload. Once the build is ready, give it its install link (the live one
    if it has one: a retried verify makes no second) and distribute it, as asked; a build
    whose check was left to a job (`processing`) gets neither. A distribution that names
    e-mails of non-members needs the rights to invite (checked first: nothing is verified
    without them); one that the invitation caps cut short answers 429 `invitation_limit`,
    the build verified and what was distributed standing, and said."""
    if asked.distribute is not None:
        await distributor.check_may_invite(access, asked.distribute.emails)
    build = await builds.verify(
        access.application,
        asked.build_id,
        asked.notes,
        asked.channels,
        asked.mandatory,
        asked.updater,
        asked.source,
        by=actor_of(access),
    )
    if build.status is not BuildStatus.READY:
        return build
    if asked.link_hours is not None:
        await links.share(build, access.caller.user, asked.link_hours)
    if (wanted := asked.distribute) is not None:
        # Named channels at verify are where the build goes; none named, reaching everyone
        # here puts it on `default` as the application's own groups would have.
        result = await distributor.distribute(
            access, build, wanted.groups, wanted.emails, wanted.notify,
            publish=asked.channels is None,
        )  # fmt: skip
        if result.admission.capped:
            raise InvitationsLimited(
                result.admission, result.invited, build={"id": build.id, "status": "ready"},
                distribution=result.summary(),
            )  # fmt: skip
    return build
