"""The app's /api routes as test cases, a world to call them in, and a valid call of each.

Tests that must cover every route (tests/test_authorization_matrix.py,
tests/security/test_mass_assignment.py) take the routes from the app itself, so a new route is
covered the day it is added, or fails the suite until BODIES says how to call it.

The world is one set of shared accounts: a project in which each role has a member, an
application and a ready build. Only the calls that destroy what they name get a fresh target of
their own (TARGETS), so every caller finds it there.
"""

from __future__ import annotations

import gzip
import itertools
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.authentication import Principal
from buildbay.auth.cli_sign_in import LoopbackRequest, pkce_challenge
from buildbay.auth.dependencies import cli_sign_ins, email_changes, email_verifications
from buildbay.auth.models import EmailChange, User
from buildbay.auth.password_reset import PasswordResets
from buildbay.auth.reads import user_by_id
from buildbay.auth.tokens import hash_token
from buildbay.auth.verification import LINK_LIFETIME
from buildbay.clock import FrozenClock
from buildbay.config import InvitationCaps
from buildbay.context import AppContext
from buildbay.db.engine import finish
from buildbay.db.reads import Reads
from buildbay.devices.dependencies import device_service
from buildbay.devices.models import AppleDeviceRegistration
from buildbay.devices.service import DeviceDescription
from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus
from buildbay.feedback.models import Feedback
from buildbay.ids import new_id
from buildbay.invitations.service import InvitationService
from buildbay.projects.authorization import project_of
from buildbay.projects.enums import ProjectRole
from tests.builds.android_files import APK
from tests.conftest import Account, Api
from tests.ios.apple_receiver import new_team_key

NO_CAPS = InvitationCaps(per_recipient=None, per_account=None, per_project=None)

T = TypeVar("T")
_PARAM = re.compile(r"{(\w+)(?::\w+)?}")

# Callers without a valid credential: all four hold the owner's, spoilt.
SPOILT = ["no token", "a bad token", "an expired token", "a revoked token"]
# Members by role, lowest first; "just below" tester is a registered user who is not a member.
LADDER = ["stranger", "tester", "developer", "admin", "owner"]


@dataclass(frozen=True)
class TokenLimits:
    scope: str | None  # None: no scope (all the user may do)
    elsewhere: bool  # restricted to another project than the world's


# API tokens of the owner, each with other limits: what they may do is what the owner may, less
# what their limits take away (and never the account's endpoints).
TOKENS = {
    "a full API token": TokenLimits(None, elsewhere=False),
    "a read token": TokenLimits("read", elsewhere=False),
    "a builds:write token": TokenLimits("builds:write", elsewhere=False),
    "a token for another project": TokenLimits(None, elsewhere=True),
}


@dataclass(frozen=True)
class RouteCase:
    method: str
    path: str  # as declared, e.g. /api/projects/{id}/members/{userId}
    has_body: bool
    success: int  # the status the route answers when it succeeds

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.path)

    @property
    def params(self) -> list[str]:
        return _PARAM.findall(self.path)

    @property
    def per_user(self) -> bool:
        """The route names a thing of the caller's own account (`{id}`: an API token, a
        device)."""
        return self.path.startswith("/api/account/") and bool(self.params)

    @property
    def owned(self) -> str:
        """What a per-user route's `{id}` names: `api_token` or `device`."""
        return "device" if self.path.startswith("/api/account/devices/") else "api_token"

    def url(self, values: dict[str, str]) -> str:
        return _PARAM.sub(lambda m: values[m.group(1)], self.path)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def api_routes(app: FastAPI) -> Iterator[RouteCase]:
    for context in iter_route_contexts(app.routes):
        route, path = context.original_route, context.path_format
        if not isinstance(route, APIRoute) or not path or not path.startswith("/api/"):
            continue
        for method in sorted(route.methods - {"HEAD"}):
            yield RouteCase(method, path, route.body_field is not None, route.status_code or 200)


# -- the world ------------------------------------------------------------------------------------


@dataclass
class Accounts:
    owner: Account
    admin: Account
    developer: Account
    tester: Account
    member: Account  # the member whose id fills {userId} (a tester)
    stranger: Account  # registered, member of nothing
    # The owner's credentials, spoilt: signed with another key, 24 h old, logged out.
    bad: dict[str, str] = field(default_factory=dict)
    expired: dict[str, str] = field(default_factory=dict)
    revoked: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)  # TOKENS' headers

    def by_role(self, role: str) -> Account:
        account: Account = getattr(self, role)
        return account


