"""Refresh the README's pictures of the console (docs/console-*.png) from a real server.

Starts `buildbay serve` on a temporary data directory, fills it through the API as a team would
(a lead, a developer and a tester; an Android and an iOS application; builds with notes, an
install link, a distribution), then takes the pictures in Debian's Chromium with Playwright:
the application page and a build's page on a desktop, a tester's install page on a phone.

Usage: .venv/bin/python tools/screenshots.py   (writes docs/console-*.png)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' build files: a signed APK, generated .ipa files

from tests.builds.android_files import APK
from tests.builds.test_metadata import INFO, ipa

DOCS = ROOT / "docs"
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "screenshots-password-1"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1"
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _server(data: Path) -> Iterator[str]:
    port = _port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")},
        "BUILDBAY_DATA_DIR": str(data),
        "BUILDBAY_PUBLIC_URL": url,
        "BUILDBAY_RATE_LIMIT_ENABLED": "false",
    }
    log = (data.parent / "server.log").open("wb")
    process = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "buildbay"), "serve", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    try:
        for _ in range(200):
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            raise SystemExit((data.parent / "server.log").read_text())
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


class Team:
    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        self.tokens: dict[str, str] = {}

    def register(self, email: str, name: str) -> None:
        r = self.http.post(
            "/api/auth/register", json={"email": email, "password": PASSWORD, "name": name}
        )
        r.raise_for_status()
        self.tokens[email] = r.json()["access_token"]

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> Any:
        r = self.http.request(
            method, path, headers={"Authorization": f"Bearer {self.tokens[who]}"}, **kwargs
        )
        r.raise_for_status()
        return r.json() if r.content else None

    def upload(
        self, who: str, project: str, app: str, data: bytes, name: str, **verify: Any
    ) -> Any:
        base = f"/api/app-distribution/{project}/{app}/builds"
        link = self.call(who, "POST", f"{base}/upload-link",
                         json={"fileName": name, "fileSize": len(data)})  # fmt: skip
        self.http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
        return self.call(who, "POST", f"{base}/verify", json={"buildId": link["buildId"], **verify})


def _seed(url: str) -> dict[str, str]:
    team = Team(url)
    lead, dev, tester = "grace@acme.example", "linus@acme.example", "ada@acme.example"
    team.register(lead, "Grace Hopper")
    team.register(dev, "Linus Chen")
    team.register(tester, "Ada Lovelace")
    project = team.call(lead, "POST", "/api/projects", json={"name": "Acme"})["id"]
    for email, role in ((dev, "developer"), (tester, "tester")):
        team.call(lead, "POST", f"/api/projects/{project}/members",
                  json={"email": email, "role": role})  # fmt: skip
    android = team.call(lead, "POST", f"/api/projects/{project}/applications",
                        json={"name": "Acme for Android", "platform": "android"})["id"]  # fmt: skip
    ios = team.call(lead, "POST", f"/api/projects/{project}/applications",
                    json={"name": "Acme for iOS", "platform": "ios"})["id"]  # fmt: skip
    apk = APK.read_bytes()
    notes = [
        "First beta: sign-in and the catalogue.",
        "Fixes the crash when the catalogue is empty.\nFaster start on older phones.",
        "Release candidate: offline mode, dark theme, and 14 smaller fixes reported by the "
        "beta testers last week.",
    ]
    for n, text in enumerate(notes):
        team.upload(dev if n % 2 else lead, project, android, apk, f"acme-{n + 1}.apk",
                    notes=text, installLink={"expiresInHours": 72})  # fmt: skip
    build = None
    for short, number in (("2.3.0", "230"), ("2.4.0", "240")):
        info = {**INFO, "CFBundleShortVersionString": short, "CFBundleVersion": number}
        build = team.upload(lead, project, ios, ipa(info).getvalue(), f"Acme-{short}.ipa",
                            notes=f"Acme {short} for the iOS beta group.",
                            distribute={"groups": ["everyone"], "notify": False})  # fmt: skip
    assert build is not None
    link = team.call(lead, "POST", f"/api/app-distribution/{project}/{ios}/builds/"
                     f"{build['buildId']}/install-link", json={"expiresInHours": 72})  # fmt: skip
    return {
        "application": f"/projects/{project}/apps/{android}",
        "build": f"/projects/{project}/apps/{ios}/builds/{build['buildId']}",
        "install": link["url"],
        "lead": lead,
    }


def _sign_in(page: Page, email: str) -> None:
    page.goto("/login")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/projects")


def main() -> int:
    with (
        tempfile.TemporaryDirectory(prefix="buildbay-screenshots-") as tmp,
        _server(Path(tmp) / "data") as url,
    ):
        seeded = _seed(url)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            desktop = browser.new_page(base_url=url, viewport=DESKTOP)  # type: ignore[arg-type]
            _sign_in(desktop, seeded["lead"])
            for name, path in (("application", seeded["application"]),
                               ("build", seeded["build"])):  # fmt: skip
                desktop.goto(path)
                target = DOCS / f"console-{name}.png"
                desktop.screenshot(path=str(target), full_page=True)
                print(f"wrote {target.relative_to(ROOT)}")
            phone = browser.new_page(
                viewport=PHONE, user_agent=IPHONE, device_scale_factor=2, is_mobile=True,  # type: ignore[arg-type]
            )  # fmt: skip
            phone.goto(seeded["install"])
            target = DOCS / "console-install-phone.png"
            phone.screenshot(path=str(target), full_page=True)
            print(f"wrote {target.relative_to(ROOT)}")
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
