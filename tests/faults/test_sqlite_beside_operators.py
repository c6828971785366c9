"""The embedded default's SQLite file, with an operator working beside a live server: the
documented `buildbay users set-plan`, an online `sqlite3 .backup`, then `kill -9` of the server.

SQLite's locks are POSIX locks, which belong to a process and a file: closing *any* descriptor
of the file drops all of that process's locks on it. A server that opens and closes the
database, `-wal` or `-shm` file behind SQLite's back loses its locks; the next outside
connection then believes it is the last one, checkpoints, and unlinks the WAL the server is
still writing into. The server's later commits go to a deleted file: they read back fine in
that process and vanish with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.faults.conftest import Server, assert_sqlite_files_not_deleted, wait_for
from tests.test_operator_commands import operator_command

pytestmark = [pytest.mark.slow, pytest.mark.faults]


@pytest.fixture
def sqlite_env(tmp_path: Path) -> dict[str, str]:
    """The embedded default (no BUILDBAY_DATABASE_URL), whichever database the suite runs on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")}
    env.update(BUILDBAY_DATA_DIR=str(tmp_path / "data"), BUILDBAY_SECRET_KEY=TEST_SECRET)
    return env


def _operator(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _create_project(http: httpx.Client, headers: dict[str, str], name: str) -> str:
    r = http.post("/api/projects", json={"name": name}, headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_writes_survive_operator_commands_a_backup_and_a_kill(
    sqlite_env: dict[str, str], servers: Callable[..., Server], tmp_path: Path
) -> None:
    """Catches: the server dropping SQLite's locks (an `os.open`/`os.close` of the database
    files for each new pool connection), after which `users set-plan` or `.backup` deleted the
    server's WAL, and every write after it was lost at the kill."""
    server = servers(sqlite_env)
    database = server.data_dir / "buildbay.sqlite3"
    # The loss needs an existing database, which the server then starts on, as on any restart
    # after its first: `buildbay db upgrade` makes it (in this process: the server's first
    # start would make the same schema in the same file, after seconds of imports).
    assert operator_command(sqlite_env, "db", "upgrade").returncode == 0
    assert database.exists()
    server.start()
    with httpx.Client(base_url=server.base, timeout=30) as http:
        r = http.post(
            "/api/auth/register", json={"email": "ops@example.com", "password": "a long password"}
        )
        assert r.status_code == 201, r.text
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        before = _create_project(http, headers, "Before the operator")

        _operator(
            sqlite_env, sys.executable, "-m", "buildbay", "users", "set-plan", "ops@example.com",
            "pro",
        )  # fmt: skip
        _operator(sqlite_env, "sqlite3", str(database), f".backup {tmp_path / 'backup.sqlite3'}")
        _operator(sqlite_env, "sqlite3", str(database), f"VACUUM INTO '{tmp_path / 'vacuumed'}'")
        assert_sqlite_files_not_deleted(server.pid, database)

        after = _create_project(http, headers, "After the operator")
        # The server sees the operator's write (once its access-token cache, a few seconds'
        # memory of the user's row, has let go of the old one).
        wait_for(
            lambda: http.get("/api/auth/me", headers=headers).json()["plan"] == "pro",
            "the server to see the plan the operator set",
        )
        assert_sqlite_files_not_deleted(server.pid, database)

    server.kill()
    server.start()
    with httpx.Client(base_url=server.base, timeout=30) as http:
        r = http.post(
            "/api/auth/login", json={"email": "ops@example.com", "password": "a long password"}
        )
        assert r.status_code == 200, r.text
        assert r.json()["user"]["plan"] == "pro"
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        r = http.get("/api/projects", headers=headers)
        assert r.status_code == 200, r.text
        assert {p["id"] for p in r.json()["projects"]} == {before, after}

    # The backups taken beside the live server are whole databases with the first project.
    for backup in ("backup.sqlite3", "vacuumed"):
        done = _operator(sqlite_env, "sqlite3", str(tmp_path / backup), "SELECT name FROM projects")
        assert done.splitlines() == ["Before the operator"]
