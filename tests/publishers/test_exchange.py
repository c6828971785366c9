"""Trusted publishing against the real OpenID Connect provider process: a CI's ID token is
exchanged for an upload-only token of the application whose publisher takes it, and refused
when its audience, subject, age or signature is wrong, or when it is replayed."""

from __future__ import annotations

import asyncio
import base64
from datetime import timedelta
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import func, select

from buildbay.audit.models import AuditEntry
from buildbay.auth.models import ApiToken
from buildbay.clock import FrozenClock
from buildbay.db.engine import create_engines
from buildbay.errors import NotAuthenticated
from buildbay.publishers.exchange import verified
from buildbay.publishers.models import UsedIdToken
from buildbay.publishers.service import sweep_used_id_tokens
from tests.conftest import Account, Api, assert_problem
from tests.oidc_provider import OidcProvider, oidc_provider_process
from tests.publishers.id_tokens import GITHUB_SUBJECT, id_token, signing_key_id

EXCHANGE = "/api/auth/oidc-exchange"
NOWHERE = "app_00000000000000000000000000"  # an application that does not exist


def asked(token: str, application_id: str) -> dict[str, str]:
    """An exchange's body: the ID token, and the application the upload is for."""
    return {"token": token, "applicationId": application_id}


async def trust(
    client: httpx.AsyncClient, owner: Account, project_id: str, app_id: str, **fields: Any
) -> dict[str, Any]:
    r = await client.post(
        f"/api/projects/{project_id}/applications/{app_id}/trusted-publishers",
        json=fields,
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture
async def shop(
    api: Api, client: httpx.AsyncClient, owner: Account, provider: OidcProvider
) -> dict[str, Any]:
    """An application that trusts acme/shop's main branch, as its audience `buildbay`."""
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    publisher = await trust(
        client, owner, project["id"], app["id"], issuer=provider.issuer,
        subjectPattern="repo:acme/shop:ref:refs/heads/*", audience="buildbay",
    )  # fmt: skip
    return {"project": project, "app": app, "publisher": publisher}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_an_id_token_is_exchanged_for_a_token_that_uploads_to_its_application(
    client: httpx.AsyncClient, api: Api, provider: OidcProvider, shop: dict[str, Any],
    settings: Any, clock: FrozenClock,
) -> None:  # fmt: skip
    r = await client.post(EXCHANGE, json=asked(id_token(provider), shop["app"]["id"]))

    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["applicationId"] == shop["app"]["id"]
    assert answer["projectId"] == shop["project"]["id"]
    assert answer["token"].startswith("bb_")
    ci = Account("ci", "", answer["token"], "", {})
    build = await api.upload(ci, shop["project"]["id"], shop["app"]["id"])
    assert build["status"] == "ready"
    engine, _ = create_engines(settings.resolved_database_url)
    try:
        async with engine.connect() as db:
            entries = (await db.execute(select(AuditEntry.action, AuditEntry.actor_kind,
                                               AuditEntry.actor_email))).all()  # fmt: skip
    finally:
        await engine.dispose()
    identity = f"{provider.issuer} {GITHUB_SUBJECT}"
    assert ("trusted_publisher.exchanged", "ci", identity) in entries
    assert ("trusted_publisher.added", "user", "owner@example.com") in entries
    # The build the CI uploaded names the CI identity, not the publisher's creator.
    assert ("build.uploaded", "ci", identity) in entries


async def test_the_exchanged_token_is_refused_everywhere_but_its_applications_uploads(
    client: httpx.AsyncClient, api: Api, owner: Account, provider: OidcProvider,
    shop: dict[str, Any],
) -> None:  # fmt: skip
    token = (await client.post(EXCHANGE, json=asked(id_token(provider), shop["app"]["id"]))).json()[
        "token"
    ]
    pid, aid = shop["project"]["id"], shop["app"]["id"]
    other = await api.application(owner, pid, "Another app")
    build = await api.upload(owner, pid, aid)
    builds = f"/api/app-distribution/{pid}/{aid}/builds"
    refused = [
        ("GET", "/api/projects"), ("GET", f"/api/projects/{pid}"), ("GET", "/api/auth/me"),
        ("GET", f"/api/projects/{pid}/applications"), ("GET", "/api/account/api-tokens"),
        ("GET", f"/api/app-distribution/{pid}/{other['id']}/builds"),
        ("DELETE", f"{builds}/{build['buildId']}"),
        ("POST", f"{builds}/{build['buildId']}/install-link"),
        ("DELETE", f"/api/projects/{pid}/applications/{aid}"),
        ("GET", f"/api/projects/{pid}/applications/{aid}/trusted-publishers"),
        # Beyond uploading: its builds' bytes, who installed them on which device, and the
        # install links (shared ones open to whoever holds them).
        ("GET", f"{builds}/{build['buildId']}/download"),
        ("GET", f"{builds}/{build['buildId']}/installs"),
        ("GET", f"{builds}/{build['buildId']}/devices"),
        ("GET", f"{builds}/{build['buildId']}/install-links"),
    ]  # fmt: skip
    for method, path in refused:
        r = await client.request(method, path, headers=bearer(token))
        assert_problem(r, 403)
    # What `buildbay upload` reads of its application: allowed.
    r = await client.get(f"/api/projects/{pid}/applications/{aid}", headers=bearer(token))
    assert r.status_code == 200, r.text
    r = await client.get(builds, headers=bearer(token))
    assert r.status_code == 200, r.text
    # Not among the account's own tokens.
    r = await client.get("/api/account/api-tokens", headers=owner.headers)
    assert r.json()["apiTokens"] == []


async def test_a_wrong_audience_is_refused(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any]
) -> None:
    r = await client.post(
        EXCHANGE, json=asked(id_token(provider, audience="someone-else"), shop["app"]["id"])
    )

    problem = assert_problem(r, 403, "no_matching_publisher")
    assert "someone-else" in problem["detail"]  # the token's own, never the publisher's
    assert "refs/heads/*" not in problem["detail"]


