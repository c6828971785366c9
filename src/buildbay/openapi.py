"""OpenAPI links: which values of a response feed which next request (OpenAPI 3.1, Link Object).

Clients read them as documentation ("the `id` of a created project is the `{id}` of these
operations"); the stateful API tests (tests/api/test_schemathesis.py) follow them to chain
create, read, update and delete, and the upload steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def link(
    method: str,
    path: str,
    description: str,
    parameters: Mapping[str, str],
    request_body: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Link Object to the operation at `method` `path`; `parameters` and `request_body` map
    its parameters and body fields to runtime expressions (`$response.body#/id`)."""
    pointer = path.replace("~", "~0").replace("/", "~1")
    target: dict[str, Any] = {
        "operationRef": f"#/paths/{pointer}/{method.lower()}",
        "description": description,
        "parameters": dict(parameters),
    }
    if request_body is not None:
        target["requestBody"] = dict(request_body)
    return target


def linked(
    status: int, description: str, links: Mapping[str, dict[str, Any]]
) -> dict[int | str, dict[str, Any]]:
    """A `responses=` entry for the success status: FastAPI keeps its body schema and adds
    these links."""
    return {status: {"description": description, "links": dict(links)}}
