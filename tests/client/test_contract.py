"""The client's own models and requests (buildbay_client) against the server's /openapi.json:
the client carries a copy of the API's shape instead of importing the server, and this is what
keeps the copy true.

For every op the SDK sends: the path and method exist, the query parameters and body fields it
sends are the operation's (and include every required one), and the answer's schema is the
client model's: the same fields under the same JSON names, every field the client requires is
one the server always sends, every field the server may send as null is optional in the client,
and the enums have the same values.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from enum import Enum
from typing import Any, get_args, get_origin

import pytest

from buildbay_client import models, ops
from buildbay_client.models import MAX_NOTES_LENGTH, Model, fields_of, json_name
from buildbay_client.ops import Op

P, A, B = "prj_01", "app_01", "bld_01"
SHA = "0" * 64

# Each op built with every optional argument given, so that every field it can send is checked.
CASES: dict[str, Op[Any]] = {
    "login": ops.login("ci@example.com", "a long password"),
    "register": ops.register("ci@example.com", "a long password", "CI"),
    "refresh": ops.refresh("refresh"),
    "logout": ops.logout("refresh"),
    "me": ops.me(),
    "cli_token": ops.cli_token("bbc_code", "v" * 43, "http://127.0.0.1:53682/callback"),
    "device_code": ops.device_code("ada-laptop"),
    "device_token": ops.device_token("bbd_code"),
    "list_api_tokens": ops.list_api_tokens(),
    "create_api_token": ops.create_api_token("ci", 30),
    "revoke_api_token": ops.revoke_api_token("tok_01"),
    "list_projects": ops.list_projects(10, "cursor"),
    "create_project": ops.create_project("Acme"),
    "get_project": ops.get_project(P),
    "rename_project": ops.rename_project(P, "Acme 2"),
    "delete_project": ops.delete_project(P),
    "list_members": ops.list_members(P),
    "add_member": ops.add_member(P, "tester@example.com", "tester"),
    "set_member_role": ops.set_member_role(P, "usr_01", "developer"),
    "remove_member": ops.remove_member(P, "usr_01"),
    "list_webhooks": ops.list_webhooks(P),
    "create_webhook": ops.create_webhook(P, "https://hooks.example.com/x", ["build.ready"], "CI"),
    "test_webhook": ops.test_webhook(P, "whk_01"),
    "list_deliveries": ops.list_deliveries(P, "whk_01", 10, "cursor"),
    "set_webhook_enabled": ops.set_webhook_enabled(P, "whk_01", False),
    "delete_webhook": ops.delete_webhook(P, "whk_01"),
    "retry_delivery": ops.retry_delivery(P, "whd_01"),
    "list_applications": ops.list_applications(P, 10, "cursor"),
    "create_application": ops.create_application(P, "Android", "android", "com.example.app"),
    "get_application": ops.get_application(P, A),
    # What `buildbay apps update` sends with every option given.
    "update_application": ops.update_application(
        P,
        A,
        {
            "name": "A",
            "platform": "ios",
            "bundleId": "com.example.app",
            "retention": {
                "keepLast": 5,
                "keepDays": 30,
                "protect": {"groups": False, "channels": True},
            },
        },
    ),
    # What `buildbay apps retention-preview` and `apps update` send before a rule is saved.
    "preview_retention": ops.preview_retention(
        P, A, {"keepLast": 5, "keepDays": 30, "protect": {"groups": True, "channels": False}}
    ),
    "delete_application": ops.delete_application(P, A),
    "list_builds": ops.list_builds(
        P,
        A,
        10,
        "cursor",
        status="ready",
        version_name="1.4.2",
        version_code="42",
        sort="version",
    ),
    "get_build": ops.get_build(P, A, B),
    "latest_build": ops.latest_build(P, A, "1.4.2"),
    "download": ops.download(P, A, B),
    "delete_build": ops.delete_build(P, A, B),
    "upload_link": ops.upload_link(P, A, "app.apk", 10, SHA, multipart=True, on_duplicate="reuse"),
    "set_build_channels": ops.set_build_channels(P, A, B, ["default", "beta"], 25),
    "attach_blockmap": ops.attach_blockmap(P, A, B, b"\x1f\x8b"),
    "mark_mandatory": ops.mark_mandatory(P, A, B),
    "part_targets": ops.part_targets(P, A, B, [1, 2]),
    "received_parts": ops.received_parts(P, A, B),
    "verify": ops.verify(
        P,
        A,
        B,
        "notes",
        24,
        ["default", "beta"],
        True,
        {"groups": ["everyone"], "emails": ["t@example.com"], "notify": True},
    ),
    "list_channels": ops.list_channels(P, A),
    "create_channel": ops.create_channel(P, A, "beta"),
    "list_groups": ops.list_groups(P, 10, "cursor"),
    "list_project_devices": ops.list_project_devices(P, 10, "cursor", "ana"),
    "export_devices": ops.export_devices(P, "csv"),
    "distribute_build": ops.distribute_build(P, A, B, ["everyone"], ["t@example.com"], False),
    "create_install_link": ops.create_install_link(P, A, B, 24),
    "list_install_links": ops.list_install_links(P, A, B),
    "revoke_install_link": ops.revoke_install_link(P, A, B, "lnk_01"),
    "list_feedback": ops.list_feedback(
        P, 10, "cursor", application=A, build=B, status="new", category="bug", q="crash"
    ),
    "get_feedback": ops.get_feedback(P, "fbk_01"),
    "update_feedback": ops.update_feedback(P, "fbk_01", {"status": "triaged", "assignee": None}),
    "list_feedback_comments": ops.list_feedback_comments(P, "fbk_01", 10, "cursor"),
    "comment_on_feedback": ops.comment_on_feedback(P, "fbk_01", "Thanks, fixed in 1.4.3"),
    "own_feedback": ops.own_feedback(10, "cursor"),
}


# An answer whose model is not the op's, which the SDK reads by its status: upload-link's 200
# is the ready build of the same bytes, reused (`"onDuplicate": "reuse"`).
OTHER_ANSWERS: dict[tuple[str, str], type[Model]] = {("upload_link", "200"): models.Build}


@pytest.fixture
def document(served_openapi: str) -> dict[str, Any]:
    """The server's /openapi.json (fetched once a session, tests/conftest.py), a copy of its
    own for each test."""
    doc: dict[str, Any] = json.loads(served_openapi)
    return doc


def test_every_op_of_the_sdk_is_checked() -> None:
    factories = {
        name
        for name, function in inspect.getmembers(ops, inspect.isfunction)
        if function.__module__ == ops.__name__ and str(function.__annotations__.get("return", ""))
        .startswith("Op[")
    }  # fmt: skip
    assert factories == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_op_is_an_operation_of_the_server(name: str, document: dict[str, Any]) -> None:
    op = CASES[name]
    operation = _operation(document, op)

    declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
    assert set(op.params) <= declared, f"{name}: query parameters the server does not take"

    body_schema = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if op.content is not None:  # raw bytes: what the operation takes
        raw = operation.get("requestBody", {}).get("content", {})
        assert raw.get("application/octet-stream") is not None, f"{name}: takes no raw body"
    elif op.json is None:  # no body: the operation takes none, or an optional one
        assert body_schema is None or not operation["requestBody"].get("required")
    else:
        assert body_schema is not None, f"{name}: sends a body the operation does not take"
        sent = op.json if op.json is not None else {}
        _check_body(document, sent, body_schema["schema"], name)

    answers = {
        status: answer for status, answer in operation["responses"].items()
        if status.startswith(("2", "3"))
    }  # fmt: skip
    if op.model is None:
        schemas = [a.get("content", {}).get("application/json") for a in answers.values()]
        assert schemas == [None] * len(schemas), f"{name}: the server answers a body"
        return
    for status, answer in answers.items():  # verify: 200 ready, or 202 processing
        model = OTHER_ANSWERS.get((name, status), op.model)
        ref = answer["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{model.__name__}", name
        _check_model(document, model, model.__name__)


def test_notes_are_refused_before_sending_at_the_servers_limit(document: dict[str, Any]) -> None:
    notes = document["components"]["schemas"]["VerifyRequest"]["properties"]["notes"]
    limits = [o["maxLength"] for o in notes.get("anyOf", [notes]) if "maxLength" in o]
    assert limits == [MAX_NOTES_LENGTH]


def test_a_model_that_drifts_from_the_server_is_caught(document: dict[str, Any]) -> None:
    """The check itself: a field renamed in the client, or made required where the server may
    leave it out, fails it."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Project(Model):
        id: str
        name: str
        application_count: int  # the server's is applicationsCount

    with pytest.raises(AssertionError, match="applicationCount"):
        _check_model(document, Project, "Project")

    @dataclass(frozen=True)
    class UploadLink(Model):
        upload_url: str | None
        build_id: str
        expires_at: str
        upload_headers: dict[str, str]
        upload_method: str  # the server may leave it out (its default)
        multipart: dict[str, int] | None = None

    with pytest.raises(AssertionError, match="uploadMethod"):
        _check_model(document, UploadLink, "UploadLink")


