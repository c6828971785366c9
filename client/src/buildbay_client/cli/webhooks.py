"""A project's webhooks and their deliveries."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
    JsonOption,
    ProjectRef,
    connect,
    emit,
    err,
    out,
    project_id,
    table_of,
    when,
)

webhooks = typer.Typer(help="A project's webhooks (admin+).", no_args_is_help=True)


def _webhooks_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("id", "url", "events", "state", "last attempt")
        for w in found:
            state = ("failing" if w.failing_since else "enabled") if w.enabled else "disabled"
            t.add_row(w.id, w.url, ", ".join(w.events), state, when(w.last_delivery_at))
        return t

    return table


@webhooks.command("list")
def webhooks_list(ctx: typer.Context, project: ProjectRef, as_json: JsonOption = False) -> None:
    """List a project's webhooks (never their secret)."""
    with connect(ctx) as client:
        found = client.list_webhooks(project_id(client, project)).webhooks
    emit(found, as_json, _webhooks_table(found))


@webhooks.command("create")
def webhooks_create(
    ctx: typer.Context,
    url: str,
    project: ProjectRef,
    event: Annotated[
        list[str],
        typer.Option(
            "--event", "-e", help="An event type to send (build.ready, ...); repeat for several"
        ),
    ],
    description: Annotated[str | None, typer.Option(help="What it is for")] = None,
    as_json: JsonOption = False,
) -> None:
    """Add a webhook; its signing secret is printed this once."""
    with connect(ctx) as client:
        created = client.create_webhook(project_id(client, project), url, event, description)
    if as_json:
        emit(created, True, lambda: table_of())
        return
    err.print(f"Created {created.id} ({created.url}); the signing secret is shown once:")
    out.print(created.secret)


@webhooks.command("test")
def webhooks_test(
    ctx: typer.Context, webhook: str, project: ProjectRef, as_json: JsonOption = False
) -> None:
    """Send a webhook.test event to a webhook (by id)."""
    with connect(ctx) as client:
        accepted = client.test_webhook(project_id(client, project), webhook)
    if as_json:
        emit(accepted, True, lambda: table_of())
        return
    err.print(f"Test event queued as delivery {accepted.delivery_id}")


@webhooks.command("deliveries")
def webhooks_deliveries(
    ctx: typer.Context,
    webhook: str,
    project: ProjectRef,
    limit: Annotated[int, typer.Option(min=1, max=100, help="How many, newest first")] = 20,
    as_json: JsonOption = False,
) -> None:
    """A webhook's delivery log, newest first."""
    with connect(ctx) as client:
        found = client.list_deliveries(project_id(client, project), webhook, limit).deliveries

    def table() -> Table:
        t = table_of("id", "event", "status", "attempts", "last answer", "created", "webhook-id")
        for d in found:
            answer = str(d.last_status_code) if d.last_status_code else (d.last_error or "")
            t.add_row(
                d.id, d.event_type, d.status.value, str(d.attempts), answer,
                when(d.created_at), d.event_id,
            )  # fmt: skip
        return t

    emit(found, as_json, table)
