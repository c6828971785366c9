"""`buildbay devices register-with-apple` and `buildbay devices apple-key ...`: sending a
project's enrolled devices to Apple through its App Store Connect API key.

`add_apple_commands(devices)` puts them in the `devices` group, beside the device list's own
commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
    EXIT_REFUSED,
    JsonOption,
    ProjectRef,
    YesOption,
    connect,
    emit,
    err,
    out,
    project_id,
    table_of,
    when,
)

apple_key = typer.Typer(
    help="The project's App Store Connect API key, to register devices with Apple (admin+).",
    no_args_is_help=True,
)

MAX_ROUNDS = 100  # "register all missing" asks the server again at most this often


def add_apple_commands(devices: typer.Typer) -> None:
    devices.command("register-with-apple")(register_with_apple)
    devices.add_typer(apple_key, name="apple-key")


def register_with_apple(
    ctx: typer.Context,
    project: ProjectRef,
    device: Annotated[
        str | None,
        typer.Argument(
            metavar="DEVICE",
            help="A device's id; without it, every device of the project's members that is "
            "not registered yet",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Register devices with Apple (App Store Connect), through the project's API key, so that
    the next ad-hoc or development profile can include them (developer+). Exits 5 if Apple
    refused a device."""
    from buildbay_client import apple

    registered: list[Any] = []
    refused: dict[str, Any] = {}  # by device
    remaining = 0
    with connect(ctx) as client:
        pid = project_id(client, project)
        if device is not None:
            registered.append(client.run(apple.register_device_with_apple(pid, device)))
        else:
            after = None
            for _ in range(MAX_ROUNDS):
                batch = client.run(apple.register_missing_with_apple(pid, after))
                registered += batch.registrations
                refused.update((r.device_id, r) for r in batch.refused)
                remaining = batch.remaining
                after = batch.last_sent
                if after is None or not remaining:
                    break  # done: none left, or none after those sent (Apple refused those)
    if as_json:
        from buildbay_client.models import to_json

        document = {
            "registrations": to_json(registered),
            "refused": to_json(list(refused.values())),
            "remaining": remaining,
        }
        out.print_json(data=document)
    else:
        emit(registered, False, _registrations_table(registered))
        for r in refused.values():
            err.print(f"Apple refused {r.name} ({r.udid}, {r.device_id}): {r.detail}")
        if device is None:
            err.print(
                f"{len(registered)} registered, {len(refused)} refused, {remaining} not "
                "registered yet"
            )
    if refused:
        raise typer.Exit(EXIT_REFUSED)


def _registrations_table(found: Sequence[Any]) -> Any:
    def table() -> Table:
        t = table_of("device", "name", "udid", "platform", "outcome", "apple id", "registered")
        for r in found:
            t.add_row(
                r.device_id, r.name, r.udid, r.platform, r.outcome.value,
                r.apple_device_id or "-", when(r.registered_with_apple.at),
            )  # fmt: skip
        return t

    return table


def _key_table(key: Any) -> Any:
    def table() -> Table:
        t = table_of("key id", "issuer id", "added", "by")
        t.add_row(
            key.key_id,
            key.issuer_id,
            when(key.created_at),
            key.created_by.email if key.created_by else "-",
        )
        return t

    return table


@apple_key.command("set")
def apple_key_set(
    ctx: typer.Context,
    project: ProjectRef,
    key_id: Annotated[str, typer.Option(help="The key's ID (10 letters and digits)")],
    issuer_id: Annotated[str, typer.Option(help="The team's issuer ID (a UUID)")],
    p8: Annotated[
        Path,
        typer.Option(
            exists=True, dir_okay=False, readable=True, help="The key's AuthKey_<keyId>.p8 file"
        ),
    ],
    as_json: JsonOption = False,
) -> None:
    """Set the project's App Store Connect API key (replacing any). The private key is stored
    encrypted and never shown again."""
    from buildbay_client import apple

    private_key = p8.read_text(encoding="ascii", errors="replace")
    with connect(ctx) as client:
        key = client.run(apple.put_apple_key(project_id(client, project), key_id, issuer_id,
                                             private_key))  # fmt: skip
    emit(key, as_json, _key_table(key))


@apple_key.command("show")
def apple_key_show(ctx: typer.Context, project: ProjectRef, as_json: JsonOption = False) -> None:
    """Which App Store Connect API key the project has (never its private key)."""
    from buildbay_client import apple

    with connect(ctx) as client:
        key = client.run(apple.get_apple_key(project_id(client, project)))
    emit(key, as_json, _key_table(key))


@apple_key.command("delete")
def apple_key_delete(ctx: typer.Context, project: ProjectRef, yes: YesOption = False) -> None:
    """Remove the project's App Store Connect API key (the devices stay registered with Apple)."""
    from buildbay_client import apple

    with connect(ctx) as client:
        pid = project_id(client, project)
        if not yes:
            typer.confirm("Remove the project's App Store Connect API key?", abort=True)
        client.run(apple.delete_apple_key(pid))
    err.print("Removed the project's App Store Connect API key")
