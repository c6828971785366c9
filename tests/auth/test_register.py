from __future__ import annotations

import re

import httpx
import pytest

from buildbay.clock import FrozenClock
from tests.auth.conftest import bearer
from tests.conftest import Api, assert_problem, iso_z

TOKEN_PAIR_FIELDS = {"access_token", "refresh_token", "token_type", "expires_in", "user"}
USER_FIELDS = {"id", "email", "name", "plan", "createdAt", "emailVerified"}


async def register(client: httpx.AsyncClient, **body: object) -> httpx.Response:
    return await client.post("/api/auth/register", json=body)


async def test_register_creates_a_free_account_and_answers_a_token_pair(
    client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    r = await register(
        client, email="ada@example.com", password="correct horse", name="Ada Lovelace"
    )

    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == TOKEN_PAIR_FIELDS
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 86400
    assert body["access_token"]
    assert body["refresh_token"]
    assert body["refresh_token"] != body["access_token"]
    user = body["user"]
    assert set(user) == USER_FIELDS
    assert user["id"]
    assert user["email"] == "ada@example.com"
    assert user["name"] == "Ada Lovelace"
    assert user["plan"] == "free"
    assert user["createdAt"] == iso_z(clock.now())


async def test_the_registered_access_token_identifies_the_new_user(
    client: httpx.AsyncClient,
) -> None:
    r = await register(client, email="ada@example.com", password="correct horse")
    body = r.json()

    me = await client.get("/api/auth/me", headers=bearer(body["access_token"]))

    assert me.status_code == 200, me.text
    assert {k: me.json()[k] for k in body["user"]} == body["user"]


async def test_register_without_a_name_gives_the_user_a_name_anyway(
    client: httpx.AsyncClient,
) -> None:
    r = await register(client, email="grace@example.com", password="correct horse")

    assert r.status_code == 201, r.text
    assert r.json()["user"]["name"] == "grace"


async def test_register_stores_the_email_lower_cased(client: httpx.AsyncClient) -> None:
    r = await register(client, email="Ada.Lovelace@Example.COM", password="correct horse")

    assert r.status_code == 201, r.text
    assert r.json()["user"]["email"] == "ada.lovelace@example.com"


@pytest.mark.parametrize(
    "second",
    [
        "ada@example.com",
        "ADA@Example.com",
        "\uff41\uff44\uff41@\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com",
    ],
)
async def test_an_email_can_register_only_once_whatever_its_case(
    client: httpx.AsyncClient, second: str
) -> None:
    first = await register(client, email="Ada@example.com", password="correct horse")
    assert first.status_code == 201, first.text

    r = await register(client, email=second, password="another password")

    body = assert_problem(r, 409, "email_taken")
    assert "errors" not in body


@pytest.mark.parametrize("length", [8, 128])
async def test_register_accepts_passwords_of_8_to_128_characters(
    client: httpx.AsyncClient, length: int
) -> None:
    password = "p" * length
    r = await register(client, email="ada@example.com", password=password)

    assert r.status_code == 201, r.text
    login = await client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": password}
    )
    assert login.status_code == 200, login.text


@pytest.mark.parametrize("length", [0, 7, 129])
async def test_register_refuses_a_password_shorter_than_8_or_longer_than_128(
    client: httpx.AsyncClient, length: int
) -> None:
    password = ("Zx9#" * 40)[:length]
    r = await register(client, email="ada@example.com", password=password)

    body = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["password"]
    if password:
        assert password not in r.text  # a password is never echoed back


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"password": "correct horse"}, "email", "is required"),
        ({"email": "ada@example.com"}, "password", "is required"),
        ({"email": "not-an-email", "password": "correct horse"}, "email", None),
    ],
)
async def test_register_names_each_missing_or_invalid_field(
    client: httpx.AsyncClient, body: dict[str, str], field: str, message: str | None
) -> None:
    r = await client.post("/api/auth/register", json=body)

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == [field]
    if message is not None:
        assert problem["errors"][0]["message"] == message


@pytest.mark.parametrize("field", ["plan", "id", "role"])
async def test_register_refuses_unknown_fields_and_creates_nothing(
    client: httpx.AsyncClient, field: str
) -> None:
    r = await register(
        client, email="ada@example.com", password="correct horse", **{field: "enterprise"}
    )

    body = assert_problem(r, 422, "validation_error")
    assert body["errors"] == [{"field": field, "message": "is not a field of this request"}]
    # Nothing was created: the same e-mail can still register, and gets the free plan.
    r = await register(client, email="ada@example.com", password="correct horse")
    assert r.status_code == 201, r.text
    assert r.json()["user"]["plan"] == "free"


