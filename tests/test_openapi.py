from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel, ValidationError

from buildbay.app import API_SECTIONS
from buildbay.auth.schemas import LogoutRequest, RefreshRequest
from buildbay.schemas import RequestModel

# Every endpoint of the seed, its paths exactly as written there.
SEED_ENDPOINTS = [
    ("post", "/api/auth/register"),
    ("post", "/api/auth/login"),
    ("post", "/api/auth/logout"),
    ("post", "/api/auth/refresh-token"),
    ("get", "/api/projects"),
    ("post", "/api/projects"),
    ("get", "/api/project/{id}"),
    ("put", "/api/projects/{id}"),
    ("delete", "/api/projects/{id}"),
    ("get", "/api/projects/{id}/applications"),
    ("post", "/api/projects/{id}/applications"),
    ("get", "/api/projects/{id}/applications/{appId}"),
    ("put", "/api/projects/{id}/applications/{appId}"),
    ("delete", "/api/projects/{id}/applications/{appId}"),
    ("get", "/api/app-distribution/{projectId}/{appId}/builds"),
    ("post", "/api/app-distribution/{projectId}/{appId}/builds/upload-link"),
    ("post", "/api/app-distribution/{projectId}/{appId}/builds/verify"),
    ("delete", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"),
]
PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


@pytest.fixture
def document(served_openapi: str) -> dict[str, Any]:
    """/openapi.json as the app serves it (fetched once a session, tests/conftest.py), a copy
    of its own for each test."""
    doc: dict[str, Any] = json.loads(served_openapi)
    return doc


def api_operations(app: FastAPI) -> set[tuple[str, str]]:
    found = set()
    for context in iter_route_contexts(app.routes):
        route, path = context.original_route, context.path_format
        if isinstance(route, APIRoute) and path and path.startswith("/api/"):
            found |= {(m.lower(), path) for m in route.methods - {"HEAD"}}
    return found


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in {"get", "put", "post", "delete", "patch"}
    ]


async def test_openapi_lists_every_api_route(app: FastAPI, document: dict[str, Any]) -> None:
    documented = {(m, p) for m, p, _ in operations(document) if p.startswith("/api/")}

    assert documented == api_operations(app)


async def test_openapi_has_the_seeds_paths_exactly_as_written(document: dict[str, Any]) -> None:
    missing = [(m, p) for m, p in SEED_ENDPOINTS if m not in document["paths"].get(p, {})]

    assert missing == []


async def test_openapi_documents_the_contracts_extra_endpoints(document: dict[str, Any]) -> None:
    paths = document["paths"]
    assert "get" in paths["/api/projects/{id}"]
    assert {"get", "post"} <= set(paths["/api/projects/{id}/members"])
    assert {"put", "delete"} <= set(paths["/api/projects/{id}/members/{userId}"])
    assert "get" in paths["/api/app-distribution/{projectId}/{appId}/builds/{buildId}/download"]
    assert "delete" in paths["/api/account/api-tokens/{id}"]


async def test_openapi_documents_change_password_and_every_answer_it_gives(
    document: dict[str, Any],
) -> None:
    operation = document["paths"]["/api/auth/change-password"]["post"]

    assert set(operation["responses"]) == {
        "204",
        "400",
        "401",
        "403",  # an API token: a login only
        "408",
        "413",
        "422",
        "429",
        "500",
        "503",
    }
    assert "content" not in operation["responses"]["204"]
    assert operation["security"] == [{"HTTPBearer": []}]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    schema = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert set(schema["properties"]) == {"currentPassword", "newPassword"}
    assert set(schema["required"]) == {"currentPassword", "newPassword"}
    assert schema["additionalProperties"] is False
    new_password = schema["properties"]["newPassword"]
    assert (new_password["minLength"], new_password["maxLength"]) == (8, 128)


async def test_every_error_response_is_problem_json(document: dict[str, Any]) -> None:
    wrong = []
    for method, path, operation in operations(document):
        for status, response in operation.get("responses", {}).items():
            if status[0] in "45" and response.get("content") != {
                "application/problem+json": {"schema": PROBLEM_REF}
            }:
                wrong.append(f"{method.upper()} {path} {status}: {response.get('content')}")

    assert wrong == []


async def test_api_operations_document_their_errors(document: dict[str, Any]) -> None:
    missing = []
    for method, path, operation in operations(document):
        if not path.startswith("/api/"):
            continue
        statuses = set(operation["responses"])
        if not {"429", "500", "503"} <= statuses:
            missing.append(f"{method.upper()} {path}: {sorted(statuses)}")
        if "{" in path and not {"401", "404"} <= statuses:
            missing.append(f"{method.upper()} {path}: no 401/404 in {sorted(statuses)}")
        if "requestBody" in operation and not {"408", "422"} <= statuses:
            missing.append(f"{method.upper()} {path}: a body but no 408 or 422")

    assert missing == []


