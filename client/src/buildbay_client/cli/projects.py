"""Projects, and their members and roles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
    JsonOption,
    ProjectRef,
    connect,
    emit,
    err,
    every_page,
    named,
    project_id,
    table_of,
    when,
)

if TYPE_CHECKING:
    from buildbay_client.api import Buildbay

projects = typer.Typer(help="Projects you are a member of.", no_args_is_help=True)


@projects.command("list")
def projects_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List your projects, newest first."""
    with connect(ctx) as client:
        found = every_page(
            lambda cursor: client.list_projects(limit=100, cursor=cursor), "projects"
        )

    def table() -> Table:
        t = table_of("id", "name", "applications", "created")
        for p in found:
            t.add_row(p.id, p.name, str(p.applications_count), when(p.created_at))
        return t

    emit(found, as_json, table)


def _project_table(p: Any) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("id", "name", "applications", "created", "updated")
        t.add_row(p.id, p.name, str(p.applications_count), when(p.created_at), when(p.updated_at))
        return t

    return table


@projects.command("create")
def projects_create(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Create a project; you become its owner."""
    with connect(ctx) as client:
        project = client.create_project(name)
    emit(project, as_json, _project_table(project))


@projects.command("show")
def projects_show(ctx: typer.Context, project: str, as_json: JsonOption = False) -> None:
    """Show a project (by id or name)."""
    with connect(ctx) as client:
        found = client.get_project(project_id(client, project))
    emit(found, as_json, _project_table(found))


@projects.command("rename")
def projects_rename(
    ctx: typer.Context, project: str, name: str, as_json: JsonOption = False
) -> None:
    """Rename a project (admin+)."""
    with connect(ctx) as client:
        renamed = client.rename_project(project_id(client, project), name)
    emit(renamed, as_json, _project_table(renamed))


@projects.command("delete")
def projects_delete(
    ctx: typer.Context,
    project: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask")] = False,
) -> None:
    """Delete a project with its applications and builds (owner)."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        if not yes:
            typer.confirm(f"Delete project {pid} and every build in it?", abort=True)
        client.delete_project(pid)
    err.print(f"Deleted project {pid}")


members = typer.Typer(help="Members of a project and their roles.", no_args_is_help=True)


def _members_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("user id", "email", "name", "role", "since")
        for m in found:
            t.add_row(m.user_id, m.email, m.name, m.role.value, when(m.created_at))
        return t

    return table


@members.command("list")
def members_list(ctx: typer.Context, project: ProjectRef, as_json: JsonOption = False) -> None:
    """List a project's members."""
    with connect(ctx) as client:
        found = client.list_members(project_id(client, project)).members
    emit(found, as_json, _members_table(found))


@members.command("add")
def members_add(
    ctx: typer.Context,
    email: str,
    project: ProjectRef,
    role: Annotated[str, typer.Option(help="tester, developer, admin or owner")] = "tester",
    as_json: JsonOption = False,
) -> None:
    """Add a registered user to a project (admin+)."""
    with connect(ctx) as client:
        member = client.add_member(project_id(client, project), email, role)
    emit(member, as_json, _members_table([member]))


def _member_id(client: Buildbay, project: str, ref: str) -> str:
    if ref.startswith("usr_"):
        return ref
    emails = {m.user_id: m.email for m in client.list_members(project).members}
    return named(emails, ref.lower(), "member with the e-mail")


@members.command("set-role")
def members_set_role(
    ctx: typer.Context, member: str, role: str, project: ProjectRef, as_json: JsonOption = False
) -> None:
    """Change a member's role (member by user id or e-mail)."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        changed = client.set_member_role(pid, _member_id(client, pid, member), role)
    emit(changed, as_json, _members_table([changed]))


@members.command("remove")
def members_remove(ctx: typer.Context, member: str, project: ProjectRef) -> None:
    """Remove a member from a project (or yourself: leave it)."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        client.remove_member(pid, _member_id(client, pid, member))
    err.print(f"Removed {member} from {pid}")
