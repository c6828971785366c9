"""The `buildbay` command: log in, manage projects, applications, members, API tokens,
webhooks and builds, and upload from a terminal or a CI job.

Exit codes a CI can trust are EXIT_CODES_HELP (shown by `buildbay --help`). Other installed
distributions add command groups through the `buildbay.commands` entry points (the server adds
`serve`, `db`, `users` and `sweep`): each names a function that takes the Typer app.

`buildbay --help` only imports typer and rich: the SDK (httpx) is imported by the commands that
talk to a server.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from buildbay_client.cli.account import login, logout, tokens, whoami
from buildbay_client.cli.apps import apps, channels
from buildbay_client.cli.builds import builds, progress_bar, upload
from buildbay_client.cli.common import COMMANDS_GROUP, EXIT_CODES_HELP, err, options
from buildbay_client.cli.projects import members, projects
from buildbay_client.cli.webhooks import webhooks

__all__ = ["COMMANDS_GROUP", "command", "main", "progress_bar", "register"]


def register(app: typer.Typer) -> None:
    """Add the client's commands to a Typer app."""
    app.callback()(options)
    app.command(rich_help_panel="Client")(login)
    app.command(rich_help_panel="Client")(logout)
    app.command(rich_help_panel="Client")(whoami)
    app.command(rich_help_panel="Client")(upload)
    for group, name in (
        (projects, "projects"),
        (apps, "apps"),
        (channels, "channels"),
        (builds, "builds"),
        (members, "members"),
        (tokens, "tokens"),
        (webhooks, "webhooks"),
    ):
        app.add_typer(group, name=name, rich_help_panel="Client")


def command() -> typer.Typer:
    """The whole `buildbay` command: the client's commands, and those of the installed
    distributions that add some (the server's, where it is installed)."""
    app = typer.Typer(
        help="Buildbay: self-hosted build distribution. Upload builds from CI, hand them to "
        "testers.",
        epilog=EXIT_CODES_HELP,
        no_args_is_help=True,
        add_completion=False,
    )
    register(app)
    for entry in entry_points(group=COMMANDS_GROUP):
        try:
            entry.load()(app)
        except Exception as exc:
            origin = entry.dist.name if entry.dist else entry.value
            err.print(
                f"buildbay: the commands of {origin} are left out: they failed to load "
                f"({type(exc).__name__}: {exc})"
            )
    return app


def main() -> None:
    command()()
