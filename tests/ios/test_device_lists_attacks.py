"""Issue 37's device lists as an attacker tries them: a tester names their device so that the
file a developer downloads runs something when a spreadsheet opens it."""

from __future__ import annotations

import pytest

from tests.ios.test_device_lists import Team, add_devices, team, udid

__all__ = ["team"]  # the fixture, shared

pytestmark = pytest.mark.usefixtures("no_leaks")


async def test_no_name_in_apple_s_file_runs_as_a_formula(team: Team) -> None:
    """Apple's file is tab-separated text, which a spreadsheet opens as readily as a CSV: a
    name that starts as a formula does loses that start (Apple takes the rest as the name)."""
    t1, _ = team.testers
    tester = t1.user["id"]
    await add_devices(
        team.app,
        [
            {"user_id": tester, "udid": udid(1), "name": '=HYPERLINK("http://x","a")'},
            {"user_id": tester, "udid": udid(2), "name": "+1+cmd|' /C calc'!A0"},
            {"user_id": tester, "udid": udid(3), "name": "-@=+ phone"},
            {"user_id": tester, "udid": udid(4), "name": "@"},
            {"user_id": tester, "udid": udid(5), "name": "Ana's iPhone - work"},
            {"user_id": tester, "udid": udid(6), "name": "=", "model": "=1+2"},
        ],
    )

    r = await team.client.get(
        f"/api/projects/{team.project_id}/devices/export?format=apple",
        headers=team.developer.headers,
    )

    assert r.status_code == 200, r.text
    assert r.content.decode().splitlines() == [
        "Device ID\tDevice Name\tDevice Platform",
        f'{udid(1)}\tHYPERLINK("http://x","a")\tios',
        f"{udid(2)}\t1+cmd|' /C calc'!A0\tios",
        f"{udid(3)}\tphone\tios",
        f"{udid(4)}\tiPhone14,2\tios",
        f"{udid(5)}\tAna's iPhone - work\tios",
        f"{udid(6)}\t1+2\tios",
    ]