async def test_a_foreign_subject_is_refused(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any]
) -> None:
    for subject in ("repo:evil/shop:ref:refs/heads/main", "repo:acme/shop:ref:refs/heads/a/b",
                    "repo:acme/shop:environment:prod"):  # fmt: skip
        r = await client.post(EXCHANGE, json=asked(id_token(provider, subject), shop["app"]["id"]))
        assert_problem(r, 403, "no_matching_publisher")


async def test_a_replayed_id_token_is_refused(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any]
) -> None:
    token = id_token(provider)
    assert (await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))).status_code == 200

    r = await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))

    assert_problem(r, 401, "id_token_replayed")


async def test_of_two_exchanges_of_one_id_token_at_once_one_wins(
    app: Any, provider: OidcProvider, shop: dict[str, Any]
) -> None:
    token = id_token(provider)
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as one,
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as two,
    ):
        answers = await asyncio.gather(
            one.post(EXCHANGE, json=asked(token, shop["app"]["id"])),
            two.post(EXCHANGE, json=asked(token, shop["app"]["id"])),
        )

    assert sorted(r.status_code for r in answers) == [200, 401], [r.text for r in answers]


async def test_an_expired_id_token_is_refused(
    client: httpx.AsyncClient, api: Api, owner: Account, clock: FrozenClock, tmp_path: Any
) -> None:
    with oidc_provider_process(tmp_path, "--token-max-age", "60") as short:
        project = await api.project(owner)
        app = await api.application(owner, project["id"])
        await trust(client, owner, project["id"], app["id"], issuer=short.issuer,
                    subjectPattern=GITHUB_SUBJECT, audience="buildbay")  # fmt: skip
        token = id_token(short)
        clock.advance(seconds=90)  # past its exp (60 s), within the 5 minutes of its iat

        r = await client.post(EXCHANGE, json=asked(token, app["id"]))

    assert_problem(r, 401, "token_expired")


async def test_an_id_token_issued_more_than_5_minutes_ago_is_refused(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any], clock: FrozenClock
) -> None:
    token = id_token(provider)  # valid an hour
    clock.advance(minutes=5, seconds=30)

    r = await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))

    assert_problem(r, 401, "token_too_old")


async def test_a_token_of_a_rotated_key_is_taken_once_the_keys_are_read_again(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any], clock: FrozenClock
) -> None:
    assert (
        await client.post(EXCHANGE, json=asked(id_token(provider), shop["app"]["id"]))
    ).status_code == 200
    provider.rotate_keys()
    token = id_token(provider)

    # Within a minute of the last read: the keys are not read again (an issuer is not
    # hammered by tokens it never signed), and the token is refused, not spent.
    r = await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))
    assert_problem(r, 401, "invalid_id_token")
    clock.advance(seconds=61)
    r = await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))

    assert r.status_code == 200, r.text