# -- helpers ----------------------------------------------------------------------------------


def _operation(document: dict[str, Any], op: Op[Any]) -> dict[str, Any]:
    """The document's operation for this op's path and method; a literal segment wins over a
    parameter (`/builds/latest` over `/builds/{buildId}`)."""

    def pattern(template: str) -> str:
        return "[^/]+".join(re.escape(part) for part in re.split(r"\{[^}]+\}", template))

    matches = [
        template
        for template in document["paths"]
        if re.fullmatch(pattern(template), op.path)
        and op.method.lower() in document["paths"][template]
    ]
    assert matches, f"{op.method} {op.path} is not in the server's API"
    template = min(matches, key=lambda t: t.count("{"))
    operation: dict[str, Any] = document["paths"][template][op.method.lower()]
    return operation


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A schema without its `$ref` or its `anyOf [X, null]`."""
    while True:
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            options = [o for o in schema["anyOf"] if o.get("type") != "null"]
            assert len(options) == 1, schema
            schema = options[0]
        else:
            return schema


def _nullable(schema: dict[str, Any]) -> bool:
    return any(o.get("type") == "null" for o in schema.get("anyOf", []))


def _check_body(document: dict[str, Any], sent: Any, schema: dict[str, Any], where: str) -> None:
    schema = _resolve(document, schema)
    if not isinstance(sent, dict) or "properties" not in schema:
        return
    properties = schema["properties"]
    unknown = set(sent) - set(properties)
    assert not unknown, f"{where}: sends fields the server does not take: {unknown}"
    missing = set(schema.get("required", [])) - set(sent)
    assert not missing, f"{where}: leaves out required fields: {missing}"
    for key, value in sent.items():
        if value is not None:
            _check_body(document, value, properties[key], f"{where}.{key}")


def _check_model(document: dict[str, Any], model: type[Model], name: str) -> None:
    schema = document["components"]["schemas"][name]
    properties: dict[str, Any] = schema["properties"]
    required = set(schema.get("required", []))
    fields = {json_name(model, field): (kind, needed) for field, kind, needed in fields_of(model)}
    assert set(fields) == set(properties), (
        f"{name}: the client reads {sorted(set(fields) - set(properties))} which the server "
        f"does not send, and lacks {sorted(set(properties) - set(fields))}"
    )
    for key, (kind, needed) in fields.items():
        where = f"{name}.{key}"
        if needed:
            assert key in required, f"{where}: required by the client, optional in the server"
        if _nullable(properties[key]):
            assert _optional(kind), f"{where}: the server may send null, the client refuses it"
        _check_kind(document, _unwrap(kind), properties[key], where)


def _check_kind(document: dict[str, Any], kind: Any, schema: dict[str, Any], where: str) -> None:
    if kind is Any:  # the client takes the value as it comes (a number or a string)
        return
    resolved = _resolve(document, schema)
    if get_origin(kind) is list:
        _check_kind(document, _unwrap(get_args(kind)[0]), resolved["items"], f"{where}[]")
    elif isinstance(kind, type) and issubclass(kind, Model):
        ref = _ref(schema)
        assert ref is not None, f"{where}: the server's is not an object schema"
        _check_model(document, kind, ref)
    elif isinstance(kind, type) and issubclass(kind, Enum):
        assert sorted(m.value for m in kind) == sorted(resolved["enum"]), where


def _ref(schema: dict[str, Any]) -> str | None:
    for option in [schema, *schema.get("anyOf", [])]:
        if "$ref" in option:
            return str(option["$ref"]).rsplit("/", 1)[1]
    return None


def _optional(kind: Any) -> bool:
    return get_origin(kind) in (types.UnionType, typing.Union) and type(None) in get_args(kind)


def _unwrap(kind: Any) -> Any:
    if _optional(kind):
        (inner,) = [k for k in get_args(kind) if k is not type(None)]
        return inner
    return kind
