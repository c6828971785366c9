"""What testers said about builds, as the team triages it: list a project's feedback, show one
with its screenshots and comments, set its status (and who it is assigned to), reply to the
tester who sent it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    JsonOption,
    ProjectRef,
    app_id,
    connect,
    emit,
    err,
    every_page,
    fail,
    out,
    plain,
    project_id,
    table_of,
    when,
)

if TYPE_CHECKING:
    from buildbay_client.api import Buildbay
    from buildbay_client.models import FeedbackComment, TeamFeedback

feedback = typer.Typer(
    help="Testers' feedback on builds: list, show, triage, reply (developer+).",
    no_args_is_help=True,
)

STATUSES = ("new", "triaged", "resolved", "wont-fix")
CATEGORIES = ("bug", "crash", "suggestion", "other")
# What a table shows of a feedback's text: its first line, this long at most.
SHOWN_TEXT = 60

FeedbackArg = Annotated[
    str, typer.Argument(metavar="FEEDBACK", help="The feedback's id (fbk_...), as `list` shows it")
]


def _first_line(text: str, limit: int = SHOWN_TEXT) -> str:
    text = plain(text).strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _reporter(f: TeamFeedback) -> str:
    return f.tester.email if f.tester is not None else f"{f.reporter_email} (app)"


def _feedback_table(found: Sequence[TeamFeedback]) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("id", "sent", "status", "category", "app", "version", "from", "replies",
                     "assignee", "text")  # fmt: skip
        for f in found:
            t.add_row(
                f.id, when(f.created_at), f.status.value, f.category.value, f.application_name,
                f.build_version or "-", _reporter(f), str(f.comments_count),
                f.assignee.name if f.assignee else "-", _first_line(f.text),
            )  # fmt: skip
        return t

    return table


def _choice(value: str | None, allowed: Sequence[str], what: str) -> str | None:
    """`value` if it is one of `allowed` (checked here, before anything is sent)."""
    if value is not None and value not in allowed:
        fail(f"{what} must be one of {', '.join(allowed)} (not {value!r})", 2)
    return value


@feedback.command("list")
def feedback_list(
    ctx: typer.Context,
    project: ProjectRef,
    app: Annotated[
        str | None, typer.Option("--app", "-a", help="Only an application's (id or name)")
    ] = None,
    build: Annotated[str | None, typer.Option(help="Only a build's (its id)")] = None,
    status: Annotated[
        str | None, typer.Option(help=f"Only in this state: {', '.join(STATUSES)}")
    ] = None,
    category: Annotated[
        str | None, typer.Option(help=f"Only of this kind: {', '.join(CATEGORIES)}")
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            "--search", "-q", help="Only feedback whose text or sender's e-mail holds this"
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="Feedback per page")] = 20,
    cursor: Annotated[str | None, typer.Option(help="The next page, as the last one said")] = None,
    as_json: JsonOption = False,
) -> None:
    """List a project's feedback, newest first, a page at a time."""
    _choice(status, STATUSES, "--status")
    _choice(category, CATEGORIES, "--category")
    with connect(ctx) as client:
        pid = project_id(client, project)
        page = client.list_feedback(
            pid, limit, cursor, application=app_id(client, pid, app) if app else None,
            build=build, status=status, category=category, q=search,
        )  # fmt: skip
    if as_json:
        emit(page, True, _feedback_table(page.feedback))  # {"feedback": [...], "nextCursor": ...}
        return
    out.print(_feedback_table(page.feedback)())
    if page.next_cursor:
        err.print(f"More: --cursor {page.next_cursor}")