async def test_a_forged_id_token_is_refused(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any]
) -> None:
    claims = jwt.decode(id_token(provider), options={"verify_signature": False})
    kid = signing_key_id(provider)
    ours = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, ours, algorithm="RS256", headers={"kid": kid})

    r = await client.post(EXCHANGE, json=asked(forged, shop["app"]["id"]))

    assert_problem(r, 401, "invalid_id_token")


@pytest.mark.parametrize("alg", ["none", "HS256"])
async def test_a_token_without_an_asymmetric_signature_is_refused(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any], alg: str
) -> None:
    claims = jwt.decode(id_token(provider), options={"verify_signature": False})
    header = base64.urlsafe_b64encode(f'{{"alg":"{alg}","typ":"JWT"}}'.encode()).rstrip(b"=")
    unsigned = jwt.encode(claims, "k" * 32, algorithm="HS256").split(".")
    token = ".".join([header.decode(), unsigned[1], unsigned[2] if alg == "HS256" else ""])

    r = await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))

    assert_problem(r, 401, "invalid_id_token")


async def test_two_applications_trusting_one_identity_each_get_the_upload_naming_them(
    client: httpx.AsyncClient, api: Api, owner: Account, provider: OidcProvider,
    shop: dict[str, Any],
) -> None:  # fmt: skip
    pid = shop["project"]["id"]
    second = await api.application(owner, pid, "Shop iOS")
    await trust(client, owner, pid, second["id"], issuer=provider.issuer,
                subjectPattern="repo:acme/shop:**", audience="buildbay")  # fmt: skip

    for app_id in (shop["app"]["id"], second["id"]):  # no "ambiguous" any more: each is named
        r = await client.post(EXCHANGE, json=asked(id_token(provider), app_id))
        assert r.status_code == 200, r.text
        assert r.json()["applicationId"] == app_id


async def test_an_exchange_that_names_no_application_is_a_422_and_spends_nothing(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any]
) -> None:
    token = id_token(provider)
    for body in ({"token": token}, {"token": token, "applicationId": None},
                 {"token": token, "applicationId": "Shop"}):  # fmt: skip
        r = await client.post(EXCHANGE, json=body)
        problem = assert_problem(r, 422, "validation_error")
        assert problem["errors"][0]["field"] == "applicationId", problem

    r = await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))
    assert r.status_code == 200, r.text


async def _builds(client: httpx.AsyncClient, who: Account, pid: str, aid: str) -> list[Any]:
    r = await client.get(f"/api/app-distribution/{pid}/{aid}/builds", headers=who.headers)
    assert r.status_code == 200, r.text
    builds: list[Any] = r.json()["builds"]
    return builds


