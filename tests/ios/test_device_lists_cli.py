"""`buildbay devices list|export` against a real server over HTTP (in a thread of this process,
as tests/client/test_cli.py runs it): the table and --json, a search, Apple's file to a file
and the CSV to standard output, and a tester's refusal as its exit code."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert

from buildbay.db.engine import create_engine
from buildbay.devices.models import Device
from tests.builds.test_metadata import ipa, profile
from tests.client.test_cli import PASSWORD, Cli
from tests.ios.test_device_lists import ENROLLED, udid

pytestmark = pytest.mark.slow


def _insert_devices(database_url: str, rows: list[dict[str, Any]]) -> None:
    """The devices, as enrolled ones, in the server's database (enrolling is a device's)."""

    async def insert_them() -> None:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as connection:
                await connection.execute(insert(Device), rows)
        finally:
            await engine.dispose()

    asyncio.run(insert_them())


def _device(n: int, user_id: str, name: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": f"dev_01M8H7000000000000000000{n:02d}",
        "user_id": user_id, "udid": udid(n), "name": name, "model": "iPhone14,2",
        "os_version": "21E236", "platform": "ios", "serial": None,
        "enrolled_at": ENROLLED, "last_seen_at": ENROLLED, **fields,
    }  # fmt: skip


class Acme:
    """A project with an iOS application whose ad-hoc build lists the first device, and two
    testers' devices; a developer runs the commands."""

    def __init__(self, base: str, database_url: str, tmp_path: Path) -> None:
        self.http = httpx.Client(base_url=base)
        owner = self._account("owner")
        developer = self._account("developer")
        tester = self._account("tester")
        headers = {"Authorization": f"Bearer {owner['access_token']}"}
        self.project = self._ok(
            self.http.post("/api/projects", json={"name": "Acme"}, headers=headers)
        )
        pid = self.project["id"]
        for who, role in ((developer, "developer"), (tester, "tester")):
            body = {"email": who["user"]["email"], "role": role}
            self._ok(self.http.post(f"/api/projects/{pid}/members", json=body, headers=headers))
        app = self._ok(
            self.http.post(
                f"/api/projects/{pid}/applications",
                json={"name": "Acme iOS", "platform": "ios"},
                headers=headers,
            )
        )
        data = ipa(extra={"embedded.mobileprovision": profile(ProvisionedDevices=[udid(1)])})
        self.app_id = str(app["id"])
        self.build_id = self._upload(pid, self.app_id, data.getvalue(), headers)
        _insert_devices(
            database_url,
            [
                _device(1, tester["user"]["id"], "Ana's iPhone"),
                _device(2, tester["user"]["id"], "=cmd|' /C calc'!A0", platform="ipados"),
                _device(3, developer["user"]["id"], "Dev Mac", platform="macos", model="Mac14,2"),
            ],
        )
        config = tmp_path / "config"
        env = {"BUILDBAY_URL": base}
        self.developer = Cli(base, config, developer["user"]["email"])
        self.developer.env |= {**env, "BUILDBAY_TOKEN": developer["access_token"]}
        self.tester = Cli(base, config, tester["user"]["email"])
        self.tester.env |= {**env, "BUILDBAY_TOKEN": tester["access_token"]}
        self.developer_headers = {"Authorization": f"Bearer {developer['access_token']}"}

    def _account(self, who: str) -> dict[str, Any]:
        body = {"email": f"{who}@acme.example.com", "password": PASSWORD, "name": who.title()}
        return self._ok(self.http.post("/api/auth/register", json=body))

    def _upload(self, pid: str, app_id: str, data: bytes, headers: dict[str, str]) -> str:
        base = f"/api/app-distribution/{pid}/{app_id}/builds"
        link = self._ok(
            self.http.post(
                f"{base}/upload-link",
                json={"fileName": "Acme.ipa", "fileSize": len(data)},
                headers=headers,
            )
        )
        self._ok(self.http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"]))
        built = self._ok(
            self.http.post(f"{base}/verify", json={"buildId": link["buildId"]}, headers=headers)
        )
        return str(built["buildId"])

    @staticmethod
    def _ok(response: httpx.Response) -> Any:
        assert response.is_success, response.text
        return response.json()


@pytest.fixture
def acme(threaded_server: str, database_url: str, tmp_path: Path) -> Iterator[Acme]:
    made = Acme(threaded_server, database_url, tmp_path)
    yield made
    made.http.close()


def test_devices_list_shows_each_device_against_the_newest_ad_hoc_build(acme: Acme) -> None:
    done = acme.developer("devices", "list", "-p", "Acme")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "id", "udid", "name", "model", "platform", "tester", "enrolled", "Acme", "iOS",
    ]  # fmt: skip
    rows = {line.split()[0]: line.rstrip() for line in lines[1:]}
    assert rows["dev_01M8H700000000000000000001"].endswith(" yes")
    assert rows["dev_01M8H700000000000000000002"].endswith(" no")
    assert "tester@acme.example.com" in rows["dev_01M8H700000000000000000001"]
    assert list(rows) == [f"dev_01M8H7000000000000000000{n:02d}" for n in (3, 2, 1)]

    found = acme.developer.json("devices", "list", "-p", acme.project["id"], "--search", "MAC")
    assert [d["name"] for d in found] == ["Dev Mac"]
    (ana,) = acme.developer.json("devices", "list", "-p", "Acme", "-s", "ana's")
    assert ana["inProfileOfLatest"] == {
        acme.app_id: {"applicationId": acme.app_id, "buildId": acme.build_id, "included": True}
    }
    assert ana["tester"]["email"] == "tester@acme.example.com"


