"""The `buildbay` command: log in, manage projects, applications, members, API tokens,
webhooks and builds, and upload from a terminal or a CI job.

Exit codes a CI can trust are EXIT_CODES_HELP (shown by `buildbay --help`). Other installed
distributions add command groups through the `buildbay.commands` entry points (the server adds
`serve`, `db`, `users` and `sweep`): each names a function that takes the Typer app.

`buildbay --help` only imports typer and rich: the SDK (httpx) is imported by the commands that
talk to a server.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from buildbay_client.config import DEFAULT_PROFILE, Profile, load_profiles, save_profiles
from buildbay_client.errors import (
    ApiError,
    AuthenticationError,
    BuildbayClientError,
    ConflictError,
    LimitError,
    NetworkError,
    NotFoundError,
    PermissionDenied,
    ServerError,
    ValidationError,
)
from buildbay_client.files import platform_problem

if TYPE_CHECKING:
    from rich.progress import Progress

    from buildbay_client.api import Buildbay, RetryPolicy
    from buildbay_client.models import Model

COMMANDS_GROUP = "buildbay.commands"  # entry points that add commands to `buildbay`

EXIT_AUTH, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_LIMIT, EXIT_NETWORK = 3, 4, 5, 6, 7
EXIT_CODES_HELP = (
    "Exit codes: 0 done (upload: the build is verified and ready); 1 other error; "
    "2 wrong usage; 3 authentication or permission; 4 not found; "
    "5 refused (validation or conflict); 6 a limit (file size, storage quota, rate limit); "
    "7 network or server unavailable after retries."
)
_EXIT_CODES: list[tuple[type[BuildbayClientError], int]] = [
    (AuthenticationError, EXIT_AUTH),
    (PermissionDenied, EXIT_AUTH),
    (NotFoundError, EXIT_NOT_FOUND),
    (ValidationError, EXIT_REFUSED),
    (ConflictError, EXIT_REFUSED),
    (LimitError, EXIT_LIMIT),
    (NetworkError, EXIT_NETWORK),
]
UNAVAILABLE = {502, 503, 504}  # a ServerError with these is "unavailable" (7); others are bugs (1)

# Piped or captured, tables keep their rows on one line (ids are not folded at 80 columns).
# markup=False: names, notes and file names come from users, and "[/]" is not a style.
out = Console(
    highlight=False, markup=False, soft_wrap=True, width=None if sys.stdout.isatty() else 1000
)
err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON")]
ProjectRef = Annotated[str, typer.Option("--project", "-p", help="Project id or name")]
AppRef = Annotated[str, typer.Option("--app", "-a", help="Application id or name")]


@dataclass
class Target:
    """Which server and which credentials: --url/--token or BUILDBAY_URL/BUILDBAY_TOKEN over the
    profile's."""

    profile: str = DEFAULT_PROFILE
    url: str | None = None
    token: str | None = None


def target(ctx: typer.Context) -> Target:
    found = ctx.find_root().obj
    return found if isinstance(found, Target) else Target()


def options(
    ctx: typer.Context,
    profile: Annotated[
        str,
        typer.Option(
            envvar="BUILDBAY_PROFILE", help="Profile (environment) to use: production, development"
        ),
    ] = DEFAULT_PROFILE,
    url: Annotated[
        str | None, typer.Option(envvar="BUILDBAY_URL", help="Server address (overrides profile)")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="BUILDBAY_TOKEN", help="API token (overrides profile)", show_default=False
        ),
    ] = None,
) -> None:
    ctx.obj = Target(profile, url, token)


@contextmanager
def connect(ctx: typer.Context) -> Iterator[Buildbay]:
    """A client for the chosen target; API errors become one line and the exit code."""
    chosen = target(ctx)
    with failures():  # a profiles file that cannot be read: one line, exit 1
        profiles = load_profiles()
    profile = profiles.get(chosen.profile)
    url = (chosen.url or (profile.url if profile else "")).rstrip("/") or None
    if profile is not None and url != profile.url:
        profile = None  # another server: never send it this profile's credentials
    if url is None:
        _fail(
            f"no server for profile {chosen.profile!r}: run `buildbay login --url URL` "
            "or set BUILDBAY_URL",
            EXIT_AUTH,
        )
    token = chosen.token or (profile.token if profile else None)
    refresh = None if chosen.token else (profile.refresh_token if profile else None)

    def keep(tokens: Any) -> None:  # a refreshed pair replaces the saved one
        if profile is not None and not chosen.token:
            profile.token, profile.refresh_token = tokens.access_token, tokens.refresh_token
            save_profiles(profiles)

    from buildbay_client.api import Buildbay

    with (
        failures(),
        Buildbay(url, token, refresh_token=refresh, on_tokens=keep, retry=_retry()) as client,
    ):
        yield client


