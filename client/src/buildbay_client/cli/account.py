"""Signing in and out, who you are, and your API tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from buildbay_client.cli.common import (
    JsonOption,
    connect,
    emit,
    err,
    every_page,
    fail,
    failures,
    out,
    project_id,
    retry_policy,
    size_text,
    table_of,
    target,
    when,
)
from buildbay_client.config import Profile, load_profiles, save_profiles

if TYPE_CHECKING:
    from buildbay_client.api import Buildbay
    from buildbay_client.models import CliToken, TokenResponse


def login(
    ctx: typer.Context,
    url: Annotated[
        str | None, typer.Option("--url", help="Server address, e.g. https://builds.example.com")
    ] = None,
    email: Annotated[str | None, typer.Option(help="Log in with e-mail and password")] = None,
    token: Annotated[
        str | None, typer.Option("--token", help="Use an API token instead (bb_...)")
    ] = None,
    sso: Annotated[
        bool,
        typer.Option(
            "--sso",
            help="Sign in in the browser, as in the web console (your company's sign-in "
            "where the server has one); saves an API token named 'CLI on <this computer>'",
        ),
    ] = False,
    device: Annotated[
        bool,
        typer.Option(
            "--device",
            help="With --sso: enter a code on any computer or phone instead of opening a "
            "browser here (by itself over SSH or without a display)",
        ),
    ] = False,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="With --sso: print the address, open nothing")
    ] = False,
    timeout: Annotated[
        int, typer.Option(min=10, max=3600, help="With --sso: seconds to wait for you")
    ] = 300,
) -> None:
    """Log in and save the credentials in the profile (file mode 0600)."""
    chosen = target(ctx)
    if (device or no_browser) and not sso:
        raise typer.BadParameter("--device and --no-browser go with --sso")
    with failures():  # a profiles file that cannot be read: one line, exit 1
        profiles = load_profiles()
    previous = profiles.get(chosen.profile)
    server = url or chosen.url or (previous.url if previous else None)
    if server is None:
        server = typer.prompt("Server address")
    profile = Profile(url=server.rstrip("/"))
    from buildbay_client.api import Buildbay

    with failures(), Buildbay(profile.url, token, retry=retry_policy()) as client:
        if sso:
            created = _sign_in_through_the_browser(
                client, profile.url, device=device, browser=not no_browser, timeout=timeout
            )
            profile.token, profile.email = created.token, created.user.email
        elif token:
            user = client.me()
            profile.token, profile.email = token, user.email
        else:
            email = email or typer.prompt("E-mail")
            password = typer.prompt("Password", hide_input=True)
            tokens = _password_login(client, email, password)
            profile.token, profile.refresh_token = tokens.access_token, tokens.refresh_token
            profile.email = tokens.user.email
    profiles[chosen.profile] = profile
    path = save_profiles(profiles)
    err.print(f"Logged in to {profile.url} as {profile.email} (profile {chosen.profile}, {path})")


def _password_login(client: Buildbay, email: str, password: str) -> TokenResponse:
    """The password sign-in, or where the server signs people in through its identity
    provider only (BUILDBAY_OIDC_ONLY: 403 `sso_only`), the command that does."""
    from buildbay_client.errors import ApiError

    try:
        return client.login(email, password)
    except ApiError as exc:
        if exc.code != "sso_only":
            raise
        fail(f"{exc.detail}. Sign in with `buildbay login --sso` instead", 2)


def _sign_in_through_the_browser(
    client: Buildbay, server: str, *, device: bool, browser: bool, timeout: int
) -> CliToken:
    """`login --sso`: the loopback redirect where a browser here can be opened, else (or with
    --device, or when the loopback cannot listen) the device code. Ctrl-C stops it: exit 130."""
    from buildbay_client import sso

    try:
        if not device and (not browser or sso.can_open_browser()):
            try:
                listener = sso.listen()
            except OSError as exc:
                err.print(f"Cannot listen on 127.0.0.1 ({exc}): signing in with a code instead")
            else:
                return sso.loopback_sign_in(
                    client, server, listener, err.print, open_browser=browser, timeout=timeout
                )
        return sso.device_sign_in(client, err.print, open_browser=browser, timeout=timeout)
    except KeyboardInterrupt:
        err.print("Sign-in stopped; nothing was saved")
        raise typer.Exit(130) from None


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
        t = table_of("email", "name", "plan", "storage used", "quota")
        t.add_row(
            me.email, me.name, me.plan.value, size_text(me.usage.storage_bytes),
            size_text(quota) if quota else "unlimited",
        )  # fmt: skip
        return t

    emit(me, as_json, table)


tokens = typer.Typer(help="Your API tokens (for CI).", no_args_is_help=True)


@tokens.command("list")
def tokens_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List your API tokens (never their secret), with their scope and projects."""
    with connect(ctx) as client:
        found = client.list_api_tokens().api_tokens
        limited = any(x.project_ids is not None for x in found)
        names = _project_names(client) if limited and not as_json else {}

    def table() -> Table:
        t = table_of("id", "name", "prefix", "scope", "projects", "created", "expires", "last used")
        for x in found:
            t.add_row(
                x.id, x.name, x.prefix, _scope(x.scope), _projects(x.project_ids, names),
                when(x.created_at), when(x.expires_at), when(x.last_used_at),
            )  # fmt: skip
        return t

    emit(found, as_json, table)


def _project_names(client: Buildbay) -> dict[str, str]:
    found = every_page(lambda cursor: client.list_projects(limit=100, cursor=cursor), "projects")
    return {p.id: p.name for p in found}


def _scope(scope: Any) -> str:  # a models.TokenScope, or None
    return str(scope.value) if scope is not None else "everything"


TOKEN_SCOPES = ("read", "upload", "builds:write")


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
            metavar="read|upload|builds:write",
            help="read: read and download only; upload: also upload and verify builds; "
            "builds:write: also delete builds and share them. Without it: all you may do "
            "(never the account)",
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
        emit(created, True, lambda: table_of())
        return
    err.print(f"Created {created.id} ({created.name}); the secret is shown once:")
    out.print(created.token)


@tokens.command("revoke")
def tokens_revoke(ctx: typer.Context, token_id: str) -> None:
    """Revoke an API token: it stops working at once."""
    with connect(ctx) as client:
        client.revoke_api_token(token_id)
    err.print(f"Revoked {token_id}")
