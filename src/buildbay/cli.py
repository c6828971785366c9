"""The server's operator commands, which join the `buildbay` command of the client
(buildbay-client) through the `buildbay.commands` entry point: running the server and looking
after its database.

Importing this module loads typer and nothing of the server: the settings, SQLAlchemy and
FastAPI are imported inside the commands, so that `buildbay --help` stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from buildbay.config import Settings
    from buildbay.context import AppContext

T = TypeVar("T")

PANEL = "Server administration"
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
users_app = typer.Typer(help="User accounts.", no_args_is_help=True)
jobs_app = typer.Typer(help="The outbox: mails (and later webhooks) sent in the background.",
                       no_args_is_help=True)  # fmt: skip


@contextmanager
def _configured() -> Iterator[None]:
    """A configuration that cannot run the server is one line and exit code 2 (some settings
    are only checked when first used)."""
    from buildbay.config import ConfigurationError

    try:
        yield
    except ConfigurationError as exc:
        typer.echo(f"buildbay: {exc}", err=True)
        raise typer.Exit(2) from None


def _settings(**overrides: object) -> Settings:
    from buildbay.config import Settings

    with _configured():
        return Settings(**overrides)  # type: ignore[arg-type]


NOT_MIGRATED = (
    "the database has not got this version's schema: run `buildbay db upgrade` first "
    "(`buildbay serve` does it too on the embedded SQLite database)"
)


def _on_database(
    settings: Settings,
    work: Callable[[AsyncEngine], Awaitable[T]],
    ctx: AppContext | None = None,
) -> T:
    """Run `work` on the settings' database (through the engine of `ctx`, an app's, if given),
    once it is known to have this version's schema: an operator command on an empty or older
    database says so in one line (exit code 1) instead of a traceback of SQL, and changes
    nothing. The engine (the app's pools) is disposed of at the end."""
    import asyncio

    from buildbay.db import migrate
    from buildbay.db.engine import create_engine

    async def run() -> T:
        engine = ctx.engine if ctx else create_engine(settings.resolved_database_url)
        try:
            if await migrate.schema_of(engine) is not migrate.Schema.CURRENT:
                typer.echo(f"buildbay: {NOT_MIGRATED}", err=True)
                raise typer.Exit(1)
            return await work(engine)
        finally:
            await (ctx.dispose() if ctx else engine.dispose())

    with _configured():
        return asyncio.run(run())


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = 8000,
    workers: Annotated[
        int, typer.Option(min=1, help="Server processes sharing the port (more than 1 needs Redis)")
    ] = 1,
) -> None:
    """Run the API (on the embedded default it creates or migrates its own schema)."""
    import uvicorn

    from buildbay.app import create_app, served

    settings = _settings(host=host, port=port)
    with _configured():
        settings.signing_key  # noqa: B018 - fail (or create the development key) before listening
    if workers > 1 and not settings.redis_url:
        typer.echo(
            "buildbay: --workers above 1 needs BUILDBAY_REDIS_URL: request counts and token "
            "revocations must be shared by the processes",
            err=True,
        )
        raise typer.Exit(2)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not settings.migrates_itself:
        _check_schema(settings)
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "loop": "uvloop",
        "http": "httptools",
        "proxy_headers": True,
        "server_header": False,
        "access_log": False,  # ours (buildbay.access) leaves out query strings: signed URLs
        "timeout_keep_alive": 30,
        "log_level": "info",
    }
    if workers == 1:
        with _configured():
            app = served(create_app(settings))
        uvicorn.run(app, **options)
        return
    # Several processes: the schema is migrated here, once, and each worker builds its app from
    # the same environment (host and port included, for the URLs it writes).
    if settings.migrates_itself:
        with _configured():
            _migrate(settings)
    os.environ["BUILDBAY_HOST"], os.environ["BUILDBAY_PORT"] = host, str(port)
    uvicorn.run("buildbay.app:create_worker_app", factory=True, workers=workers, **options)