def test_devices_export_writes_apple_s_file_or_the_csv(acme: Acme, tmp_path: Path) -> None:
    target = tmp_path / "devices.txt"

    done = acme.developer("devices", "export", "-p", "Acme", "--format", "apple", "-o", str(target))

    assert done.returncode == 0, done.stderr
    served = acme.http.get(
        f"/api/projects/{acme.project['id']}/devices/export", headers=acme.developer_headers
    )
    assert target.read_bytes() == served.content
    assert (
        target.read_bytes()
        == (
            "Device ID\tDevice Name\tDevice Platform\n"
            f"{udid(1)}\tAna's iPhone\tios\n"
            f"{udid(2)}\tcmd|' /C calc'!A0\tios\n"  # no formula's start
            f"{udid(3)}\tDev Mac\tmac\n"
        ).encode()
    )
    assert "Saved the devices" in done.stderr

    done = acme.developer("devices", "export", "-p", "Acme", "-f", "csv")
    assert done.returncode == 0, done.stderr
    # (Click's test runner reads standard output with universal newlines: CRLF comes as LF.)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("id,udid,name,model,")
    assert f"{udid(2)},'=cmd|' /C calc'!A0," in done.stdout
    assert len([line for line in lines if line]) == 4


def test_a_tester_is_refused_with_the_permission_exit_code(acme: Acme, tmp_path: Path) -> None:
    done = acme.tester("devices", "list", "-p", "Acme")
    assert done.returncode == 3
    assert "developer role" in done.stderr

    target = tmp_path / "never.txt"
    done = acme.tester("devices", "export", "-p", "Acme", "-o", str(target))
    assert done.returncode == 3
    assert not target.exists()

    done = acme.developer("devices", "export", "-p", "Acme", "-f", "xlsx")
    assert done.returncode == 2


def test_json_of_the_list_is_the_api_s_devices(acme: Acme) -> None:
    found = acme.developer.json("devices", "list", "-p", "Acme")
    served = acme.http.get(
        f"/api/projects/{acme.project['id']}/devices", headers=acme.developer_headers
    ).json()
    assert found == served["devices"]
    assert json.dumps(found)  # plain JSON
