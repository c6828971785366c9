"""Who installed what: install page opens and downloads, through a tester's own link, an
anonymous link or the API, reported per build and counted on the build."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from buildbay.clock import FrozenClock
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.distribution.installs import downloads_by_day, platform_of
from tests.conftest import assert_problem, iso_z
from tests.distribution.conftest import Team

IPHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15"
PIXEL = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/124.0 Mobile"


def test_the_platform_comes_from_the_user_agent() -> None:
    assert platform_of(IPHONE) == "ios"
    assert platform_of(PIXEL) == "android"
    assert platform_of("Mozilla/5.0 (Windows NT 10.0; Win64; x64)") == "windows"
    assert platform_of("Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4)") == "macos"
    assert platform_of("Mozilla/5.0 (X11; Linux x86_64)") == "linux"
    assert platform_of("curl/8.5.0") == "other"
    assert platform_of(None) == "other"


async def test_opens_and_downloads_are_attributed_to_the_tester_of_the_link(
    team: Team, clock: FrozenClock
) -> None:
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")
    build = await team.upload()
    await team.run_jobs()
    reached_at = clock.now()
    [mail] = team.mails_to(tess.email)
    link = mail.link("http://testserver/install/")

    clock.advance(minutes=5)
    opened_at = clock.now()
    r = await team.client.get(link, headers={"Accept": "text/html", "User-Agent": PIXEL})
    assert r.status_code == 200, r.text
    clock.advance(minutes=1)
    r = await team.client.get(link, headers={"Accept": "text/html", "User-Agent": PIXEL})
    r = await team.client.get(f"{link}/download", headers={"User-Agent": PIXEL})
    assert r.status_code == 302, r.text
    # A download through the API is its caller's; an anonymous link's is nobody's.
    path = f"{team.builds}/{build['buildId']}"
    r = await team.client.get(f"{path}/download", headers=tom.headers)
    assert r.status_code == 302, r.text
    r = await team.client.post(f"{path}/install-link", headers=team.owner.headers)
    shared = r.json()["url"]
    r = await team.client.get(shared, headers={"Accept": "text/html"})
    r = await team.client.get(f"{shared}/download")
    r = await team.client.get(f"{path}/download", headers=team.owner.headers)

    r = await team.client.get(f"{path}/installs", headers=team.owner.headers)

    assert r.status_code == 200, r.text
    report = r.json()
    assert report["buildId"] == build["buildId"]
    assert (report["anonymousOpens"], report["anonymousDownloads"]) == (1, 1)
    assert report["downloadsCount"] == 4
    by_email = {t["email"]: t for t in report["testers"]}
    assert by_email["tess@example.com"] == {
        "userId": tess.user["id"],
        "email": tess.email,
        "name": tess.user["name"],
        "reachedAt": iso_z(reached_at),
        "notifiedAt": iso_z(reached_at),
        "mailError": None,
        "firstOpenedAt": iso_z(opened_at),
        "lastDownloadedAt": iso_z(clock.now()),
        "downloads": 1,
        "platforms": ["android"],
    }
    assert by_email["tom@example.com"]["downloads"] == 1
    assert by_email["tom@example.com"]["firstOpenedAt"] is None
    # The uploader was reached (everyone) but not mailed, and downloaded through the API.
    assert by_email["owner@example.com"]["notifiedAt"] is None
    assert by_email["owner@example.com"]["downloads"] == 1
    r = await team.client.get(path, headers=team.owner.headers)
    assert r.json()["downloadsCount"] == 4
    r = await team.client.get(team.builds, headers=team.owner.headers)
    assert r.json()["builds"][0]["downloadsCount"] == 4
    r = await team.client.get(f"{path}/installs", headers=tess.headers)
    assert_problem(r, 403, "insufficient_role")


async def test_downloads_by_day_counts_each_utc_day(team: Team, clock: FrozenClock) -> None:
    build = await team.upload()
    path = f"{team.builds}/{build['buildId']}/download"
    for _ in range(2):
        r = await team.client.get(path, headers=team.owner.headers)
        assert r.status_code == 302
    clock.advance(days=2)
    owner = await team.api.login(team.owner)  # the first login's token has expired
    r = await team.client.get(path, headers=owner.headers)
    assert r.status_code == 302
    ctx: AppContext = team.app.state.ctx
    reads = Reads.on(ctx.read_engine)
    try:
        today = clock.now().astimezone(UTC).date()
        days = await downloads_by_day(reads, team.application["id"], today, 4)
    finally:
        await reads.close()

    assert [count for _, count in days] == [0, 2, 0, 1]
    assert days[-1][0] == today
    assert days[0][0] == today - timedelta(days=3)
    assert isinstance(days[0][0], date)
    assert isinstance(clock.now(), datetime)
