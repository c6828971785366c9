"""The project's devices as a file: Apple's "Register Multiple Devices" upload (byte for byte, as
Apple's sample file writes it) and a CSV whose cells a spreadsheet never runs."""

from __future__ import annotations

import csv
import io

import pytest

from buildbay.devices.enums import DevicePlatform
from tests.conftest import assert_problem
from tests.ios.test_device_lists import Team, add_devices, team, udid

__all__ = ["team"]  # the fixture, shared

pytestmark = pytest.mark.usefixtures("no_leaks")


async def _export(t: Team, **params: str) -> bytes:
    r = await t.client.get(
        f"/api/projects/{t.project_id}/devices/export", params=params, headers=t.developer.headers
    )
    assert r.status_code == 200, r.text
    return r.content


async def test_the_apple_file_is_apple_s_format_byte_for_byte(team: Team) -> None:
    t1, t2 = team.testers
    one, two = t1.user["id"], t2.user["id"]
    await add_devices(
        team.app,
        [
            {"user_id": one, "udid": udid(1), "name": "Ana's iPhone"},
            {"user_id": one, "udid": udid(2), "name": "Tab\there\nnew line\r\n",
             "platform": DevicePlatform.IPADOS},
            {"user_id": two, "udid": "0123456789ABCDEF0123456789ABCDEF01234567",
             "name": "Zoë's 📱 iPhone"},
            {"user_id": two, "udid": udid(4), "name": "A" * 30 + " " + "B" * 29},
            {"user_id": two, "udid": "A5B5CD50-14AB-5AF7-8B78-AB4751AB10A8", "name": " \t ",
             "platform": DevicePlatform.MACOS, "model": "Mac14,2"},
            {"user_id": one, "udid": udid(6), "name": "x" * 49 + " y"},
            {"user_id": one, "udid": udid(7), "name": "\u2028line\u2029separators\x85"},
        ],
    )  # fmt: skip

    r = await team.client.get(
        f"/api/projects/{team.project_id}/devices/export?format=apple",
        headers=team.developer.headers,
    )

    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/tab-separated-values; charset=utf-8"
    assert r.headers["content-disposition"] == 'attachment; filename="acme-devices.txt"'
    assert (
        r.content
        == (
            "Device ID\tDevice Name\tDevice Platform\n"
            f"{udid(1)}\tAna's iPhone\tios\n"
            f"{udid(2)}\tTab here new line\tios\n"
            "0123456789ABCDEF0123456789ABCDEF01234567\tZoë's 📱 iPhone\tios\n"
            f"{udid(4)}\t{'A' * 30} {'B' * 19}\tios\n"
            "A5B5CD50-14AB-5AF7-8B78-AB4751AB10A8\tMac14,2\tmac\n"
            f"{udid(6)}\t{'x' * 49}\tios\n"
            f"{udid(7)}\tline separators\tios\n"
        ).encode()
    )
    # Without `format`, the same file.
    assert await _export(team) == r.content


async def test_an_empty_project_exports_the_header_alone(team: Team) -> None:
    assert await _export(team) == b"Device ID\tDevice Name\tDevice Platform\n"
    assert await _export(team, format="csv") == (
        b"id,udid,name,model,osVersion,platform,serial,testerId,testerEmail,testerName,"
        b"enrolledAt,lastSeenAt\r\n"
    )


async def test_the_csv_is_rfc_4180_and_no_cell_runs_as_a_formula(team: Team) -> None:
    t1, t2 = team.testers
    r = await team.client.put("/api/auth/me", json={"name": "@SUM(A1:A9)"}, headers=t2.headers)
    assert r.status_code == 200, r.text
    plain, formula, quoted = await add_devices(
        team.app,
        [
            {"user_id": t1.user["id"], "udid": udid(1), "name": "Ana's iPhone", "serial": "F9FX"},
            {"user_id": t2.user["id"], "udid": udid(2), "name": "=HYPERLINK(\"http://x\",\"a\")",
             "model": "+iPhone", "serial": "-2+3"},
            {"user_id": t1.user["id"], "udid": udid(3), "name": 'Say "hi", now\nplease',
             "platform": DevicePlatform.MACOS, "model": "\tMac"},
        ],
    )  # fmt: skip

    r = await team.client.get(
        f"/api/projects/{team.project_id}/devices/export?format=csv",
        headers=team.developer.headers,
    )

    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/csv; charset=utf-8; header=present"
    assert r.headers["content-disposition"] == 'attachment; filename="acme-devices.csv"'
    lines = r.content.split(b"\r\n")
    name = t1.user["name"]
    assert (
        lines[1]
        == (
            f'{plain},{udid(1)},Ana\'s iPhone,"iPhone14,2",21E236,ios,F9FX,{t1.user["id"]},'
            f"tester1@example.com,{name},2026-11-20T09:30:00Z,2026-11-20T09:30:00Z"
        ).encode()
    )
    rows = list(csv.reader(io.StringIO(r.content.decode(), newline="")))
    assert rows[0][:3] == ["id", "udid", "name"]
    assert len(rows) == 4
    by_id = {row[0]: row for row in rows[1:]}
    assert by_id[formula][2:4] == ['\'=HYPERLINK("http://x","a")', "'+iPhone"]
    assert by_id[formula][6] == "'-2+3"
    assert by_id[formula][9] == "'@SUM(A1:A9)"
    assert by_id[quoted][2:4] == ['Say "hi", now\nplease', "'\tMac"]
    assert b'"Say ""hi"", now\nplease"' in r.content


async def test_thousands_of_devices_come_whole_a_batch_at_a_time(team: Team) -> None:
    t1, t2 = team.testers
    await add_devices(
        team.app,
        [
            {"user_id": (t1, t2)[n % 2].user["id"], "udid": udid(n), "name": f"Phone {n}"}
            for n in range(2500)
        ],
    )

    lines = (await _export(team)).decode().splitlines()

    assert lines[0] == "Device ID\tDevice Name\tDevice Platform"
    assert lines[1:] == [f"{udid(n)}\tPhone {n}\tios" for n in range(2500)]


async def test_only_developers_export_and_a_format_must_be_one_of_the_two(team: Team) -> None:
    base = f"/api/projects/{team.project_id}/devices/export"
    tester = team.testers[0]
    assert_problem(await team.client.get(base, headers=tester.headers), 403, "insufficient_role")
    r = await team.client.get(f"{base}?format=xlsx", headers=team.developer.headers)
    assert_problem(r, 422, "validation_error")


async def test_the_file_s_name_is_safe_whatever_the_project_s_name(team: Team) -> None:
    r = await team.client.put(
        f"/api/projects/{team.project_id}",
        json={"name": 'Ünïcode "Q"/../x; y'},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    r = await team.client.get(
        f"/api/projects/{team.project_id}/devices/export", headers=team.developer.headers
    )
    assert r.headers["content-disposition"] == 'attachment; filename="unicode-q-x-y-devices.txt"'

    r = await team.client.put(
        f"/api/projects/{team.project_id}", json={"name": "测试"}, headers=team.owner.headers
    )
    assert r.status_code == 200, r.text
    r = await team.client.get(
        f"/api/projects/{team.project_id}/devices/export?format=csv",
        headers=team.developer.headers,
    )
    expected = f'attachment; filename="{team.project_id}-devices.csv"'
    assert r.headers["content-disposition"] == expected
