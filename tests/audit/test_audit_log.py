"""The audit log (issue 41): each security-relevant change leaves its entry, in the unit of
work of the change; the project's log (admin+) and one's own account's, in keyset pages with
filters or as an NDJSON export; nothing secret in any entry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import select
from typer.testing import CliRunner

from buildbay.audit.models import AuditEntry
from buildbay.audit.record import AuditAction
from buildbay.auth.models import User
from buildbay.auth.password_reset import PasswordResets
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from buildbay.db.engine import finish
from buildbay.projects.dependencies import project_service
from buildbay.projects.models import Project
from tests.conftest import TEST_SECRET, Account, Api, assert_problem
from tests.invitations.test_invitations import Invites, invites
from tests.leaks import LeakGuard
from tests.smtp import SmtpSink, smtp
from tests.test_operator_commands import operator_commands

__all__ = ["invites", "smtp"]

ACCOUNT_LOG = "/api/account/audit-log"
USER_AGENT = "buildbay-tests/1.0 \x1b[31mred\x1b[0m"  # an escape sequence a terminal would run


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


def ctx_of(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


def project_log(project_id: str) -> str:
    return f"/api/projects/{project_id}/audit-log"


async def entries(
    client: httpx.AsyncClient, path: str, caller: Account, **query: str
) -> list[dict[str, Any]]:
    """Every entry of a log, following its cursors."""
    found: list[dict[str, Any]] = []
    params: dict[str, str] = {"limit": "100", **query}
    while True:
        r = await client.get(path, params=params, headers=caller.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        found.extend(body["entries"])
        if body["nextCursor"] is None:
            return found
        params["cursor"] = body["nextCursor"]


async def rows(app: FastAPI) -> list[AuditEntry]:
    db = ctx_of(app).sessions()
    try:
        return list((await db.scalars(select(AuditEntry).order_by(AuditEntry.id))).all())
    finally:
        await finish(db, ok=True)


@dataclass
class Walk:
    """What a step of the walk needs, and what it leaves for the check."""

    api: Api
    client: httpx.AsyncClient
    app: FastAPI
    invites: Invites
    owner: Account
    project: dict[str, Any]
    other: Account | None = None  # a second account the step involved
    target_id: str | None = None  # what the entry must name
    in_account_log: bool = False  # the entry shows in the owner's account log, not the project's

    @property
    def headers(self) -> dict[str, str]:
        return {**self.owner.headers, "User-Agent": USER_AGENT}

    async def post(self, path: str, body: Any = None, status: int = 201) -> dict[str, Any]:
        r = await self.client.post(path, json=body, headers=self.headers)
        assert r.status_code == status, r.text
        return r.json() if r.content else {}

    async def put(self, path: str, body: Any) -> dict[str, Any]:
        r = await self.client.put(path, json=body, headers=self.headers)
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result

    async def delete(self, path: str) -> None:
        r = await self.client.delete(path, headers=self.headers)
        assert r.status_code == 204, r.text

    async def app_id(self) -> str:
        application = await self.api.application(self.owner, self.project["id"])
        return str(application["id"])

    async def build(self) -> tuple[str, dict[str, Any]]:
        app_id = await self.app_id()
        return app_id, await self.api.upload(self.owner, self.project["id"], app_id)

    async def member(self, role: str = "developer") -> Account:
        self.other = await self.api.register()
        await self.api.add_member(self.owner, self.project["id"], self.other, role)
        return self.other


Step = Callable[[Walk], Awaitable[None]]
P = "/api/projects/{id}"


async def sign_in(w: Walk) -> None:
    await w.api.login(w.owner)
    w.target_id, w.in_account_log = w.owner.user["id"], True


async def sign_in_failed(w: Walk) -> None:
    r = await w.client.post(
        "/api/auth/login", json={"email": w.owner.email, "password": "not the password"}
    )
    assert_problem(r, 401, "invalid_credentials")
    w.target_id, w.in_account_log = w.owner.user["id"], True


async def password_changed(w: Walk) -> None:
    body = {"currentPassword": w.owner.password, "newPassword": "a brand new passphrase"}
    await w.post("/api/auth/change-password", body, 204)
    w.target_id, w.in_account_log = w.owner.user["id"], True


async def password_reset(w: Walk) -> None:
    db = ctx_of(w.app).sessions()
    try:
        user = await db.get_one(User, w.owner.user["id"])
        token = await PasswordResets(db, ctx_of(w.app).clock.now()).issue(user)
    finally:
        await finish(db, ok=True)
    body = {"token": token, "password": "a brand new passphrase"}
    await w.post("/api/auth/password-reset/confirm", body, 204)
    w.owner.password = "a brand new passphrase"
    w.owner = await w.api.login(w.owner)  # the reset ended every session
    w.target_id, w.in_account_log = w.owner.user["id"], True


async def token_created(w: Walk) -> None:
    created = await w.post("/api/account/api-tokens", {"name": "ci"})
    w.target_id, w.in_account_log = created["id"], True


async def token_revoked(w: Walk) -> None:
    created = await w.post("/api/account/api-tokens", {"name": "ci"})
    await w.delete(f"/api/account/api-tokens/{created['id']}")
    w.target_id, w.in_account_log = created["id"], True


async def member_added(w: Walk) -> None:
    other = await w.api.register()
    await w.post(
        f"/api/projects/{w.project['id']}/members", {"email": other.email, "role": "admin"}
    )
    w.other, w.target_id = other, other.user["id"]


async def member_role_changed(w: Walk) -> None:
    other = await w.member()
    await w.put(f"/api/projects/{w.project['id']}/members/{other.user['id']}", {"role": "admin"})
    w.target_id = other.user["id"]


async def member_removed(w: Walk) -> None:
    other = await w.member()
    await w.delete(f"/api/projects/{w.project['id']}/members/{other.user['id']}")
    w.target_id = other.user["id"]


async def invitation_sent(w: Walk) -> None:
    invitation, _ = await w.invites.send(w.owner, w.project["id"], "carol@example.com")
    w.target_id = invitation["id"]


async def invitation_revoked(w: Walk) -> None:
    invitation, _ = await w.invites.send(w.owner, w.project["id"], "carol@example.com")
    await w.delete(f"/api/projects/{w.project['id']}/invitations/{invitation['id']}")
    w.target_id = invitation["id"]


async def invitation_accepted(w: Walk) -> None:
    invitation, token = await w.invites.send(w.owner, w.project["id"], "carol@example.com")
    w.other = await w.api.register("carol@example.com")
    r = await w.invites.accept(w.other, token)
    assert r.status_code == 200, r.text
    w.target_id = invitation["id"]


async def project_created(w: Walk) -> None:
    w.project = await w.post("/api/projects", {"name": "Second"})
    w.target_id = w.project["id"]


async def project_renamed(w: Walk) -> None:
    await w.put(P.format(id=w.project["id"]), {"name": "Renamed"})
    w.target_id = w.project["id"]


async def project_deleted(w: Walk) -> None:
    await w.delete(P.format(id=w.project["id"]))
    w.target_id, w.in_account_log = w.project["id"], True  # its log went with it


async def application_created(w: Walk) -> None:
    w.target_id = await w.app_id()


async def application_renamed(w: Walk) -> None:
    app_id = await w.app_id()
    await w.put(f"{P.format(id=w.project['id'])}/applications/{app_id}", {"name": "Renamed"})
    w.target_id = app_id


async def application_deleted(w: Walk) -> None:
    app_id = await w.app_id()
    await w.delete(f"{P.format(id=w.project['id'])}/applications/{app_id}")
    w.target_id = app_id


def builds_path(w: Walk, app_id: str) -> str:
    return f"/api/app-distribution/{w.project['id']}/{app_id}/builds"


async def build_uploaded(w: Walk) -> None:
    _, build = await w.build()
    w.target_id = build["buildId"]


async def build_deleted(w: Walk) -> None:
    app_id, build = await w.build()
    await w.delete(f"{builds_path(w, app_id)}/{build['buildId']}")
    w.target_id = build["buildId"]


async def install_link_created(w: Walk) -> None:
    app_id, build = await w.build()
    link = await w.post(f"{builds_path(w, app_id)}/{build['buildId']}/install-link")
    w.target_id = link["linkId"]


async def install_link_revoked(w: Walk) -> None:
    app_id, build = await w.build()
    path = f"{builds_path(w, app_id)}/{build['buildId']}"
    link = await w.post(f"{path}/install-link")
    await w.delete(f"{path}/install-links/{link['linkId']}")
    w.target_id = link["linkId"]


WEBHOOK_URL = "https://hooks.example.com/services/T0/B0/chat-credential-in-the-path"


async def webhook_created(w: Walk) -> None:
    webhook = await w.post(
        f"{P.format(id=w.project['id'])}/webhooks", {"url": WEBHOOK_URL, "events": ["build.ready"]}
    )
    w.target_id = webhook["id"]


async def webhook_changed(w: Walk) -> None:
    await webhook_created(w)
    await w.put(
        f"{P.format(id=w.project['id'])}/webhooks/{w.target_id}", {"description": "Releases"}
    )


async def webhook_deleted(w: Walk) -> None:
    await webhook_created(w)
    await w.delete(f"{P.format(id=w.project['id'])}/webhooks/{w.target_id}")


STEPS: dict[AuditAction, Step] = {
    AuditAction.SIGN_IN: sign_in,
    AuditAction.SIGN_IN_FAILED: sign_in_failed,
    AuditAction.PASSWORD_CHANGED: password_changed,
    AuditAction.PASSWORD_RESET: password_reset,
    AuditAction.TOKEN_CREATED: token_created,
    AuditAction.TOKEN_REVOKED: token_revoked,
    AuditAction.MEMBER_ADDED: member_added,
    AuditAction.MEMBER_ROLE_CHANGED: member_role_changed,
    AuditAction.MEMBER_REMOVED: member_removed,
    AuditAction.INVITATION_SENT: invitation_sent,
    AuditAction.INVITATION_REVOKED: invitation_revoked,
    AuditAction.INVITATION_ACCEPTED: invitation_accepted,
    AuditAction.PROJECT_CREATED: project_created,
    AuditAction.PROJECT_RENAMED: project_renamed,
    AuditAction.PROJECT_DELETED: project_deleted,
    AuditAction.APPLICATION_CREATED: application_created,
    AuditAction.APPLICATION_RENAMED: application_renamed,
    AuditAction.APPLICATION_DELETED: application_deleted,
    AuditAction.BUILD_UPLOADED: build_uploaded,
    AuditAction.BUILD_DELETED: build_deleted,
    AuditAction.INSTALL_LINK_CREATED: install_link_created,
    AuditAction.INSTALL_LINK_REVOKED: install_link_revoked,
    AuditAction.WEBHOOK_CREATED: webhook_created,
    AuditAction.WEBHOOK_CHANGED: webhook_changed,
    AuditAction.WEBHOOK_DELETED: webhook_deleted,
}
# The owner's own changes; these are someone else's (the invited person's) or a failure's.
ACTOR_IS_OTHER = {AuditAction.INVITATION_ACCEPTED}
NO_ACTOR_ID = {AuditAction.SIGN_IN_FAILED}
# Whom the entry is about, besides its actor (their account's log shows it).
ABOUT_OTHER = {
    AuditAction.MEMBER_ADDED, AuditAction.MEMBER_ROLE_CHANGED, AuditAction.MEMBER_REMOVED,
}  # fmt: skip


@pytest.mark.parametrize("action", list(STEPS), ids=[a.value for a in STEPS])
async def test_each_change_leaves_its_entry_naming_who_what_and_from_where(
    action: AuditAction, api: Api, client: httpx.AsyncClient, app: FastAPI, invites: Invites,
    owner: Account,
) -> None:  # fmt: skip
    project = await api.project(owner)
    walk = Walk(api, client, app, invites, owner, project)

    await STEPS[action](walk)

    path = ACCOUNT_LOG if walk.in_account_log else project_log(walk.project["id"])
    found = await entries(client, path, walk.owner, action=action.value)
    assert len(found) == 1, found
    [entry] = found
    assert entry["target"]["id"] == walk.target_id
    assert entry["at"].endswith("Z")
    actor = walk.other if action in ACTOR_IS_OTHER else owner
    assert actor is not None
    assert entry["actor"]["kind"] == "user"
    assert entry["actor"]["id"] == (None if action in NO_ACTOR_ID else actor.user["id"])
    assert entry["actor"]["email"] == actor.email
    assert entry["ip"] == "127.0.0.1"
    if not walk.in_account_log:
        assert entry["projectId"] == walk.project["id"]
    if action in ABOUT_OTHER:
        assert walk.other is not None
        about = await entries(client, ACCOUNT_LOG, walk.other, action=action.value)
        assert [e["id"] for e in about] == [entry["id"]]


async def test_the_user_agent_is_kept_neutralised_and_a_failed_sign_in_keeps_what_was_typed(
    client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    typed = "  OWNER@Example.com "  # as typed: spaces, capitals
    r = await client.post(
        "/api/auth/login",
        json={"email": typed, "password": "wrong password"},
        headers={"User-Agent": USER_AGENT + "x" * 1000},
    )
    assert_problem(r, 401, "invalid_credentials")

    [entry] = await entries(client, ACCOUNT_LOG, owner, action="auth.sign_in_failed")
    assert entry["actor"] == {"kind": "user", "id": None, "email": typed}
    assert entry["userAgent"].startswith("buildbay-tests/1.0 \ufffd[31mred\ufffd[0m")
    assert len(entry["userAgent"]) == 500
    assert entry["details"] == {"method": "password"}
    stored = json.dumps([vars_of(row) for row in await rows(app)], default=str)
    assert "wrong password" not in stored


async def test_a_failed_sign_in_with_an_unknown_e_mail_is_in_no_ones_log(
    client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    r = await client.post(
        "/api/auth/login", json={"email": "nobody@example.com", "password": "guessing"}
    )
    assert_problem(r, 401, "invalid_credentials")

    [row] = [row for row in await rows(app) if row.action == "auth.sign_in_failed"]
    assert (row.actor_email, row.subject_user_id, row.target_id) == (
        "nobody@example.com", None, None,
    )  # fmt: skip
    assert await entries(client, ACCOUNT_LOG, owner, action="auth.sign_in_failed") == []


async def test_an_entry_rolls_back_with_the_change_it_tells_of(
    app: FastAPI, owner: Account
) -> None:
    ctx = ctx_of(app)
    for ok in (False, True):
        db = ctx.sessions()
        try:
            user = await db.get_one(User, owner.user["id"])
            view = await project_service(ctx, db).create(user, f"Kept {ok}")
        finally:
            await finish(db, ok=ok)
        db = ctx.sessions()
        try:
            project = await db.get(Project, view.project.id)
            entry = await db.scalar(
                select(AuditEntry).where(AuditEntry.target_id == view.project.id)
            )
        finally:
            await finish(db, ok=True)
        assert (project is not None, entry is not None) == (ok, ok)


async def test_a_role_change_reads_as_from_and_to(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    bob = await api.register("bob@example.com")
    await api.add_member(owner, project["id"], bob, "developer")
    r = await client.put(
        f"/api/projects/{project['id']}/members/{bob.user['id']}",
        json={"role": "admin"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text

    [entry] = await entries(client, project_log(project["id"]), owner, action="member.role_changed")
    assert entry["target"] == {"type": "user", "id": bob.user["id"], "name": "bob@example.com"}
    assert entry["details"] == {"from": "developer", "to": "admin"}


async def test_an_operators_plan_change_is_by_the_operator_and_in_the_users_log(
    client: httpx.AsyncClient, owner: Account, settings: Settings
) -> None:
    env = {
        "BUILDBAY_DATA_DIR": str(settings.data_dir),
        "BUILDBAY_DATABASE_URL": settings.resolved_database_url,
        "BUILDBAY_SECRET_KEY": TEST_SECRET,
    }
    args = ["users", "set-plan", owner.email, "pro"]
    result = await asyncio.to_thread(CliRunner().invoke, operator_commands(), args, env=env)
    assert result.exit_code == 0, result.output

    [entry] = await entries(client, ACCOUNT_LOG, owner, action="plan.changed")
    assert entry["actor"] == {"kind": "operator", "id": None, "email": None}
    assert entry["target"]["id"] == owner.user["id"]
    assert entry["details"] == {"from": "free", "to": "pro"}
    assert entry["ip"] is None


# -- reading the log ---------------------------------------------------------------------------


async def test_the_project_log_is_for_admins_and_the_rule_of_403_and_404_holds(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    admin, developer, stranger = await api.register(), await api.register(), await api.register()
    await api.add_member(owner, project["id"], admin, "admin")
    await api.add_member(owner, project["id"], developer, "developer")
    path = project_log(project["id"])

    assert (await client.get(path, headers=admin.headers)).status_code == 200
    assert_problem(await client.get(path, headers=developer.headers), 403, "insufficient_role")
    assert_problem(await client.get(path, headers=stranger.headers), 403, "not_a_member")
    unknown = project_log("prj_01JZZZZZZZZZZZZZZZZZZZZZZZ")
    assert_problem(await client.get(unknown, headers=admin.headers), 404, "project_not_found")
    assert_problem(await client.get(path), 401)
    # No way to change or delete an entry.
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        r = await client.request(method, path, headers=owner.headers)
        assert r.status_code == 405, (method, r.text)


async def test_pages_come_newest_first_with_cursors_and_filters(
    api: Api, client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    admin = await api.register("admin@example.com")
    await api.add_member(owner, project["id"], admin, "admin")
    clock.advance(days=2)
    owner, admin = await api.login(owner), await api.login(admin)
    for n in range(5):
        r = await client.put(
            f"/api/projects/{project['id']}", json={"name": f"Acme {n}"}, headers=admin.headers
        )
        assert r.status_code == 200, r.text
    path = project_log(project["id"])

    r = await client.get(path, params={"limit": "2"}, headers=owner.headers)
    first = r.json()
    assert [e["target"]["name"] for e in first["entries"]] == ["Acme 4", "Acme 3"]
    r = await client.get(
        path, params={"limit": "2", "cursor": first["nextCursor"]}, headers=owner.headers
    )
    assert [e["target"]["name"] for e in r.json()["entries"]] == ["Acme 2", "Acme 1"]
    every = await entries(client, path, owner)
    assert [e["action"] for e in every] == ["project.renamed"] * 5 + [
        "member.added", "project.created",
    ]  # fmt: skip
    by_admin = await entries(client, path, owner, actor="ADMIN@example.com")
    assert len(by_admin) == 5
    assert len(await entries(client, path, owner, actor=admin.user["id"])) == 5
    today = clock.now().date().isoformat()
    assert len(await entries(client, path, owner, since=today)) == 5
    assert (
        len(
            await entries(
                client, path, owner, until=(clock.now() - timedelta(days=1)).date().isoformat()
            )
        )
        == 2
    )
    assert len(await entries(client, path, owner, action="member.added", until=today)) == 1


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"action": "build.stolen"}, "action"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"actor": "a\x00b"}, "actor"),
        ({"actor": "x" * 321}, "actor"),
        ({"format": "csv"}, "format"),
        ({"limit": "0"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
    ],
)
async def test_a_bad_filter_is_a_422_naming_it(
    api: Api, client: httpx.AsyncClient, owner: Account, query: dict[str, str], field: str
) -> None:
    project = await api.project(owner)
    for path in (project_log(project["id"]), ACCOUNT_LOG):
        problem = assert_problem(await client.get(path, params=query, headers=owner.headers), 422)
        assert [e["field"] for e in problem["errors"]] == [field]


async def test_the_ndjson_export_streams_the_whole_filtered_log_as_an_attachment(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    project = await api.project(owner)
    for n in range(3):
        await client.put(
            f"/api/projects/{project['id']}", json={"name": f"A{n}"}, headers=owner.headers
        )
    path = project_log(project["id"])

    r = await client.get(path, params={"format": "ndjson", "limit": "1"}, headers=owner.headers)

    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-ndjson"
    assert r.headers["content-disposition"].startswith("attachment; filename=")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert lines == await entries(client, path, owner)
    assert len(lines) == 4
    r = await client.get(
        path, params={"format": "ndjson", "action": "project.renamed"}, headers=owner.headers
    )
    assert len(r.text.splitlines()) == 3


async def test_the_export_reads_in_batches_past_the_first(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    await seed(app, project["id"], owner, 1234, clock.now())

    r = await client.get(ACCOUNT_LOG, params={"format": "ndjson"}, headers=owner.headers)

    ids = [json.loads(line)["id"] for line in r.text.splitlines()]
    assert len(ids) == 1234 + 1  # and the project's creation
    assert ids == sorted(ids, reverse=True)


async def test_the_account_log_holds_what_one_did_and_what_was_done_about_one_and_no_more(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    bob = await api.register("bob@example.com")
    await api.add_member(owner, project["id"], bob, "tester")
    await api.project(bob, "Bob's own")

    mine = {e["action"] for e in await entries(client, ACCOUNT_LOG, owner)}
    bobs = [e["action"] for e in await entries(client, ACCOUNT_LOG, bob)]

    assert mine == {"project.created", "member.added"}
    assert bobs == ["project.created", "member.added"]
    # Where another person acted from (the admin who added bob) is the project admins' to
    # read, not bob's; his own doings, and a failed sign-in with his address, show theirs.
    [added] = await entries(client, ACCOUNT_LOG, bob, action="member.added")
    assert (added["actor"]["id"], added["ip"], added["userAgent"]) == (owner.user["id"], None, None)
    [own] = await entries(client, ACCOUNT_LOG, bob, action="project.created")
    assert own["ip"] == "127.0.0.1"
    r = await client.post("/api/auth/login", json={"email": bob.email, "password": "wrong one"})
    assert_problem(r, 401, "invalid_credentials")
    [failed] = await entries(client, ACCOUNT_LOG, bob, action="auth.sign_in_failed")
    assert failed["ip"] == "127.0.0.1"
    exported = await client.get(ACCOUNT_LOG, params={"format": "ndjson"}, headers=bob.headers)
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [e["ip"] for e in lines if e["action"] == "member.added"] == [None]
    [in_project] = await entries(client, project_log(project["id"]), owner, action="member.added")
    assert in_project["ip"] == "127.0.0.1"


# -- retention and the database's own guard ------------------------------------------------------


async def seed(
    app: FastAPI, project_id: str, owner: Account, count: int, at: datetime, step: int = 1
) -> None:
    """`count` entries (bulk-inserted) about the project, by the owner, `step` seconds apart."""
    from buildbay.ids import new_id

    db = ctx_of(app).sessions()
    try:
        await db.run_sync(
            lambda s: s.bulk_insert_mappings(  # type: ignore[arg-type]
                AuditEntry,
                [
                    {"id": new_id("aud"), "at": at - timedelta(seconds=n * step),
                     "actor_kind": "user", "actor_id": owner.user["id"],
                     "actor_email": owner.email, "action": "project.renamed",
                     "target_type": "project", "target_id": project_id, "target_name": f"n{n}",
                     "project_id": project_id, "details": {}}
                    for n in range(count)
                ],
            )
        )  # fmt: skip
    finally:
        await finish(db, ok=True)


async def test_the_sweeper_deletes_entries_past_the_retention_in_batches(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI, clock: FrozenClock
) -> None:
    from buildbay.builds.sweeper import sweep

    project = await api.project(owner)
    now = clock.now()
    await seed(app, project["id"], owner, 2500, now - timedelta(days=31))  # 3 batches
    await seed(app, project["id"], owner, 10, now - timedelta(days=29))
    ctx = ctx_of(app)

    swept = await sweep(
        ctx.sessions, ctx.storage, now, "http://testserver", audit_retention_days=30
    )

    assert swept.audit_entries == 2500
    left = await entries(client, project_log(project["id"]), owner)
    assert len(left) == 11  # the ten kept and the project's creation
    untouched = await sweep(ctx.sessions, ctx.storage, now, "http://testserver")
    assert untouched.audit_entries == 0


async def test_retention_days_is_a_setting() -> None:
    assert Settings().audit_retention_days == 365
    import os

    os.environ["BUILDBAY_AUDIT_RETENTION_DAYS"] = "30"
    try:
        assert Settings().audit_retention_days == 30
    finally:
        del os.environ["BUILDBAY_AUDIT_RETENTION_DAYS"]


async def test_postgresql_refuses_to_change_or_delete_an_entry_but_for_the_retention_sweep(
    api: Api, owner: Account, app: FastAPI, settings: Settings
) -> None:
    if not settings.resolved_database_url.startswith("postgresql"):
        pytest.skip("the trigger is PostgreSQL's")
    from sqlalchemy import delete, text, update
    from sqlalchemy.exc import DBAPIError

    from buildbay.audit.retention import allow_retention_delete

    await api.project(owner)
    ctx = ctx_of(app)
    for change in (
        update(AuditEntry).values(actor_email="someone@else.com"),
        delete(AuditEntry),
        text("TRUNCATE audit_entries"),
    ):
        async with ctx.sessions() as db:
            with pytest.raises(DBAPIError, match="never changed or deleted"):
                async with db.begin():
                    await db.execute(change)
    async with ctx.sessions() as db, db.begin():
        await allow_retention_delete(db)
        assert (await db.execute(delete(AuditEntry))).rowcount == 1  # type: ignore[attr-defined]


# -- nothing secret ------------------------------------------------------------------------------


def vars_of(row: AuditEntry) -> dict[str, Any]:
    return {c.name: getattr(row, c.name) for c in AuditEntry.__table__.columns}


async def test_no_secret_reaches_an_entry(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI, no_leaks: LeakGuard
) -> None:
    secrets = [owner.password, owner.access_token, owner.refresh_token]
    project = await api.project(owner)
    walk = Walk(api, client, app, invites=None, owner=owner, project=project)  # type: ignore[arg-type]
    token = await walk.post("/api/account/api-tokens", {"name": "ci"})
    secrets.append(token["token"])
    r = await client.post("/api/auth/login", json={"email": owner.email, "password": "guess-1234"})
    assert r.status_code == 401
    secrets.append("guess-1234")
    db = ctx_of(app).sessions()
    try:
        user = await db.get_one(User, owner.user["id"])
        reset = await PasswordResets(db, ctx_of(app).clock.now()).issue(user)
    finally:
        await finish(db, ok=True)
    secrets.append(reset)
    await walk.post(
        "/api/auth/password-reset/confirm", {"token": reset, "password": "new secret 42"}, 204
    )
    secrets.append("new secret 42")
    walk.owner = await api.login(Account(owner.email, "new secret 42", "", "", owner.user))
    secrets.append(walk.owner.access_token)
    webhook = await walk.post(
        f"/api/projects/{project['id']}/webhooks", {"url": WEBHOOK_URL, "events": ["build.ready"]}
    )
    secrets += [webhook["secret"], "chat-credential-in-the-path"]
    rotated = await walk.post(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}/rotate-secret", None, 200
    )
    secrets.append(rotated["secret"])

    stored = json.dumps([vars_of(row) for row in await rows(app)], default=str)
    exported = (
        await client.get(ACCOUNT_LOG, params={"format": "ndjson"}, headers=walk.owner.headers)
    ).text

    assert len(await rows(app)) >= 7
    for secret in secrets:
        assert secret not in stored
        assert secret not in exported
