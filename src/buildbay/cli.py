"""The `buildbay` command: the client (client/cli.py), and running the server and looking after
its database."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Annotated, Any

import typer
from sqlalchemy import update

from buildbay.client.cli import EXIT_CODES_HELP, register
from buildbay.config import ConfigurationError, Plan, Settings

app = typer.Typer(
    help="Buildbay: self-hosted build distribution. Upload builds from CI, hand them to testers.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
users_app = typer.Typer(help="User accounts.", no_args_is_help=True)
app.add_typer(db_app, name="db", rich_help_panel="Server administration")
app.add_typer(users_app, name="users", rich_help_panel="Server administration")
register(app)  # login, upload, projects, apps, builds, members, tokens


def _settings(**overrides: object) -> Settings:
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ConfigurationError as exc:
        typer.echo(f"buildbay: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command(rich_help_panel="Server administration")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = 8000,
    workers: Annotated[
        int, typer.Option(min=1, help="Server processes sharing the port (more than 1 needs Redis)")
    ] = 1,
) -> None:
    """Run the API (on the embedded default it creates or migrates its own schema)."""
    import uvicorn

    from buildbay.app import create_app

    settings = _settings(host=host, port=port)
    settings.signing_key  # noqa: B018 - fail (or create the development key) before listening
    if workers > 1 and not settings.redis_url:
        typer.echo(
            "buildbay: --workers above 1 needs BUILDBAY_REDIS_URL: request counts and token "
            "revocations must be shared by the processes",
            err=True,
        )
        raise typer.Exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
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
        uvicorn.run(create_app(settings), **options)
        return
    # Several processes: the schema is migrated here, once, and each worker builds its app from
    # the same environment (host and port included, for the URLs it writes).
    if settings.migrates_itself:
        _migrate(settings)
    os.environ["BUILDBAY_HOST"], os.environ["BUILDBAY_PORT"] = host, str(port)
    uvicorn.run("buildbay.app:create_worker_app", factory=True, workers=workers, **options)


def _migrate(settings: Settings) -> None:
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
    _migrate(_settings())
    typer.echo("database schema is up to date")


@users_app.command("set-plan")
def set_plan(
    email: Annotated[str, typer.Argument(help="The user's e-mail")],
    plan: Annotated[Plan, typer.Argument(help="free, pro or enterprise")],
) -> None:
    """Move a user to another plan (its rate limit and largest build file follow)."""
    from buildbay.auth.models import User
    from buildbay.auth.service import normalise_email
    from buildbay.db.engine import create_engine, create_sessionmaker

    settings = _settings()

    async def run() -> int:
        engine = create_engine(settings.resolved_database_url)
        try:
            async with create_sessionmaker(engine)() as db, db.begin():
                result = await db.execute(
                    update(User).where(User.email == normalise_email(email)).values(plan=plan)
                )
                return int(result.rowcount)  # type: ignore[attr-defined]
        finally:
            await engine.dispose()

    if asyncio.run(run()) == 0:
        typer.echo(f"buildbay: no user with e-mail {email}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{email} is now on the {plan.value} plan")


@app.command(rich_help_panel="Server administration")
def sweep() -> None:
    """Remove expired pending builds, builds past their retention rule and partial files of
    uploads cut off by a crash (serve does too)."""
    from buildbay.app import create_app
    from buildbay.builds.sweeper import Swept, sweep

    settings = _settings(sweep_interval_seconds=0)
    ctx = create_app(settings).state.ctx

    async def run() -> Swept:
        try:
            return await sweep(ctx.sessions, ctx.storage, ctx.clock.now())
        finally:
            await ctx.engine.dispose()

    swept = asyncio.run(run())
    typer.echo(
        f"swept {swept.expired_uploads} expired pending builds, "
        f"{swept.retention} builds beyond their retention rule "
        f"and {swept.abandoned_uploads} partial files of interrupted uploads"
    )


def main() -> None:
    try:
        app()
    except ConfigurationError as exc:  # pragma: no cover - raised lazily by settings
        typer.echo(f"buildbay: {exc}", err=True)
        sys.exit(2)
