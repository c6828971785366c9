"""The server's operator commands on a database without this version's schema: one line that
says what to do, exit code 1, and nothing written (not a traceback of SQL)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
import uvicorn
from alembic.script import ScriptDirectory
from typer.testing import CliRunner

from buildbay.cli import register
from buildbay.db import migrate
from buildbay.db.engine import create_engine
from tests.conftest import TEST_SECRET
from tests.processes import free_port


def operator_commands() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.mark.parametrize(
    "args",
    [
        ["users", "set-plan", "ada@example.com", "pro"],
        ["jobs", "failed"],
        ["jobs", "retry", "job_01"],
        ["sweep"],
    ],
    ids=["set-plan", "jobs-failed", "jobs-retry", "sweep"],
)
def test_a_command_on_an_unmigrated_database_says_to_upgrade_and_writes_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    database = tmp_path / "buildbay.sqlite3"
    env = {
        "BUILDBAY_DATA_DIR": str(tmp_path / "data"),
        "BUILDBAY_DATABASE_URL": f"sqlite+inline:///{database}",
        "BUILDBAY_SECRET_KEY": TEST_SECRET,
    }
    result = CliRunner().invoke(operator_commands(), args, env=env)

    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "run `buildbay db upgrade` first" in result.stderr
    assert "Traceback" not in result.stderr
    with sqlite3.connect(database) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == []


def test_the_same_command_works_once_the_database_is_upgraded(tmp_path: Path) -> None:
    env = {
        "BUILDBAY_DATA_DIR": str(tmp_path / "data"),
        "BUILDBAY_DATABASE_URL": f"sqlite+inline:///{tmp_path / 'buildbay.sqlite3'}",
        "BUILDBAY_SECRET_KEY": TEST_SECRET,
    }
    commands = operator_commands()
    assert CliRunner().invoke(commands, ["db", "upgrade"], env=env).exit_code == 0

    result = CliRunner().invoke(commands, ["jobs", "failed"], env=env)
    assert (result.exit_code, result.stdout) == (0, "0 failed job(s)\n")


def test_users_create_makes_an_account_and_prints_where_its_owner_sets_a_password(
    tmp_path: Path,
) -> None:
    """With sign-up closed the operator makes the accounts; nobody ever sees the password."""
    env = {
        "BUILDBAY_DATA_DIR": str(tmp_path / "data"),
        "BUILDBAY_DATABASE_URL": f"sqlite+inline:///{tmp_path / 'buildbay.sqlite3'}",
        "BUILDBAY_SECRET_KEY": TEST_SECRET,
        "BUILDBAY_PUBLIC_URL": "https://builds.example.com",
        "BUILDBAY_SIGNUP": "closed",
    }
    commands = operator_commands()
    assert CliRunner().invoke(commands, ["db", "upgrade"], env=env).exit_code == 0

    made = CliRunner().invoke(commands, ["users", "create", "Ada@Example.com", "--name", "Ada"],
                              env=env)  # fmt: skip
    assert made.exit_code == 0, made.output
    said, link = made.stdout.splitlines()
    assert said.startswith("created ada@example.com;")
    assert link.startswith("https://builds.example.com/reset-password?token=")

    again = CliRunner().invoke(commands, ["users", "create", "ada@example.com"], env=env)
    assert again.exit_code == 1
    assert "An account with this e-mail already exists" in again.stderr
    bad = CliRunner().invoke(commands, ["users", "create", "not an e-mail"], env=env)
    assert bad.exit_code == 2
    assert "Traceback" not in bad.output


def _production(server_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A production server's settings on an SQLite file: it does not migrate its own schema."""
    database = f"sqlite+inline:///{tmp_path / 'production.sqlite3'}"
    return dict(server_env, BUILDBAY_ENV="production", BUILDBAY_DATABASE_URL=database)


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def operator_command(env: dict[str, str], *args: str) -> Done:
    """`buildbay ARGS`, one of the server's commands, with exactly `env` for its settings (no
    other BUILDBAY_* variable), in this process: the command's own code, which a process of
    its own ran only after seconds of imports. (`python -m buildbay serve` as a program has
    the tests that serve: tests/test_server_process.py.)"""
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("BUILDBAY_")}
    result = CliRunner().invoke(operator_commands(), list(args), env={**unset, **env})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback is a bug, never an answer
    return Done(result.exit_code, result.stdout, result.stderr)


def serve_refusing(env: dict[str, str], *args: str) -> Done:
    """`buildbay serve ARGS` (operator_command) up to where it would start listening: were a
    check to let it through, the test fails there instead of serving."""

    def listening(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("`buildbay serve` started listening instead of refusing")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uvicorn, "run", listening)
        return operator_command(env, "serve", "--port", str(free_port()), *args)


def _serve(env: dict[str, str]) -> Done:
    return serve_refusing(env)


def test_serve_refuses_a_database_never_migrated_instead_of_answering_500s(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    result = _serve(_production(server_env, tmp_path))

    assert result.returncode == 1, result.stderr
    assert "run `buildbay db upgrade` first" in result.stderr
    assert "Traceback" not in result.stderr
    with sqlite3.connect(tmp_path / "production.sqlite3") as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == []


def test_serve_refuses_a_database_an_older_version_migrated(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    env = _production(server_env, tmp_path)

    async def upgrade_to(revision: str) -> None:
        engine = create_engine(env["BUILDBAY_DATABASE_URL"])
        try:
            await migrate.upgrade(engine, revision)
            assert await migrate.schema_of(engine) is migrate.Schema.OLDER
        finally:
            await engine.dispose()

    script = ScriptDirectory.from_config(migrate.alembic_config())
    head = script.get_revision(script.get_current_head())
    assert head is not None
    assert isinstance(head.down_revision, str)
    asyncio.run(upgrade_to(head.down_revision))

    result = _serve(env)

    assert result.returncode == 1, result.stderr
    assert "run `buildbay db upgrade` first" in result.stderr
