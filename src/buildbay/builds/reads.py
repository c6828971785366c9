"""Builds as read (db/reads.py): their records, the queries that give them, and what a reader
may do with one (its icon, a signed download address)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, Select, String, and_, bindparam, cast, func, or_, select
from sqlalchemy.engine import RowMapping

from buildbay.applications.models import Application
from buildbay.builds.enums import BuildStatus
from buildbay.builds.extras import EXTRA_COLUMNS, BuildExtras, extras_of
from buildbay.builds.models import Build, BuildIcon
from buildbay.builds.records import BuildRecord
from buildbay.config import Settings
from buildbay.db.reads import Reads, RecordOf
from buildbay.distribution.visibility import (
    DISTRIBUTED_TO_VIEWER,
    Viewer,
    not_distributed,
    viewer_params,
)
from buildbay.errors import Conflict, NotFound
from buildbay.ids import split_page
from buildbay.storage.base import PartInfo, Storage, UploadGone, part_bounds, parts_count

BUILD = RecordOf(BuildRecord, Build)


@dataclass(frozen=True, slots=True)
class ShownBuild:
    """A build and what the API shows beside it (extras.py)."""

    build: BuildRecord
    extras: BuildExtras


class BuildOrder(StrEnum):
    NEWEST = "newest"
    VERSION = "version"


@dataclass(frozen=True, slots=True)
class VersionFilter:
    """`?versionName=` and `?versionCode=`: an APK's own fields, or for an .ipa its
    CFBundleShortVersionString (`shortVersion`) and CFBundleVersion (`buildNumber`)."""

    name: str | None = None
    code: str | None = None


@dataclass(frozen=True, slots=True)
class SourceFilter:
    """`?branch=` (the branch verify was told, exactly) and `?commit=` (a commit, or its first
    7 or more hex digits)."""

    branch: str | None = None
    commit: str | None = None


@dataclass(frozen=True, slots=True)
class BuildQuery:
    """A page of an application's builds: newest first or by version, from a cursor's build
    on; of one status (else ready and processing ones: LISTED_BY_DEFAULT), version or search
    text, if asked; of the ready builds distributed to `viewer` (a tester), if given."""

    application_id: str
    limit: int
    after_id: str | None = None
    status: BuildStatus | None = None
    version: VersionFilter | None = None
    sort: BuildOrder = BuildOrder.NEWEST
    viewer: Viewer | None = None
    search: str | None = None
    source: SourceFilter | None = None

    @property
    def is_first_page(self) -> bool:
        """The first page, newest first, of the builds listed by default (the viewer's, for a
        tester)."""
        return (
            self.after_id is None
            and self.status is None
            and self.version is None
            and self.sort is BuildOrder.NEWEST
            and not self.search
            and self.source is None
        )


def _version_clauses(version: VersionFilter | None) -> list[ColumnElement[bool]]:
    if version is None:
        return []
    clauses = []
    for wanted, keys in (
        (version.name, ("versionName", "shortVersion")),
        (version.code, ("versionCode", "buildNumber")),
    ):
        if wanted is not None:
            # As text on both databases (an APK's versionCode is a number in the JSON).
            clauses.append(
                or_(*(cast(Build.metadata_[key].as_string(), String) == wanted for key in keys))
            )
    return clauses


def _source_clauses(source: SourceFilter | None) -> list[ColumnElement[bool]]:
    if source is None:
        return []
    clauses = []
    if source.branch is not None:
        clauses.append(Build.source_branch == source.branch)
    if source.commit is not None:
        prefix = source.commit.lower()
        # Commits are stored in lower-case hex, which sorts below "g" in every collation: the
        # range reads the index, LIKE keeps it exact whatever the database's collation says.
        clauses += [
            Build.source_commit >= prefix,
            Build.source_commit < prefix + "g",
            Build.source_commit.startswith(prefix, autoescape=True),
        ]
    return clauses


_VERSION_KEYS = ("versionName", "shortVersion", "versionCode", "buildNumber")


def _search_clause(text: str | None) -> list[ColumnElement[bool]]:
    """Builds whose file name, notes or version (name or code) hold `text`, in any case."""
    if not text:
        return []
    fields = [Build.file_name, Build.notes] + [
        cast(Build.metadata_[key].as_string(), String) for key in _VERSION_KEYS
    ]
    return [or_(*(field.icontains(text, autoescape=True) for field in fields))]


@dataclass(frozen=True, slots=True)
class StorageUsage:
    bytes: int
    builds: int


_USAGE = select(
    func.coalesce(func.sum(Build.file_size), 0).label("bytes"), func.count(Build.id).label("builds")
).where(
    Build.uploaded_by == bindparam("user_id"),
    or_(Build.status != BuildStatus.PENDING, Build.expires_at > bindparam("now")),
)


async def storage_usage(reads: Reads, user_id: str, now: datetime) -> StorageUsage:
    """What a user's builds take: every build they uploaded, and the pending ones whose upload
    link still works (their declared size is reserved from the link on; once it expires, the
    sweeper removes them and they no longer count)."""
    row = await reads.first(_USAGE, {"user_id": user_id, "now": now})
    assert row is not None  # an aggregate has one row
    return StorageUsage(int(row["bytes"]), int(row["builds"]))


# Built once: composing a statement per request costs more than the database takes to run it.
_PLATFORM_OF_APPLICATION = select(Application.platform).where(
    Application.id == bindparam("application_id")
)
_BUILDS = select(*BUILD.columns)
_BUILDS_OF_APPLICATION = _BUILDS.where(Build.application_id == bindparam("application_id"))
_BUILD_OF_APPLICATION = _BUILDS_OF_APPLICATION.where(Build.id == bindparam("build_id"))
# The same with what the API shows beside each build (extras.py), read in the same statement.
_SHOWN_OF_APPLICATION = _BUILDS_OF_APPLICATION.add_columns(*EXTRA_COLUMNS)
_SHOWN_BUILD_OF_APPLICATION = _BUILD_OF_APPLICATION.add_columns(*EXTRA_COLUMNS)
# What a list shows unless asked for a status: the builds that are there to install, and those
# being checked (a refused or abandoned upload is no row of a list; `?status=pending` finds it).
LISTED_BY_DEFAULT = (BuildStatus.READY, BuildStatus.PROCESSING)
_LISTED = Build.status.in_(LISTED_BY_DEFAULT)
_SHOWN_NEWEST_FIRST = (
    _SHOWN_OF_APPLICATION.where(_LISTED).order_by(Build.id.desc()).limit(bindparam("limit"))
)
# A tester sees what they can install: ready builds given to them, never a pending upload (nor
# the reason it was refused). Their first page, and whether they were given a build, built once.
_SEEN = and_(DISTRIBUTED_TO_VIEWER, Build.status == BuildStatus.READY)
_SHOWN_NEWEST_SEEN_FIRST = (
    _SHOWN_OF_APPLICATION.where(_SEEN).order_by(Build.id.desc()).limit(bindparam("limit"))
)
_GIVEN = DISTRIBUTED_TO_VIEWER.label("distributed")
_BUILD_GIVEN = _BUILD_OF_APPLICATION.add_columns(_GIVEN)
_SHOWN_BUILD_GIVEN = _SHOWN_BUILD_OF_APPLICATION.add_columns(_GIVEN)
_BUILD_OF_KEY = _BUILDS.where(Build.storage_key == bindparam("storage_key"))
_ICON = select(BuildIcon.png).where(BuildIcon.build_id == bindparam("build_id"))
_VERSION_KEY = func.coalesce(Build.version_code, -1)
_VERSION_KEY_OF = select(_VERSION_KEY).where(
    Build.id == bindparam("build_id"), Build.application_id == bindparam("application_id")
)


def already_verified() -> Conflict:
    return Conflict(
        "This build is already verified; its bytes cannot change", code="build_already_verified"
    )


def not_in_application() -> NotFound:
    return NotFound("No build with this id in the application", code="build_not_found")


# How long a browser or client may keep a build's icon (the API's and the console's answer): a
# build's bytes, and so its icon, never change.
ICON_CACHE = {"Cache-Control": "private, max-age=31536000, immutable"}


class BuildReads:
    """Builds as a reader sees them: on a read-only request's reads, or a unit of work's."""

    def __init__(self, reads: Reads, now: datetime, settings: Settings, storage: Storage) -> None:
        self.reads = reads
        self.now = now
        self.settings = settings
        self.storage = storage

    async def shown_page(self, query: BuildQuery) -> tuple[list[ShownBuild], str | None]:
        """A page of builds as `query` asks, each with what the API shows beside it (extras.py),
        in one statement."""
        params: dict[str, Any] = {
            "application_id": query.application_id,
            "limit": query.limit + 1,  # and one more: split_page's look-ahead
            "now": self.now,
        }
        if query.viewer is not None:
            params.update(viewer_params(query.viewer))
        stmt: Select[Any] | None
        if query.is_first_page:  # as clients poll it: built once
            stmt = _SHOWN_NEWEST_FIRST if query.viewer is None else _SHOWN_NEWEST_SEEN_FIRST
        else:
            stmt = await self._composed(query)
        if stmt is None:
            return [], None  # the cursor's build was deleted meanwhile
        rows = await self.reads.all(stmt, params)
        found = [ShownBuild(BUILD.of(row), extras_of(row)) for row in rows]
        return split_page(found, query.limit, lambda shown: shown.build.id)

    async def _composed(self, query: BuildQuery) -> Select[Any] | None:
        """The statement of a page other than the plain first one; None if its cursor's build
        is gone."""
        stmt = _SHOWN_OF_APPLICATION.where(
            *_version_clauses(query.version),
            *_search_clause(query.search),
            *_source_clauses(query.source),
        )
        if query.viewer is not None:
            stmt = stmt.where(_SEEN)
        if query.status is not None:
            stmt = stmt.where(Build.status == query.status)
        elif query.viewer is None:  # a tester's are ready ones anyway
            stmt = stmt.where(_LISTED)
        after_id = query.after_id
        if query.sort is BuildOrder.VERSION:
            # Highest version code first, builds without one last; the newest first among
            # equals. The cursor is still the last build's id: its version code is looked up.
            stmt = stmt.order_by(_VERSION_KEY.desc(), Build.id.desc())
            if after_id is not None:
                after_key = await self.reads.scalar(
                    _VERSION_KEY_OF,
                    {"build_id": after_id, "application_id": query.application_id},
                )
                if after_key is None:
                    return None
                stmt = stmt.where(
                    or_(
                        after_key > _VERSION_KEY,
                        and_(after_key == _VERSION_KEY, Build.id < after_id),
                    )
                )
        else:
            stmt = stmt.order_by(Build.id.desc())
            if after_id is not None:
                stmt = stmt.where(Build.id < after_id)
        return stmt.limit(bindparam("limit"))

    async def latest(
        self, application_id: str, version: VersionFilter | None, viewer: Viewer | None = None
    ) -> BuildRecord:
        """The newest ready build (of that version, if asked; distributed to `viewer`)."""
        seen = [DISTRIBUTED_TO_VIEWER] if viewer is not None else []
        params = {"application_id": application_id, **(viewer_params(viewer) if viewer else {})}
        row = await self.reads.first(
            _BUILDS_OF_APPLICATION.where(
                Build.status == BuildStatus.READY, *_version_clauses(version), *seen
            )
            .order_by(Build.id.desc())
            .limit(1),
            params,
        )
        if row is None:
            raise NotFound("No ready build matches", code="build_not_found")
        return BUILD.of(row)

    async def get(
        self, application_id: str, build_id: str, viewer: Viewer | None = None
    ) -> BuildRecord:
        """The build; 403 `not_distributed` if `viewer` (a tester) was not given it."""
        row = await self._one(application_id, build_id, viewer, shown=False)
        return BUILD.of(row)

    async def shown(
        self, application_id: str, build_id: str, viewer: Viewer | None = None
    ) -> ShownBuild:
        """`get`, with what the API shows beside the build, in the same statement."""
        row = await self._one(application_id, build_id, viewer, shown=True)
        return ShownBuild(BUILD.of(row), extras_of(row))

    async def _one(
        self, application_id: str, build_id: str, viewer: Viewer | None, *, shown: bool
    ) -> RowMapping:
        params: dict[str, Any] = {"build_id": build_id, "application_id": application_id}
        if shown:
            params["now"] = self.now
        if viewer is None:
            stmt = _SHOWN_BUILD_OF_APPLICATION if shown else _BUILD_OF_APPLICATION
        else:  # whether the tester was given it, in the same statement
            stmt = _SHOWN_BUILD_GIVEN if shown else _BUILD_GIVEN
            params.update(viewer_params(viewer))
        row = await self.reads.first(stmt, params)
        if row is None:
            raise not_in_application()
        if viewer is not None and not row["distributed"]:
            raise not_distributed()
        return row

    async def pending_upload(self, storage_key: str) -> BuildRecord:
        """The build whose bytes are stored at `storage_key`, while they may still arrive (step
        2 of the upload asks before it takes them, and again before it keeps them)."""
        row = await self.reads.first(_BUILD_OF_KEY, {"storage_key": storage_key})
        if row is None:
            raise NotFound("This build no longer exists", code="build_not_found")
        build = BUILD.of(row)
        if build.status is not BuildStatus.PENDING:
            raise already_verified()
        return build

    async def platform_of(self, build: BuildRecord) -> str | None:
        """The platform of the build's application (None if it was deleted meanwhile)."""
        platform = await self.reads.scalar(
            _PLATFORM_OF_APPLICATION, {"application_id": build.application_id}
        )
        return str(platform) if platform is not None else None

    def uploading_in_parts(self, build: BuildRecord) -> BuildRecord:
        """`build`, if its upload is a multipart one still taking parts."""
        if build.status is not BuildStatus.PENDING:
            raise already_verified()
        if not build.multipart:
            raise Conflict(
                "This build is uploaded in one PUT to its uploadUrl, not in parts",
                code="not_multipart",
            )
        return build

    async def received_parts(
        self, application_id: str, build_id: str
    ) -> tuple[BuildRecord, list[PartInfo]]:
        """A multipart build's parts that have fully arrived (a client that stopped sends the
        rest)."""
        build = self.uploading_in_parts(await self.get(application_id, build_id))
        assert build.upload_id is not None
        try:
            parts = await self.storage.list_parts(build.storage_key, build.upload_id)
        except UploadGone:
            # Joined by a verify that then refused the file (or whose commit was lost): every
            # part is in the object.
            info = await self.storage.stat(build.storage_key)
            if info is None or info.size != build.file_size or build.part_size is None:
                raise Conflict(
                    "This upload was given up; ask for a new upload link", code="upload_expired"
                ) from None
            count = parts_count(build.file_size, build.part_size)
            parts = [
                PartInfo(n, part_bounds(n, build.part_size, build.file_size)[1], self.now)
                for n in range(1, count + 1)
            ]
        return build, parts

    async def icon(self, build: BuildRecord) -> bytes:
        """The PNG icon the build's file carries; 404 if it has none."""
        png = None
        if build.has_icon:
            png = await self.reads.scalar(_ICON, {"build_id": build.id})
        if png is None:
            raise NotFound("This build's file carries no icon", code="icon_not_found")
        return bytes(png)

    async def download_url(
        self, application_id: str, build_id: str, viewer: Viewer | None = None
    ) -> str:
        return await self.ready_file_url(await self.get(application_id, build_id, viewer))

    async def ready_file_url(self, build: BuildRecord) -> str:
        """`file_url` of a ready build; 409 for a pending one."""
        if build.status is not BuildStatus.READY:
            raise Conflict(
                "This build is not verified yet; only ready builds can be downloaded",
                code="build_not_ready",
            )
        return await self.file_url(build)

    async def file_url(self, build: BuildRecord) -> str:
        """A short-lived signed address of a build's file (the version verify checked)."""
        expires_at = self.now + timedelta(seconds=self.settings.download_link_ttl_seconds)
        return await self.storage.download_url(
            build.storage_key, build.file_name, expires_at, build.storage_version
        )
