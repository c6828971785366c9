"""The console: what an application releases to its installed apps (issue "In-app updates"):
its release channels, each build's channels and mandatory flag, and the update key."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from buildbay.applications.dependencies import application_service
from buildbay.builds.dependencies import build_service
from buildbay.builds.schemas import BuildChannelsUpdate
from buildbay.channels.dependencies import channel_service
from buildbay.channels.schemas import NAME_RULE, ChannelCreate
from buildbay.console.build_page import build_path, render_build
from buildbay.console.builds import application_path, render_application
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    form_fields,
    parse_form,
    posted_form,
    said,
    see_other,
    visit_application,
)
from buildbay.deps import get_context
from buildbay.errors import Conflict
from buildbay.numbers import whole_number
from buildbay.projects.enums import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.post("/projects/{project_id}/apps/{app_id}/channels")
async def create_channel(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    fields = await form_fields(request)
    try:
        body = parse_form(ChannelCreate, {"name": fields.get("name", "").strip()})
        assert isinstance(body, ChannelCreate)
        await channel_service(get_context(request), db).create(access.application.id, body.name)
    except (FormError, Conflict) as exc:
        message = (
            said(exc) if isinstance(exc, Conflict) else NAME_RULE[0].upper() + NAME_RULE[1:] + "."
        )
        return await render_application(
            request, visitor, db, project_id, app_id,
            failed="channel", values=fields, errors={"name": message}, status_code=exc.status,
        )  # fmt: skip
    return see_other(f"{application_path(project_id, app_id)}#channels")


@router.post("/projects/{project_id}/apps/{app_id}/channels/{channel_id}/delete")
async def delete_channel(
    request: Request, project_id: str, app_id: str, channel_id: str
) -> Response:
    _, db, access = await visit_application(request, project_id, app_id, ProjectRole.DEVELOPER)
    await channel_service(get_context(request), db).delete(access.application.id, channel_id)
    return see_other(f"{application_path(project_id, app_id)}#channels")


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/release")
async def set_release(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    """A build's channels (the ticked boxes, none for none) and its mandatory flag, at once."""
    _, db, access = await visit_application(request, project_id, app_id, ProjectRole.DEVELOPER)
    form = await posted_form(request)
    channels = [str(name) for name in form.getlist("channel")]
    builds = build_service(get_context(request), db)
    await builds.set_channels(access.application, build_id, channels)
    await builds.update(access.application, build_id, {"mandatory": form.get("mandatory") == "on"})
    return see_other(f"{application_path(project_id, app_id)}#build-{build_id}")


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/rollout")
async def set_rollout(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    """The build page's slider: the build's rollout percentage on one of its channels."""
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    fields = await form_fields(request)
    channel, given = fields.get("channel", ""), fields.get("percent", "").strip()
    number = whole_number(given)
    try:
        # The API's own rule for the number (1 to 100); the service's for the channel.
        body = parse_form(
            BuildChannelsUpdate,
            {"channels": [], "rolloutPercent": given if number is None else number},
        )
        assert isinstance(body, BuildChannelsUpdate)
        assert body.rollout_percent is not None
    except FormError:
        errors = {"percent": "Choose a rollout from 1 to 100 percent of the channel's installs."}
        return await render_build(request, visitor, db, project_id, app_id, build_id,
                                  "rollout", fields, errors, 422)  # fmt: skip
    percent = body.rollout_percent
    await build_service(get_context(request), db).set_rollout(
        access.application, build_id, channel, percent, visitor.principal.user.id
    )
    visitor.tell(
        f"Update checks on {channel} now offer this build to "
        + ("every install." if percent == 100 else f"{percent}% of its installs.")
    )
    return see_other(f"{build_path(project_id, app_id, build_id)}#updates")


@router.post("/projects/{project_id}/apps/{app_id}/update-key")
async def rotate_update_key(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.ADMIN)
    await application_service(get_context(request), db).rotate_update_key(access.application)
    visitor.tell(
        "The update key changed. Apps that ship the old key get answers for 7 more days: "
        "release builds with the new one before then."
    )
    return see_other(f"{application_path(project_id, app_id)}#updates")