def _retry() -> RetryPolicy:
    """BUILDBAY_RETRY_ATTEMPTS: how many times a step is tried in all (default 8: 23-45 s).
    Each wait is said on stderr, with what failed and where, never a silent pause."""
    from buildbay_client.api import RetryPolicy

    attempts = os.environ.get("BUILDBAY_RETRY_ATTEMPTS", "")
    policy = RetryPolicy(attempts=max(1, int(attempts))) if attempts.isdigit() else RetryPolicy()

    def say(why: str, seconds: float, tried: int) -> None:
        err.print(
            f"buildbay: {why}; trying again in {seconds:.1f} s (try {tried + 1} of "
            f"{policy.attempts})"
        )

    policy.on_retry = say
    return policy


@contextmanager
def failures() -> Iterator[None]:
    try:
        yield
    except BuildbayClientError as exc:
        code = next((c for kind, c in _EXIT_CODES if isinstance(exc, kind)), 1)
        if isinstance(exc, ServerError) and exc.status in UNAVAILABLE:
            code = EXIT_NETWORK
        message = str(exc)
        if isinstance(exc, ApiError) and exc.request_id:
            message += f" [requestId {exc.request_id}]"
        _fail(message, code)
    except (OSError, UnicodeError) as exc:  # a local file that cannot be read or written
        _fail(f"{type(exc).__name__}: {exc}", 1)


def _fail(message: str, code: int) -> NoReturn:
    err.print(f"buildbay: {message}")
    raise typer.Exit(code)


def emit(value: Model | Sequence[Model], as_json: bool, table: Callable[[], Table]) -> None:
    if as_json:
        from buildbay_client.models import to_json

        out.print_json(json.dumps(to_json(value)))
    else:
        out.print(table())


def _table(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


def _size(size: int) -> str:
    """`812 bytes`, `8.5 KiB`, `1 GiB`: one decimal at most (as the web console shows sizes)."""
    if size < 1024:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f}".removesuffix(".0") + f" {unit}"


def version_label(metadata: dict[str, Any] | None) -> str | None:
    """A build's version as people read it: `1.4.2 (42)` (an APK's versionName and versionCode,
    an .ipa's CFBundleShortVersionString and CFBundleVersion), or whichever of the two it has."""
    metadata = metadata or {}
    name = metadata.get("versionName") or metadata.get("shortVersion")
    code = metadata.get("versionCode") or metadata.get("buildNumber")
    if name and code:
        return f"{name} ({code})"
    return str(name or code) if name or code else None


# -- resolving names ----------------------------------------------------------------------------


_ID = re.compile(r"^(prj|app)_[0-9A-HJKMNP-TV-Z]{26}$")
_GROUP_ID = re.compile(r"^grp_[0-9A-HJKMNP-TV-Z]{26}$")


def project_id(client: Buildbay, ref: str) -> str:
    """A project given by id, or by its name among your projects."""
    if _ID.match(ref):
        return ref
    found = _all(lambda cursor: client.list_projects(limit=100, cursor=cursor), "projects")
    return _named({p.id: p.name for p in found}, ref, "project named")


def app_id(client: Buildbay, project: str, ref: str) -> str:
    """An application given by id, or by its name in the project."""
    if _ID.match(ref):
        return ref
    found = _all(
        lambda cursor: client.list_applications(project, limit=100, cursor=cursor), "applications"
    )
    return _named({a.id: a.name for a in found}, ref, "application named")


def group_id(client: Buildbay, project: str, ref: str) -> str:
    """A tester group given by id (`everyone` too), or by its name in the project."""
    if ref == "everyone" or _GROUP_ID.match(ref):
        return ref
    found = _all(lambda cursor: client.list_groups(project, limit=100, cursor=cursor), "groups")
    return _named({g.id: g.name for g in found}, ref, "tester group named")


