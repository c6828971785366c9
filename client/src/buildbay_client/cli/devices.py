"""The devices a project's testers enrolled: the list, and the file for Apple's device upload."""

from __future__ import annotations

import os
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
    JsonOption,
    ProjectRef,
    connect,
    emit,
    err,
    failures,
    project_id,
    table_of,
    when,
)

if TYPE_CHECKING:
    from buildbay_client.models import LatestProfile, ProjectDevice

devices = typer.Typer(
    help="The iPhones, iPads and Macs a project's testers enrolled (developer+).",
    no_args_is_help=True,
)

# What the table says of an application's newest ad-hoc build against a device.
_INCLUDED = {True: "yes", False: "no", None: "?"}


class ExportFormat(StrEnum):
    APPLE = "apple"
    CSV = "csv"


def _devices_table(found: list[ProjectDevice], applications: list[LatestProfile]) -> Table:
    """One row a device; a column for each iOS application: whether its newest ad-hoc build
    installs on the device (yes, no, ? not known, - no such build)."""
    t = table_of("id", "udid", "name", "model", "platform", "tester", "enrolled",
                 *(a.name for a in applications))  # fmt: skip
    for d in found:
        shown = []
        for a in applications:
            inclusion = d.in_profile_of_latest.get(a.application_id)
            shown.append("-" if inclusion is None else _INCLUDED[inclusion.included])
        t.add_row(d.id, d.udid, d.name, d.model, d.platform, d.tester.email,
                  when(d.enrolled_at), *shown)  # fmt: skip
    return t


@devices.command("list")
def devices_list(
    ctx: typer.Context,
    project: ProjectRef,
    search: Annotated[
        str | None,
        typer.Option(
            "--search", "-s", help="Only devices whose name, model, UDID or tester holds this text"
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List the devices of a project's members, the most recently enrolled first, with
    whether each iOS application's newest ad-hoc build installs on each."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        found: list[Any] = []
        applications: list[Any] = []
        cursor = None
        while True:
            page = client.list_project_devices(pid, limit=100, cursor=cursor, q=search)
            found += page.devices
            applications = page.applications
            cursor = page.next_cursor
            if cursor is None:
                break
    emit(found, as_json, lambda: _devices_table(found, applications))


@devices.command("export")
def devices_export(
    ctx: typer.Context,
    project: ProjectRef,
    format: Annotated[  # noqa: A002 - the option's name
        ExportFormat,
        typer.Option(
            "--format",
            "-f",
            help="apple: the file Apple's Register Multiple Devices upload takes; csv",
        ),
    ] = ExportFormat.APPLE,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the file here (default: standard output)"),
    ] = None,
) -> None:
    """Download a project's devices: the file to upload in the Apple developer account
    (Devices, Register Multiple Devices), or a CSV."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        data = client.export_devices(pid, format.value)
    if output is None:
        typer.echo(data, nl=False)
        return
    with failures():  # a file that cannot be written: one line, exit 1
        _write(output, data)
    err.print(f"Saved the devices of {pid} ({format.value}) as {output}")


def _write(path: Path, data: bytes) -> None:
    """`data` as `path`, whole or not at all: written beside it, then renamed over it."""
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        Path(partial).replace(path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