async def test_a_publisher_trusting_someone_elses_ci_never_draws_its_uploads(
    client: httpx.AsyncClient, api: Api, owner: Account, provider: OidcProvider,
    settings: Any,
) -> None:  # fmt: skip
    """The outside attack on issue 41: anyone may add a publisher trusting someone else's CI
    identity to an application of their own. The victim's CI names its application, and a
    publisher grants only its own: the attacker's neither takes the victim's uploads nor
    blocks them, and the victim's never yields a token for the attacker's application."""
    victim_project = await api.project(owner, "Victim")
    victim_app = await api.application(owner, victim_project["id"], "Shop")
    attacker = await api.register("attacker@example.com")
    attacker_project = await api.project(attacker, "Trap")
    attacker_app = await api.application(attacker, attacker_project["id"], "Trap")
    await trust(client, attacker, attacker_project["id"], attacker_app["id"],
                issuer=provider.issuer, subjectPattern="repo:acme/shop:**",
                audience="buildbay")  # fmt: skip
    vid, aid = victim_app["id"], attacker_app["id"]

    # The victim has no publisher yet (or removed theirs): its CI's exchange naming its own
    # application is refused, and nothing of the attacker's publisher is said or used.
    r = await client.post(EXCHANGE, json=asked(id_token(provider), vid))
    problem = assert_problem(r, 403, "no_matching_publisher")
    assert vid in problem["detail"]
    assert aid not in problem["detail"]
    assert "**" not in problem["detail"]
    # Naming nothing is not a fallback to whichever publisher matches.
    assert_problem(await client.post(EXCHANGE, json={"token": id_token(provider)}), 422)

    victim_publisher = await trust(
        client, owner, victim_project["id"], vid, issuer=provider.issuer,
        subjectPattern="repo:acme/shop:ref:refs/heads/*", audience="buildbay",
    )  # fmt: skip
    # Once it has one: no "ambiguous" denial, a token for the victim's application only.
    r = await client.post(EXCHANGE, json=asked(id_token(provider), vid))
    assert r.status_code == 200, r.text
    assert (r.json()["applicationId"], r.json()["projectId"]) == (vid, victim_project["id"])
    ci = Account("ci", "", r.json()["token"], "", {})
    build = await api.upload(ci, victim_project["id"], vid)
    assert build["status"] == "ready"
    r = await client.get(
        f"/api/app-distribution/{attacker_project['id']}/{aid}/builds", headers=ci.headers
    )
    assert_problem(r, 403)
    assert await _builds(client, attacker, attacker_project["id"], aid) == []

    # The victim's publisher never yields a token for the attacker's application: with the
    # attacker's removed, naming it is refused, though the victim's publisher takes the token.
    r = await client.get(
        f"/api/projects/{attacker_project['id']}/applications/{aid}/trusted-publishers",
        headers=attacker.headers,
    )
    [attackers] = r.json()["trustedPublishers"]
    r = await client.delete(
        f"/api/projects/{attacker_project['id']}/applications/{aid}/trusted-publishers/"
        f"{attackers['id']}",
        headers=attacker.headers,
    )
    assert r.status_code == 204, r.text
    r = await client.post(EXCHANGE, json=asked(id_token(provider), aid))
    problem = assert_problem(r, 403, "no_matching_publisher")
    assert vid not in problem["detail"]
    assert "refs/heads/*" not in problem["detail"]
    assert await _builds(client, attacker, attacker_project["id"], aid) == []

    # Every token exchanged was for the victim's application, by the victim's publisher.
    engine, _ = create_engines(settings.resolved_database_url)
    try:
        async with engine.connect() as db:
            query = select(ApiToken.application_id, ApiToken.publisher_id)
            minted = (await db.execute(query.where(ApiToken.publisher_id.is_not(None)))).all()
    finally:
        await engine.dispose()
    assert [tuple(row) for row in minted] == [(vid, victim_publisher["id"])]


async def test_an_issuer_no_publisher_names_is_refused_without_reading_its_keys(
    client: httpx.AsyncClient, provider: OidcProvider
) -> None:
    token = id_token(provider)
    logged_before = provider.log_path.stat().st_size  # (the module's earlier tests read keys)
    r = await client.post(EXCHANGE, json=asked(token, NOWHERE))

    assert_problem(r, 403, "no_matching_publisher")
    with provider.log_path.open("rb") as log:
        log.seek(logged_before)
        assert b"GET /jwks" not in log.read()


async def test_a_removed_publisher_takes_no_more_tokens_and_its_tokens_die(
    client: httpx.AsyncClient, api: Api, owner: Account, provider: OidcProvider,
    shop: dict[str, Any],
) -> None:  # fmt: skip
    pid, aid = shop["project"]["id"], shop["app"]["id"]
    token = (await client.post(EXCHANGE, json=asked(id_token(provider), shop["app"]["id"]))).json()[
        "token"
    ]
    path = f"/api/projects/{pid}/applications/{aid}/trusted-publishers"

    r = await client.delete(f"{path}/{shop['publisher']['id']}", headers=owner.headers)

    assert r.status_code == 204
    assert_problem(await client.get(f"/api/projects/{pid}/applications/{aid}",
                                    headers=bearer(token)), 401)  # fmt: skip
    assert_problem(
        await client.post(EXCHANGE, json=asked(id_token(provider), shop["app"]["id"])), 403
    )
    assert (await client.get(path, headers=owner.headers)).json()["trustedPublishers"] == []


async def test_exchanges_are_rate_limited_per_address(
    client: httpx.AsyncClient, settings: Any
) -> None:
    settings.oidc_exchanges_per_minute_per_ip = 2
    for _ in range(2):
        r = await client.post(EXCHANGE, json=asked("not.a.jwt", NOWHERE))
        assert_problem(r, 401, "invalid_id_token")

    r = await client.post(EXCHANGE, json=asked("not.a.jwt", NOWHERE))

    assert_problem(r, 429, "rate_limited")
    assert "oidc-exchange" in r.json()["detail"]


