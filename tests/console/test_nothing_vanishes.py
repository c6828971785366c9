"""Nothing vanishes silently, in a real browser: the team lead saves a retention rule, the
settings page says which builds it deletes ("3 builds, 3 of them in testers' hands") and asks
first; once the sweeper ran, the application's page lists what went and why; and the tester who
opens the install link of a removed build is offered the newest build they may install."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from buildbay.app import create_app
from buildbay.builds.sweeper import Swept, sweep
from buildbay.config import Settings
from tests.builds.android_files import aab, proto_manifest
from tests.console.test_console import PASSWORD, create_project_and_app, sign_up

pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]


def _sweep_now(env: dict[str, str]) -> Swept:
    """One round of the sweeper (`buildbay sweep`) on the server's database and files, in a
    thread of its own (this one runs the browser's event loop)."""
    fields = {k.removeprefix("BUILDBAY_").lower(): v for k, v in env.items()
              if k.startswith("BUILDBAY_")}  # fmt: skip
    settings = Settings(**fields, sweep_interval_seconds=0)
    done: list[Swept] = []

    async def run() -> None:
        ctx = create_app(settings, migrate_on_start=False).state.ctx
        try:
            now = ctx.clock.now()
            done.append(
                await sweep(ctx.sessions, ctx.storage, now, ctx.settings.resolved_public_url)
            )
        finally:
            await ctx.dispose()

    thread = threading.Thread(target=lambda: asyncio.run(run()))
    thread.start()
    thread.join(60)
    [swept] = done
    return swept


class Api:
    def __init__(self, server: str, email: str) -> None:
        self.http = httpx.Client(base_url=server, timeout=30)
        login = self.http.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        self.http.headers["Authorization"] = f"Bearer {login.json()['access_token']}"

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = self.http.request(method, path, json=body)
        assert r.is_success, r.text
        return r.json()

    def upload(self, base: str, version: str, code: int) -> str:
        data = aab(proto_manifest("com.acme.app", version, code))
        link = self.ok("POST", f"{base}/upload-link",
                       {"fileName": f"acme-{version}.aab", "fileSize": len(data)})  # fmt: skip
        assert self.http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
        return str(self.ok("POST", f"{base}/verify", {"buildId": link["buildId"]})["buildId"])


def test_retention_says_what_it_deletes_and_a_removed_builds_link_offers_the_newest(
    server: str, server_env: dict[str, str], new_page: NewPage
) -> None:
    lead = new_page(server)
    sign_up(lead, "lee@example.com", "Lee")
    app_url = create_project_and_app(lead)
    tess = new_page(server)
    sign_up(tess, "tess@example.com", "Tess")
    api = Api(server, "lee@example.com")
    try:
        _the_day(server, server_env, new_page, lead, tess, api, app_url)
    finally:
        api.http.close()


def _the_day(
    server: str, server_env: dict[str, str], new_page: NewPage, lead: Page, tess: Page,
    api: Api, app_url: str,
) -> None:  # fmt: skip
    project_id, app_id = re.findall(r"/(?:projects|apps)/([^/]+)", app_url)
    api.ok("POST", f"/api/projects/{project_id}/members",
           {"email": "tess@example.com", "role": "tester"})  # fmt: skip
    base = f"/api/app-distribution/{project_id}/{app_id}/builds"
    # Each goes to everyone (the application's default): all four are in testers' hands.
    ids = [api.upload(base, v, c) for v, c in (("1.0.0", 100), ("1.1.0", 110), ("1.2.0", 120),
                                                 ("1.5.0", 150))]  # fmt: skip
    old_link = api.ok("POST", f"{base}/{ids[1]}/install-link", {"expiresInHours": 48})["url"]

    # The rule is not saved before the lead has seen what it deletes.
    lead.goto(f"{app_url}/settings")
    lead.get_by_label("The newest (number of builds)").fill("1")
    lead.get_by_role("button", name="Save settings").click()
    confirm = lead.locator("#confirm-deletion")
    expect(confirm.get_by_role("heading")).to_have_text(
        "This rule deletes 3 builds, 3 of them in testers' hands"
    )
    expect(confirm.locator("li")).to_have_count(3)
    expect(confirm.locator("li").first).to_contain_text("1.2.0 (120)")
    expect(confirm.locator("li").first).to_contain_text("in testers' hands")
    assert (
        api.ok("GET", f"/api/projects/{project_id}/applications/{app_id}")["retention"]["keepLast"]
        is None
    )
    confirm.get_by_role("button", name="Save and delete 3 builds").click()
    expect(lead.get_by_role("status")).to_contain_text(
        "Settings saved. The retention rule deletes 3 builds on the sweeper's next round"
    )
    expect(
        lead.get_by_label("Always keep the newest build given to each tester group")
    ).to_be_checked()

    assert _sweep_now(server_env).retention == 3

    lead.goto(app_url)
    removed = lead.locator("section#removed")
    expect(removed.get_by_role("heading")).to_have_text("Removed builds, last 30 days")
    expect(removed.locator("tbody tr")).to_have_count(3)
    row = removed.locator(f"#removed-{ids[1]}")
    expect(row).to_contain_text("1.1.0 (110)")
    expect(row).to_contain_text("By the retention rule")
    expect(row).to_contain_text("It was in testers' hands")
    expect(lead.locator("table.builds tbody tr")).to_have_count(1)

    # Tess opens the link she was given for 1.1.0: not a dead end.
    tess.goto(old_link)
    expect(tess.get_by_role("heading", level=1)).to_have_text("1.1.0 (110) was removed")
    expect(tess.get_by_text("The newest build for you is 1.5.0 (150).")).to_be_visible()
    tess.get_by_role("link", name="Open 1.5.0 (150)").click()
    expect(tess).to_have_url(re.compile(f"/apps/{app_id}#build-{ids[3]}$"))
    expect(tess.locator(f"#build-{ids[3]}")).to_contain_text("acme-1.5.0.aab")
    # Someone not signed in is asked to sign in, and told nothing of the application's builds.
    stranger = new_page(server)
    stranger.goto(old_link)
    expect(stranger.get_by_role("heading", level=1)).to_have_text("Install link no longer works")
    expect(stranger.get_by_role("link", name="Sign in")).to_be_visible()
    expect(stranger.locator("main")).not_to_contain_text("1.5.0")
