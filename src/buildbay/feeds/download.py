"""The files the feeds point at: `/feeds/{updateKey}/download/{buildId}/{fileName}` (routes:
download_routes.py).

The update key is the only credential, and it is public (it ships in every installed copy): an
address opens exactly what the update check would offer under the same key, a ready build of
the key's application published to a release channel and distributed to `everyone`, and
nothing else. The address is stable for as long as the build exists: no expiry of its own, no
signature; the feed that wrote it may be cached. A rotated key keeps its addresses working for
its 7-day window (applications/update_keys.py), as the check does.

`fileName` is the build's file name, or that name + `.blockmap` when the build has one
(builds/blockmap.py): electron-updater asks for `<url>.blockmap` beside the file it updates to.
It asks for the blockmap of the installed version at an address it derives from the new file's
(Provider.getBlockMapFiles: the new version replaced by the installed one in the path), so
under the new build's id: `<new build>/<older file name>.blockmap` is the blockmap of the newest
build of the application with that file name (one the update check would offer too).

Downloads here are not counted as installs (no install event, no `build.downloaded` webhook):
an app updating itself is not a tester installing a build, and one update is many requests
(HEAD, the blockmaps, one Range request per group of changed blocks). The update check and
the feeds are what an install asks of Buildbay; the install report stays the testers'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, exists, select

from buildbay.applications.models import UpdateKey
from buildbay.builds.blockmap import BLOCKMAP_SUFFIX, blockmap_key
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build, BuildChannel
from buildbay.db.reads import Reads
from buildbay.distribution.visibility import DISTRIBUTED_TO_EVERYONE
from buildbay.errors import NotFound
from buildbay.updates.check import key_owner, unknown_key
from buildbay.updates.versions import MAX_LENGTH


@dataclass(frozen=True, slots=True)
class FeedFile:
    """A file a feed address serves: where it is stored and what to call it."""

    storage_key: str
    storage_version: str | None  # the version verify pinned (S3 with versioning); None else
    file_name: str
    size: int
    # A strong validator of the bytes (ETag, If-Range): their SHA-256, which never changes
    # under the same address (a new blockmap is new bytes, and a new tag).
    etag: str
    # When the key that opens it stops naming its application (rotated; None: never).
    key_expires_at: datetime | None = None


_PUBLISHED = exists().where(BuildChannel.build_id == Build.id)
# The key and the build in one statement (one round trip: every Range request of a download
# asks it): a row when the build is of the key's application; none says only that one of the
# two names nothing, which `key_owner` then tells apart.
_FILE = select(
    UpdateKey.expires_at,
    Build.status,
    Build.file_name,
    Build.file_size,
    Build.sha256,
    Build.storage_key,
    Build.storage_version,
    Build.blockmap_size,
    Build.blockmap_sha256,
    _PUBLISHED.label("published"),
    DISTRIBUTED_TO_EVERYONE.label("to_everyone"),
).where(
    UpdateKey.key == bindparam("key"),
    Build.id == bindparam("build_id"),
    Build.application_id == UpdateKey.application_id,
)


# The blockmap of the newest build of the application by that file name that the check would
# offer: electron-updater's address of the installed version's blockmap.
_OLDER_BLOCKMAP = (
    select(Build.storage_key, Build.blockmap_size, Build.blockmap_sha256)
    .where(
        Build.application_id == bindparam("application_id"),
        Build.file_name == bindparam("file_name"),
        Build.status == BuildStatus.READY,
        Build.blockmap_size.is_not(None),
        _PUBLISHED,
        DISTRIBUTED_TO_EVERYONE,
    )
    .order_by(Build.id.desc())
    .limit(1)
)


def _no_build(build_id: str) -> NotFound:
    return NotFound(
        f"This application has no ready build {build_id}: it was deleted (by someone, or by "
        "the application's retention rule), is not verified yet, or belongs to another "
        "application",
        code="unknown_build",
    )


def _not_published(build_id: str) -> NotFound:
    return NotFound(
        f"Build {build_id} is not offered to updating apps: publish it to a release channel and "
        "distribute it to everyone (the update check offers only those)",
        code="build_not_published",
    )


def _no_file(build_id: str, file_name: str, name: str, has_blockmap: bool) -> NotFound:
    files = f'"{name}"' + (f' and "{name}{BLOCKMAP_SUFFIX}"' if has_blockmap else "")
    return NotFound(
        f'Build {build_id} has no file named "{file_name}": its files are {files}',
        code="unknown_file",
    )


def _no_blockmap(build_id: str) -> NotFound:
    return NotFound(
        f"Build {build_id} has no blockmap: upload the `.blockmap` electron-builder wrote "
        "beside it (PUT .../builds/{buildId}/blockmap) for differential downloads",
        code="no_blockmap",
    )


async def feed_file(
    reads: Reads, key: str, build_id: str, file_name: str, now: datetime
) -> FeedFile:
    """The file `file_name` of build `build_id` that `key` opens; NotFound saying which part of
    the address names nothing (the key, the build, its publication, the file)."""
    if not key.startswith("bbu_") or len(key) > MAX_LENGTH:
        raise unknown_key()
    row = await reads.first(_FILE, {"key": key, "build_id": build_id[:40]})
    if row is None or (row["expires_at"] is not None and row["expires_at"] <= now):
        await key_owner(reads, key, now)  # raises unknown_update_key, if that is it
        row = None
    if row is None or row["status"] != BuildStatus.READY:
        raise _no_build(build_id if len(build_id) <= 32 else build_id[:32] + "...")
    if not row["published"] or not row["to_everyone"]:
        raise _not_published(build_id)
    name: str = row["file_name"]
    has_blockmap = row["blockmap_size"] is not None
    if file_name == name:
        return FeedFile(
            row["storage_key"], row["storage_version"], name, row["file_size"],
            f'"{row["sha256"]}"', row["expires_at"],
        )  # fmt: skip
    if file_name == name + BLOCKMAP_SUFFIX:
        if not has_blockmap:
            raise _no_blockmap(build_id)
        return FeedFile(
            blockmap_key(row["storage_key"]), None, file_name, row["blockmap_size"],
            f'"{row["blockmap_sha256"]}"', row["expires_at"],
        )  # fmt: skip
    if file_name.endswith(BLOCKMAP_SUFFIX):
        owner = await key_owner(reads, key, now)
        older = await reads.first(
            _OLDER_BLOCKMAP,
            {
                "application_id": owner.application_id,
                "file_name": file_name.removesuffix(BLOCKMAP_SUFFIX),
            },
        )
        if older is not None:
            return FeedFile(
                blockmap_key(older["storage_key"]), None, file_name, older["blockmap_size"],
                f'"{older["blockmap_sha256"]}"', row["expires_at"],
            )  # fmt: skip
    raise _no_file(build_id, file_name[:300], name, has_blockmap)
