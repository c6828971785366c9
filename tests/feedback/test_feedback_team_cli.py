"""`buildbay feedback list|show|status|reply` against a real server over HTTP (in a thread of
this process, as tests/client/test_cli.py serves it): the project, application, build and
members made by commands, the feedback rows written with the models into the server's database
(as the submission stores them)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus
from buildbay.feedback.models import Feedback
from buildbay.ids import new_id
from tests.builds.android_files import APK
from tests.client.test_cli import PASSWORD, Cli, _login
from tests.conftest import PG_URL, serving_a_copy

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Served:
    url: str
    database_url: str  # the same database, for a driver of this thread's own


@pytest.fixture(scope="module")
def served(migrated_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("feedback-cli")
    # The served database, read directly by the tests (serving_a_copy copies it there).
    direct_url = PG_URL or f"sqlite+aiosqlite:///{work / 'buildbay.sqlite3'}"
    with serving_a_copy(migrated_database, work) as base:
        yield Served(base, direct_url)


def _register(served: Served, who: str) -> str:
    email = f"{who}-{uuid.uuid4().hex[:12]}@example.com"
    r = httpx.post(
        f"{served.url}/api/auth/register",
        json={"email": email, "password": PASSWORD, "name": who.title()},
    )
    assert r.status_code == 201, r.text
    return email


def _write_feedback(served: Served, rows: list[dict[str, Any]]) -> None:
    async def write() -> None:
        engine = create_async_engine(served.database_url)
        try:
            async with engine.begin() as connection:
                await connection.execute(Feedback.__table__.insert(), rows)  # type: ignore[attr-defined]
        finally:
            await engine.dispose()

    asyncio.run(write())


def test_the_team_lists_shows_triages_and_replies_from_a_terminal(
    served: Served, tmp_path: Path
) -> None:
    owner = _register(served, "owner")
    cli = Cli(served.url, tmp_path / "config", owner)
    _login(cli)
    project = cli.json("projects", "create", "Acme")
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    build = cli.json("upload", str(APK), "-p", "Acme", "-a", "Acme Android")
    tess, dev = _register(served, "tess"), _register(served, "dev")
    cli.json("members", "add", tess, "-p", "Acme")
    dev_id = cli.json("members", "add", dev, "-p", "Acme", "--role", "developer")["userId"]
    members = {m["email"]: m["userId"] for m in cli.json("members", "list", "-p", "Acme")}
    ids = [new_id("fbk") for _ in range(3)]
    stamp = datetime.fromisoformat(build["createdAt"].replace("Z", "+00:00"))
    base = {
        "project_id": project["id"], "application_id": app["id"], "build_id": build["buildId"],
        "assignee_id": None, "created_at": stamp, "updated_at": stamp,
    }  # fmt: skip
    rows = [
        {"id": ids[0], "tester_id": members[tess], "reporter_email": tess,
         "category": FeedbackCategory.BUG, "status": FeedbackStatus.NEW,
         "text": "Crash when I tap Login\nSecond line", "context": {"model": "Pixel 8"}},
        {"id": ids[1], "tester_id": None, "reporter_email": "ring@beta.example",
         "category": FeedbackCategory.SUGGESTION, "status": FeedbackStatus.NEW,
         "text": "A dark mode, please", "context": None},
        {"id": ids[2], "tester_id": members[tess], "reporter_email": tess,
         "category": FeedbackCategory.CRASH, "status": FeedbackStatus.RESOLVED,
         "text": "[bold]Not markup[/bold]", "context": None},
    ]  # fmt: skip
    stamp = datetime.fromisoformat(build["createdAt"].replace("Z", "+00:00"))
    _write_feedback(
        served, [base | row | {"created_at": stamp, "updated_at": stamp} for row in rows]
    )

    # The list: newest first, a line each, the first line of the text.
    done = cli("feedback", "list", "-p", "Acme")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("fbk_")]
    assert [line.split()[0] for line in lines] == list(reversed(ids))
    assert "Crash when I tap Login" in done.stdout
    assert "Second line" not in done.stdout
    assert "ring@beta.example (app)" in done.stdout
    assert "[bold]Not markup[/bold]" in done.stdout  # user text is never styled
    assert "1.4.2 (42)" in done.stdout
    page = cli.json("feedback", "list", "-p", "Acme", "--status", "new", "--limit", "1")
    assert [f["id"] for f in page["feedback"]] == [ids[1]]
    more = cli.json("feedback", "list", "-p", "Acme", "--status", "new", "--cursor",
                    page["nextCursor"])  # fmt: skip
    assert [f["id"] for f in more["feedback"]] == [ids[0]]
    found = cli.json("feedback", "list", "-p", "Acme", "-q", "DARK", "-a", "Acme Android")
    assert [f["id"] for f in found["feedback"]] == [ids[1]]
    assert cli("feedback", "list", "-p", "Acme", "--status", "done").returncode == 2

    # Triage: a status and an assignee by e-mail, then nobody.
    done = cli("feedback", "status", ids[0], "triaged", "-p", "Acme", "--assign", dev)
    assert done.returncode == 0, done.stderr
    assert f"Feedback {ids[0]} is triaged, assigned to Dev" in done.stderr
    changed = cli.json("feedback", "status", ids[0], "-p", "Acme", "--unassign")
    assert (changed["status"], changed["assignee"]) == ("triaged", None)
    refused = cli("feedback", "status", ids[0], "-p", "Acme", "--assign", tess)  # a tester
    assert refused.returncode == 5
    assert "assignee" in refused.stderr
    assert cli("feedback", "status", ids[0], "-p", "Acme").returncode == 2
    assert cli("feedback", "status", ids[0], "wontfix", "-p", "Acme").returncode == 2
    changed = cli.json("feedback", "status", ids[0], "resolved", "-p", "Acme", "--assign", dev_id)
    assert changed["assignee"]["id"] == dev_id

    # Replies, the second from stdin; `show` reads them oldest first.
    done = cli("feedback", "reply", ids[0], "Thanks, looking into it", "-p", "Acme")
    assert done.returncode == 0, done.stderr
    assert f"Replied to feedback {ids[0]} (fbc_" in done.stderr
    reply = cli.json("feedback", "reply", ids[0], "-", "-p", "Acme", stdin="Fixed in 1.4.3\n")
    assert reply["text"] == "Fixed in 1.4.3"
    assert cli("feedback", "reply", ids[0], "  ", "-p", "Acme").returncode == 5
    done = cli("feedback", "show", ids[0], "-p", "Acme")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Crash when I tap Login\nSecond line" in out
    assert "context.model" in out
    assert "Pixel 8" in out
    assert out.index("Thanks, looking into it") < out.index("Fixed in 1.4.3")
    shown = cli.json("feedback", "show", ids[0], "-p", "Acme")
    assert shown["commentsCount"] == 2
    assert [c["text"] for c in shown["comments"]] == ["Thanks, looking into it", "Fixed in 1.4.3"]
    assert cli("feedback", "show", "fbk_00000000000000000000000000", "-p", "Acme").returncode == 4


def test_what_testers_wrote_cannot_drive_the_terminal(served: Served, tmp_path: Path) -> None:
    """A tester's text, an app's context and a comment reach a developer's terminal: their
    escape sequences (clear the screen, a hidden link, the clipboard), carriage returns and
    bidirectional overrides are left out; lines stay."""
    owner = _register(served, "owner")
    cli = Cli(served.url, tmp_path / "config", owner)
    _login(cli)
    project = cli.json("projects", "create", "Acme")
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    build = cli.json("upload", str(APK), "-p", "Acme", "-a", "Acme Android")
    stamp = datetime.fromisoformat(build["createdAt"].replace("Z", "+00:00"))
    fid = new_id("fbk")
    text = (
        "\x1b[2J\x1b]0;owned\x07Crash \x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\"
        "\nreal line\rfake line\n\ttabbed \u202egpj.exe\u202c \x9b31m\x1b]52;c;ZXZpbA==\x07"
    )
    _write_feedback(served, [{
        "id": fid, "project_id": project["id"], "application_id": app["id"],
        "build_id": build["buildId"], "tester_id": None, "reporter_email": "ring@beta.example",
        "category": FeedbackCategory.BUG, "status": FeedbackStatus.NEW, "text": text,
        "context": {"model\x1b[8m": "Pixel\x1b[31m 8", "log": "a\rb"},
        "assignee_id": None, "created_at": stamp, "updated_at": stamp,
    }])  # fmt: skip
    cli("feedback", "reply", fid, "On it \x1b[5mnow", "-p", "Acme")

    listed = cli("feedback", "list", "-p", "Acme")
    shown = cli("feedback", "show", fid, "-p", "Acme")
    for done in (listed, shown):
        assert done.returncode == 0, done.stderr
        unshown = {c for c in done.stdout if ord(c) < 0x20 and c not in "\n\t"}
        assert not unshown | ({"\x9b", "\u202e", "\u202c", "\x7f"} & set(done.stdout))
    assert "[2J]0;ownedCrash ]8;;https://evil.example\\here]8;;\\" in listed.stdout
    assert "real linefake line\n" in shown.stdout  # no line written over
    assert "tabbed gpj.exe 31m]52;c;ZXZpbA==" in shown.stdout
    assert "context.model[8m" in shown.stdout
    assert "Pixel[31m 8" in shown.stdout
    assert "On it [5mnow" in shown.stdout
    # JSON keeps them, escaped: a program reads what was sent.
    assert cli.json("feedback", "show", fid, "-p", "Acme")["text"] == text
