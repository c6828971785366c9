"""`buildbay login --sso` with a real browser: the command in a process of its own opens
Chromium's page (through BROWSER, a script of this test that writes the address down), the
person signs in and allows it, and the browser's redirect to the command's loopback passes the
page's Content-Security-Policy (its form-action names that loopback: a browser enforces it on a
form's redirect too) and ends the command, whose saved token then works."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]
PASSWORD = "a long password"


def test_login_sso_in_chromium_signs_in_allows_and_the_command_gets_its_token(
    server: str, new_page: NewPage, tmp_path: Path
) -> None:
    email = "ada-cli@example.com"
    r = httpx.post(f"{server}/api/auth/register", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    browser = tmp_path / "browser"
    browser.write_text(
        f"#!{sys.executable}\nimport pathlib, sys\n"
        f"pathlib.Path({str(tmp_path / 'opened')!r}).write_text(sys.argv[1])\n"
    )
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDBAY_", "SSH_"))}
    env |= {"BUILDBAY_CONFIG_DIR": str(tmp_path / "config"), "BROWSER": str(browser)}
    command = [sys.executable, "-m", "buildbay_client"]
    process = subprocess.Popen(
        [*command, "login", "--sso", "--url", server],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "opened").exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        page = new_page(server)

        page.goto((tmp_path / "opened").read_text())
        page.get_by_label("E-mail").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text(
            "Sign in the Buildbay command line on"
        )
        page.get_by_role("button", name="Allow").click()

        expect(page.get_by_text("Signed in.")).to_be_visible()
        assert page.url.startswith("http://127.0.0.1:")
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert f"as {email}" in stderr
    me = subprocess.run(
        [*command, "whoami", "--json"], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert me.returncode == 0, me.stderr
    assert json.loads(me.stdout)["email"] == email
