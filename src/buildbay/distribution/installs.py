"""Who installed what: every open of an install page and every download (through an install
link or the API) is an install event; a build's report tells, per person it reached, when they
were mailed, first opened their link and how often they downloaded it.

An event names its user when the caller is signed in (the API, the console); through an install
link it names the link, and, for a personal link (a tester's own: builds/install.py), its owner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.builds.records import BuildRecord
from buildbay.db.reads import Reads
from buildbay.distribution.models import BuildRecipient, InstallEvent, InstallEventKind
from buildbay.ids import new_id

# The user agent's platform, by the first of these words it holds (case-insensitive).
_PLATFORMS = (
    ("iphone", "ios"),
    ("ipad", "ios"),
    ("ipod", "ios"),
    ("android", "android"),
    ("windows", "windows"),
    ("macintosh", "macos"),
    ("mac os x", "macos"),
    ("cros", "chromeos"),
    ("linux", "linux"),
)


def platform_of(user_agent: str | None) -> str:
    """`ios`, `android`, `windows`, `macos`, `chromeos`, `linux` or `other`."""
    text = (user_agent or "").lower()
    for word, platform in _PLATFORMS:
        if word in text:
            return platform
    return "other"


async def record(
    db: AsyncSession,
    build: BuildRecord,
    kind: InstallEventKind,
    now: datetime,
    user_agent: str | None,
    *,
    user_id: str | None = None,
    link_id: str | None = None,
) -> None:
    """One open or download, in the request's unit of work."""
    db.add(
        InstallEvent(
            id=new_id("ins"),
            build_id=build.id,
            application_id=build.application_id,
            kind=kind,
            user_id=user_id,
            install_link_id=link_id,
            platform=platform_of(user_agent),
            at=now,
        )
    )
    await db.flush()


# -- reading --------------------------------------------------------------------------------------

_RECIPIENTS = (
    select(
        BuildRecipient.email,
        BuildRecipient.user_id,
        BuildRecipient.reached_at,
        BuildRecipient.notified_at,
        BuildRecipient.mail_error,
        BuildRecipient.install_link_id,
        User.name,
    )
    .outerjoin(User, User.id == BuildRecipient.user_id)
    .where(BuildRecipient.build_id == bindparam("build_id"))
    .order_by(BuildRecipient.email)
)
_EVENTS = (
    select(
        InstallEvent.kind,
        InstallEvent.user_id,
        InstallEvent.install_link_id,
        InstallEvent.platform,
        InstallEvent.at,
        User.email,
        User.name,
    )
    .outerjoin(User, User.id == InstallEvent.user_id)
    .where(InstallEvent.build_id == bindparam("build_id"))
    .order_by(InstallEvent.at)
)
_DOWNLOADS_SINCE = select(InstallEvent.at).where(
    InstallEvent.application_id == bindparam("application_id"),
    InstallEvent.kind == InstallEventKind.DOWNLOAD,
    InstallEvent.at >= bindparam("since"),
)


@dataclass
class TesterInstalls:
    email: str | None
    user_id: str | None
    name: str | None
    reached_at: datetime | None  # None: never reached (a developer who downloaded it)
    notified_at: datetime | None
    first_opened_at: datetime | None = None
    last_downloaded_at: datetime | None = None
    downloads: int = 0
    platforms: list[str] = field(default_factory=list)
    mail_error: str | None = None  # why their mail could not be sent


@dataclass
class InstallsReport:
    build_id: str
    testers: list[TesterInstalls]
    anonymous_opens: int
    anonymous_downloads: int

    @property
    def downloads_count(self) -> int:
        return self.anonymous_downloads + sum(t.downloads for t in self.testers)


async def installs_of(reads: Reads, build: BuildRecord) -> InstallsReport:
    """Per person: reached, notified, first opened, downloads; the rest as anonymous."""
    params = {"build_id": build.id}
    testers: list[TesterInstalls] = []
    by_user: dict[str, TesterInstalls] = {}
    by_link: dict[str, TesterInstalls] = {}
    for row in await reads.all(_RECIPIENTS, params):
        tester = TesterInstalls(row["email"], row["user_id"], row["name"], row["reached_at"],
                                row["notified_at"], mail_error=row["mail_error"])  # fmt: skip
        testers.append(tester)
        if row["user_id"]:
            by_user[row["user_id"]] = tester
        if row["install_link_id"]:
            by_link[row["install_link_id"]] = tester
    opens = downloads = 0
    for event in await reads.all(_EVENTS, params):
        whose = by_user.get(event["user_id"] or "") or by_link.get(event["install_link_id"] or "")
        if whose is None and event["user_id"] is not None:
            whose = by_user[event["user_id"]] = TesterInstalls(
                event["email"], event["user_id"], event["name"], None, None
            )
            testers.append(whose)
        is_open = event["kind"] is InstallEventKind.OPEN
        if whose is None:
            opens += is_open
            downloads += not is_open
            continue
        if is_open:
            whose.first_opened_at = whose.first_opened_at or event["at"]
        else:
            whose.downloads += 1
            whose.last_downloaded_at = event["at"]
        if event["platform"] not in whose.platforms:
            whose.platforms.append(event["platform"])
    return InstallsReport(build.id, testers, opens, downloads)


async def downloads_by_day(
    reads: Reads, application_id: str, today: date, days: int
) -> list[tuple[date, int]]:
    """The application's downloads on each of the last `days` days (UTC), oldest first."""
    first = today - timedelta(days=days - 1)
    since = datetime(first.year, first.month, first.day, tzinfo=UTC)
    counts = dict.fromkeys((first + timedelta(days=n) for n in range(days)), 0)
    for row in await reads.all(
        _DOWNLOADS_SINCE, {"application_id": application_id, "since": since}
    ):
        day = row["at"].astimezone(UTC).date()
        if day in counts:
            counts[day] += 1
    return list(counts.items())
