"""The desktop updaters' feeds: public (the update key is the credential, as for the update
check), cacheable (ETag, 304, `Cache-Control: public, max-age=60`), and counted against the
update check's rate limits (updates/routes.py `owner_of_key`). What each answers is
remembered until a write changes it (feeds/cache.py): the answer does not depend on who asks
(an updater applies a staged rollout itself, from the feed's percentage or interval)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from buildbay.deps import Context, ReadsDep, TransactionRoute
from buildbay.errors import NotFound
from buildbay.feeds import appinstaller, electron, sparkle
from buildbay.feeds.builds import (
    application_name,
    offered_builds,
    release_of,
    require_desktop,
    require_platform,
)
from buildbay.feeds.cache import Rendered
from buildbay.problems import problem_responses
from buildbay.updates.routes import cacheable, etag_of, owner_of_key

router = APIRouter(prefix="/feeds", tags=["desktop feeds"], route_class=TransactionRoute)

# What each client is served; none of them insists on one.
ELECTRON_TYPE = "application/yaml"  # RFC 9512
SPARKLE_TYPE = "application/rss+xml"
# Microsoft's web server setup for App Installer serves .appinstaller files as this.
APPINSTALLER_TYPE = "application/appinstaller"

# No length rule: a key or name that is too long is not one of ours (404 that says which).
UpdateKey = Annotated[str, Path(description="The application's update key (`bbu_...`)")]
_HEADERS = {
    "ETag": {"schema": {"type": "string"}},
    "Cache-Control": {"schema": {"type": "string"}},
}
_ERRORS = problem_responses(404, 429)


def _answer(description: str, media_type: str) -> dict[int | str, dict[str, object]]:
    return {
        200: {"description": description, "headers": _HEADERS, "content": {media_type: {}}},
        304: {"description": "The feed has not changed (If-None-Match)"},
        **_ERRORS,
    }


@router.get(
    "/{update_key}/electron/{name}.yml",
    response_class=Response,
    responses=_answer("electron-updater's channel file (UpdateInfo)", ELECTRON_TYPE),
    summary="electron-updater's generic provider: a channel file (latest.yml, latest-mac.yml, "
    "latest-linux.yml, latest-linux-arm64.yml, beta.yml, ...)",
)
async def electron_feed(
    request: Request,
    ctx: Context,
    reads: ReadsDep,
    update_key: UpdateKey,
    name: Annotated[
        str,
        Path(
            description="The channel file's name: `latest` is the application's `default` "
            "channel, with `-mac`, `-linux` or `-linux-arm64` after it on those platforms"
        ),
    ],
) -> Response:
    cache = ctx.feeds
    mark = await cache.mark()  # before anything is read (feeds/cache.py)
    owner = await owner_of_key(ctx, request, reads, update_key, mark)
    require_desktop(owner)

    async def read() -> tuple[Rendered, None]:
        wanted = electron.channel_file(owner.platform, name)
        try:
            builds = await offered_builds(reads, owner, wanted.channel, full=False)
        except NotFound as exc:
            if exc.code == "unknown_channel" and electron.looks_like_another_platform(name):
                raise electron.wrong_file(owner.platform, name) from None
            raise
        best, files = electron.update_files(builds, owner.platform, wanted)
        best = await release_of(reads, best)
        public_url = ctx.settings.resolved_public_url
        body = electron.render(electron.update_info(best, files, public_url, update_key))
        return Rendered(body, etag_of(body)), None

    rendered = await cache.remembered(("electron", update_key, name), mark, read)
    return cacheable(request, rendered.body, ELECTRON_TYPE, rendered.etag)


@router.get(
    "/{update_key}/sparkle/{channel}.xml",
    response_class=Response,
    responses=_answer("Sparkle's appcast of the channel (RSS 2.0)", SPARKLE_TYPE),
    summary="Sparkle's appcast of a channel (a macOS application's SUFeedURL)",
)
async def sparkle_feed(
    request: Request,
    ctx: Context,
    reads: ReadsDep,
    update_key: UpdateKey,
    channel: Annotated[str, Path(description="The release channel (`default`, `beta`, ...)")],
) -> Response:
    cache = ctx.feeds
    mark = await cache.mark()
    owner = await owner_of_key(ctx, request, reads, update_key, mark)
    require_platform(owner, "macos", "Sparkle")

    async def read() -> tuple[Rendered, datetime | None]:
        builds = await offered_builds(reads, owner, channel, sparkle.MAX_ITEMS)
        title = await application_name(reads, owner)
        now = ctx.clock.now()
        body = sparkle.appcast(
            builds, title=title, channel=channel, public_url=ctx.settings.resolved_public_url,
            update_key=update_key, now=now,
        )  # fmt: skip
        # A phased rollout's interval grows with time (sparkle.py): good until its next step.
        return Rendered(body, etag_of(body)), sparkle.changes_at(builds, now)

    rendered = await cache.remembered(("sparkle", update_key, channel), mark, read)
    return cacheable(request, rendered.body, SPARKLE_TYPE, rendered.etag)


@router.get(
    "/{update_key}/appinstaller/{channel}.appinstaller",
    response_class=Response,
    responses=_answer("Windows App Installer's file of the channel", APPINSTALLER_TYPE),
    summary="Windows App Installer's file of a channel (MSIX packages)",
)
async def appinstaller_feed(
    request: Request,
    ctx: Context,
    reads: ReadsDep,
    update_key: UpdateKey,
    channel: Annotated[str, Path(description="The release channel (`default`, `beta`, ...)")],
) -> Response:
    cache = ctx.feeds
    mark = await cache.mark()
    owner = await owner_of_key(ctx, request, reads, update_key, mark)
    require_platform(owner, "windows", "App Installer")

    async def read() -> tuple[Rendered, None]:
        builds = await offered_builds(reads, owner, channel)
        body = appinstaller.appinstaller(
            builds, channel=channel, public_url=ctx.settings.resolved_public_url,
            update_key=update_key,
        )  # fmt: skip
        return Rendered(body, etag_of(body)), None

    rendered = await cache.remembered(("appinstaller", update_key, channel), mark, read)
    return cacheable(request, rendered.body, APPINSTALLER_TYPE, rendered.etag)
