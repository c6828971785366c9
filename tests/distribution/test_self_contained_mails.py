"""Issue 36: a mail reads on its own. The new-build mail names the project, the application, the
version and the uploader (by name: testers never see members' addresses), and carries the
tester's install link and the application's console page (where the tester's builds are).
(The mail that says a webhook was disabled carries the webhook's page: tests/webhooks/
test_webhooks.py.)"""

from __future__ import annotations

import httpx

from tests.builds.android_files import APK
from tests.console.test_mail_pages import browser, sign_in
from tests.distribution.conftest import Team

__all__ = ["browser"]


async def test_the_new_build_mail_names_the_uploader_and_links_the_application_page(
    team: Team, browser: httpx.AsyncClient
) -> None:
    r = await team.client.put("/api/auth/me", json={"name": "Ada Lead"},
                              headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 200, r.text
    tess = await team.member("tess@example.com")
    build = await team.upload(data=APK.read_bytes(), file_name="demo.apk")
    await team.run_jobs()

    [mail] = team.mails_to(tess.email)
    page = f"http://testserver/projects/{team.project['id']}/apps/{team.application['id']}"
    text = mail.text.replace("\r\n", "\n")
    assert text.startswith(
        "Acme Android 1.4.2 (42) is ready to install, in the project Acme on Buildbay "
        "(uploaded by Ada Lead).\n"
    )
    assert f"Every build of Acme Android for you is on Buildbay (sign in): {page}\n" in text
    assert mail.link("http://testserver/install/")
    assert team.owner.email not in text
    assert team.owner.email not in mail.html
    assert f'href="{page}"' in mail.html
    assert "uploaded by Ada Lead" in mail.html

    # The page opens for the tester, with the build.
    await sign_in(browser, tess.email)
    r = await browser.get(page.removeprefix("http://testserver"))
    assert r.status_code == 200
    assert build["buildId"] in r.text
