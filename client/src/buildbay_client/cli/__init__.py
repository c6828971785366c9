"""The `buildbay` command: log in, manage projects, applications, members, API tokens,
webhooks and builds, list and export testers' devices and register them with Apple, triage
testers' feedback, and upload from a terminal or a CI job.

Exit codes a CI can trust are EXIT_CODES_HELP (shown by `buildbay --help`). Other installed
distributions add command groups through the `buildbay.commands` entry points (the server adds
`serve`, `db`, `users` and `sweep`): each names a function that takes the Typer app.

`buildbay --help` only imports typer and rich: the SDK (httpx) is imported by the commands that
talk to a server. Help is click's plain layout, wrapped to the terminal (80 columns at most):
rich's tables cut option names short on an 80-column terminal ("--install-link…").
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import typer
from typer.core import TyperGroup

from buildbay_client.cli.account import login, logout, tokens, whoami
from buildbay_client.cli.apple import add_apple_commands
from buildbay_client.cli.apps import apps, channels
from buildbay_client.cli.builds import builds, progress_bar, upload
from buildbay_client.cli.common import COMMANDS_GROUP, EXIT_CODES_HELP, err, options
from buildbay_client.cli.devices import devices
from buildbay_client.cli.feedback import feedback
from buildbay_client.cli.projects import members, projects
from buildbay_client.cli.webhooks import webhooks

__all__ = ["COMMANDS_GROUP", "command", "main", "progress_bar", "register"]


def register(app: typer.Typer) -> None:
    """Add the client's commands to a Typer app."""
    add_apple_commands(devices)
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
        (devices, "devices"),
        (feedback, "feedback"),
    ):
        app.add_typer(group, name=name, rich_help_panel="Client")


class PanelledGroup(TyperGroup):
    """The command list under one heading per `rich_help_panel` ("Client", "Server
    administration"), in plain help as rich help would group them."""

    # Typed loosely: the context and formatter are typer's own click's, which it does not export.
    def format_commands(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, Any]]] = {}
        for name in self.list_commands(ctx):
            found = self.get_command(ctx, name)
            if found is not None and not found.hidden:
                panel = getattr(found, "rich_help_panel", None) or "Commands"
                panels.setdefault(panel, []).append((name, found))
        if not panels:
            return
        widest = max(len(name) for listed in panels.values() for name, _ in listed)
        limit = formatter.width - 6 - widest
        for panel, listed in panels.items():
            with formatter.section(panel):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in listed])


def command() -> typer.Typer:
    """The whole `buildbay` command: the client's commands, and those of the installed
    distributions that add some (the server's, where it is installed)."""
    app = typer.Typer(
        help="Buildbay: self-hosted build distribution. Upload builds from CI, hand them to "
        "testers.",
        epilog=EXIT_CODES_HELP,
        no_args_is_help=True,
        add_completion=False,
        cls=PanelledGroup,
        rich_markup_mode=None,  # plain help for every command (see the module's docstring)
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