def _named(names: dict[str, str], ref: str, what: str) -> str:
    """The id whose name is `ref`: exactly, else in another case (the server keeps names apart
    regardless of case); none names the closest ones, if any is close."""
    matches = [i for i, name in names.items() if name == ref] or [
        i for i, name in names.items() if name.casefold() == ref.casefold()
    ]
    if not matches:
        close = difflib.get_close_matches(ref, list(names.values()), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(n) for n in close)}?" if close else ""
        _fail(f"no {what} {ref!r} (use its id, or check the name){hint}", EXIT_NOT_FOUND)
    if len(matches) > 1:
        _fail(f"more than one {what} {ref!r}: use its id ({', '.join(matches)})", EXIT_REFUSED)
    return matches[0]


# -- login --------------------------------------------------------------------------------------


def login(
    ctx: typer.Context,
    url: Annotated[
        str | None, typer.Option("--url", help="Server address, e.g. https://builds.example.com")
    ] = None,
    email: Annotated[str | None, typer.Option(help="Log in with e-mail and password")] = None,
    token: Annotated[
        str | None, typer.Option("--token", help="Use an API token instead (bb_...)")
    ] = None,
) -> None:
    """Log in and save the credentials in the profile (file mode 0600)."""
    chosen = target(ctx)
    with failures():  # a profiles file that cannot be read: one line, exit 1
        profiles = load_profiles()
    previous = profiles.get(chosen.profile)
    server = url or chosen.url or (previous.url if previous else None)
    if server is None:
        server = typer.prompt("Server address")
    profile = Profile(url=server.rstrip("/"))
    from buildbay_client.api import Buildbay

    with failures(), Buildbay(profile.url, token, retry=_retry()) as client:
        if token:
            user = client.me()
            profile.token, profile.email = token, user.email
        else:
            email = email or typer.prompt("E-mail")
            password = typer.prompt("Password", hide_input=True)
            tokens = client.login(email, password)
            profile.token, profile.refresh_token = tokens.access_token, tokens.refresh_token
            profile.email = tokens.user.email
    profiles[chosen.profile] = profile
    path = save_profiles(profiles)
    err.print(f"Logged in to {profile.url} as {profile.email} (profile {chosen.profile}, {path})")


def logout(ctx: typer.Context) -> None:
    """End the session (an access token is revoked) and forget the profile's credentials."""
    chosen = target(ctx)
    with failures():  # a profiles file that cannot be read: one line, exit 1
        profiles = load_profiles()
    profile = profiles.get(chosen.profile)
    if profile is None or profile.token is None:
        err.print(f"Profile {chosen.profile} is not logged in")
        return
    from buildbay_client.api import Buildbay

    try:
        if profile.refresh_token:  # a login session; API tokens are revoked with `tokens revoke`
            with (
                failures(),
                Buildbay(profile.url, profile.token, refresh_token=profile.refresh_token) as client,
            ):
                client.logout(profile.refresh_token)
    finally:  # forgotten here whatever the server said
        profile.token = profile.refresh_token = None
        save_profiles(profiles)
    err.print(f"Logged out of {profile.url}")


