"""A project's webhooks and their deliveries."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
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
    format_: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="standard (the signed event, by default), or a chat's incoming webhook: "
            "slack, discord, teams (a Workflows URL), google-chat",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Add a webhook; its signing secret is printed this once."""
    with connect(ctx) as client:
        created = client.create_webhook(
            project_id(client, project), url, event, description, format_
        )
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


WebhookArg = Annotated[str, typer.Argument(metavar="WEBHOOK", help="The webhook's id (whk_...)")]


@webhooks.command("disable")
def webhooks_disable(
    ctx: typer.Context, webhook: WebhookArg, project: ProjectRef, as_json: JsonOption = False
) -> None:
    """Stop sending to a webhook. Its pending deliveries fail without being sent."""
    _set_enabled(ctx, webhook, project, False, as_json)


@webhooks.command("enable")
def webhooks_enable(
    ctx: typer.Context, webhook: WebhookArg, project: ProjectRef, as_json: JsonOption = False
) -> None:
    """Send to a webhook again. One is disabled by hand, or after 5 days of failures."""
    _set_enabled(ctx, webhook, project, True, as_json)


def _set_enabled(
    ctx: typer.Context, webhook: str, project: str, enabled: bool, as_json: bool
) -> None:
    with connect(ctx) as client:
        changed = client.set_webhook_enabled(project_id(client, project), webhook, enabled)
    if as_json:
        emit(changed, True, _webhooks_table([changed]))
        return
    err.print(f"{'Enabled' if enabled else 'Disabled'} webhook {changed.id} ({changed.url})")


@webhooks.command("delete")
def webhooks_delete(
    ctx: typer.Context, webhook: WebhookArg, project: ProjectRef, yes: YesOption = False
) -> None:
    """Delete a webhook and its delivery log. Its pending deliveries are not sent."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        if not yes:
            typer.confirm(f"Delete webhook {webhook} and its delivery log?", abort=True)
        client.delete_webhook(pid, webhook)
    err.print(f"Deleted webhook {webhook}")


@webhooks.command("retry")
def webhooks_retry(
    ctx: typer.Context,
    delivery: Annotated[
        str,
        typer.Argument(
            metavar="DELIVERY",
            help="The delivery's id (whd_...), as `webhooks deliveries` lists it",
        ),
    ],
    project: ProjectRef,
    as_json: JsonOption = False,
) -> None:
    """Send a delivery again now. It has the same webhook-id and body: a receiver that
    de-duplicates by webhook-id sees it once."""
    with connect(ctx) as client:
        accepted = client.retry_delivery(project_id(client, project), delivery)
    if as_json:
        emit(accepted, True, lambda: table_of())
        return
    err.print(f"Delivery {accepted.delivery_id} queued to be sent again")