def _check_schema(settings: Settings) -> None:
    """Refuse to serve a database without this version's tables (every request would fail
    with a 500): one line, exit code 1. A newer schema is served with a warning (the
    processes of a rolling upgrade restart one at a time after `buildbay db upgrade`), and a
    database that cannot be reached yet with one too: the server answers 503 until it can."""
    import asyncio
    import logging

    from sqlalchemy.exc import DBAPIError

    from buildbay.db import migrate
    from buildbay.db.engine import create_engine

    log = logging.getLogger("buildbay")

    async def schema() -> migrate.Schema | None:
        engine = create_engine(settings.resolved_database_url)
        try:
            return await migrate.schema_of(engine)
        except (OSError, DBAPIError) as exc:
            log.warning("could not check the database's schema before starting: %s", exc)
            return None
        finally:
            await engine.dispose()

    found = asyncio.run(schema())
    if found in (migrate.Schema.MISSING, migrate.Schema.OLDER):
        typer.echo(f"buildbay: {NOT_MIGRATED}", err=True)
        raise typer.Exit(1)
    if found is migrate.Schema.NEWER:
        log.warning(
            "the database's schema is newer than this version's (a newer Buildbay migrated "
            "it): this process serves it as it is"
        )


def _migrate(settings: Settings) -> None:
    import asyncio

    from buildbay.db import migrate
    from buildbay.db.engine import create_engine

    settings.data_dir.mkdir(parents=True, exist_ok=True)

    async def run() -> None:
        engine = create_engine(settings.resolved_database_url)
        try:
            await migrate.upgrade(engine)
        finally:
            await engine.dispose()

    asyncio.run(run())


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the schema migrations to BUILDBAY_DATABASE_URL (the production path)."""
    settings = _settings()
    with _configured():
        _migrate(settings)
    typer.echo("database schema is up to date")


@users_app.command("set-plan")
def set_plan(
    email: Annotated[str, typer.Argument(help="The user's e-mail")],
    plan_name: Annotated[str, typer.Argument(metavar="PLAN", help="free, pro or enterprise")],
) -> None:
    """Move a user to another plan (its rate limit and largest build file follow)."""

    from sqlalchemy import select

    from buildbay.audit.record import OPERATOR, AuditAction, Target, record
    from buildbay.auth.logins import normalise_email
    from buildbay.auth.models import User
    from buildbay.clock import SystemClock
    from buildbay.config import Plan
    from buildbay.db.engine import create_sessionmaker

    try:
        plan = Plan(plan_name)
    except ValueError:
        choices = ", ".join(p.value for p in Plan)
        raise typer.BadParameter(f"{plan_name!r} is not a plan: one of {choices}") from None
    settings = _settings()

    async def run(engine: AsyncEngine) -> int:
        async with create_sessionmaker(engine)() as db, db.begin():
            user = await db.scalar(
                select(User).where(User.email == normalise_email(email)).with_for_update()
            )
            if user is None:
                return 0
            before, user.plan = user.plan, plan
            # Recorded with the change, by the operator (whoever runs commands on the server).
            record(db, at=SystemClock().now(), actor=OPERATOR, action=AuditAction.PLAN_CHANGED,
                   target=Target("user", user.id, user.email), subject_user_id=user.id,
                   details={"from": Plan(before).value, "to": plan.value})  # fmt: skip
            return 1

    if _on_database(settings, run) == 0:
        typer.echo(f"buildbay: no user with e-mail {email}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{email} is now on the {plan.value} plan")


@users_app.command("create")
def create_user(
    email: Annotated[str, typer.Argument(help="The new user's e-mail")],
    name: Annotated[
        str | None, typer.Option(help="Their name (default: the e-mail's name)")
    ] = None,
) -> None:
    """Create an account, whatever BUILDBAY_SIGNUP says, and print a link (valid 1 hour) where
    its owner sets a password."""
    import secrets

    from pydantic import ValidationError

    from buildbay.app import create_app
    from buildbay.auth.dependencies import account_service, password_resets
    from buildbay.auth.password_reset import reset_link
    from buildbay.auth.schemas import RegisterRequest
    from buildbay.errors import BuildbayError

    password = secrets.token_urlsafe(32)  # nobody knows it: the link sets theirs
    try:  # the e-mail and the name as sign-up takes them
        asked = RegisterRequest.model_validate({"email": email, "password": password, "name": name})
    except ValidationError as exc:
        reasons = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise typer.BadParameter(reasons) from None
    settings = _settings()
    with _configured():
        ctx = create_app(settings).state.ctx

    async def run(_: AsyncEngine) -> tuple[str, str]:
        async with ctx.sessions() as db, db.begin():
            user = await account_service(ctx, db).create_account(
                str(asked.email), password, asked.name
            )
            return user.email, await password_resets(ctx, db).issue(user)

    try:
        created, token = _on_database(settings, run, ctx)
    except BuildbayError as exc:
        typer.echo(f"buildbay: {exc.detail}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"created {created}; they choose their password here (the link works for 1 hour):")
    typer.echo(reset_link(settings.resolved_public_url, token))


@jobs_app.command("failed")
def jobs_failed() -> None:
    """List the jobs that failed for good (a refused mail, or 24 hours of retries), newest
    first, with the last error."""

    from sqlalchemy import select

    from buildbay.db.engine import create_sessionmaker
    from buildbay.jobs.models import Job, JobStatus

    settings = _settings()

    async def run(engine: AsyncEngine) -> list[Job]:
        async with create_sessionmaker(engine)() as db:
            return list(
                await db.scalars(
                    select(Job).where(Job.status == JobStatus.FAILED).order_by(Job.id.desc())
                )
            )

    failed = _on_database(settings, run)
    for job in failed:
        to = ", ".join(job.payload.get("to", [])) if job.kind == "mail" else ""
        when = job.finished_at.strftime("%Y-%m-%dT%H:%M:%SZ") if job.finished_at else "-"
        typer.echo(f"{job.id}  {job.kind}{' to ' + to if to else ''}  failed {when} after "
                   f"{job.attempts} attempt(s): {job.last_error}")  # fmt: skip
    typer.echo(f"{len(failed)} failed job(s)")


@jobs_app.command("retry")
def jobs_retry(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB_ID...", help="Failed jobs' ids")],
) -> None:
    """Run failed jobs again, at once (after fixing what failed them, e.g. BUILDBAY_SMTP_URL):
    each gets 24 hours of retries anew."""
    from datetime import UTC, datetime

    from sqlalchemy import update

    from buildbay.db.engine import create_sessionmaker
    from buildbay.jobs.models import Job, JobStatus

    settings = _settings()
    now = datetime.now(UTC)

    async def run(engine: AsyncEngine) -> int:
        async with create_sessionmaker(engine)() as db, db.begin():
            result = await db.execute(
                update(Job)
                .where(Job.id.in_(job_ids), Job.status == JobStatus.FAILED)
                .values(
                    status=JobStatus.PENDING,
                    attempts=0,
                    run_after=now,
                    created_at=now,
                    finished_at=None,
                )
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    retried = _on_database(settings, run)
    typer.echo(f"{retried} job(s) will run again")
    if retried < len(set(job_ids)):
        typer.echo("buildbay: the others are not failed jobs", err=True)
        raise typer.Exit(1)


def sweep() -> None:
    """Remove expired pending builds, builds past their retention rule, partial files of
    uploads cut off by a crash and stored files no build owns (serve does too)."""

    from buildbay.app import create_app
    from buildbay.builds.sweeper import Swept, sweep
    from buildbay.feedback.dependencies import FEEDBACK_SPOOL

    settings = _settings(sweep_interval_seconds=0)
    with _configured():
        ctx = create_app(settings).state.ctx

    async def run(_: AsyncEngine) -> Swept:
        return await sweep(
            ctx.sessions, ctx.storage, ctx.clock.now(), ctx.settings.resolved_public_url,
            audit_retention_days=ctx.settings.audit_retention_days,
            feedback_spool=ctx.settings.data_dir / FEEDBACK_SPOOL,
        )  # fmt: skip

    swept = _on_database(settings, run, ctx)
    typer.echo(
        f"swept {swept.expired_uploads} expired pending builds, "
        f"{swept.retention} builds beyond their retention rule, "
        f"{swept.abandoned_uploads} partial files of interrupted uploads, "
        f"{swept.orphan_objects} stored files no build owned, "
        f"{swept.orphan_uploads} multipart uploads no build owned, "
        f"{swept.abandoned_screenshots} screenshots' files left by a crash "
        f"and {swept.audit_entries} audit entries past their retention"
    )


def register(app: typer.Typer) -> None:
    """Add the operator commands to the `buildbay` command (the `buildbay.commands` entry point
    in pyproject.toml names this function)."""
    app.command(rich_help_panel=PANEL)(serve)
    app.add_typer(db_app, name="db", rich_help_panel=PANEL)
    app.add_typer(users_app, name="users", rich_help_panel=PANEL)
    app.add_typer(jobs_app, name="jobs", rich_help_panel=PANEL)
    app.command(rich_help_panel=PANEL)(sweep)
