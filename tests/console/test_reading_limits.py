"""The console says why a build whose file went past a reading limit was refused: the limit, in
the sentence verify answered."""

from __future__ import annotations

import httpx

from buildbay.builds.readers import MetadataReaders, ReadLimits
from tests.builds.hostile_readers import spin
from tests.builds.test_metadata import ipa
from tests.console.test_distribution_pages import browser, text
from tests.console.test_mail_pages import sign_in
from tests.distribution.conftest import Team, settings, smtp, team

__all__ = ["browser", "settings", "smtp", "team"]


async def test_a_build_stopped_at_a_reading_limit_says_so_on_its_page(
    team: Team, browser: httpx.AsyncClient
) -> None:
    api, owner = team.api, team.owner
    application = await api.application(owner, team.project["id"], "Acme iOS", platform="ios")
    limits = ReadLimits(cpu_seconds=0.2, memory_bytes=1024**3, timeout_seconds=60)
    team.app.state.ctx.readers = MetadataReaders(1, limits, read=spin)
    base = f"/api/app-distribution/{team.project['id']}/{application['id']}/builds"
    data = ipa().getvalue()
    link = await api.client.post(
        f"{base}/upload-link", json={"fileName": "acme.ipa", "fileSize": len(data)},
        headers=owner.headers,
    )  # fmt: skip
    assert link.status_code == 201, link.text
    build_id = link.json()["buildId"]
    put = await api.client.put(
        link.json()["uploadUrl"], content=data, headers=link.json()["uploadHeaders"]
    )
    assert put.status_code == 200, put.text
    r = await api.client.post(f"{base}/verify", json={"buildId": build_id}, headers=owner.headers)
    await team.app.state.ctx.readers.aclose()
    assert r.status_code == 422, r.text
    await sign_in(browser, owner.email)

    app_page = f"/projects/{team.project['id']}/apps/{application['id']}"
    listed = text(await browser.get(app_page))
    page = text(await browser.get(f"{app_page}/builds/{build_id}"))

    refusal = (
        "The last check refused it: Not a readable .ipa: reading it took more than 0.2 seconds "
        "of processor time; an iOS application takes only builds whose metadata can be read"
    )
    assert refusal not in listed  # the application's list shows ready builds
    assert refusal in page
