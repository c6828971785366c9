"""Secrets with any text in them. Every address, field and header that carries a secret (an
install link's token, an unsubscribe link's, an invitation's, a password reset's, a signed
storage URL's signature, a console form's CSRF token, a bearer token, an update key) refuses a
wrong one with its own 4xx whatever characters it holds: never a 500, which also cost the next
request on a kept-alive connection (tests/test_server_process.py shows that over a real one).

Each case starts from a secret the server really made and changes it: text appended, or one
character replaced by any text (non-ASCII, lone surrogates, controls).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from buildbay.auth.models import User
from buildbay.auth.password_reset import PasswordResets
from buildbay.auth.tokens import hash_token
from buildbay.config import Settings
from buildbay.context import AppContext
from buildbay.db.engine import finish
from buildbay.invitations.models import Invitation
from tests.conftest import BASE_URL, Account, Api, assert_problem

ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.rate_limit_enabled = False  # hundreds of requests from one address, on purpose
    return settings


@dataclass
class Secrets:
    """A user's secrets as the server made them, and a signed-in console on `client`."""

    client: httpx.AsyncClient
    owner: Account
    csrf: str  # the console's, for the signed-in cookies `client` holds
    made: dict[str, str] = field(default_factory=dict)  # name -> the secret
    urls: dict[str, str] = field(default_factory=dict)  # signed storage URLs, by name


