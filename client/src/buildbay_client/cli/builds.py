"""Builds: listing, showing, downloading and deleting them, and uploading one."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from buildbay_client.cli.common import (
    APP_ID_PATTERN,
    EXIT_AUTH,
    EXIT_REFUSED,
    GROUP_ID_PATTERN,
    AppRef,
    JsonOption,
    ProjectRef,
    app_id,
    connect,
    emit,
    err,
    every_page,
    fail,
    group_id,
    out,
    project_id,
    project_of_application,
    server_and_token,
    size_text,
    table_of,
    use_token,
    version_label,
    when,
)
from buildbay_client.files import platform_problem
from buildbay_client.source import BuildSource, problems

if TYPE_CHECKING:
    from rich.progress import Progress


builds = typer.Typer(help="Builds of an application.", no_args_is_help=True)


class OnDuplicate(StrEnum):
    REUSE = "reuse"
    REFUSE = "refuse"


class Architecture(StrEnum):
    """verify's `architecture` (`universal`: one file for both)."""

    X64 = "x64"
    ARM64 = "arm64"
    UNIVERSAL = "universal"


def _builds_table(found: Sequence[Any]) -> Callable[[], Table]:
    def table() -> Table:
        t = table_of("id", "file", "version", "size", "status", "uploaded", "source", "notes")
        for b in found:
            notes = (b.notes or "").splitlines()[0][:40] if b.notes else ""
            t.add_row(
                b.build_id, b.file_name, version_label(b.metadata) or "-", size_text(b.file_size),
                b.status.value, when(b.verified_at or b.created_at), _source_text(b), notes,
            )  # fmt: skip
        return t

    return table


def _source_text(build: Any) -> str:
    """`main 3f0a9c1`: the build's branch (or tag) and short commit, or `-`."""
    source = build.source
    if source is None:
        return "-"
    words = [source.branch or source.tag or "", (source.commit or "")[:7]]
    return " ".join(w for w in words if w) or "-"


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
    if build.console_url:
        out.print(f"console  {build.console_url}")


def _say_reused_and_warnings(build: Any) -> None:
    """On stderr, beside the build: that it was already there, and what the server warns."""
    from buildbay_client.models import ReusedBuild

    if isinstance(build, ReusedBuild):
        if build.sent:
            err.print(f"already uploaded as build {build.build_id}; the copy sent was dropped")
        else:
            err.print(f"already uploaded as build {build.build_id}, nothing sent")
    for warning in build.warnings:
        err.print(f"warning: {warning.detail}")