def whoami(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Who the token belongs to, with the plan, storage usage and limits."""
    with connect(ctx) as client:
        me = client.me()
    quota = me.limits.storage_quota_bytes

    def table() -> Table:
        t = _table("email", "name", "plan", "storage used", "quota")
        t.add_row(
            me.email, me.name, me.plan.value, _size(me.usage.storage_bytes),
            _size(quota) if quota else "unlimited",
        )  # fmt: skip
        return t

    emit(me, as_json, table)


# -- projects -----------------------------------------------------------------------------------

projects = typer.Typer(help="Projects you are a member of.", no_args_is_help=True)


@projects.command("list")
def projects_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List your projects, newest first."""
    with connect(ctx) as client:
        found = _all(lambda cursor: client.list_projects(limit=100, cursor=cursor), "projects")

    def table() -> Table:
        t = _table("id", "name", "applications", "created")
        for p in found:
            t.add_row(p.id, p.name, str(p.applications_count), _when(p.created_at))
        return t

    emit(found, as_json, table)


def _all(fetch: Callable[[str | None], Any], field: str) -> list[Any]:
    items: list[Any] = []
    cursor = None
    while True:
        page = fetch(cursor)
        items += getattr(page, field)
        cursor = page.next_cursor
        if cursor is None:
            return items


def _project_table(p: Any) -> Callable[[], Table]:
    def table() -> Table:
        t = _table("id", "name", "applications", "created", "updated")
        t.add_row(p.id, p.name, str(p.applications_count), _when(p.created_at), _when(p.updated_at))
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


# -- members ------------------------------------------------------------------------------------

members = typer.Typer(help="Members of a project and their roles.", no_args_is_help=True)


def _members_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = _table("user id", "email", "name", "role", "since")
        for m in found:
            t.add_row(m.user_id, m.email, m.name, m.role.value, _when(m.created_at))
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
    return _named(emails, ref.lower(), "member with the e-mail")


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


# -- applications -------------------------------------------------------------------------------

apps = typer.Typer(help="Applications inside a project.", no_args_is_help=True)


def _apps_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = _table("id", "name", "platform", "bundle id", "ready builds", "retention")
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
        found = _all(
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
        _fail("nothing to change: give --name, --platform, --bundle-id or a retention option", 2)
    with connect(ctx) as client:
        pid = project_id(client, project)
        updated = client.update_application(pid, app_id(client, pid, app), changes)
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


# -- release channels ---------------------------------------------------------------------------

channels = typer.Typer(
    help="Release channels of an application (an installed app asks for updates on one).",
    no_args_is_help=True,
)


def _channels_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = _table("id", "name", "ready builds", "newest build", "created")
        for c in found:
            t.add_row(
                c.id, c.name, str(c.builds_count), c.latest_build_id or "-", _when(c.created_at)
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


# -- builds -------------------------------------------------------------------------------------

builds = typer.Typer(help="Builds of an application.", no_args_is_help=True)


def _builds_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = _table("id", "file", "version", "size", "status", "uploaded", "notes")
        for b in found:
            notes = (b.notes or "").splitlines()[0][:40] if b.notes else ""
            t.add_row(
                b.build_id, b.file_name, version_label(b.metadata) or "-", _size(b.file_size),
                b.status.value, _when(b.verified_at or b.created_at), notes,
            )  # fmt: skip
        return t

    return table


def _links(build: Any) -> None:
    """The addresses a person or the next CI step wants, one per line."""
    out.print(f"build    {build.build_id} ({build.status.value})")
    version = version_label(build.metadata)
    if version:
        out.print(f"version  {version}")
    if build.download_url:
        out.print(f"download {build.download_url}")
    if build.install_url:
        out.print(f"install  {build.install_url}")


@builds.command("list")
def builds_list(
    ctx: typer.Context,
    project: ProjectRef,
    app: AppRef,
    version_name: Annotated[str | None, typer.Option(help="Only this version name")] = None,
    sort: Annotated[str, typer.Option(help="newest or version")] = "newest",
    limit: Annotated[int, typer.Option(min=1, max=100, help="Builds per page")] = 20,
    cursor: Annotated[str | None, typer.Option(help="The next page, as the last one said")] = None,
    as_json: JsonOption = False,
) -> None:
    """List builds, newest first (or by version), a page at a time."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        page = client.list_builds(
            pid, app_id(client, pid, app), limit, cursor, version_name=version_name, sort=sort
        )
    if as_json:
        emit(page, True, _builds_table(page.builds))  # {"builds": [...], "nextCursor": ...}
        return
    out.print(_builds_table(page.builds)())
    if page.next_cursor:
        err.print(f"More: --cursor {page.next_cursor}")


@builds.command("show")
def builds_show(
    ctx: typer.Context, build_id: str, project: ProjectRef, app: AppRef, as_json: JsonOption = False
) -> None:
    """Show a build with its metadata and links."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        build = client.get_build(pid, app_id(client, pid, app), build_id)
    if as_json:
        emit(build, True, _builds_table([build]))
        return
    out.print(_builds_table([build])())
    _links(build)


@builds.command("latest")
def builds_latest(
    ctx: typer.Context,
    project: ProjectRef,
    app: AppRef,
    version_name: Annotated[str | None, typer.Option(help="The newest of this version")] = None,
    as_json: JsonOption = False,
) -> None:
    """The newest ready build: its id and links."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        build = client.latest_build(pid, app_id(client, pid, app), version_name)
    if as_json:
        emit(build, True, _builds_table([build]))
    else:
        _links(build)


@builds.command("download")
def builds_download(
    ctx: typer.Context,
    build_id: str,
    project: ProjectRef,
    app: AppRef,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="File or directory to save to")
    ] = Path(),
) -> None:
    """Download a ready build's file."""
    with connect(ctx) as client, _progress("Downloading") as progress:
        pid = project_id(client, project)
        saved = client.download_build(
            pid, app_id(client, pid, app), build_id, output, progress=progress
        )
    err.print(f"Saved {saved}")


@builds.command("delete")
def builds_delete(
    ctx: typer.Context,
    build_id: str,
    project: ProjectRef,
    app: AppRef,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask")] = False,
) -> None:
    """Delete a build and its file (developer+)."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        aid = app_id(client, pid, app)
        if not yes:
            typer.confirm(f"Delete build {build_id} and its file for good?", abort=True)
        client.delete_build(pid, aid, build_id)
    err.print(f"Deleted build {build_id}")


# -- upload -------------------------------------------------------------------------------------


def _interactive() -> bool:
    return err.is_terminal and not os.environ.get("CI")


def progress_bar(console: Console) -> Progress:
    """What a terminal shows of a transfer. Its text is plain, never markup: the consoles print
    user text (file and project names) and so read no markup, and a column written as markup
    showed as `[progress.description]Uploading`."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("{task.description}", style="progress.description", markup=False),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


@contextmanager
def _progress(verb: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on a terminal; in CI, a plain line every 10 % (and at the end)."""
    if _interactive():
        with progress_bar(err) as bar:
            task = bar.add_task(verb, total=None)

            def show(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield show
        return
    state = {"next": 0, "last": 0, "started": time.monotonic(), "base": -1}

    def log(done: int, total: int) -> None:
        if state["base"] < 0:  # a resumed upload starts with what had arrived before
            state["base"] = done
        if done < state["last"]:  # a retry sends the file (or a part) again
            state.update(next=0, started=time.monotonic(), base=done)
            err.print(f"{verb}: starting again after a failure")
        state["last"] = done
        if total and (done >= state["next"] or done == total):
            percent = done * 100 // total
            elapsed = max(time.monotonic() - state["started"], 1e-6)
            rate = (done - state["base"]) / elapsed / 1024 / 1024
            err.print(f"{verb}: {percent:3d}% {_size(done)} of {_size(total)} ({rate:.1f} MiB/s)")
            state["next"] = min(total, done + max(total // 10, 1))

    yield log


def upload(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="The build file")
    ],
    project: ProjectRef,
    app: AppRef,
    notes: Annotated[str | None, typer.Option(help="Release notes")] = None,
    notes_file: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="Release notes from a file"),
    ] = None,
    install_link_hours: Annotated[
        int | None,
        typer.Option(min=1, max=2160, help="Also create an install link valid this long"),
    ] = None,
    channel: Annotated[
        list[str] | None,
        typer.Option(
            "--channel",
            help="Publish to this release channel (repeat for several; default: `default`, "
            "once the build goes to everyone)",
        ),
    ] = None,
    mandatory: Annotated[
        bool, typer.Option(help="Update checks that find this build say the update is mandatory")
    ] = False,
    distribute: Annotated[
        list[str] | None,
        typer.Option(
            "--distribute",
            help="Distribute it to this tester group (name or id; `everyone`); repeatable",
        ),
    ] = None,
    distribute_email: Annotated[
        list[str] | None,
        typer.Option("--distribute-email", help="Distribute it to this e-mail; repeatable"),
    ] = None,
    parts_in_flight: Annotated[
        int,
        typer.Option(
            min=1,
            max=32,
            help="Parts sent at once, for a file above 64 MiB (sent in parts; running the "
            "same upload again resumes it)",
        ),
    ] = 4,  # as the SDK's PARTS_IN_FLIGHT (api.py is imported only when a command runs)
    as_json: JsonOption = False,
) -> None:
    """Upload a build and verify it. Exits 0 only once the build is ready. Its testers are
    mailed (once each) when it is distributed to them.

    A file above 64 MiB goes in parts, several at once; if the upload is cut off (a kill, a
    broken network), running the same command again sends only the parts still missing."""
    if notes is not None and notes_file is not None:
        _fail("give --notes or --notes-file, not both", 2)
    with connect(ctx) as client:
        text = notes_file.read_text(encoding="utf-8") if notes_file is not None else notes
        pid = project_id(client, project)
        aid = app_id(client, pid, app)
        # Before a byte is read or sent: a 2 GB file the application would refuse costs nothing.
        if problem := platform_problem(file, client.get_application(pid, aid).platform.value):
            _fail(problem, EXIT_REFUSED)
        groups = [group_id(client, pid, g) for g in distribute or []]
        with _progress("Uploading") as progress:
            build = client.upload_build(
                pid, aid, file, notes=text, install_link_hours=install_link_hours,
                progress=progress, channels=channel or None, mandatory=mandatory,
                distribute_to=groups, distribute_emails=distribute_email or [],
                parts_in_flight=parts_in_flight,
            )  # fmt: skip
    if build.status.value != "ready":  # pragma: no cover - verify answers ready or an error
        _fail(f"build {build.build_id} is {build.status.value}, not ready", 1)
    if as_json:
        emit(build, True, _builds_table([build]))
    else:
        _links(build)


# -- API tokens ---------------------------------------------------------------------------------

tokens = typer.Typer(help="Your API tokens (for CI).", no_args_is_help=True)


@tokens.command("list")
def tokens_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List your API tokens (never their secret), with their scope and projects."""
    with connect(ctx) as client:
        found = client.list_api_tokens().api_tokens
        limited = any(x.project_ids is not None for x in found)
        names = _project_names(client) if limited and not as_json else {}

    def table() -> Table:
        t = _table("id", "name", "prefix", "scope", "projects", "created", "expires", "last used")
        for x in found:
            t.add_row(
                x.id, x.name, x.prefix, _scope(x.scope), _projects(x.project_ids, names),
                _when(x.created_at), _when(x.expires_at), _when(x.last_used_at),
            )  # fmt: skip
        return t

    emit(found, as_json, table)


def _project_names(client: Buildbay) -> dict[str, str]:
    found = _all(lambda cursor: client.list_projects(limit=100, cursor=cursor), "projects")
    return {p.id: p.name for p in found}


def _scope(scope: Any) -> str:  # a models.TokenScope, or None
    return str(scope.value) if scope is not None else "everything"


TOKEN_SCOPES = ("read", "builds:write")


def _token_scope(value: str | None) -> str | None:
    if value is not None and value not in TOKEN_SCOPES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(TOKEN_SCOPES)}")
    return value


def _projects(ids: list[str] | None, names: dict[str, str]) -> str:
    if ids is None:
        return "all"
    return ", ".join(names.get(i, i) for i in ids)


@tokens.command("create")
def tokens_create(
    ctx: typer.Context,
    name: str,
    expires_in_days: Annotated[int | None, typer.Option(min=1, max=365)] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            callback=_token_scope,
            metavar="read|builds:write",
            help="read: read and download only; builds:write: also upload, verify and delete "
            "builds and share them. Without it: all you may do (never the account)",
            show_default=False,
        ),
    ] = None,
    project: Annotated[
        list[str] | None,
        typer.Option(
            "--project",
            help="Only this project (name or id); repeat for several. Without it: all yours",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create an API token; its secret is printed this once."""
    with connect(ctx) as client:
        project_ids = [project_id(client, p) for p in project] if project else None
        created = client.create_api_token(name, expires_in_days, scope, project_ids)
    if as_json:
        emit(created, True, lambda: _table())
        return
    err.print(f"Created {created.id} ({created.name}); the secret is shown once:")
    out.print(created.token)


@tokens.command("revoke")
def tokens_revoke(ctx: typer.Context, token_id: str) -> None:
    """Revoke an API token: it stops working at once."""
    with connect(ctx) as client:
        client.revoke_api_token(token_id)
    err.print(f"Revoked {token_id}")


# -- webhooks -----------------------------------------------------------------------------------

webhooks = typer.Typer(help="A project's webhooks (admin+).", no_args_is_help=True)


def _webhooks_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = _table("id", "url", "events", "state", "last attempt")
        for w in found:
            state = ("failing" if w.failing_since else "enabled") if w.enabled else "disabled"
            t.add_row(w.id, w.url, ", ".join(w.events), state, _when(w.last_delivery_at))
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
        emit(created, True, lambda: _table())
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
        emit(accepted, True, lambda: _table())
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
        t = _table("id", "event", "status", "attempts", "last answer", "created", "webhook-id")
        for d in found:
            answer = str(d.last_status_code) if d.last_status_code else (d.last_error or "")
            t.add_row(
                d.id, d.event_type, d.status.value, str(d.attempts), answer,
                _when(d.created_at), d.event_id,
            )  # fmt: skip
        return t

    emit(found, as_json, table)


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