async def test_register_refuses_a_body_that_is_not_json(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/api/auth/register",
        content=b'{"email": "ada@example.com",',
        headers={"Content-Type": "application/json"},
    )

    assert_problem(r, 400, "malformed_json")


async def test_each_registration_is_a_different_user(api: Api) -> None:
    ada = await api.register("ada@example.com")
    grace = await api.register("grace@example.com")

    assert ada.user["id"] != grace.user["id"]
    assert ada.access_token != grace.access_token


# -- look-alike addresses ---------------------------------------------------------------------


@pytest.mark.parametrize("email", [" ada@example.com", "ada@example.com ", "\tada@example.com"])
async def test_an_email_with_whitespace_around_it_is_422_as_sent(
    client: httpx.AsyncClient, email: str
) -> None:
    first = await register(client, email="ada@example.com", password="correct horse")
    assert first.status_code == 201, first.text

    r = await register(client, email=email, password="another password")

    body = assert_problem(r, 422, "validation_error")
    assert body["errors"] == [{"field": "email", "message": "cannot start or end with whitespace"}]


async def test_a_fullwidth_email_is_the_address_it_looks_like(client: httpx.AsyncClient) -> None:
    r = await register(client, email="\uff41lice@example.com", password="correct horse")
    assert r.status_code == 201, r.text
    assert r.json()["user"]["email"] == "alice@example.com"

    r = await client.post(
        "/api/auth/login",
        json={"email": "alice@\uff45xample.com", "password": "correct horse"},
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("email", "part", "scripts"),
    [
        ("alice@ex\u0430mple.com", "ex\u0430mple", "Cyrillic"),  # Cyrillic a
        ("alice@g\u03bfogle.com", "g\u03bfogle", "Greek"),  # Greek omicron
        ("\u0430lice@example.com", "\u0430lice", "Cyrillic"),
    ],
)
async def test_an_email_mixing_latin_with_look_alike_letters_is_422(
    client: httpx.AsyncClient, email: str, part: str, scripts: str
) -> None:
    r = await register(client, email=email, password="correct horse")

    body = assert_problem(r, 422, "validation_error")
    message = f"mixes Latin letters with {scripts} look-alikes in '{part}'; write it in one script"
    assert body["errors"] == [{"field": "email", "message": message}]
    assert body["detail"] == f"email: {message}"


async def test_an_idn_domain_in_one_script_is_fine(client: httpx.AsyncClient) -> None:
    email = "ivan@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444"
    r = await register(client, email=email, password="correct horse")

    assert r.status_code == 201, r.text
    assert r.json()["user"]["email"] == email


async def test_a_name_before_the_at_outside_ascii_is_422_as_mail_cannot_count_on_it(
    client: httpx.AsyncClient,
) -> None:
    """It needs SMTPUTF8 of every server on the way (tests/mail/test_addresses.py)."""
    email = "\u0438\u0432\u0430\u043d@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444"
    r = await register(client, email=email, password="correct horse")

    body = assert_problem(r, 422, "validation_error")
    reason = (
        "has characters outside ASCII before the @, which not every mail server takes; "
        "use an ASCII address"
    )
    assert body["errors"] == [{"field": "email", "message": reason}]


@pytest.mark.parametrize(
    "name", ["Ada\u202e", "\u200b\u200b", "\u2066Ada\u2069", "A\u008dda", "A\u0006da"]
)
async def test_a_name_with_bidi_controls_or_nothing_visible_is_422(
    client: httpx.AsyncClient, name: str
) -> None:
    r = await register(client, email="ada@example.com", password="correct horse", name=name)

    body = assert_problem(r, 422, "validation_error")
    assert body["errors"][0]["field"] == "name"


async def test_the_register_schema_says_what_a_name_may_hold(client: httpx.AsyncClient) -> None:
    """The OpenAPI pattern of `name` refuses what the server refuses (a C1 control, found by
    schemathesis) and takes a blank name (which means none)."""
    schema = (await client.get("/openapi.json")).json()["components"]["schemas"]
    options = schema["RegisterRequest"]["properties"]["name"]["anyOf"]
    pattern = re.compile(next(o["pattern"] for o in options if "pattern" in o))
    assert pattern.search("  Ada Lovelace ")
    assert pattern.search("   ")
    assert not pattern.search("A\u008dda")
    assert not pattern.search("\u200b")