async def test_the_sweeper_forgets_exchanged_id_tokens_once_they_expire(
    app: Any, client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any],
    clock: FrozenClock,
) -> None:  # fmt: skip
    token = id_token(provider)
    assert (await client.post(EXCHANGE, json=asked(token, shop["app"]["id"]))).status_code == 200
    sessions = app.state.ctx.sessions

    async with sessions() as db, db.begin():
        kept = await sweep_used_id_tokens(db, clock.now())
    async with sessions() as db, db.begin():
        gone = await sweep_used_id_tokens(db, clock.now() + timedelta(hours=2))

    assert (kept, gone) == (0, 1)
    async with sessions() as db:
        assert (await db.scalar(select(func.count(UsedIdToken.id)))) == 0
        assert (await db.scalar(select(func.count(ApiToken.id)).where(
            ApiToken.publisher_id.is_not(None)))) == 0  # fmt: skip


class _OneKey:
    """The keys of an issuer that signs with one key (`verified` asks only for it)."""

    def __init__(self, key: jwt.PyJWK) -> None:
        self.key = key

    async def key_for(self, *_: object) -> jwt.PyJWK:
        return self.key

    async def refreshed_key(self, *_: object) -> None:
        return None


@pytest.mark.parametrize("audience", [5, 1.5, {"buildbay": 1}, None, [], ["buildbay", 5]])
async def test_an_audience_that_is_not_a_string_or_a_list_of_strings_is_a_401(
    audience: object,
) -> None:
    # An admin may trust any issuer (one of their own too): whatever a genuinely signed token
    # holds in `aud` is refused as a token, never a 500 nor a dict's keys taken as audiences.
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    key = jwt.PyJWK.from_dict(public)
    now = FrozenClock().now()
    issuer = "https://ci.example.com"
    expires = int((now + timedelta(minutes=5)).timestamp())
    claims = {"iss": issuer, "sub": GITHUB_SUBJECT, "aud": audience, "exp": expires,
              "iat": int(now.timestamp())}  # fmt: skip
    token = jwt.encode(claims, private, algorithm="RS256")

    with pytest.raises(NotAuthenticated) as refused:
        await verified(token, issuer, None, "RS256", _OneKey(key), now)  # type: ignore[arg-type]

    assert refused.value.code == "invalid_id_token"


@pytest.mark.parametrize(
    "subject",
    ["repo:acme/shop:ref:refs/heads/ma\x00in", "repo:acme/shop:ref:refs/heads/main\nx",
     "repo:acme/shop:ref:refs/heads/ma\x1b[31min"],
)  # fmt: skip
async def test_a_subject_with_control_characters_is_refused(
    client: httpx.AsyncClient, provider: OidcProvider, shop: dict[str, Any], subject: str
) -> None:
    # No CI issuer names a repository or branch with a control character; `*` must not stand
    # for one, and a NUL must not reach the database (PostgreSQL refuses it in text: a 500).
    r = await client.post(EXCHANGE, json=asked(id_token(provider, subject), shop["app"]["id"]))

    assert_problem(r, 401, "invalid_id_token")


async def test_a_jti_with_a_control_character_still_makes_the_token_single_use(
    client: httpx.AsyncClient, api: Api, owner: Account, provider: OidcProvider
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await trust(client, owner, project["id"], app["id"], issuer=provider.issuer,
                subjectPattern="ci-runner", audience="buildbay")  # fmt: skip
    provider.set_user("ci-runner", jti="run\x00-1")  # PostgreSQL refuses NUL in text: a 500
    token = id_token(provider, "ci-runner")

    assert (await client.post(EXCHANGE, json=asked(token, app["id"]))).status_code == 200
    assert_problem(
        await client.post(EXCHANGE, json=asked(token, app["id"])), 401, "id_token_replayed"
    )


@pytest.mark.parametrize("escape", ["\\u0000", "\\ud800"])
async def test_an_issuer_no_database_can_store_is_refused_before_the_lookup(
    client: httpx.AsyncClient, escape: str
) -> None:
    # Anyone may send this (nothing is verified before the issuer is looked up): PostgreSQL
    # refuses a NUL in text, and no database driver encodes a lone surrogate (not UTF-8). It
    # must be a 401, not a 500.
    header = base64.urlsafe_b64encode(b'{"alg":"RS256","typ":"JWT"}').rstrip(b"=").decode()
    claims = f'{{"iss":"https://a{escape}b","sub":"x"}}'.encode()
    body = base64.urlsafe_b64encode(claims).rstrip(b"=")
    token = f"{header}.{body.decode()}.c2ln"

    r = await client.post(EXCHANGE, json=asked(token, NOWHERE))

    assert_problem(r, 401, "invalid_id_token")
