"""A project's App Store Connect API key: put by an admin, checked, sealed at rest under a key
derived from the server's secret and bound to the project, never shown again (not by the API,
not in a log), and removed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi import FastAPI
from sqlalchemy import select, update

from buildbay.config import Settings
from buildbay.devices.apple.keys import KeySeal, SealBroken
from buildbay.devices.models import AppleApiKey
from tests.conftest import Account, Api, assert_problem, iso_z
from tests.ios.apple_receiver import AppleReceiver, apple_receiving, enrolled, new_team_key

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def receiver() -> Iterator[AppleReceiver]:
    with apple_receiving() as r:
        yield r


@pytest.fixture
def settings(settings: Settings, receiver: AppleReceiver) -> Settings:
    settings.apple_api_url = receiver.url
    return settings


class Team:
    """A project with a developer and a tester beside its owner (an admin and more)."""

    def __init__(self, api: Api, owner: Account) -> None:
        self.api, self.owner = api, owner

    async def setup(self) -> Team:
        self.project = await self.api.project(self.owner, "Acme iOS")
        self.developer = await self.api.register("dev@example.com")
        self.tester = await self.api.register("tester@example.com")
        await self.api.add_member(self.owner, self.project["id"], self.developer, "developer")
        await self.api.add_member(self.owner, self.project["id"], self.tester, "tester")
        return self

    @property
    def key_url(self) -> str:
        return f"/api/projects/{self.project['id']}/apple-api-key"


@pytest.fixture
async def team(api: Api, owner: Account) -> Team:
    return await Team(api, owner).setup()


async def _stored(app: FastAPI, project_id: str) -> Any:
    async with app.state.ctx.sessions() as db:
        return (
            await db.execute(select(AppleApiKey).where(AppleApiKey.project_id == project_id))
        ).scalar_one_or_none()


async def test_an_admin_puts_a_key_and_the_api_shows_all_of_it_but_the_private_key(
    client: httpx.AsyncClient, team: Team, owner: Account, settings: Settings
) -> None:
    key = new_team_key()
    body = key.body() | {"issuerId": key.issuer_id.upper()}

    r = await client.put(team.key_url, json=body, headers=owner.headers)

    assert r.status_code == 200, r.text
    shown = {
        "keyId": key.key_id,
        "issuerId": key.issuer_id,  # as App Store Connect writes it, in lower case
        "createdAt": r.json()["createdAt"],
        "createdBy": {"id": owner.user["id"], "email": owner.email},
    }
    assert r.json() == shown
    r = await client.get(team.key_url, headers=team.developer.headers)
    assert r.status_code == 200, r.text
    assert r.json() == shown
    assert "PRIVATE KEY" not in r.text
    assert r.headers["cache-control"] == "no-store"


async def test_the_key_is_stored_sealed_and_opens_for_its_project_under_its_secret_only(
    client: httpx.AsyncClient, team: Team, owner: Account, app: FastAPI, settings: Settings
) -> None:
    key = new_team_key()
    r = await client.put(team.key_url, json=key.body(), headers=owner.headers)
    assert r.status_code == 200, r.text

    row = await _stored(app, team.project["id"])
    sealed = row.private_key_encrypted
    body_of_the_pem = "".join(key.pem.splitlines()[1:-1])
    assert key.der not in sealed
    assert body_of_the_pem.encode() not in sealed
    assert b"PRIVATE KEY" not in sealed
    assert KeySeal(settings.signing_key).open(team.project["id"], sealed) == key.der
    with pytest.raises(SealBroken):
        KeySeal(settings.signing_key).open("prj_01ANOTHERPROJECT000000000", sealed)
    with pytest.raises(SealBroken):
        KeySeal(b"another server's secret key, just as long as it").open(team.project["id"], sealed)
    # Sealed afresh each time: the same key twice is two different texts.
    r = await client.put(team.key_url, json=key.body(), headers=owner.headers)
    assert (await _stored(app, team.project["id"])).private_key_encrypted != sealed


async def test_a_sealed_key_copied_into_another_projects_row_does_not_open(
    client: httpx.AsyncClient,
    team: Team,
    owner: Account,
    api: Api,
    app: FastAPI,
    receiver: AppleReceiver,
) -> None:
    key = receiver.trust(new_team_key())
    await client.put(team.key_url, json=key.body(), headers=owner.headers)
    other = await api.project(owner, "Other")
    r = await client.put(
        f"/api/projects/{other['id']}/apple-api-key",
        json=new_team_key().body(),
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    copied = (await _stored(app, team.project["id"])).private_key_encrypted
    async with app.state.ctx.sessions() as db, db.begin():
        await db.execute(
            update(AppleApiKey)
            .where(AppleApiKey.project_id == other["id"])
            .values(private_key_encrypted=copied, key_id=key.key_id, issuer_id=key.issuer_id)
        )
    await enrolled(app.state.ctx.sessions, owner.user["id"])

    r = await client.post(
        f"/api/projects/{other['id']}/devices/register-with-apple", headers=owner.headers
    )

    problem = assert_problem(r, 409, "apple_key_unreadable")
    assert "put the key again" in problem["detail"]
    assert receiver.received == []


def _pem(key: Any, password: bytes | None = None) -> str:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()


P256 = ec.generate_private_key(ec.SECP256R1())
NOT_A_KEY = [
    ("garbage", "not a key at all"),
    ("a PEM of nothing", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
    ("a public key", P256.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()),
    ("an RSA key", _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))),
    ("a P-384 key", _pem(ec.generate_private_key(ec.SECP384R1()))),
    ("a key behind a password", _pem(P256, b"a password")),
    ("half a key", _pem(P256)[:120]),
]  # fmt: skip


@pytest.mark.parametrize(("what", "pem"), NOT_A_KEY, ids=[w for w, _ in NOT_A_KEY])
async def test_what_is_not_an_app_store_connect_key_is_refused_without_being_repeated(
    client: httpx.AsyncClient, team: Team, owner: Account, what: str, pem: str
) -> None:
    body = new_team_key().body() | {"privateKey": pem}

    r = await client.put(team.key_url, json=body, headers=owner.headers)

    problem = assert_problem(r, 422, "apple_key_invalid")
    assert [e["field"] for e in problem["errors"]] == ["privateKey"]
    for line in pem.splitlines():
        if len(line) > 8 and "PRIVATE KEY" not in line and "PUBLIC KEY" not in line:
            assert line not in r.text
    r = await client.get(team.key_url, headers=owner.headers)
    assert_problem(r, 404, "apple_key_not_found")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("keyId", "2X9R4HXF3"),  # 9 characters
        ("keyId", "2X9R4HXF345"),
        ("keyId", "2X9R4HXF3!"),
        ("keyId", " 2X9R4HXF34"),
        ("issuerId", "57246542-96fe-1a63-e053"),
        ("issuerId", "57246542096fe01a63-e053-0824d011072a"),
        ("issuerId", "{57246542-96fe-1a63-e053-0824d011072a}"),
        ("issuerId", "57246542-96fe-1a63-e053-0824d011072g"),
        ("privateKey", ""),
        ("privateKey", "x" * 10_001),
    ],
)
async def test_a_key_id_issuer_id_or_private_key_of_the_wrong_shape_is_a_422(
    client: httpx.AsyncClient, team: Team, owner: Account, field: str, value: str
) -> None:
    body = new_team_key().body() | {field: value}

    r = await client.put(team.key_url, json=body, headers=owner.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == [field]


async def test_a_missing_field_or_one_of_the_servers_is_a_422(
    client: httpx.AsyncClient, team: Team, owner: Account
) -> None:
    body = new_team_key().body()
    del body["issuerId"]
    r = await client.put(team.key_url, json=body, headers=owner.headers)
    assert_problem(r, 422, "validation_error")

    r = await client.put(
        team.key_url, json=new_team_key().body() | {"createdBy": "me"}, headers=owner.headers
    )
    assert_problem(r, 422, "validation_error")


async def test_only_admins_put_or_remove_the_key_and_testers_do_not_see_it(
    client: httpx.AsyncClient, team: Team, owner: Account, api: Api
) -> None:
    body = new_team_key().body()
    for who in (team.developer, team.tester):
        r = await client.put(team.key_url, json=body, headers=who.headers)
        assert_problem(r, 403, "insufficient_role")
    admin = await api.register("admin@example.com")
    await api.add_member(owner, team.project["id"], admin, "admin")
    r = await client.put(team.key_url, json=body, headers=admin.headers)
    assert r.status_code == 200, r.text

    r = await client.get(team.key_url, headers=team.tester.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await client.delete(team.key_url, headers=team.developer.headers)
    assert_problem(r, 403, "insufficient_role")
    stranger = await api.register("stranger@example.com")
    r = await client.get(team.key_url, headers=stranger.headers)
    assert_problem(r, 403, "not_a_member")


async def test_a_new_key_replaces_the_old_and_delete_removes_it(
    client: httpx.AsyncClient, team: Team, owner: Account, app: FastAPI, clock: Any
) -> None:
    first, second = new_team_key(), new_team_key()
    await client.put(team.key_url, json=first.body(), headers=owner.headers)
    clock.advance(minutes=5)

    r = await client.put(team.key_url, json=second.body(), headers=owner.headers)

    assert r.status_code == 200, r.text
    assert r.json()["keyId"] == second.key_id
    assert r.json()["createdAt"] == iso_z(clock.now())
    r = await client.get(team.key_url, headers=owner.headers)
    assert r.json()["keyId"] == second.key_id

    r = await client.delete(team.key_url, headers=owner.headers)
    assert r.status_code == 204, r.text
    assert await _stored(app, team.project["id"]) is None
    r = await client.get(team.key_url, headers=owner.headers)
    assert_problem(r, 404, "apple_key_not_found")
    r = await client.delete(team.key_url, headers=owner.headers)
    assert_problem(r, 404, "apple_key_not_found")


async def test_the_private_key_and_the_token_made_with_it_reach_no_log(
    client: httpx.AsyncClient,
    team: Team,
    owner: Account,
    app: FastAPI,
    receiver: AppleReceiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    key = receiver.trust(new_team_key())
    await enrolled(app.state.ctx.sessions, owner.user["id"])
    await client.put(team.key_url, json=key.body() | {"privateKey": "not a key"},
                     headers=owner.headers)  # fmt: skip

    r = await client.put(team.key_url, json=key.body(), headers=owner.headers)
    assert r.status_code == 200, r.text
    r = await client.post(
        f"/api/projects/{team.project['id']}/devices/register-with-apple", headers=owner.headers
    )
    assert r.status_code == 200, r.text
    receiver.keys.clear()  # Apple no longer knows the key: a 401, and its problem
    await enrolled(app.state.ctx.sessions, owner.user["id"], udid=None)
    r = await client.post(
        f"/api/projects/{team.project['id']}/devices/register-with-apple", headers=owner.headers
    )
    assert_problem(r, 409, "apple_key_rejected")

    tokens = [h["authorization"].split()[1] for h in (x.headers for x in receiver.received)]
    assert len(tokens) == 2
    logged = caplog.text
    assert logged  # the requests were logged...
    for line in key.pem.splitlines()[1:-1]:
        assert line not in logged  # ...but not the key
    for token in tokens:
        for part in token.split("."):
            assert part not in logged
