"""The Content-Security-Policy in a real browser: the console, the install page and the API docs
all work under it, and none reports a violation (the `new_page` fixture fails the test on any).
A page's own check that the policy is there: an inline script planted in the page does not run."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.builds.android_files import APK
from tests.console.test_console import create_project_and_app, sign_up

pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]


def csp_violations_of(page: Page, script: str) -> list[str]:
    """What the page's policy refuses when `script` tries to add an inline script."""
    return list(
        page.evaluate(
            """(code) => new Promise((resolve) => {
                const seen = [];
                document.addEventListener("securitypolicyviolation", (e) => {
                    seen.push(e.violatedDirective);
                });
                const s = document.createElement("script");
                s.textContent = code;
                document.body.appendChild(s);
                setTimeout(() => resolve(seen), 200);
            })""",
            script,
        )
    )


def test_the_console_runs_its_script_under_the_policy_and_no_inline_one(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    response = page.goto("/signup")
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    sign_up(page, "csp@example.com", "Csp")
    create_project_and_app(page)
    # console.js ran: a destructive form asks first (data-confirm), and a dismissed dialog
    # leaves the page where it is.
    page.goto("/account")
    page.get_by_label("Token name").fill("ci")
    page.get_by_role("button", name="Create token").click()
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("button", name="Revoke")).to_be_visible()


def test_an_inline_script_planted_in_a_page_does_not_run(server: str, chromium: Browser) -> None:
    # Its own context, outside `new_page`: the violation here is the point.
    context = chromium.new_context(base_url=server)
    try:
        page = context.new_page()
        page.goto("/login")
        assert csp_violations_of(page, "window.ran = true") == ["script-src-elem"]
        assert page.evaluate("window.ran === undefined")
    finally:
        context.close()


def test_the_install_page_and_the_api_docs_work_under_their_policies(
    server: str, new_page: NewPage
) -> None:
    with httpx.Client(base_url=server, timeout=30) as http:
        r = http.post("/api/auth/register", json={"email": "i@example.com", "password": "12345678"})
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        project = http.post("/api/projects", json={"name": "Acme"}, headers=headers).json()
        app = http.post(
            f"/api/projects/{project['id']}/applications", json={"name": "Demo"}, headers=headers
        ).json()
        base = f"/api/app-distribution/{project['id']}/{app['id']}/builds"
        data = APK.read_bytes()
        link = http.post(
            f"{base}/upload-link",
            json={"fileName": "demo.apk", "fileSize": len(data)},
            headers=headers,
        ).json()
        assert http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"]).is_success
        r = http.post(
            f"{base}/verify", json={"buildId": link["buildId"], "installLink": {}}, headers=headers
        )
        assert r.status_code == 200, r.text
        install_url = r.json()["installUrl"]

    page = new_page(server)
    page.goto(install_url)
    expect(page.get_by_role("link", name=re.compile("Download demo.apk"))).to_be_visible()
    # The stylesheet applied: the install button is the accent colour, not a plain link.
    color = page.get_by_role("link", name=re.compile("Download")).evaluate(
        "(a) => getComputedStyle(a).backgroundColor"
    )
    assert color == "rgb(31, 111, 235)"
    page.goto("/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Buildbay")


def test_redoc_works_and_reaches_no_cdn(server: str, new_page: NewPage) -> None:
    # ReDoc's bundle draws a "by Redocly" logo from cdn.redoc.ly: api_docs.py points it here.
    page = new_page(server)
    elsewhere: list[str] = []
    page.on(
        "request",
        lambda r: None if r.url.startswith((server, "data:", "blob:")) else elsewhere.append(r.url),
    )
    # ReDoc renders the whole OpenAPI document in the page's one thread: on two cores shared
    # with the other test workers that took more than the default 5 s, and once, on a machine
    # running at half its speed, more than 30 s.
    with page.expect_response(f"{server}/static/redoc-logo.svg", timeout=90_000) as logo:
        page.goto("/redoc")
        expect(page.locator("h1").first).to_contain_text("Buildbay", timeout=90_000)
    assert logo.value.ok
    expect(
        page.get_by_text("Step 1: get an address to PUT the build file to").first
    ).to_be_attached()
    expect(page.get_by_role("img", name="redocly logo")).to_be_visible()
    assert elsewhere == []