@dataclass
class World:
    """The accounts, the ids of what they share, and the steps that make fresh things."""

    client: httpx.AsyncClient
    api: Api
    accounts: Accounts
    ctx: AppContext  # for what no API hands out: the secrets that only mails carry
    ids: dict[str, str] = field(default_factory=dict)  # path parameter -> existing id
    api_token_id: str = ""  # one of the owner's API tokens
    device_id: str = ""  # one of the owner's enrolled devices
    update_key: str = ""  # the world's application's
    token_ids: set[str] = field(default_factory=set)  # all the owner's API tokens
    _n: Iterator[int] = field(default_factory=itertools.count)

    def values_for(self, case: RouteCase) -> dict[str, str]:
        if not case.per_user:
            return dict(self.ids)
        return {"id": self.device_id if case.owned == "device" else self.api_token_id}

    async def login(self, account: Account) -> Account:
        return await Api(self.client).login(account)

    async def relogin(self, account: Account) -> None:
        """A fresh session for `account`, in place (after a call that may have ended its own)."""
        fresh = await self.login(account)
        account.access_token, account.refresh_token = fresh.access_token, fresh.refresh_token

    def new_email(self) -> str:
        return f"world-{next(self._n)}@example.com"

    async def new_user(self) -> Account:
        return await self.api.register(self.new_email())

    async def new_project(self) -> str:
        """A project with every role among its members, like the world's."""
        a = self.accounts
        project = await self.api.project(a.owner, f"Doomed {next(self._n)}")
        for account, role in ((a.admin, "admin"), (a.developer, "developer"), (a.tester, "tester")):
            await self.api.add_member(a.owner, project["id"], account, role)
        return str(project["id"])

    async def new_pending_build(self) -> str:
        r = await self.client.post(
            f"{self.builds}/upload-link",
            json={"fileName": "doomed.apk", "fileSize": 10},
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 201, r.text
        return str(r.json()["buildId"])

    async def new_multipart_build(self) -> str:
        """A pending build uploaded in parts (10 MiB: two parts)."""
        r = await self.client.post(
            f"{self.builds}/upload-link",
            json={"fileName": "big.apk", "fileSize": 10 * 1024 * 1024, "multipart": True},
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 201, r.text
        return str(r.json()["buildId"])

    async def new_install_link(self) -> str:
        r = await self.client.post(
            f"{self.builds}/{self.ids['buildId']}/install-link",
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 201, r.text
        return str(r.json()["linkId"])

    async def new_channel(self) -> str:
        r = await self.client.post(
            f"{self.channels}",
            json={"name": f"channel-{next(self._n)}"},
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def new_group(self) -> str:
        """A tester group of the world's project, with the member in it."""
        groups = f"/api/projects/{self.ids['id']}/groups"
        headers = self.accounts.owner.headers
        r = await self.client.post(groups, json={"name": f"group-{next(self._n)}"}, headers=headers)
        assert r.status_code == 201, r.text
        group_id = str(r.json()["id"])
        r = await self.client.post(
            f"{groups}/{group_id}/testers",
            json={"emails": [self.accounts.member.email]},
            headers=headers,
        )
        assert r.status_code == 200, r.text
        return group_id

    async def new_webhook(self) -> str:
        r = await self.client.post(
            f"/api/projects/{self.ids['id']}/webhooks",
            json={"url": "https://hooks.example.com/buildbay", "events": ["build.ready"]},
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def new_delivery(self) -> str:
        r = await self.client.post(
            f"/api/projects/{self.ids['id']}/webhooks/{self.ids['webhookId']}/test",
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 202, r.text
        return str(r.json()["deliveryId"])

    async def put_apple_key(self, project_id: str) -> None:
        r = await self.client.put(
            f"/api/projects/{project_id}/apple-api-key",
            json=new_team_key().body(),
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 200, r.text

    async def registered_device(self) -> str:
        """A device of the member's, registered with Apple through the world's project already
        (so registering it again asks Apple nothing)."""
        return await self.new_device(self.accounts.member)

    @property
    def channels(self) -> str:
        return f"/api/projects/{self.ids['id']}/applications/{self.ids['appId']}/channels"

    async def new_device(self, account: Account) -> str:
        """A device of `account`'s, as enrolling records it (tests/ios tests the enrolling),
        registered with Apple through the world's project already: registering the project's
        missing devices then asks Apple nothing (tests/ios tests asking Apple)."""
        udid = f"{next(self._n):040X}"

        async def enroll(db: AsyncSession) -> str:
            service = device_service(self.ctx, db)
            described = DeviceDescription(udid, "iPhone14,2", "21E236", None, "Test iPhone")
            device_id = (await service.enroll(account.user["id"], described)).device.id
            db.add(
                AppleDeviceRegistration(
                    project_id=self.ids["id"],
                    device_id=device_id,
                    apple_device_id=f"APPLE{udid[-5:]}",
                    registered_by=self.accounts.owner.user["id"],
                    registered_at=self.ctx.clock.now(),
                )
            )
            return device_id

        return await self._unit_of_work(enroll)

    async def new_feedback(self) -> str:
        """A feedback on the world's build by the member (a tester), written as the submission
        stores it: the team's routes (tests/feedback/) act on it."""

        async def write(db: AsyncSession) -> str:
            now = self.ctx.clock.now()
            feedback = Feedback(
                id=new_id("fbk"), project_id=self.ids["id"], application_id=self.ids["appId"],
                build_id=self.ids["buildId"], tester_id=self.accounts.member.user["id"],
                reporter_email=self.accounts.member.email, category=FeedbackCategory.BUG,
                text="It crashes", context=None, status=FeedbackStatus.NEW, assignee_id=None,
                created_at=now, updated_at=now,
            )  # fmt: skip
            db.add(feedback)
            return feedback.id

        return await self._unit_of_work(write)

    async def new_api_token(self, account: Account) -> str:
        return str((await self._api_token(account, {"name": "ci"}))["id"])

    async def _api_token(self, account: Account, body: dict[str, Any]) -> dict[str, Any]:
        r = await self.client.post("/api/account/api-tokens", json=body, headers=account.headers)
        assert r.status_code == 201, r.text
        created: dict[str, Any] = r.json()
        return created

    async def limited_tokens(self) -> None:
        """The owner's TOKENS, and another project for the one that is restricted to it."""
        elsewhere = await self.api.project(self.accounts.owner, "Elsewhere")
        for caller, limits in TOKENS.items():
            body: dict[str, Any] = {"name": caller, "scope": limits.scope}
            if limits.elsewhere:
                body["projectIds"] = [elsewhere["id"]]
            created = await self._api_token(self.accounts.owner, body)
            self.accounts.tokens[caller] = {"Authorization": f"Bearer {created['token']}"}
            self.token_ids.add(created["id"])

    async def _unit_of_work(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        db = self.ctx.sessions()
        ok = False
        try:
            result = await work(db)
            ok = True
        finally:
            await finish(db, ok=ok)
        return result

    async def reset_token(self, account: Account) -> str:
        """The token of a password-reset link mailed to `account`."""

        async def issue(db: AsyncSession) -> str:
            user = await db.get_one(User, account.user["id"])
            return await PasswordResets(db, self.ctx.clock.now()).issue(user)

        return await self._unit_of_work(issue)

    async def verification_token(self, account: Account) -> str:
        """The token of the verification link mailed to `account` at sign-up."""

        async def issue(db: AsyncSession) -> str:
            user = await db.get_one(User, account.user["id"])
            links = email_verifications(self.ctx, db).links
            return links.token(user, self.ctx.clock.now() + LINK_LIFETIME)

        return await self._unit_of_work(issue)

    async def cli_code(self, account: Account) -> dict[str, str]:
        """A loopback sign-in `account` allowed: the body that exchanges its code."""
        verifier, redirect_uri = secrets.token_urlsafe(32), "http://127.0.0.1:1/callback"

        async def allow(db: AsyncSession) -> str:
            user = await user_by_id(Reads.within(db), account.user["id"])
            assert user is not None
            asked = LoopbackRequest(redirect_uri, pkce_challenge(verifier), "s", "matrix")
            return await cli_sign_ins(self.ctx, db).approve_loopback(user, asked)

        code = await self._unit_of_work(allow)
        return {"code": code, "codeVerifier": verifier, "redirectUri": redirect_uri}

    async def device_code(self, account: Account) -> str:
        """A device sign-in `account` allowed: its device code."""

        async def allow(db: AsyncSession) -> str:
            user = await user_by_id(Reads.within(db), account.user["id"])
            assert user is not None
            service = cli_sign_ins(self.ctx, db)
            grant = await service.start_device("matrix", 5)
            await service.decide_device(grant.user_code, user, True, "matrix", self.ctx.limiter)
            return grant.device_code

        return await self._unit_of_work(allow)

    async def email_change_token(self, account: Account) -> str:
        """The token of the link mailed to the new address `account` asked to move to."""

        async def ask(db: AsyncSession) -> str:
            user = await db.get_one(User, account.user["id"])
            now = self.ctx.clock.now()
            change = EmailChange(user_id=user.id, new_email=self.new_email(), requested_at=now)
            db.add(change)
            url = email_changes(self.ctx, db).links.url(user, change, now + timedelta(days=1))
            return parse_qs(urlsplit(url).query)["token"][0]

        return await self._unit_of_work(ask)

    async def new_invitation(self) -> str:
        """A pending invitation into the world's project."""
        r = await self.client.post(
            f"/api/projects/{self.ids['id']}/invitations",
            json={"email": self.new_email(), "role": "tester"},
            headers=self.accounts.owner.headers,
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def invitation_token(self, account: Account) -> str:
        """The token mailed to `account` with an invitation into a project of someone else's
        (a fresh one: `account` is a member of nothing there yet)."""
        host = await self.new_user()
        project = await self.api.project(host, f"Hosted {next(self._n)}")

        async def invite(db: AsyncSession) -> str:
            inviter = await db.get_one(User, host.user["id"])
            access = await project_of(
                Reads.within(db), Principal(inviter), project["id"], ProjectRole.ADMIN
            )
            # The world invites one account as often as the matrix calls accept: no caps
            # here (tests/invitations/test_invitation_caps.py tests them).
            ctx, url = self.ctx, self.ctx.settings.resolved_public_url
            service = InvitationService(db, ctx.clock.now(), ctx.mail, url,
                                        lambda *_: NO_CAPS, ctx.unsubscribe)  # fmt: skip
            sent = await service.invite(access, account.email, ProjectRole.TESTER)
            token = "bbi_" + secrets.token_urlsafe(32)
            sent.token_hash = hash_token(token)  # the one in the mail is not ours to read
            return token

        return await self._unit_of_work(invite)

    @property
    def builds(self) -> str:
        return f"/api/app-distribution/{self.ids['projectId']}/{self.ids['appId']}/builds"


async def build_world(
    api: Api, client: httpx.AsyncClient, owner: Account, clock: FrozenClock, app: FastAPI
) -> World:
    """The world, with the owner's spoilt credentials. Advances `clock` by a day (to expire one
    of them), so rate limits, which count by the wall clock, should be off."""
    a = Accounts(
        owner=owner,
        admin=await api.register("admin@example.com"),
        developer=await api.register("developer@example.com"),
        tester=await api.register("tester@example.com"),
        member=await api.register("member@example.com"),
        stranger=await api.register("stranger@example.com"),
    )
    world = World(client, api, a, app.state.ctx)
    a.expired = (await world.login(owner)).headers
    clock.advance(hours=24, seconds=1)  # every token issued so far has expired
    for account in (owner, a.admin, a.developer, a.tester, a.stranger):
        await world.relogin(account)
    revoked = await world.login(owner)
    r = await client.post("/api/auth/logout", headers=revoked.headers)
    assert r.status_code == 204, r.text
    a.revoked = revoked.headers
    claims = jwt.decode(owner.access_token, options={"verify_signature": False})
    forged = jwt.encode(claims, "not-the-server-key-but-just-as-long-0123456789", "HS256")
    a.bad = {"Authorization": f"Bearer {forged}"}

    project = await api.project(owner, "Matrix")
    for account, role in (
        (a.admin, "admin"),
        (a.developer, "developer"),
        (a.tester, "tester"),
        (a.member, "tester"),
    ):
        await api.add_member(owner, project["id"], account, role)
    app = await api.application(owner, project["id"])
    # A real APK, so that the build has an icon to fetch.
    build = await api.upload(owner, project["id"], app["id"], APK.read_bytes(), "demo.apk")
    world.ids = {
        "id": project["id"],
        "projectId": project["id"],
        "appId": app["id"],
        "buildId": build["buildId"],
        "userId": a.member.user["id"],
    }
    world.ids["linkId"] = await world.new_install_link()
    world.ids["invitationId"] = await world.new_invitation()
    world.update_key = app["updateKey"]
    world.ids["channelId"] = await world.new_channel()
    world.ids["groupId"] = await world.new_group()
    world.ids["webhookId"] = await world.new_webhook()
    world.ids["deliveryId"] = await world.new_delivery()
    await world.put_apple_key(project["id"])
    world.ids["deviceId"] = await world.registered_device()
    world.ids["feedbackId"] = await world.new_feedback()
    world.ids |= await _doomed_publisher(world)
    world.api_token_id = await world.new_api_token(owner)
    world.device_id = await world.new_device(owner)
    world.token_ids.add(world.api_token_id)
    await world.limited_tokens()
    return world


# -- a valid call of each route -------------------------------------------------------------------

Key = tuple[str, str]
# A valid body, so that only what a test changes decides the answer. `subject` is the account the
# call acts as (the owner's, for the callers without a valid credential).
BodyFactory = Callable[[World, Account], Awaitable[dict[str, Any]]]
BODIES: dict[Key, BodyFactory] = {}
# Fresh ids for the calls that destroy what they name.
TargetFactory = Callable[[World], Awaitable[dict[str, str]]]
TARGETS: dict[Key, TargetFactory] = {}
# The query string of the routes that need one (after the path, with its `?`).
QUERIES: dict[Key, Callable[[World], str]] = {
    ("GET", "/api/updates/check"): lambda w: f"?key={w.update_key}&versionCode=1",
}
# Routes whose body is a multipart form, not JSON (FastAPI does not read it: the route does, as
# it arrives): a valid form of each, as httpx's `files`.
FormFactory = Callable[[World, Account], Awaitable[list[Any]]]
FORMS: dict[Key, FormFactory] = {}
# Routes that end the caller's login (or every other one): called with a login of their own,
# so that the caller's session for the other routes lives on.
ENDS_SESSIONS = {
    ("POST", "/api/auth/logout"),
    ("POST", "/api/auth/change-password"),
    ("POST", "/api/auth/logout-everywhere"),
}


def body(method: str, path: str) -> Callable[[BodyFactory], BodyFactory]:
    def register(factory: BodyFactory) -> BodyFactory:
        BODIES[(method, path)] = factory
        return factory

    return register


def target(method: str, path: str) -> Callable[[TargetFactory], TargetFactory]:
    def register(factory: TargetFactory) -> TargetFactory:
        TARGETS[(method, path)] = factory
        return factory

    return register


@body("POST", "/api/auth/register")
async def _register(w: World, subject: Account) -> dict[str, Any]:
    return {"email": w.new_email(), "password": "correct horse"}


@body("POST", "/api/auth/login")
async def _login(w: World, subject: Account) -> dict[str, Any]:
    return {"email": w.accounts.member.email, "password": w.accounts.member.password}


@body("POST", "/api/auth/refresh-token")
async def _refresh(w: World, subject: Account) -> dict[str, Any]:
    return {"refresh_token": (await w.login(w.accounts.member)).refresh_token}


@body("POST", "/api/auth/logout")
async def _logout(w: World, subject: Account) -> dict[str, Any]:
    return {}


@body("POST", "/api/auth/change-password")
async def _change_password(w: World, subject: Account) -> dict[str, Any]:
    # The same password again: the call's other effect (ending the other sessions) is its point.
    return {"currentPassword": subject.password, "newPassword": subject.password}


@body("POST", "/api/auth/password-reset")
async def _password_reset(w: World, subject: Account) -> dict[str, Any]:
    return {"email": w.new_email()}


@body("POST", "/api/auth/password-reset/confirm")
async def _confirm_password_reset(w: World, subject: Account) -> dict[str, Any]:
    # A user of its own: the reset ends every session of its account.
    doomed = await w.new_user()
    return {"token": await w.reset_token(doomed), "password": "a new password"}


@body("POST", "/api/auth/email-verification/confirm")
async def _confirm_email_verification(w: World, subject: Account) -> dict[str, Any]:
    return {"token": await w.verification_token(await w.new_user())}


@body("POST", "/api/auth/email-change")
async def _email_change(w: World, subject: Account) -> dict[str, Any]:
    return {"newEmail": w.new_email(), "password": subject.password}


@body("POST", "/api/auth/email-change/confirm")
async def _confirm_email_change(w: World, subject: Account) -> dict[str, Any]:
    return {"token": await w.email_change_token(await w.new_user())}


@body("POST", "/api/auth/cli/token")
async def _cli_token(w: World, subject: Account) -> dict[str, Any]:
    return await w.cli_code(await w.new_user())


@body("POST", "/api/auth/device/code")
async def _device_code(w: World, subject: Account) -> dict[str, Any]:
    return {"clientName": "matrix"}


@body("POST", "/api/auth/device/token")
async def _device_token(w: World, subject: Account) -> dict[str, Any]:
    return {"deviceCode": await w.device_code(await w.new_user())}


@body("POST", "/api/projects/{id}/invitations")
async def _invitation(w: World, subject: Account) -> dict[str, Any]:
    return {"email": w.new_email(), "role": "tester"}


@body("POST", "/api/invitations/accept")
@body("POST", "/api/invitations/decline")
async def _accept(w: World, subject: Account) -> dict[str, Any]:
    return {"token": await w.invitation_token(subject)}


@body("POST", "/api/projects/{id}/groups")
@body("PUT", "/api/projects/{id}/groups/{groupId}")
async def _group(w: World, subject: Account) -> dict[str, Any]:
    return {"name": f"group-{next(w._n)}"}


@body("POST", "/api/projects/{id}/groups/{groupId}/testers")
async def _testers(w: World, subject: Account) -> dict[str, Any]:
    return {"emails": [w.accounts.member.email]}


@body("POST", "/api/projects/{id}/groups/{groupId}/join-link")
async def _join_link(w: World, subject: Account) -> dict[str, Any]:
    return {"maxTesters": 10, "allowedEmailDomains": ["example.com"]}


@body("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/distribute")
async def _distribute(w: World, subject: Account) -> dict[str, Any]:
    return {"groups": ["everyone", w.ids["groupId"]], "emails": [w.accounts.member.email]}


@body("PUT", "/api/auth/me")
async def _me(w: World, subject: Account) -> dict[str, Any]:
    return {"notifyNewBuilds": True}


@body("POST", "/api/account/api-tokens")
async def _api_token(w: World, subject: Account) -> dict[str, Any]:
    return {"name": "ci"}


@body("POST", "/api/projects")
@body("PUT", "/api/projects/{id}")
async def _project(w: World, subject: Account) -> dict[str, Any]:
    return {"name": f"Renamed {uuid.uuid4().hex[:8]}"}  # an owner's projects differ in name


@body("POST", "/api/projects/{id}/members")
async def _member(w: World, subject: Account) -> dict[str, Any]:
    return {"email": (await w.new_user()).email, "role": "tester"}


@body("PUT", "/api/projects/{id}/sso-groups")
async def _sso_groups(w: World, subject: Account) -> dict[str, Any]:
    return {"mappings": [{"group": "mobile-team", "role": "developer"}]}


@body("PUT", "/api/projects/{id}/members/{userId}")
async def _role(w: World, subject: Account) -> dict[str, Any]:
    return {"role": "developer"}


@body("POST", "/api/projects/{id}/applications")
@body("PUT", "/api/projects/{id}/applications/{appId}")
async def _application(w: World, subject: Account) -> dict[str, Any]:
    return {"name": f"Another app {uuid.uuid4().hex[:8]}", "retention": {"keepLast": 5}}


@body("POST", "/api/projects/{id}/applications/{appId}/retention/preview")
async def _retention_preview(w: World, subject: Account) -> dict[str, Any]:
    return {"keepLast": 1, "protect": {"groups": False}}


@body("POST", "/api/app-distribution/{projectId}/{appId}/builds/upload-link")
async def _upload_link(w: World, subject: Account) -> dict[str, Any]:
    return {"fileName": "next.apk", "fileSize": 10}


@body("POST", "/api/app-distribution/{projectId}/{appId}/builds/verify")
async def _verify(w: World, subject: Account) -> dict[str, Any]:
    # Ready already: verify answers it again (and makes it an install link).
    return {"buildId": w.ids["buildId"], "installLink": {"expiresInHours": 1}}


@body("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-link")
async def _install_link(w: World, subject: Account) -> dict[str, Any]:
    return {"expiresInHours": 2}


@body("POST", "/api/projects/{id}/applications/{appId}/channels")
async def _channel(w: World, subject: Account) -> dict[str, Any]:
    return {"name": f"channel-{next(w._n)}"}


@body("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/channels")
async def _build_channels(w: World, subject: Account) -> dict[str, Any]:
    return {"channels": ["default"]}


@body("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}")
async def _build_update(w: World, subject: Account) -> dict[str, Any]:
    return {"mandatory": False}


@body("POST", "/api/projects/{id}/webhooks")
async def _webhook(w: World, subject: Account) -> dict[str, Any]:
    return {"url": "https://hooks.example.com/another", "events": ["member.added"]}


@body("PATCH", "/api/projects/{id}/feedback/{feedbackId}")
async def _feedback_update(w: World, subject: Account) -> dict[str, Any]:
    return {"status": "triaged"}


@body("POST", "/api/projects/{id}/feedback/{feedbackId}/comments")
async def _feedback_comment(w: World, subject: Account) -> dict[str, Any]:
    return {"text": "Thanks, we are on it"}


@body("PUT", "/api/projects/{id}/webhooks/{webhookId}")
async def _webhook_update(w: World, subject: Account) -> dict[str, Any]:
    return {"description": "Chat"}


@body("POST", "/api/projects/{id}/applications/{appId}/trusted-publishers")
async def _trusted_publisher(w: World, subject: Account) -> dict[str, Any]:
    return {
        "issuer": "https://token.actions.githubusercontent.com",
        "subjectPattern": f"repo:acme/shop{next(w._n)}:**",
        "audience": "buildbay.example.com",
    }


# Public routes whose success needs what the matrix's world cannot have: the answer every
# caller gets instead, whatever bearer token it sends. The ID-token exchange's success needs an
# ID token of the real provider, younger than 5 minutes, where the world's clock is a day ahead
# (tests/publishers/ exchange them); here: a token of an issuer no application trusts.
PUBLIC_ANSWER = {("POST", "/api/auth/oidc-exchange"): (403, "no_matching_publisher")}


@body("POST", "/api/auth/oidc-exchange")
async def _oidc_exchange(w: World, subject: Account) -> dict[str, Any]:
    # Signed with a key of our own, by an issuer the world's application does not trust
    # (test_authorization_matrix.py PUBLIC_ANSWER): refused before any key is fetched.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = {"iss": "https://ci.example.com", "sub": "repo:acme/shop:ref:refs/heads/main",
              "aud": "buildbay", "iat": 1, "exp": 2}  # fmt: skip
    return {"token": jwt.encode(claims, key, algorithm="RS256"), "applicationId": w.ids["appId"]}


@target("DELETE", "/api/projects/{id}/applications/{appId}/trusted-publishers/{publisherId}")
async def _doomed_publisher(w: World) -> dict[str, str]:
    r = await w.client.post(
        f"/api/projects/{w.ids['id']}/applications/{w.ids['appId']}/trusted-publishers",
        json=await _trusted_publisher(w, w.accounts.owner),
        headers=w.accounts.owner.headers,
    )
    assert r.status_code == 201, r.text
    return {"publisherId": str(r.json()["id"])}


@body("PUT", "/api/projects/{id}/apple-api-key")
async def _apple_key(w: World, subject: Account) -> dict[str, Any]:
    return new_team_key().body()


@target("DELETE", "/api/projects/{id}/apple-api-key")
async def _doomed_apple_key(w: World) -> dict[str, str]:
    project_id = await w.new_project()
    await w.put_apple_key(project_id)
    return {"id": project_id}


@body("PUT", "/api/projects/{id}/members/me/feedback-mail")
async def _feedback_mail(w: World, subject: Account) -> dict[str, Any]:
    return {"feedbackMail": True}


async def _feedback_form(w: World, subject: Account) -> list[Any]:
    return [("text", (None, b"It crashes")), ("category", (None, b"crash"))]


FORMS[("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/feedback")] = (
    _feedback_form
)
# Routes whose body is raw bytes (application/octet-stream): a valid body of each.
RAW: dict[Key, Callable[[World], bytes]] = {
    ("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/blockmap"): lambda w: (
        gzip.compress(b'{"version": "2", "files": []}', mtime=0)
    ),
}


@target("DELETE", "/api/projects/{id}/webhooks/{webhookId}")
async def _doomed_webhook(w: World) -> dict[str, str]:
    return {"webhookId": await w.new_webhook()}


@target("DELETE", "/api/projects/{id}/applications/{appId}/channels/{channelId}")
async def _doomed_channel(w: World) -> dict[str, str]:
    return {"channelId": await w.new_channel()}


@target("DELETE", "/api/projects/{id}/groups/{groupId}")
@target("DELETE", "/api/projects/{id}/groups/{groupId}/testers/{userId}")
async def _doomed_group(w: World) -> dict[str, str]:
    return {"groupId": await w.new_group()}


@target("GET", "/api/projects/{id}/groups/{groupId}/join-link")
@target("DELETE", "/api/projects/{id}/groups/{groupId}/join-link")
async def _group_with_a_join_link(w: World) -> dict[str, str]:
    group_id = await w.new_group()
    r = await w.client.post(
        f"/api/projects/{w.ids['id']}/groups/{group_id}/join-link",
        json={},
        headers=w.accounts.owner.headers,
    )
    assert r.status_code == 201, r.text
    return {"groupId": group_id}


@target("DELETE", "/api/account/api-tokens/{id}")
async def _own_api_token(w: World) -> dict[str, str]:
    return {"id": await w.new_api_token(w.accounts.owner)}


@body("PATCH", "/api/account/devices/{id}")
async def _device_name(w: World, subject: Account) -> dict[str, Any]:
    return {"name": "Renamed iPhone"}


@target("DELETE", "/api/account/devices/{id}")
async def _own_device(w: World) -> dict[str, str]:
    return {"id": await w.new_device(w.accounts.owner)}


@body("PUT", "/api/projects/{id}/members/me/device-mail")
async def _device_mail(w: World, subject: Account) -> dict[str, Any]:
    return {"deviceMail": True}


@target("DELETE", "/api/projects/{id}")
async def _doomed_project(w: World) -> dict[str, str]:
    return {"id": await w.new_project()}


@target("DELETE", "/api/projects/{id}/members/{userId}")
async def _doomed_member(w: World) -> dict[str, str]:
    doomed = await w.new_user()
    await w.api.add_member(w.accounts.owner, w.ids["id"], doomed, "tester")
    return {"userId": doomed.user["id"]}


@target("DELETE", "/api/projects/{id}/invitations/{invitationId}")
async def _doomed_invitation(w: World) -> dict[str, str]:
    return {"invitationId": await w.new_invitation()}


@target("DELETE", "/api/projects/{id}/applications/{appId}")
async def _doomed_application(w: World) -> dict[str, str]:
    app = await w.api.application(w.accounts.owner, w.ids["id"], f"Doomed {uuid.uuid4().hex[:8]}")
    return {"appId": app["id"]}


@target("DELETE", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}")
async def _doomed_build(w: World) -> dict[str, str]:
    return {"buildId": await w.new_pending_build()}


@body("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/parts")
async def _parts(w: World, subject: Account) -> dict[str, Any]:
    return {"partNumbers": [1, 2]}


@target("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/parts")
@target("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/parts")
async def _multipart_build(w: World) -> dict[str, str]:
    return {"buildId": await w.new_multipart_build()}


@target(
    "DELETE", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-links/{linkId}"
)
async def _doomed_link(w: World) -> dict[str, str]:
    return {"linkId": await w.new_install_link()}


@dataclass
class Prepared:
    """A call ready to send: whatever it needed (a fresh user, a login) already exists."""

    method: str
    url: str
    payload: dict[str, Any] | None
    headers: dict[str, str]
    relogin: Account | None  # whose session to renew once it is sent
    form: list[Any] | None = None  # a multipart form (FORMS), sent instead of JSON
    content: bytes | None = None  # raw bytes (RAW), sent instead of JSON


async def prepare(
    w: World, case: RouteCase, caller: str, values: dict[str, str] | None = None
) -> Prepared:
    """`case` to be called by `caller` (one of SPOILT, LADDER or TOKENS) with a valid body, on
    the world's ids, a fresh target's, or `values`."""
    a = w.accounts
    subject = a.by_role(caller) if caller in LADDER else a.owner
    if values is None:
        values = w.values_for(case)
        if case.key in TARGETS:
            values |= await TARGETS[case.key](w)
    spoilt = {"no token": {}, "a bad token": a.bad, "an expired token": a.expired}
    spoilt["a revoked token"] = a.revoked
    headers = spoilt.get(caller, a.tokens.get(caller))
    ends_sessions = caller in LADDER and case.key in ENDS_SESSIONS
    if headers is None:
        headers = (await w.login(subject)).headers if ends_sessions else subject.headers
    payload = await BODIES[case.key](w, subject) if case.has_body else None
    form = await FORMS[case.key](w, subject) if case.key in FORMS else None
    content = RAW[case.key](w) if case.key in RAW else None
    url = case.url(values) + (QUERIES[case.key](w) if case.key in QUERIES else "")
    relogin = subject if ends_sessions else None
    return Prepared(case.method, url, payload, headers, relogin, form, content)


async def send(w: World, prepared: Prepared) -> httpx.Response:
    if prepared.form is not None:
        r = await w.client.request(
            prepared.method, prepared.url, files=prepared.form, headers=prepared.headers
        )
    elif prepared.content is not None:
        raw = {**prepared.headers, "Content-Type": "application/octet-stream"}
        r = await w.client.request(
            prepared.method, prepared.url, content=prepared.content, headers=raw
        )
    else:
        r = await w.client.request(
            prepared.method, prepared.url, json=prepared.payload, headers=prepared.headers
        )
    if prepared.relogin is not None:
        await w.relogin(prepared.relogin)
    return r


async def call(
    w: World, case: RouteCase, caller: str, values: dict[str, str] | None = None
) -> httpx.Response:
    return await send(w, await prepare(w, case, caller, values))
