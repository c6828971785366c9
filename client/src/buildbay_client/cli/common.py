"""What the commands share: the target server and its credentials, the exit codes, output
(tables or JSON), and finding a project, application or group by id or name."""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from buildbay_client.config import DEFAULT_PROFILE, load_profiles, save_profiles
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
    SignInFailed,
    ValidationError,
)

if TYPE_CHECKING:
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
    (SignInFailed, EXIT_AUTH),
    (PermissionDenied, EXIT_AUTH),
    (NotFoundError, EXIT_NOT_FOUND),
    (ValidationError, EXIT_REFUSED),
    (ConflictError, EXIT_REFUSED),
    (LimitError, EXIT_LIMIT),
    (NetworkError, EXIT_NETWORK),
]
UNAVAILABLE = {502, 503, 504}  # a ServerError with these is "unavailable" (7); others are bugs (1)

# Piped or captured, tables keep their rows on one line (ids are not folded at 80 columns),
# on stderr too (the builds a retention rule deletes, in a CI log).
# markup=False: names, notes and file names come from users, and "[/]" is not a style.
out = Console(
    highlight=False, markup=False, soft_wrap=True, width=None if sys.stdout.isatty() else 1000
)
err = Console(
    stderr=True,
    highlight=False,
    markup=False,
    soft_wrap=True,
    width=None if sys.stderr.isatty() else 1000,
)

# What a terminal shows of text others wrote (a tester's feedback, an app's context): line breaks
# and tabs. The other control characters go (an escape sequence can clear the screen, retitle
# the window, write a link or the clipboard, a carriage return write over a line), and so do
# the bidirectional controls (which make text read otherwise than it is).
_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
_BIDI_CONTROLS = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_NOT_SHOWN = str.maketrans(dict.fromkeys([*_CONTROLS, *_BIDI_CONTROLS]))


def plain(text: str) -> str:
    """`text` as a terminal may show it: line ends as `\\n`, tabs kept, other control and
    bidirectional control characters left out."""
    return text.replace("\r\n", "\n").translate(_NOT_SHOWN)


JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON")]
ProjectRef = Annotated[str, typer.Option("--project", "-p", help="Project id or name")]
AppRef = Annotated[str, typer.Option("--app", "-a", help="Application id or name")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask")]


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


def server_and_token(ctx: typer.Context) -> tuple[str | None, bool]:
    """The server `connect` would reach, and whether it has a token for it (given, or the
    profile's for that server)."""
    chosen = target(ctx)
    with failures():
        profile = load_profiles().get(chosen.profile)
    url = (chosen.url or (profile.url if profile else "")).rstrip("/") or None
    if profile is not None and url != profile.url:
        profile = None
    return url, bool(chosen.token or (profile.token if profile else None))


def use_token(ctx: typer.Context, url: str, token: str) -> None:
    """From now on `connect` reaches `url` with `token` (e.g. a trusted publisher's)."""
    chosen = target(ctx)
    ctx.find_root().obj = Target(chosen.profile, url, token)


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
        fail(
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
        Buildbay(url, token, refresh_token=refresh, on_tokens=keep, retry=retry_policy()) as client,
    ):
        yield client


def retry_policy() -> RetryPolicy:
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
        fail(message, code)
    except (OSError, UnicodeError) as exc:  # a local file that cannot be read or written
        fail(f"{type(exc).__name__}: {exc}", 1)


def fail(message: str, code: int) -> NoReturn:
    err.print(f"buildbay: {message}")
    raise typer.Exit(code)


def emit(value: Model | Sequence[Model], as_json: bool, table: Callable[[], Table]) -> None:
    if as_json:
        from buildbay_client.models import to_json

        out.print_json(json.dumps(to_json(value)))
    else:
        out.print(table())


def table_of(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


def size_text(size: int) -> str:
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


ID_PATTERN = re.compile(r"^(prj|app)_[0-9A-HJKMNP-TV-Z]{26}$")
GROUP_ID_PATTERN = re.compile(r"^grp_[0-9A-HJKMNP-TV-Z]{26}$")


def project_id(client: Buildbay, ref: str) -> str:
    """A project given by id, or by its name among your projects."""
    if ID_PATTERN.match(ref):
        return ref
    found = every_page(lambda cursor: client.list_projects(limit=100, cursor=cursor), "projects")
    return named({p.id: p.name for p in found}, ref, "project named")


def app_id(client: Buildbay, project: str, ref: str) -> str:
    """An application given by id, or by its name in the project."""
    if ID_PATTERN.match(ref):
        return ref
    found = every_page(
        lambda cursor: client.list_applications(project, limit=100, cursor=cursor), "applications"
    )
    return named({a.id: a.name for a in found}, ref, "application named")


APP_ID_PATTERN = re.compile(r"^app_[0-9A-HJKMNP-TV-Z]{26}$")


def project_of_application(client: Buildbay, application_id: str) -> str:
    """The project, among yours, that holds the application with this id: an application named
    by its id alone (`--app-id`) needs neither its name nor its project's, which may change."""
    found = every_page(lambda cursor: client.list_projects(limit=100, cursor=cursor), "projects")
    for project in found:
        try:
            client.get_application(project.id, application_id)
        except NotFoundError:
            continue
        return str(project.id)
    fail(f"no application {application_id} in your projects (check the id)", EXIT_NOT_FOUND)


def group_id(client: Buildbay, project: str, ref: str) -> str:
    """A tester group given by id (`everyone` too), or by its name in the project."""
    if ref == "everyone" or GROUP_ID_PATTERN.match(ref):
        return ref
    found = every_page(
        lambda cursor: client.list_groups(project, limit=100, cursor=cursor), "groups"
    )
    return named({g.id: g.name for g in found}, ref, "tester group named")


def named(names: dict[str, str], ref: str, what: str) -> str:
    """The id whose name is `ref`: exactly, else in another case (the server keeps names apart
    regardless of case); none names the closest ones, if any is close."""
    matches = [i for i, name in names.items() if name == ref] or [
        i for i, name in names.items() if name.casefold() == ref.casefold()
    ]
    if not matches:
        close = difflib.get_close_matches(ref, list(names.values()), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(n) for n in close)}?" if close else ""
        fail(f"no {what} {ref!r} (use its id, or check the name){hint}", EXIT_NOT_FOUND)
    if len(matches) > 1:
        fail(f"more than one {what} {ref!r}: use its id ({', '.join(matches)})", EXIT_REFUSED)
    return matches[0]


def every_page(fetch: Callable[[str | None], Any], field: str) -> list[Any]:
    items: list[Any] = []
    cursor = None
    while True:
        page = fetch(cursor)
        items += getattr(page, field)
        cursor = page.next_cursor
        if cursor is None:
            return items