@feedback.command("show")
def feedback_show(
    ctx: typer.Context, feedback_id: FeedbackArg, project: ProjectRef, as_json: JsonOption = False
) -> None:
    """Show a feedback: what the tester wrote, the device's context, the screenshots'
    addresses (short-lived), and the team's comments, oldest first."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        found = client.get_feedback(pid, feedback_id)
        comments = every_page(
            lambda c: client.list_feedback_comments(pid, feedback_id, limit=100, cursor=c),
            "comments",
        )
    comments.reverse()  # a conversation reads oldest first
    if as_json:
        from buildbay_client.models import to_json

        out.print_json(data={**to_json(found), "comments": to_json(comments)})
        return
    _show(found, comments)


def _show(f: TeamFeedback, comments: Sequence[FeedbackComment]) -> None:
    lines = [
        ("id", f.id),
        ("sent", f"{when(f.created_at)} by {_reporter(f)}"),
        (
            "build",
            f"{f.application_name} {f.build_version or ''} ({f.build_id})".replace("  ", " "),
        ),
        ("category", f.category.value),
        ("status", f.status.value),
        ("assignee", f"{f.assignee.name} ({f.assignee.email})" if f.assignee else "-"),
    ]
    t = table_of("", "")
    t.show_header = False
    for name, value in lines:
        t.add_row(name, value)
    # What the app said of itself, as it said it, but what would drive the terminal.
    for name, value in sorted((f.context or {}).items()):
        t.add_row(plain(f"context.{name}"), plain(str(value)))
    for n, shot in enumerate(f.screenshots, 1):
        t.add_row(f"screenshot {n}", f"{shot.width}x{shot.height} {shot.url}")
    out.print(t)
    out.print()
    out.print(plain(f.text))
    for comment in comments:
        author = comment.author.name if comment.author else "(gone)"
        out.print()
        out.print(f"--- {author}, {when(comment.created_at)}")
        out.print(plain(comment.text))


@feedback.command("status")
def feedback_status(
    ctx: typer.Context,
    feedback_id: FeedbackArg,
    project: ProjectRef,
    status: Annotated[
        str | None,
        typer.Argument(metavar="[STATUS]", help=f"The new state: {', '.join(STATUSES)}"),
    ] = None,
    assign: Annotated[
        str | None,
        typer.Option(help="Assign it to this developer, admin or owner (e-mail or user id)"),
    ] = None,
    unassign: Annotated[bool, typer.Option(help="Assign it to nobody")] = False,
    as_json: JsonOption = False,
) -> None:
    """Set a feedback's status, and who it is assigned to (--assign, --unassign)."""
    _choice(status, STATUSES, "STATUS")
    if assign is not None and unassign:
        fail("--assign and --unassign say opposite things: give one", 2)
    if status is None and assign is None and not unassign:
        fail("say what to change: a STATUS, --assign or --unassign", 2)
    changes: dict[str, Any] = {}
    if status is not None:
        changes["status"] = status
    if unassign:
        changes["assignee"] = None
    with connect(ctx) as client:
        pid = project_id(client, project)
        if assign is not None:
            changes["assignee"] = _member_id(client, pid, assign)
        changed = client.update_feedback(pid, feedback_id, changes)
    if as_json:
        emit(changed, True, _feedback_table([changed]))
        return
    assignee = f", assigned to {changed.assignee.name}" if changed.assignee else ", unassigned"
    err.print(f"Feedback {changed.id} is {changed.status.value}{assignee}")


def _member_id(client: Buildbay, pid: str, ref: str) -> str:
    """A member given by user id, or by e-mail (in any case)."""
    if ref.startswith("usr_"):
        return ref
    found = [m for m in client.list_members(pid).members if m.email.casefold() == ref.casefold()]
    if not found:
        fail(f"no member {ref!r} in the project (use their e-mail or user id)", EXIT_NOT_FOUND)
    return found[0].user_id


@feedback.command("reply")
def feedback_reply(
    ctx: typer.Context,
    feedback_id: FeedbackArg,
    text: Annotated[
        str, typer.Argument(metavar="TEXT", help="What to say; `-` reads it from stdin")
    ],
    project: ProjectRef,
    as_json: JsonOption = False,
) -> None:
    """Reply to the tester who sent a feedback: they get it by mail, and see it beside their
    feedback."""
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        fail("the reply is empty", EXIT_REFUSED)
    with connect(ctx) as client:
        comment = client.comment_on_feedback(project_id(client, project), feedback_id, text)
    if as_json:
        emit(comment, True, lambda: table_of())
        return
    err.print(f"Replied to feedback {feedback_id} ({comment.id})")
