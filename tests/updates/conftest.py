"""Fixtures for the in-app update tests (release channels, update keys, the update check)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.builds.android_files import aab, apk, proto_manifest
from tests.conftest import Account
from tests.leaks import LeakGuard


@pytest.fixture(autouse=True)
def _no_leaks(no_leaks: LeakGuard) -> None:
    """Every response of these tests is checked for hashes, secrets shown again and internals."""


async def publish(
    client: httpx.AsyncClient,
    owner: Account,
    app: dict[str, Any],
    data: bytes,
    file_name: str = "app.apk",
    **verify: Any,
) -> dict[str, Any]:
    """Upload and verify a build (with `verify`'s extra fields: channels, mandatory)."""
    base = f"/api/app-distribution/{app['projectId']}/{app['id']}/builds"
    r = await client.post(
        f"{base}/upload-link",
        json={"fileName": file_name, "fileSize": len(data)},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    link = r.json()
    r = await client.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{base}/verify", json={"buildId": link["buildId"], **verify}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    return build


def android(version_code: int, version_name: str = "1.0", min_sdk: int = 24) -> bytes:
    """An .apk: what a phone installs."""
    return apk(version_code, version_name, min_sdk)


def bundle(version_code: int, version_name: str = "1.0", min_sdk: int = 24) -> bytes:
    """An .aab of the same package: what Google Play takes, and no phone installs."""
    return aab(proto_manifest("dev.buildbay.demo", version_name, version_code, min_sdk))
