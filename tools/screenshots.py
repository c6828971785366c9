"""Refresh the README's pictures of the console (docs/console-*.png) from a real server.

Starts `buildbay serve` on a temporary data directory, fills it through the API as a team would
(a lead, a developer and a tester; an Android and an iOS application; builds with notes, an
install link, a distribution), then takes the pictures in Debian's Chromium with Playwright:
the application page and a build's page on a desktop, a tester's install page on a phone, and
the team's feedback inbox and one feedback's page (testers' feedback sent through the API, with
screenshots drawn by Pillow).

Usage: .venv/bin/python tools/screenshots.py [NAME ...]   (writes docs/console-*.png; NAMEs,
such as feedback-inbox, take only those)
"""

from __future__ import annotations

import io
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
from PIL import Image, ImageDraw
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' build files: a signed APK, generated .ipa files

from tests.builds.android_files import aab, proto_manifest
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


def _phone_screen(title: str, rows: int, dark: bool = False, dialog: str | None = None) -> bytes:
    """A phone's screenshot of a catalogue app, drawn: what a tester attaches to feedback."""
    size = (540, 1170)
    background, ink = ((32, 33, 36), (60, 62, 66)) if dark else ((250, 250, 252), (225, 228, 235))
    image = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, size[0], 150), fill=(31, 111, 235))
    draw.text((32, 90), title, fill=(255, 255, 255), font_size=40)
    for n in range(rows):
        top = 190 + n * 150
        draw.rounded_rectangle((24, top, size[0] - 24, top + 126), 18, fill=ink)
        draw.rounded_rectangle((44, top + 20, 130, top + 106), 12, fill=(120 + 20 * n, 160, 210))
        draw.rectangle((150, top + 30, 420 - 20 * n, top + 52), fill=(150, 150, 160))
        draw.rectangle((150, top + 72, 300, top + 90), fill=(20, 20, 24) if dark else (90, 90, 100))
    if dialog:
        draw.rectangle((0, 0, *size), fill=None)
        draw.rounded_rectangle((50, 420, size[0] - 50, 700), 24, fill=(255, 255, 255),
                               outline=(207, 34, 46), width=4)  # fmt: skip
        draw.text((90, 470), dialog, fill=(207, 34, 46), font_size=34)
        draw.text((90, 540), "Acme has stopped.", fill=(40, 40, 40), font_size=30)
        draw.text((90, 610), "Close app", fill=(31, 111, 235), font_size=30)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _feedback(team: Team, project: str, app: str, builds: list[str], dev: str,
              testers: list[str]) -> str:  # fmt: skip
    """Testers' feedback on the Android builds, some triaged and answered; the id of the one
    whose page is pictured."""
    base = f"/api/app-distribution/{project}/{app}/builds"

    def send(who: str, build: str, category: str, text: str, shots: list[bytes],
             context: str | None = None) -> str:  # fmt: skip
        fields = [("text", (None, text.encode())), ("category", (None, category.encode()))]
        if context:
            fields.append(("context", (None, context.encode())))
        files = [("screenshots", (f"screen-{n}.png", data, "image/png"))
                 for n, data in enumerate(shots)]  # fmt: skip
        return str(team.call(who, "POST", f"{base}/{build}/feedback", files=fields + files)["id"])

    ada, marie = testers
    send(marie, builds[1], "bug", "The search box loses what I typed when I turn the phone.", [])
    send(ada, builds[2], "bug", "Dark theme: the prices are black on dark grey, hard to read.",
         [_phone_screen("Catalogue", 5, dark=True)])  # fmt: skip
    crash = send(
        ada, builds[2], "crash",
        "The app closes as soon as I open a category with no products (\"Garden\"). It happened "
        "three times in a row since this build; the one before was fine.",
        [_phone_screen("Garden", 0, dialog="Acme keeps stopping"), _phone_screen("Catalogue", 4)],
        '{"model": "Pixel 8", "os": "Android 15", "locale": "en-GB", "appVersion": "1.2.0 (3)", '
        '"freeMemoryMb": 812, "network": "wifi", "screen": {"name": "category", "id": 42}}',
    )  # fmt: skip
    send(marie, builds[2], "suggestion", "Could the catalogue remember where I had scrolled to "
         "when I come back from a product?", [])  # fmt: skip
    send(ada, builds[2], "other", "Installed fine on my tablet too (Galaxy Tab S9).", [])
    me = team.call(dev, "GET", "/api/auth/me")
    feedback = f"/api/projects/{project}/feedback/{crash}"
    team.call(dev, "PATCH", feedback, json={"status": "triaged", "assignee": me["id"]})
    team.call(dev, "POST", f"{feedback}/comments",
              json={"text": "Thanks Ada, I can reproduce it with an empty category. A fix is on "
                    "its way in the next build."})  # fmt: skip
    return crash