def _ctx(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


async def _unit_of_work(ctx: AppContext, work: Callable[[Any], Awaitable[str]]) -> str:
    db = ctx.sessions()
    ok = False
    try:
        result = await work(db)
        ok = True
    finally:
        await finish(db, ok=ok)
    return result


@pytest.fixture
async def secrets_(app: FastAPI, client: httpx.AsyncClient, api: Api) -> Secrets:
    ctx = _ctx(app)
    owner = await api.register("owner@example.com", "correct horse")
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    build = await api.upload(owner, project["id"], application["id"])
    builds = f"/api/app-distribution/{project['id']}/{application['id']}/builds"

    r = await client.post(f"{builds}/{build['buildId']}/install-link", headers=owner.headers)
    assert r.status_code == 201, r.text
    install = r.json()["url"].rsplit("/", 1)[1]

    r = await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": "carol@example.com", "role": "tester"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    invitation_id = r.json()["id"]

    async def known_invitation(db: Any) -> str:
        # The one in the mail is not ours to read: give the invitation one we know.
        token = "bbi_a-token-this-test-knows-0123456789abcdefghijk"
        (await db.get_one(Invitation, invitation_id)).token_hash = hash_token(token)
        return token

    async def reset(db: Any) -> str:
        user = await db.get_one(User, owner.user["id"])
        return await PasswordResets(db, ctx.clock.now()).issue(user)

    r = await client.post("/api/account/api-tokens", json={"name": "ci"}, headers=owner.headers)
    assert r.status_code == 201, r.text
    api_token = r.json()["token"]

    r = await client.post(
        f"{builds}/upload-link", json={"fileName": "a.apk", "fileSize": 5}, headers=owner.headers
    )
    assert r.status_code == 201, r.text
    upload_url = r.json()["uploadUrl"]
    r = await client.post(
        f"{builds}/upload-link",
        json={"fileName": "b.apk", "fileSize": 10 * 1024 * 1024, "multipart": True},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        f"{builds}/{r.json()['buildId']}/parts", json={"partNumbers": [1]}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    part_url = r.json()["parts"][0]["url"]
    r = await client.get(f"{builds}/{build['buildId']}/download", headers=owner.headers)
    assert r.status_code == 302, r.text
    file_url = r.headers["location"]

    csrf = await _console_sign_in(client, owner)
    secrets = Secrets(client, owner, csrf)
    secrets.made.update(
        install=install,
        unsubscribe=ctx.unsubscribe.token(owner.user["id"], owner.email),
        invitation=await _unit_of_work(ctx, known_invitation),
        reset=await _unit_of_work(ctx, reset),
        access=owner.access_token,
        refresh=owner.refresh_token,
        api_token=api_token,
        update_key=application["updateKey"],
        csrf=csrf,
    )
    for name, url in (("upload", upload_url), ("part", part_url), ("file", file_url)):
        secrets.urls[name] = url
        secrets.made[name] = dict(parse_qsl(urlsplit(url).query))["signature"]
    return secrets


async def _console_sign_in(client: httpx.AsyncClient, account: Account) -> str:
    """Signs `client` in to the console; the CSRF token of its pages from then on."""
    csrf = _csrf_of(await client.get("/login"))
    r = await client.post(
        "/login",
        data={"csrf": csrf, "email": account.email, "password": account.password},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    return _csrf_of(await client.get("/account"))


def _csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found.group(1)


# -- how each secret travels -----------------------------------------------------------------


def _in_path(token: str) -> str:
    """`token` as one path segment, whatever it holds (a lone surrogate as the bytes UTF-8
    would give it, which the server reads as U+FFFD)."""
    return quote(token.encode("utf-8", "surrogatepass"), safe="")


def _form(fields: dict[str, str]) -> bytes:
    return "&".join(
        f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
        for k, v in fields.items()
    ).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded", **ORIGIN}
HTML = {"Accept": "text/html"}


def _json(body: dict[str, str], headers: dict[str, str] | None = None) -> dict[str, Any]:
    # json.dumps escapes what UTF-8 cannot hold: "\udc80" arrives as that lone surrogate.
    return {
        "content": json.dumps(body).encode(),
        "headers": {"Content-Type": "application/json", **(headers or {})},
    }


def _bearer(token: str) -> dict[str, bytes]:
    return {"Authorization": b"Bearer " + token.encode("utf-8", "surrogatepass")}


def _with_signature(url: str, signature: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["signature"] = signature
    encoded = urlencode({k: v.encode("utf-8", "surrogatepass") for k, v in query.items()}, safe="")
    return f"{parts.path}?{encoded}"


Send = Callable[[Secrets, str], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Case:
    secret: str  # which of Secrets.made
    send: Send
    status: int
    code: str | None = None  # problem+json with this code, or...
    text: str | None = None  # ...an HTML page that says this
    where: str = "path"  # path, query, header or body: which characters can travel there


async def _get(s: Secrets, path: str, **kwargs: Any) -> httpx.Response:
    return await s.client.get(path, **kwargs)


CASES: dict[str, Case] = {
    "install page": Case(
        "install", lambda s, t: _get(s, f"/install/{_in_path(t)}", headers=HTML),
        404, text="Install link not found",
    ),
    "install page (API)": Case(
        "install", lambda s, t: _get(s, f"/install/{_in_path(t)}"), 404, "install_link_not_found"
    ),
    "install download": Case(
        "install", lambda s, t: _get(s, f"/install/{_in_path(t)}/download"),
        404, "install_link_not_found",
    ),
    "install manifest": Case(
        "install", lambda s, t: _get(s, f"/install/{_in_path(t)}/manifest.plist"),
        404, "install_link_not_found",
    ),
    "install icon": Case(
        "install", lambda s, t: _get(s, f"/install/{_in_path(t)}/icon.png"),
        404, "install_link_not_found",
    ),
    "unsubscribe page": Case(
        "unsubscribe", lambda s, t: _get(s, f"/unsubscribe/{_in_path(t)}"),
        404, text="This unsubscribe link is not valid",
    ),
    "unsubscribe (one click)": Case(
        "unsubscribe",
        lambda s, t: s.client.post(
            f"/unsubscribe/{_in_path(t)}", content=b"List-Unsubscribe=One-Click", headers=FORM
        ),
        404, text="This unsubscribe link is not valid",
    ),
    "invitation page": Case(
        "invitation", lambda s, t: _get(s, f"/invitations/{_in_path(t)}", headers=HTML),
        404, text="This invitation link is not valid",
    ),
    "invitation accept (console)": Case(
        "invitation",
        lambda s, t: s.client.post(
            f"/invitations/{_in_path(t)}/accept", content=_form({"csrf": s.csrf}),
            headers={**FORM, **HTML},
        ),
        404, text="This invitation link is not valid",
    ),
    "invitation accept (API)": Case(
        "invitation",
        lambda s, t: s.client.post(
            "/api/invitations/accept", **_json({"token": t}, s.owner.headers)
        ),
        404, "invitation_not_found", where="body",
    ),
    "password reset (API)": Case(
        "reset",
        lambda s, t: s.client.post(
            "/api/auth/password-reset/confirm", **_json({"token": t, "password": "a new one!"})
        ),
        422, "invalid_token", where="body",
    ),
    "password reset page": Case(
        "reset",
        lambda s, t: s.client.post(
            "/reset-password",
            content=_form({"csrf": s.csrf, "token": t, "password": "a new one!"}),
            headers=FORM,
        ),
        422, text="This link is unknown", where="body",
    ),
    "storage upload": Case(
        "upload",
        lambda s, t: s.client.put(_with_signature(s.urls["upload"], t), content=b"bytes"),
        403, "invalid_signature", where="query",
    ),
    "storage part": Case(
        "part",
        lambda s, t: s.client.put(_with_signature(s.urls["part"], t), content=b"bytes"),
        403, "invalid_signature", where="query",
    ),
    "storage file": Case(
        "file", lambda s, t: _get(s, _with_signature(s.urls["file"], t)),
        403, "invalid_signature", where="query",
    ),
    "console form's csrf field": Case(
        "csrf",
        lambda s, t: s.client.post("/logout", content=_form({"csrf": t}), headers=FORM),
        403, text="security token is missing or out of date", where="body",
    ),
    "console script's csrf header": Case(
        "csrf",
        lambda s, t: s.client.post(
            "/logout", headers={"X-CSRF-Token": t.encode("utf-8", "surrogatepass"), **ORIGIN}
        ),
        403, text="security token is missing or out of date", where="header",
    ),
    "access token": Case(
        "access", lambda s, t: _get(s, "/api/auth/me", headers=_bearer(t)),
        401, where="header",
    ),
    "API token": Case(
        "api_token", lambda s, t: _get(s, "/api/auth/me", headers=_bearer(t)),
        401, where="header",
    ),
    "refresh token": Case(
        "refresh",
        lambda s, t: s.client.post("/api/auth/refresh-token", **_json({"refresh_token": t})),
        401, where="body",
    ),
    "update key": Case(
        "update_key",
        lambda s, t: _get(
            s, "/api/updates/check?" + urlencode({"key": t.encode("utf-8", "surrogatepass")})
        ),
        404, where="query",
    ),
}  # fmt: skip


def _check(case: Case, r: httpx.Response, token: str) -> None:
    odd = "\x00" in token or _unencodable(token)
    if odd and r.request.url.path.startswith("/api/") and r.status_code == 422:
        # The API refuses text no field may hold (a NUL, what UTF-8 cannot encode) as such,
        # before the route (tests/api/test_nul_characters.py).
        assert_problem(r, 422, "validation_error")
    elif case.where == "path" and "\x00" in token:  # no address has one (middleware.py)
        assert_problem(r, 404, "not_found")
    elif case.text is not None:
        assert r.status_code == case.status, r.text
        assert r.headers["content-type"].startswith("text/html"), r.headers
        assert case.text in r.text, r.text
    else:
        assert_problem(r, case.status, case.code)


def _unencodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


# Any character at all, but where one cannot travel: a path segment holds no "/" (that is
# another address), a header no control character (HTTP refuses it).
_ANY = st.characters(exclude_categories=())
ALPHABETS = {
    "path": st.characters(exclude_categories=(), exclude_characters="/"),
    "header": st.characters(exclude_categories=("Cc",)),
    "query": _ANY,
    "body": _ANY,
}


def mangled(valid: str, where: str) -> st.SearchStrategy[str]:
    """`valid` with text appended, or one of its characters replaced by text."""
    text = st.text(ALPHABETS[where], min_size=1, max_size=12)
    appended = text.map(lambda extra: valid + extra)
    replaced = st.tuples(st.integers(0, len(valid) - 1), text).map(
        lambda at: valid[: at[0]] + at[1] + valid[at[0] + 1 :]
    )
    return st.one_of(appended, replaced).filter(lambda token: token.strip() != valid)


@pytest.mark.parametrize("name", list(CASES))
async def test_a_secret_with_a_non_ascii_character_is_refused_with_its_4xx(
    secrets_: Secrets, name: str
) -> None:
    case = CASES[name]
    valid = secrets_.made[case.secret]
    tokens = [valid + "é", valid[:-1] + "é", valid + "\u2028", "é"]
    if case.where in ("body", "query"):  # JSON can carry what UTF-8 cannot, forms its bytes
        tokens.append(valid[:-1] + "\udc80")
    for token in tokens:
        _check(case, await case.send(secrets_, token), token)


@pytest.mark.parametrize("name", list(CASES))
@hypothesis_settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
async def test_any_change_to_a_secret_is_refused_with_its_4xx(
    secrets_: Secrets, name: str, data: st.DataObject
) -> None:
    case = CASES[name]
    token = data.draw(mangled(secrets_.made[case.secret], case.where), label="token")
    _check(case, await case.send(secrets_, token), token)


async def test_the_secrets_themselves_still_work(secrets_: Secrets) -> None:
    """The cases above change a secret that works as it is."""
    s = secrets_
    assert (await _get(s, f"/install/{s.made['install']}")).status_code == 200
    assert (await _get(s, f"/unsubscribe/{s.made['unsubscribe']}")).status_code == 200
    assert (await _get(s, f"/invitations/{s.made['invitation']}")).status_code == 200
    assert (await _get(s, "/api/auth/me", headers=_bearer(s.made["api_token"]))).status_code == 200
    assert (await _get(s, s.urls["file"])).status_code == 200
    r = await s.client.put(s.urls["upload"], content=b"bytes")
    assert r.status_code == 200, r.text
    r = await s.client.post(
        "/api/auth/password-reset/confirm",
        json={"token": s.made["reset"], "password": "a new one!"},
    )
    assert r.status_code == 204, r.text