async def test_problem_schema_has_the_rfc_9457_fields(document: dict[str, Any]) -> None:
    problem = document["components"]["schemas"]["Problem"]

    assert {"type", "title", "status", "detail", "code", "requestId", "errors"} <= set(
        problem["properties"]
    )
    assert {"type", "title", "status", "detail", "code"} <= set(problem["required"])


async def test_no_fastapi_validation_error_schema_is_left(document: dict[str, Any]) -> None:
    text = json.dumps(document)

    assert "HTTPValidationError" not in text
    assert "#/components/schemas/ValidationError" not in text
    assert "HTTPValidationError" not in document["components"]["schemas"]


async def test_docs_answer_200(client: httpx.AsyncClient) -> None:
    r = await client.get("/docs")

    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in r.text


async def test_redoc_and_its_script_name_no_other_site(client: httpx.AsyncClient) -> None:
    page = await client.get("/redoc")
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    addresses = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert addresses, page.text
    assert all(a.startswith("/") for a in addresses), addresses

    script = await client.get("/redoc/redoc.standalone.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "cdn.redoc.ly" not in script.text
    assert '"/static/redoc-logo.svg"' in script.text
    logo = await client.get("/static/redoc-logo.svg")
    assert logo.status_code == 200
    assert logo.headers["content-type"].startswith("image/svg+xml")


async def test_every_paged_list_documents_limit_and_cursor(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    paged = []
    for path, operations in document["paths"].items():
        get = operations.get("get")
        if get is None:
            continue
        ok = get["responses"].get("200", {}).get("content", {}).get("application/json", {})
        ref = ok.get("schema", {}).get("$ref", "")
        if "nextCursor" not in schemas.get(ref.rsplit("/", 1)[-1], {}).get("properties", {}):
            continue
        paged.append(path)
        parameters = {p["name"]: p for p in get.get("parameters", []) if p["in"] == "query"}
        assert parameters["limit"]["schema"]["maximum"] == 100, path
        assert parameters["cursor"]["schema"]["type"] == "string", path
    assert len(paged) >= 3  # projects, applications, builds


def _request_models() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    todo: list[type[BaseModel]] = [RequestModel, RefreshRequest, LogoutRequest]
    while todo:
        model = todo.pop()
        found[model.__name__] = model
        todo.extend(model.__subclasses__())
    return found


async def test_every_request_body_has_a_valid_example(document: dict[str, Any]) -> None:
    """Swagger's "Try it out" sends the example as it is: without one it made one up from the
    schema (random strings; a retention rule keeping one build, which deleted the others)."""
    models = _request_models()
    missing, invalid = [], []
    for method, path, operation in operations(document):
        media = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if media is None:
            continue
        if "example" not in media:
            missing.append(f"{method.upper()} {path}")
            continue
        schema = media["schema"]
        [ref] = [s["$ref"] for s in [schema, *schema.get("anyOf", [])] if "$ref" in s]
        model = models[ref.rsplit("/", 1)[-1]]
        try:
            model.model_validate(media["example"])
        except ValidationError as exc:
            invalid.append(f"{method.upper()} {path}: {exc}")
    assert missing == []
    assert invalid == []
    update = document["paths"]["/api/projects/{id}/applications/{appId}"]["put"]
    assert "retention" not in update["requestBody"]["content"]["application/json"]["example"]


def _could_serve_one_path(first: str, other: str) -> bool:
    """Whether some request path matches both route paths: segment by segment, each pair the
    same text or one of them a parameter (a `{name:path}` parameter takes the rest)."""
    for mine, theirs in zip(first.split("/"), other.split("/"), strict=False):
        if mine.endswith(":path}") or theirs.endswith(":path}"):
            return True
        if mine != theirs and not mine.startswith("{") and not theirs.startswith("{"):
            return False
    return first.count("/") == other.count("/")


def test_no_route_of_one_router_could_serve_what_a_route_of_another_serves(app: FastAPI) -> None:
    """The app tries its routers in the order of their traffic (app.py), not of their reading:
    that order may change no answer, not even a 405's, so no route of one router (told apart by
    module and tag) could match a path that a route of another one matches. Within a router,
    the order is the router's own."""
    routes = [route for route in app.routes if isinstance(route, APIRoute)]

    def router_of(route: APIRoute) -> tuple[str, tuple[str, ...]]:
        return route.endpoint.__module__, tuple(str(tag) for tag in route.tags)

    for first in routes:
        for other in routes:
            if router_of(first) != router_of(other):
                assert not _could_serve_one_path(first.path, other.path), (first.path, other.path)


async def test_the_documents_sections_come_in_reading_order(document: dict[str, Any]) -> None:
    assert [tag["name"] for tag in document["tags"]] == list(API_SECTIONS)
    used = {tag for *_, operation in operations(document) for tag in operation.get("tags", [])}
    assert used == set(API_SECTIONS)
