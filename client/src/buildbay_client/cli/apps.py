"""Applications, and their release channels."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

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
    out,
    project_id,
    table_of,
    when,
)

if TYPE_CHECKING:
    from buildbay_client.models import Retention, RetentionPreview

apps = typer.Typer(help="Applications inside a project.", no_args_is_help=True)


def _apps_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("id", "name", "platform", "bundle id", "ready builds", "retention")
        for a in found:
            t.add_row(
                a.id, a.name, a.platform.value, a.bundle_id or "-", str(a.builds_count),
                _rule_cell(a.retention),
            )  # fmt: skip
        return t

    return table


def _rule_cell(rule: Retention) -> str:
    """`last 5, 30 days`, with the protections turned off (`groups unprotected`), or
    `keep all`."""
    limits = [f"last {rule.keep_last}" if rule.keep_last else "",
              f"{rule.keep_days} days" if rule.keep_days else ""]  # fmt: skip
    if not any(limits):
        return "keep all"
    off = [name for name, on in (("groups", rule.protect.groups),
                                 ("channels", rule.protect.channels)) if not on]  # fmt: skip
    if off:
        limits.append(f"{' and '.join(off)} unprotected")
    return ", ".join(part for part in limits if part)


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


# The retention options of `apps update` and `apps retention-preview`.
KeepLast = Annotated[
    int | None, typer.Option(help="Retention: keep the newest N ready builds", show_default=False)
]
KeepDays = Annotated[
    int | None,
    typer.Option(help="Retention: keep builds verified in the last D days", show_default=False),
]
KeepAll = Annotated[
    bool, typer.Option(help="Retention: no rule, every build is kept", show_default=False)
]
ProtectGroups = Annotated[
    bool | None,
    typer.Option(
        "--protect-groups/--no-protect-groups",
        help="Retention: always keep the newest build given to each tester group",
        show_default=False,
    ),
]
ProtectChannels = Annotated[
    bool | None,
    typer.Option(
        "--protect-channels/--no-protect-channels",
        help="Retention: always keep the newest build of each release channel",
        show_default=False,
    ),
]


def _rule(
    current: Retention,
    keep_last: int | None,
    keep_days: int | None,
    keep_all: bool,
    groups: bool | None,
    channels: bool | None,
) -> dict[str, Any]:
    """The rule the options make of the application's current one, as the API takes it: each
    option given changes its part and the others keep theirs, as in the console's form.
    `keep_all` starts from no rule (both protections on)."""
    if keep_all and (keep_last is not None or keep_days is not None):
        fail("--keep-all is no rule at all: give it without --keep-last or --keep-days", 2)
    if keep_all:
        rule: dict[str, Any] = {"keepLast": None, "keepDays": None}
        protect = {"groups": True, "channels": True}
    else:
        rule = {
            "keepLast": current.keep_last if keep_last is None else keep_last,
            "keepDays": current.keep_days if keep_days is None else keep_days,
        }
        protect = {"groups": current.protect.groups, "channels": current.protect.channels}
    if groups is not None:
        protect["groups"] = groups
    if channels is not None:
        protect["channels"] = channels
    return {**rule, "protect": protect}


def _rule_text(rule: dict[str, Any]) -> str:
    """The rule as a sentence: what it keeps, and what it always keeps."""
    last, days, protect = rule["keepLast"], rule["keepDays"], rule["protect"]
    if last is None and days is None:
        return "no rule, every build is kept"
    recent = "the last day" if days == 1 else f"the last {days} days"
    if days is None:
        keeps = (
            "keep the newest ready build" if last == 1 else f"keep the newest {last} ready builds"
        )
    elif last is None:
        keeps = f"keep the ready builds verified in {recent}"
    else:
        keeps = f"keep the ready builds both among the newest {last} and verified in {recent}"
    always = [
        what
        for what, on in (
            ("the newest given to each tester group", protect["groups"]),
            ("the newest of each release channel", protect["channels"]),
        )
        if on
    ]
    if not always:
        return f"{keeps}, protecting no tester group or release channel"
    return f"{keeps}, and always {' and '.join(always)}"


def _count(count: int, noun: str = "build") -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _doomed_summary(preview: RetentionPreview) -> str:
    """`This rule deletes 4 builds, 2 of them in testers' hands`, as the console says it."""
    if preview.count == 0:
        return "This rule deletes no build"
    held = f", {preview.distributed_count} of them in testers' hands"
    return f"This rule deletes {_count(preview.count)}{held if preview.distributed_count else ''}"


def _doomed_table(preview: RetentionPreview) -> Table:
    t = table_of("id", "file", "version", "verified", "in testers' hands")
    for b in preview.builds:
        t.add_row(
            b.build_id, b.file_name, b.version or "-", when(b.verified_at),
            "yes" if b.distributed else "-",
        )  # fmt: skip
    return t


def _say_doomed(rule: dict[str, Any], preview: RetentionPreview) -> None:
    """The rule and what it deletes, on stderr (stdout keeps the command's answer, --json)."""
    err.print(f"Retention: {_rule_text(rule)}.")
    err.print(f"{_doomed_summary(preview)}, on the server's next sweep (within minutes):")
    err.print(_doomed_table(preview))


def _confirm_deletion(rule: dict[str, Any], preview: RetentionPreview, yes: bool) -> None:
    """Go on only if the rule deletes nothing, or the user said so: at a terminal, by answering
    yes; elsewhere (CI), by --yes. Never a deletion nobody was told of."""
    if preview.count == 0:
        return
    _say_doomed(rule, preview)
    if yes:
        return
    if not sys.stdin.isatty():
        fail(
            f"not saved: the rule deletes {_count(preview.count)}; give --yes to save it "
            "without being asked (nothing was changed)",
            2,
        )
    # Asked on stderr, read from the terminal: click's confirm would put a space on stdout,
    # before the --json answer.
    err.print(f"Save it, deleting {_count(preview.count)} for good? [y/N] ", end="")
    if sys.stdin.readline().strip().lower() not in {"y", "yes"}:
        fail("not saved: nothing was changed", 1)


@apps.command("update")
def apps_update(
    ctx: typer.Context,
    app: str,
    project: ProjectRef,
    name: Annotated[str | None, typer.Option(help="New name")] = None,
    platform: Annotated[str | None, typer.Option(help="New platform")] = None,
    bundle_id: Annotated[str | None, typer.Option(help="New bundle id")] = None,
    keep_last: KeepLast = None,
    keep_days: KeepDays = None,
    keep_all: KeepAll = False,
    protect_groups: ProtectGroups = None,
    protect_channels: ProtectChannels = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Save a rule that deletes builds without asking")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Change an application or its retention rule (admin+).

    The retention options change the rule's parts they name; the others keep their value. A
    rule that deletes builds is shown with those builds first, and saved only once confirmed:
    at a terminal by answering yes, in CI by --yes (without it, nothing is saved and the exit
    code is 2). Nothing is deleted until the server's next sweep.
    """
    changes: dict[str, Any] = {
        k: v
        for k, v in {"name": name, "platform": platform, "bundleId": bundle_id}.items()
        if v is not None
    }
    retention = keep_all or any(
        option is not None for option in (keep_last, keep_days, protect_groups, protect_channels)
    )
    if not changes and not retention:
        fail("nothing to change: give --name, --platform, --bundle-id or a retention option", 2)
    with connect(ctx) as client:
        pid = project_id(client, project)
        aid = app_id(client, pid, app)
        if retention:
            current = client.get_application(pid, aid).retention
            rule = _rule(current, keep_last, keep_days, keep_all, protect_groups, protect_channels)
            _confirm_deletion(rule, client.preview_retention(pid, aid, rule), yes)
            changes["retention"] = rule
        updated = client.update_application(pid, aid, changes)
    for warning in updated.warnings:
        err.print(f"buildbay: warning: {warning.detail}")
    emit(updated, as_json, _apps_table([updated]))


@apps.command("retention-preview")
def apps_retention_preview(
    ctx: typer.Context,
    app: str,
    project: ProjectRef,
    keep_last: KeepLast = None,
    keep_days: KeepDays = None,
    keep_all: KeepAll = False,
    protect_groups: ProtectGroups = None,
    protect_channels: ProtectChannels = None,
    as_json: JsonOption = False,
) -> None:
    """Which builds a retention rule deletes (admin+).

    Saves nothing. The options are those of `apps update`, and make the rule the same way;
    without any, it shows the application's own rule and what the server's next sweep
    deletes.
    """
    with connect(ctx) as client:
        pid = project_id(client, project)
        aid = app_id(client, pid, app)
        current = client.get_application(pid, aid).retention
        rule = _rule(current, keep_last, keep_days, keep_all, protect_groups, protect_channels)
        preview = client.preview_retention(pid, aid, rule)
    if as_json:
        from buildbay_client.models import to_json

        out.print_json(json.dumps({"retention": rule, **to_json(preview)}))
        return
    out.print(f"Retention: {_rule_text(rule)}.")
    if preview.count == 0:
        out.print(f"{_doomed_summary(preview)}.")
        return
    out.print(f"{_doomed_summary(preview)}:")
    out.print(_doomed_table(preview))


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


@channels.command("set")
def channels_set(
    ctx: typer.Context,
    build_id: Annotated[str, typer.Argument(help="The build (bld_...)")],
    project: ProjectRef,
    app: AppRef,
    channel: Annotated[
        list[str] | None,
        typer.Option(
            "--channel",
            help="Publish the build to this channel (repeat for several; the build leaves the "
            "channels not named). Left out: the build's channels stay as they are",
        ),
    ] = None,
    rollout: Annotated[
        int | None,
        typer.Option(
            "--rollout",
            min=1,
            max=100,
            metavar="PERCENT",
            help="Offer the build to this share (1-100) of the installs of its channels "
            "(update checks that send an installId). Left out: each channel keeps its own; "
            "one the build joins starts at 100",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Publish a build to release channels, at a staged rollout percentage (developer+)."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        aid = app_id(client, pid, app)
        names = channel if channel else client.get_build(pid, aid, build_id).channels
        build = client.set_build_channels(pid, aid, build_id, names, rollout)

    def table() -> Table:
        t = table_of("channel", "rollout")
        for name in build.channels:
            t.add_row(name, f"{build.rollout_percents.get(name, 100)}%")
        return t

    emit(build, as_json, table)
