"""Text never holds NUL (U+0000): PostgreSQL can neither store it nor compare with it, so a NUL
anywhere used to be a 500 there (found by tests/api/test_schemathesis.py on PostgreSQL). Every
such request is now refused the same way on both databases."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Account, Api, assert_problem


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/api/auth/register",
            {"email": "nul@example.com", "password": "password1", "name": "a\0"},
        ),
        ("/api/auth/login", {"email": "owner\0@example.com", "password": "password1"}),
        ("/api/projects", {"name": "Acme\0"}),
        ("/api/account/api-tokens", {"name": "CI\0"}),
    ],
)
async def test_a_body_with_nul_in_its_text_is_a_422(
    client: httpx.AsyncClient, owner: Account, path: str, body: dict[str, str]
) -> None:
    r = await client.post(path, json=body, headers=owner.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert "NUL" in problem["detail"]


async def test_an_id_with_nul_is_a_404(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.get("/api/projects/prj_%00", headers=owner.headers)

    assert_problem(r, 404, "not_found")


async def test_a_version_filter_with_nul_is_a_422(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])

    r = await client.get(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds?versionName=1%00",
        headers=owner.headers,
    )

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == ["versionName"]
