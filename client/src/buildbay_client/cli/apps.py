"""Applications, and their release channels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
    AppRef,
    JsonOption,
    ProjectRef,
    app_id,
    connect,
    emit,
    err,
    every_page,
    fail,
    project_id,
    table_of,
    when,
)

apps = typer.Typer(help="Applications inside a project.", no_args_is_help=True)


def _apps_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("id", "name", "platform", "bundle id", "ready builds", "retention")
        for a in found:
            rule = ", ".join(
                part
                for part in (
                    f"last {a.retention.keep_last}" if a.retention.keep_last else "",
                    f"{a.retention.keep_days} days" if a.retention.keep_days else "",
                )
                if part
            )
            t.add_row(
                a.id, a.name, a.platform.value, a.bundle_id or "-", str(a.builds_count),
                rule or "keep all",
            )  # fmt: skip
        return t

    return table


@apps.command("list")
def apps_list(ctx: typer.Context, project: ProjectRef, as_json: JsonOption = False) -> None:
    """List a project's applications."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        found = every_page(
            lambda cursor: client.list_applications(pid, limit=100, cursor=cursor),
            "applications",
        )
    emit(found, as_json, _apps_table(found))


@apps.command("create")
def apps_create(
    ctx: typer.Context,
    name: str,
    project: ProjectRef,
    platform: Annotated[
        str | None, typer.Option(help="android, ios, macos, windows, linux, other")
    ] = None,
    bundle_id: Annotated[str | None, typer.Option(help="e.g. com.example.app")] = None,
    as_json: JsonOption = False,
) -> None:
    """Create an application (admin+)."""
    with connect(ctx) as client:
        created = client.create_application(project_id(client, project), name, platform, bundle_id)
    emit(created, as_json, _apps_table([created]))


@apps.command("show")
def apps_show(
    ctx: typer.Context, app: str, project: ProjectRef, as_json: JsonOption = False
) -> None:
    """Show an application (by id or name)."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        found = client.get_application(pid, app_id(client, pid, app))
    emit(found, as_json, _apps_table([found]))


@apps.command("update")
def apps_update(
    ctx: typer.Context,
    app: str,
    project: ProjectRef,
    name: Annotated[str | None, typer.Option(help="New name")] = None,
    platform: Annotated[str | None, typer.Option(help="New platform")] = None,
    bundle_id: Annotated[str | None, typer.Option(help="New bundle id")] = None,
    keep_last: Annotated[
        int | None, typer.Option(help="Retention: keep the newest N ready builds")
    ] = None,
    keep_days: Annotated[
        int | None, typer.Option(help="Retention: keep builds of the last D days")
    ] = None,
    keep_all: Annotated[bool, typer.Option(help="Retention: remove the rule")] = False,
    as_json: JsonOption = False,
) -> None:
    """Change an application's fields or retention rule (admin+)."""
    changes: dict[str, Any] = {
        k: v
        for k, v in {"name": name, "platform": platform, "bundleId": bundle_id}.items()
        if v is not None
    }
    if keep_all:
        changes["retention"] = None
    elif keep_last is not None or keep_days is not None:
        rule = {"keepLast": keep_last, "keepDays": keep_days}
        changes["retention"] = {k: v for k, v in rule.items() if v is not None}
    if not changes:
        fail("nothing to change: give --name, --platform, --bundle-id or a retention option", 2)
    with connect(ctx) as client:
        pid = project_id(client, project)
        updated = client.update_application(pid, app_id(client, pid, app), changes)
    for warning in updated.warnings:
        err.print(f"buildbay: warning: {warning.detail}")
    emit(updated, as_json, _apps_table([updated]))


@apps.command("delete")
def apps_delete(
    ctx: typer.Context,
    app: str,
    project: ProjectRef,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask")] = False,
) -> None:
    """Delete an application with its builds (admin+)."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        aid = app_id(client, pid, app)
        if not yes:
            typer.confirm(f"Delete application {aid} and every build of it?", abort=True)
        client.delete_application(pid, aid)
    err.print(f"Deleted application {aid}")


channels = typer.Typer(
    help="Release channels of an application (an installed app asks for updates on one).",
    no_args_is_help=True,
)


def _channels_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("id", "name", "ready builds", "newest build", "created")
        for c in found:
            t.add_row(
                c.id, c.name, str(c.builds_count), c.latest_build_id or "-", when(c.created_at)
            )
        return t

    return table


@channels.command("list")
def channels_list(
    ctx: typer.Context, project: ProjectRef, app: AppRef, as_json: JsonOption = False
) -> None:
    """List an application's release channels."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        found = client.list_channels(pid, app_id(client, pid, app)).channels
    emit(found, as_json, _channels_table(found))


@channels.command("create")
def channels_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="1-40 of a-z, 0-9, '.', '_', '-' (e.g. beta)")],
    project: ProjectRef,
    app: AppRef,
    as_json: JsonOption = False,
) -> None:
    """Create a release channel (developer+); publish builds to it with upload --channel."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        created = client.create_channel(pid, app_id(client, pid, app), name)
    emit(created, as_json, _channels_table([created]))
