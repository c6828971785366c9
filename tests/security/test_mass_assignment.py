"""No mass assignment: a request body sets only the fields its endpoint documents.

Generated from the route table and the app's own OpenAPI document: every /api route with a body
is sent a valid body plus the fields a client must never set (ids, owners, roles, plans, states,
sizes, hashes, timestamps), at the top level and inside each nested object. Each answers 422
naming exactly those fields, and the database is the same, row for row, before and after.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.models import Base
from tests.conftest import Account, Api, assert_problem
from tests.route_table import (
    PUBLIC_ANSWER,
    RouteCase,
    World,
    api_routes,
    build_world,
    prepare,
    send,
)

# Fields of the server's own, and what a client would like to set them to.
SERVER_OWNED: dict[str, Any] = {
    "id": "usr_00000000000000000000000000",
    "ownerId": "usr_00000000000000000000000000",
    "userId": "usr_00000000000000000000000000",
    "projectId": "prj_00000000000000000000000000",
    "applicationId": "app_00000000000000000000000000",
    "buildId": "bld_00000000000000000000000000",
    "role": "owner",
    "plan": "enterprise",
    "status": "ready",
    "isAdmin": True,
    "email": "someone.else@example.com",
    "sizeBytes": 1,
    "fileSize": 1,
    "sha256": "0" * 64,
    "passwordHash": "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2g",
    "tokenHash": "0" * 64,
    "storageKey": "../../elsewhere",
    "uploadedBy": "usr_00000000000000000000000000",
    "applicationsCount": 0,
    "buildsCount": 0,
    "createdAt": "2000-01-01T00:00:00Z",
    "updatedAt": "2000-01-01T00:00:00Z",
    "verifiedAt": "2000-01-01T00:00:00Z",
    "expiresAt": "2999-01-01T00:00:00Z",
    "lastUsedAt": None,
    "revokedAt": None,
    "metadata": {"packageName": "com.evil"},
}
OPERATIONS = {"post", "put", "patch", "delete"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.rate_limit_enabled = False  # the world alone takes more than a minute's quota
    return settings


@pytest.fixture
async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/openapi.json")
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The object schema behind a $ref, or behind the one $ref of an `X | None`."""
    for option in schema.get("anyOf", []):
        if "$ref" in option:
            return resolve(document, option)
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        resolved: dict[str, Any] = document["components"]["schemas"][name]
        return resolved
    return schema


def request_schema(document: dict[str, Any], case: RouteCase) -> dict[str, Any]:
    operation = document["paths"][case.path][case.method.lower()]
    content = operation["requestBody"]["content"]["application/json"]
    return resolve(document, content["schema"])


def object_schemas(document: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """`schema` and every object schema nested in it, however deep."""
    found = [schema]
    for prop in schema.get("properties", {}).values():
        nested = resolve(document, prop)
        if nested is not prop and "properties" in nested:
            found += object_schemas(document, nested)
    return found


@pytest.fixture
def write_routes(app: FastAPI) -> list[RouteCase]:
    routes = [c for c in api_routes(app) if c.has_body]
    assert len(routes) >= 14, "fewer /api routes with a body than there were: routing changed?"
    return routes


async def test_every_request_body_schema_forbids_other_fields(
    document: dict[str, Any], write_routes: list[RouteCase]
) -> None:
    open_ended = []
    for case in write_routes:
        for schema in object_schemas(document, request_schema(document, case)):
            if schema.get("additionalProperties") is not False:
                open_ended.append(f"{case}: {schema.get('title')}")

    assert open_ended == []


def injected(schema: dict[str, Any]) -> dict[str, Any]:
    """The server-owned fields this schema does not take."""
    return {k: v for k, v in SERVER_OWNED.items() if k not in schema.get("properties", {})}


def with_injections(
    document: dict[str, Any], schema: dict[str, Any], body: dict[str, Any], prefix: str = ""
) -> tuple[dict[str, Any], set[str]]:
    """`body` with the server-owned fields added at every level it has, and their names."""
    extra = injected(schema)
    changed = {**body, **extra}
    names = {prefix + name for name in extra}
    for name, value in body.items():
        nested = resolve(document, schema["properties"][name])
        if isinstance(value, dict) and "properties" in nested:
            changed[name], inner = with_injections(document, nested, value, f"{prefix}{name}.")
            names |= inner
    return changed, names


async def database_rows(app: FastAPI) -> dict[str, list[tuple[Any, ...]]]:
    async with app.state.ctx.sessions() as db:
        return {
            table.name: sorted((tuple(row) for row in await db.execute(select(table))), key=repr)
            for table in Base.metadata.sorted_tables
        }


@pytest.fixture
async def world(
    api: Api, client: httpx.AsyncClient, owner: Account, clock: FrozenClock, app: FastAPI
) -> World:
    return await build_world(api, client, owner, clock, app)


async def test_server_owned_fields_are_refused_on_every_write_and_nothing_changes(
    app: FastAPI, world: World, document: dict[str, Any], write_routes: list[RouteCase]
) -> None:
    failures: list[str] = []
    nested_checked = 0
    for case in write_routes:
        prepared = await prepare(world, case, "owner")
        assert prepared.payload is not None
        schema = request_schema(document, case)
        prepared.payload, names = with_injections(document, schema, prepared.payload)
        nested_checked += sum("." in n for n in names) > 0
        # A call that may end the caller's session renews it after sending: here only after the
        # comparison, which that new login would spoil.
        caller, prepared.relogin = prepared.relogin, None
        before = await database_rows(app)

        r = await send(world, prepared)

        try:
            problem = assert_problem(r, 422, "validation_error")
            assert {e["field"] for e in problem["errors"]} == names
            assert {e["message"] for e in problem["errors"]} == {"is not a field of this request"}
            assert await database_rows(app) == before
        except AssertionError as exc:
            failures.append(f"{case}: {r.status_code} {r.text[:300]} ({exc})")
        if caller is not None:
            await world.relogin(caller)

    assert failures == []
    assert nested_checked >= 3  # retention (create, update) and verify's installLink


async def test_the_same_bodies_without_the_injected_fields_are_accepted(
    world: World, write_routes: list[RouteCase]
) -> None:
    # What made the calls above fail was the injected fields, not the bodies they were added to.
    failures = []
    for case in write_routes:
        r = await send(world, await prepare(world, case, "owner"))
        if r.is_success:
            continue
        # A public route whose success the world cannot reach answers as the matrix says.
        if (r.status_code, r.json().get("code")) != PUBLIC_ANSWER.get(case.key):
            failures.append(f"{case}: {r.status_code} {r.text[:300]}")

    assert failures == []