def _seed(url: str) -> dict[str, str]:
    team = Team(url)
    lead, dev, tester = "grace@acme.example", "linus@acme.example", "ada@acme.example"
    team.register(lead, "Grace Hopper")
    team.register(dev, "Linus Chen")
    team.register(tester, "Ada Lovelace")
    other_tester = "marie@acme.example"
    team.register(other_tester, "Marie Curie")
    project = team.call(lead, "POST", "/api/projects", json={"name": "Acme"})["id"]
    for email, role in ((dev, "developer"), (tester, "tester"), (other_tester, "tester")):
        team.call(lead, "POST", f"/api/projects/{project}/members",
                  json={"email": email, "role": role})  # fmt: skip
    android = team.call(lead, "POST", f"/api/projects/{project}/applications",
                        json={"name": "Acme for Android", "platform": "android"})["id"]  # fmt: skip
    ios = team.call(lead, "POST", f"/api/projects/{project}/applications",
                    json={"name": "Acme for iOS", "platform": "ios"})["id"]  # fmt: skip
    notes = [
        "First beta: sign-in and the catalogue.",
        "Fixes the crash when the catalogue is empty.\nFaster start on older phones.",
        "Release candidate: offline mode, dark theme, and 14 smaller fixes reported by the "
        "beta testers last week.",
    ]
    android_builds = []
    for n, text in enumerate(notes):
        # A file of its own per build (the same file twice is refused: one build per binary).
        data = aab(proto_manifest("com.acme.app", f"1.{n}.0", n + 1))
        made = team.upload(dev if n % 2 else lead, project, android, data, f"acme-1.{n}.0.aab",
                           notes=text, installLink={"expiresInHours": 72})  # fmt: skip
        android_builds.append(made["buildId"])
    build = None
    for short, number in (("2.3.0", "230"), ("2.4.0", "240")):
        info = {**INFO, "CFBundleShortVersionString": short, "CFBundleVersion": number}
        build = team.upload(lead, project, ios, ipa(info).getvalue(), f"Acme-{short}.ipa",
                            notes=f"Acme {short} for the iOS beta group.",
                            distribute={"groups": ["everyone"], "notify": False})  # fmt: skip
    assert build is not None
    link = team.call(lead, "POST", f"/api/app-distribution/{project}/{ios}/builds/"
                     f"{build['buildId']}/install-link", json={"expiresInHours": 72})  # fmt: skip
    crash = _feedback(team, project, android, android_builds, dev, [tester, other_tester])
    return {
        "application": f"/projects/{project}/apps/{android}",
        "feedback-inbox": f"/projects/{project}/feedback",
        "feedback": f"/projects/{project}/feedback/{crash}",
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


def main(names: list[str]) -> int:
    wanted = set(names) or {"application", "build", "feedback-inbox", "feedback", "install-phone"}
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
            for name in ("application", "build", "feedback-inbox", "feedback"):
                if name not in wanted:
                    continue
                desktop.goto(seeded[name])
                # Lazy images (the inbox's thumbnails) drawn before the picture is taken.
                desktop.wait_for_function("() => [...document.images].every((img) => img.complete)")
                target = DOCS / f"console-{name}.png"
                desktop.screenshot(path=str(target), full_page=True)
                print(f"wrote {target.relative_to(ROOT)}")
            if "install-phone" not in wanted:
                browser.close()
                return 0
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
    sys.exit(main(sys.argv[1:]))