@builds.command("list")
def builds_list(
    ctx: typer.Context,
    project: ProjectRef,
    app: AppRef,
    version_name: Annotated[str | None, typer.Option(help="Only this version name")] = None,
    sort: Annotated[str, typer.Option(help="newest or version")] = "newest",
    limit: Annotated[int, typer.Option(min=1, max=100, help="Builds per page")] = 20,
    cursor: Annotated[str | None, typer.Option(help="The next page, as the last one said")] = None,
    branch: Annotated[str | None, typer.Option(help="Only builds of this branch")] = None,
    commit: Annotated[
        str | None, typer.Option(help="Only builds of this commit (or its first 7+ digits)")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List builds, newest first (or by version), a page at a time."""
    with connect(ctx) as client:
        pid = project_id(client, project)
        page = client.list_builds(
            pid, app_id(client, pid, app), limit, cursor, version_name=version_name, sort=sort,
            branch=branch, commit=commit,
        )  # fmt: skip
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


GroupOption = Annotated[
    list[str] | None,
    typer.Option(
        "--group", "-g", metavar="GROUP",
        help="A tester group (name or id; `everyone`); repeat for several",
    ),
]  # fmt: skip
EmailOption = Annotated[
    list[str] | None,
    typer.Option("--email", "-e", metavar="EMAIL", help="A tester's e-mail; repeat for several"),
]


@builds.command("distribute")
def builds_distribute(
    ctx: typer.Context,
    build_id: Annotated[str, typer.Argument(metavar="BUILD", help="The build's id (bld_...)")],
    project: ProjectRef,
    app: AppRef,
    group: GroupOption = None,
    email: EmailOption = None,
    notify: Annotated[
        bool, typer.Option(help="Mail each newly reached tester their own install link")
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Distribute a ready build to tester groups and e-mails. E-mails of people who are not
    members are invited into the project as testers (developer+; admin+ to invite)."""
    if not group and not email:
        fail("give --group or --email (each may be repeated)", 2)
    with connect(ctx) as client:
        pid = project_id(client, project)
        aid = app_id(client, pid, app)
        groups = [group_id(client, pid, g) for g in group or []]
        result = client.distribute_build(pid, aid, build_id, groups, email or [], notify)
        names = group_names(client, pid) if not as_json else {}
    if as_json:
        emit(result, True, lambda: table_of())
    else:
        out.print(f"distributed {distribution_text(result, names)}")


def group_names(client: Any, project: str) -> dict[str, str]:
    found = every_page(
        lambda cursor: client.list_groups(project, limit=100, cursor=cursor), "groups"
    )
    return {g.id: g.name for g in found}


def distribution_text(result: Any, names: dict[str, str]) -> str:
    """What a distribution did, on one line: `to QA, everyone: 2 testers reached, 2 mailed;
    invited lee@example.com; not invited sam@example.com (...)`."""
    groups = ", ".join(names.get(g, g) for g in result.groups) or "no group"
    reached = result.testers_reached
    text = f"to {groups}: {reached} {'tester' if reached == 1 else 'testers'} reached, "
    text += f"{result.notified} mailed"
    if result.invitations_pending:
        pending = result.invitations_pending
        text += f", {pending} {'invitation' if pending == 1 else 'invitations'} pending"
    if result.unsubscribed:
        text += f", {result.unsubscribed} unsubscribed from mail"
    if result.invited:
        text += f"; invited {', '.join(result.invited)}"
    for refused in result.not_invited:
        text += f"; not invited {refused.email} ({refused.detail})"
    return text


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
            err.print(
                f"{verb}: {percent:3d}% {size_text(done)} of {size_text(total)} ({rate:.1f} MiB/s)"
            )
            state["next"] = min(total, done + max(total // 10, 1))

    yield log


UploadProject = Annotated[
    str | None,
    typer.Option("--project", "-p", help="Project id or name; none with --app-id"),
]
UploadApp = Annotated[
    str | None, typer.Option("--app", "-a", help="Application id or name (with --project)")
]
UploadAppId = Annotated[
    str | None,
    typer.Option(
        "--app-id",
        metavar="APP_ID",
        help="The application's id (app_..., as its page in the console shows it), instead of "
        "--project and --app: it never changes, so renaming the application or its project "
        "breaks no CI job (with trusted publishing, required: the upload names its application)",
    ),
]


def _check_target(project: str | None, app: str | None, app_id_given: str | None) -> None:
    """Usage (exit 2), before anything is sent: --app-id, or --project with --app."""
    if app_id_given is not None:
        if app is not None:
            fail("give --app-id or --app, not both", 2)
        if not APP_ID_PATTERN.match(app_id_given):
            fail(f"--app-id takes an application's id (app_...), not {app_id_given!r}: "
                 "give a name with --project and --app", 2)  # fmt: skip
    elif project is None or app is None:
        fail("give --app-id, or --project and --app", 2)


def _upload_target(
    client: Any, project: str | None, app: str | None, app_id_given: str | None
) -> tuple[str, str]:
    """The project's and the application's ids an upload goes to."""
    if app_id_given is not None:
        pid = (
            project_id(client, project)
            if project is not None
            else project_of_application(client, app_id_given)
        )
        return pid, app_id_given
    assert project is not None  # _check_target said so
    assert app is not None
    pid = project_id(client, project)
    return pid, app_id(client, pid, app)


def upload(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="The build file")
    ],
    project: UploadProject = None,
    app: UploadApp = None,
    app_id_given: UploadAppId = None,
    notes: Annotated[str | None, typer.Option(help="Release notes")] = None,
    notes_file: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="Release notes from a file"),
    ] = None,
    install_link_hours: Annotated[
        int | None,
        typer.Option(min=1, max=2160, help="Also create an install link valid this long"),
    ] = None,
    install_link_days: Annotated[
        int | None,
        typer.Option(min=1, max=90, help="As --install-link-hours, in days"),
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
    blockmap: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            readable=True,
            help="electron-builder's `.blockmap` of the file, attached to the build once it is "
            "ready (electron-updater's differential download reads it)",
        ),
    ] = None,
    on_duplicate: Annotated[
        OnDuplicate,
        typer.Option(
            help="A file already uploaded as a ready build of the application: reuse that "
            "build (nothing sent; the distribution, channels and install link asked apply to "
            "it) or refuse (exit 5)",
        ),
    ] = OnDuplicate.REUSE,
    architecture: Annotated[
        Architecture | None,
        typer.Option(
            help="A desktop build's processor architecture, as its updaters tell builds apart "
            "(a file that names its own must agree)",
        ),
    ] = None,
    sparkle_ed_signature: Annotated[
        str | None,
        typer.Option(
            help="A macOS build's EdDSA signature as Sparkle's sign_update printed it (the "
            "private key stays with you)",
        ),
    ] = None,
    minimum_os_version: Annotated[
        str | None,
        typer.Option(
            help="The lowest OS version the build runs on (11.0, 10.0.17763.0), for a file "
            "that does not say it",
        ),
    ] = None,
    notes_from_git: Annotated[
        bool,
        typer.Option(
            "--notes-from-git",
            help="Release notes from the subjects of the commits since the application's last "
            "ready build (on this branch, when known), merges left out, at most 50 lines; "
            "where that range is unknown, the last commit's message (said on stderr)",
        ),
    ] = False,
    notes_template: Annotated[
        str | None,
        typer.Option(
            help="A header above --notes-from-git's lines: {branch}, {commit}, {tag}, "
            "{count} (commits listed) and {since} (the last build's commit) are replaced; "
            "{{ and }} for braces",
        ),
    ] = None,
    commit: Annotated[
        str | None, typer.Option(help="The build's commit (else CI's or git's)")
    ] = None,
    branch: Annotated[
        str | None, typer.Option(help="The build's branch (else CI's or git's)")
    ] = None,
    tag: Annotated[str | None, typer.Option(help="The build's tag (else CI's or git's)")] = None,
    repository: Annotated[
        str | None, typer.Option(help="owner/name or the repository's http(s) address")
    ] = None,
    ci_run_url: Annotated[str | None, typer.Option(help="The CI run's http(s) address")] = None,
    pull_request: Annotated[
        str | None, typer.Option(help="The pull request's number or http(s) address")
    ] = None,
    no_source: Annotated[
        bool,
        typer.Option("--no-source", help="Send no source (commit, branch, ...) with the build"),
    ] = False,
    github_output: Annotated[
        Path | None,
        typer.Option(
            envvar="GITHUB_OUTPUT",
            help="Append build-id, install-url, build-url and version to this GitHub Actions "
            "output file (in a GitHub Actions job: $GITHUB_OUTPUT by itself)",
        ),
    ] = None,
    github_summary: Annotated[
        Path | None,
        typer.Option(
            envvar="GITHUB_STEP_SUMMARY",
            help="Append a Markdown summary (the install link and its QR code) to this file "
            "(in a GitHub Actions job: $GITHUB_STEP_SUMMARY by itself)",
        ),
    ] = None,
    dotenv: Annotated[
        Path | None,
        typer.Option(
            help="Write BUILDBAY_BUILD_ID, BUILDBAY_INSTALL_URL, BUILDBAY_BUILD_URL and "
            "BUILDBAY_VERSION to this file (a GitLab dotenv report)",
        ),
    ] = None,
    audience: Annotated[
        str | None,
        typer.Option(
            "--audience",
            envvar="BUILDBAY_OIDC_AUDIENCE",
            help="Trusted publishing: the audience of the CI's ID token, as the application's "
            "trusted publisher expects it (default: the server's host name)",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Upload a build and verify it. Exits 0 only once the build is ready. Its testers are
    mailed (once each) when it is distributed to them.

    A file already uploaded (the same bytes as a ready build of the application) is not sent
    again: that build is the answer, so a CI job run twice ends with one build.

    A file above 64 MiB goes in parts, several at once; if the upload is cut off (a kill, a
    broken network), running the same command again sends only the parts still missing.

    In CI without a token (no --token, BUILDBAY_TOKEN or profile), the job's OpenID Connect ID
    token (BUILDBAY_ID_TOKEN, or GitHub Actions' with `id-token: write`) is exchanged for a
    15-minute upload-only token of the application --app-id names, once one of that
    application's trusted publishers takes it (docs/ci.md): --app-id is then required, as a
    publisher only grants its own application."""
    if sum([notes is not None, notes_file is not None, notes_from_git]) > 1:
        fail("give one of --notes, --notes-file and --notes-from-git", 2)
    if notes_template is not None:
        if not notes_from_git:
            fail("--notes-template goes with --notes-from-git", 2)
        _check_template(notes_template)
    if install_link_hours is not None and install_link_days is not None:
        fail("give --install-link-hours or --install-link-days, not both", 2)
    if install_link_days is not None:
        install_link_hours = install_link_days * 24
    trusted = _trusted_publishing(ctx, project, app, app_id_given, audience)
    if trusted is None:
        _check_target(project, app, app_id_given)
    given = BuildSource(commit, branch, tag, repository, ci_run_url, _pull_request(pull_request))
    if no_source and given != BuildSource():
        fail("give --no-source or source options (--commit, --branch, ...), not both", 2)
    for name, wrong in problems(given).items():
        fail(f"--{_OPTION_OF.get(name, name)} {wrong}", 2)
    found = _found_source(given)
    text = _notes_file(notes_file) if notes_file is not None else notes
    with connect(ctx) as client:
        pid, aid = trusted or _upload_target(client, project, app, app_id_given)
        if notes_from_git:
            text = _git_notes(client, pid, aid, found, notes_template)
        # Before a byte is read or sent: a 2 GB file the application would refuse costs nothing.
        application = client.get_application(pid, aid)
        if problem := platform_problem(file, application.platform.value):
            fail(problem, EXIT_REFUSED)
        if trusted:
            # The upload token reads no project's group list, and its distribution is verify's
            # (the distribute call needs builds:write): the groups by id, at verify.
            groups = [_trusted_group(g) for g in distribute or []]
            at_verify, emails = groups, distribute_email or []
        else:
            groups = [group_id(client, pid, g) for g in distribute or []]
            at_verify, emails = [], []
        with _progress("Uploading") as progress:
            build = client.upload_build(
                pid, aid, file, notes=text, install_link_hours=install_link_hours,
                progress=progress, channels=channel or None, mandatory=mandatory,
                distribute_to=at_verify, distribute_emails=emails,
                parts_in_flight=parts_in_flight, on_duplicate=on_duplicate.value,
                architecture=architecture.value if architecture else None,
                sparkle_ed_signature=sparkle_ed_signature, minimum_os_version=minimum_os_version,
                source=None if no_source else found,
            )  # fmt: skip
        _say_reused_and_warnings(build)
        if build.status.value != "ready":  # pragma: no cover - verify answers ready or an error
            fail(f"build {build.build_id} is {build.status.value}, not ready", 1)
        if blockmap is not None:
            build = _with_blockmap(client, build, blockmap)
        if trusted:
            distribution = None
            if (at_verify or emails) and not as_json:
                out.print(f"distributed at verify to {', '.join([*at_verify, *emails])}")
        else:
            distribution = _distribute_uploaded(client, build, groups, distribute_email or [])
        names = group_names(client, pid) if distribution and not as_json else {}
    _print_uploaded(build, distribution, names, as_json)
    _hand_to_ci(build, application.name, github_output, github_summary, dotenv)


def _trusted_group(ref: str) -> str:
    """--distribute with trusted publishing: a group's id, or `everyone`."""
    if ref != "everyone" and not GROUP_ID_PATTERN.match(ref):
        fail(f"trusted publishing: --distribute {ref!r}: give the tester group's id (grp_..., "
             "in the address of its page in the console) or everyone; the upload token "
             "reaches its one application, not the project's group names", 2)  # fmt: skip
    return ref


def _trusted_publishing(
    ctx: typer.Context, project: str | None, app: str | None, app_id_given: str | None,
    audience: str | None,
) -> tuple[str, str] | None:  # fmt: skip
    """Without a token, in a CI job that can get an ID token: the project and application of
    the upload token it is exchanged for (the token is used from then on); else None."""
    from buildbay_client import oidc

    url, has_token = server_and_token(ctx)
    if has_token or not oidc.available():
        return None
    if url is None:
        fail("trusted publishing: no server; set BUILDBAY_URL", EXIT_AUTH)
    if project is not None or app is not None or app_id_given is None:
        fail("trusted publishing: give --app-id (the application's id, app_...), not --project "
             "or --app: the upload names its application, as a trusted publisher only grants "
             "its own, and the exchanged token cannot read projects to look a name up",
             2)  # fmt: skip
    if not APP_ID_PATTERN.match(app_id_given):
        fail(f"--app-id takes an application's id (app_...), not {app_id_given!r}", 2)
    try:
        id_token = oidc.ci_id_token(audience or oidc.default_audience(url))
        got = oidc.exchange(url, id_token, app_id_given)
    except oidc.TrustedPublishingError as exc:
        fail(f"trusted publishing: {exc}", EXIT_AUTH)
    err.print(
        f"buildbay: trusted publishing: uploading to {got.application_id} with a token valid "
        f"until {got.expires_at}"
    )
    use_token(ctx, url, got.token)
    return got.project_id, got.application_id


def _hand_to_ci(
    build: Any, app_name: str, github_output: Path | None, github_summary: Path | None,
    dotenv: Path | None,
) -> None:  # fmt: skip
    """The outputs, the summary and the dotenv asked (GitHub's by themselves in its jobs, as
    the runner names their files), and in a GitHub or GitLab job's log the QR code of the
    install link (else the build page's) on stderr: stdout stays the output (--json)."""
    from buildbay_client import ci
    from buildbay_client.models import ReusedBuild

    version = version_label(build.metadata)
    outputs = ci.step_outputs(build.build_id, build.install_url, build.console_url, version)
    if github_output is not None:
        ci.append(github_output, ci.github_output_text(outputs))
    if github_summary is not None:
        name = (build.metadata or {}).get("appName") or app_name
        ci.append(github_summary, ci.summary_markdown(
            name, version, build.build_id, build.install_url, build.console_url,
            isinstance(build, ReusedBuild),
        ))  # fmt: skip
    if dotenv is not None:
        dotenv.write_text(ci.dotenv_text(outputs), encoding="utf-8")
    shown = build.install_url or build.console_url
    if ci.ci_name() is not None and shown:
        label = "install link" if build.install_url else "build page"
        err.print(f"QR code of the {label} {shown}:")
        err.print(ci.qr_text(shown), crop=False, overflow="ignore")


def _with_blockmap(client: Any, build: Any, blockmap: Path) -> Any:
    """The build with its blockmap attached (a reused build keeps what it is: a ReusedBuild)."""
    attached = client.attach_blockmap(
        build.project_id, build.application_id, build.build_id, blockmap.read_bytes()
    )
    return dataclasses.replace(build, blockmap_size=attached.blockmap_size)


_OPTION_OF = {"ciRunUrl": "ci-run-url", "pullRequest": "pull-request"}


def _pull_request(value: str | None) -> int | str | None:
    """--pull-request: a number, or an address."""
    if value is None:
        return None
    number = value.strip()
    return int(number) if number.isascii() and number.isdigit() else value


def _notes_file(path: Path) -> str:
    """--notes-file's text, read before anything is sent: a file that is not UTF-8 or cannot
    be read is said (exit 2), not a traceback after the upload began."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        fail(f"--notes-file {path} is not UTF-8 text: save it as UTF-8", 2)
    except OSError as exc:
        fail(f"--notes-file {path} cannot be read: {exc.strerror or exc}", 2)


def _check_template(template: str) -> None:
    from buildbay_client.notes import TemplateError, render_template

    try:
        render_template(template, {})
    except TemplateError as wrong:
        fail(str(wrong), 2)


def _found_source(given: BuildSource) -> BuildSource:
    """The options' source over what CI's environment and the git checkout say (a value the
    server would refuse left out, and said); the CI found said too."""
    from buildbay_client.source import detect, without_problems

    ci, detected = detect()
    detected = without_problems(detected, lambda line: err.print(line))
    found = given.over(detected)
    if ci is not None:
        err.print(f"source: from {ci}'s environment")
    return found


def _git_notes(
    client: Any, project: str, app: str, found: BuildSource, template: str | None
) -> str | None:
    """--notes-from-git's notes: since the commit of the application's last ready build on
    the same branch (else of any branch), asked of the server; each step said on stderr."""
    from buildbay_client.notes import notes_from_git
    from buildbay_client.source import from_git

    local = from_git()
    head = found.commit or local.commit
    branch = found.branch or local.branch
    since: str | None = None
    why = "no earlier ready build of the application has a commit"
    for on_branch in [branch, None] if branch else [None]:
        page = client.list_builds(project, app, 20, status="ready", branch=on_branch)
        earlier = next((b for b in page.builds if b.source and b.source.commit), None)
        if earlier is not None:
            assert earlier.source is not None
            since = earlier.source.commit
            where = f" on {on_branch}" if on_branch else ""
            err.print(f"notes: since build {earlier.build_id}{where} ({since[:7]})")
            break
    values = {
        "branch": branch or "",
        "commit": (head or "")[:7],
        "tag": found.tag or local.tag or "",
        "since": (since or "")[:7],
    }
    made = notes_from_git(since, why, head, template, values)
    for line in made.said:
        err.print(line)
    return made.text


def _distribute_uploaded(
    client: Any, build: Any, groups: Sequence[str], emails: Sequence[str]
) -> Any:
    """The uploaded build to the groups and e-mails given, once it is ready (a build in parts
    checked in the background too); what that did, for the output. None: none given."""
    if not groups and not emails:
        return None
    return client.distribute_build(
        build.project_id, build.application_id, build.build_id, groups, emails
    )


def _print_uploaded(build: Any, distribution: Any, names: dict[str, str], as_json: bool) -> None:
    """The build for the next CI step: with --json, the build's fields (`consoleUrl`, and
    `installUrl` when a shared install link exists) and `distribution` (null: none asked);
    else a line each."""
    if as_json:
        from buildbay_client.models import to_json

        answer = {**to_json(build), "distribution": to_json(distribution)}
        out.print_json(json.dumps(answer))
        return
    _links(build)
    if distribution is not None:
        out.print(f"reached  {distribution_text(distribution, names)}")
