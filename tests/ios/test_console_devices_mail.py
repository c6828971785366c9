"""The new-build mail tells a tester when the build installs on a device of theirs that the
application's previous ready build missed: "This build now installs on your iPhone (...)". One
query for the whole distribution, whoever is mailed. Mails read from a real SMTP server
(aiosmtpd, tests/smtp.py)."""

from __future__ import annotations

from typing import Any

import pytest

from buildbay.context import AppContext
from buildbay.db.engine import finish
from tests.conftest import Account, statements_run
from tests.distribution.conftest import Team, settings, smtp, team
from tests.ios.console_devices import (
    DAN_IPHONE,
    OLGA_IPHONE,
    TESS_IPAD,
    TESS_IPHONE,
    adhoc_ipa,
    enroll,
    forget_profile,
)

__all__ = ["settings", "smtp", "team"]

NOW_INSTALLS = "This build now installs on"


class Crew:
    """An iOS application of Team's project with two testers, Tess and Dan, each with an
    enrolled iPhone; every build goes to both, with a mail."""

    def __init__(self, team: Team, app_: dict[str, Any], tess: Account, dan: Account) -> None:
        self.team, self.application, self.tess, self.dan = team, app_, tess, dan

    async def ship(self, data: bytes) -> dict[str, Any]:
        """The build uploaded and distributed to both, and its mails sent."""
        build = await self.team.api.upload(
            self.team.owner, self.team.project["id"], self.application["id"], data, "acme.ipa"
        )
        base = f"/api/app-distribution/{self.team.project['id']}/{self.application['id']}/builds"
        r = await self.team.client.post(
            f"{base}/{build['buildId']}/distribute",
            json={"emails": [self.tess.email, self.dan.email], "notify": True},
            headers=self.team.owner.headers,
        )
        assert r.status_code == 200, r.text
        await self.team.run_jobs()
        return build

    def last_mail(self, account: Account) -> Any:
        return self.team.mails_to(account.email)[-1]

    async def enroll(
        self, account: Account, udid: str, name: str, model: str = "iPhone15,2"
    ) -> None:
        ctx: AppContext = self.team.app.state.ctx
        db = ctx.sessions()
        await enroll(db, account.user["id"], udid, name, model)
        await finish(db, ok=True)


@pytest.fixture
async def crew(team: Team) -> Crew:
    application = await team.api.application(team.owner, team.project["id"], "Acme iOS",
                                             platform="ios")  # fmt: skip
    crew = Crew(team, application, await team.member("tess@example.com"),
                await team.member("dan@example.com"))  # fmt: skip
    await crew.enroll(crew.tess, TESS_IPHONE, "Tess's iPhone")
    await crew.enroll(crew.dan, DAN_IPHONE, "Dan's iPhone")
    return crew


async def test_the_mail_says_the_build_now_installs_on_the_iphone_the_last_one_missed(
    crew: Crew,
) -> None:
    await crew.ship(adhoc_ipa([DAN_IPHONE], "1.0", "1"))
    assert NOW_INSTALLS not in crew.last_mail(crew.tess).text  # no build before it
    assert NOW_INSTALLS not in crew.last_mail(crew.dan).text

    await crew.ship(adhoc_ipa([DAN_IPHONE, TESS_IPHONE], "1.1", "2"))

    tess = crew.last_mail(crew.tess)
    assert "This build now installs on your iPhone (Tess's iPhone).\n" in (
        tess.text.replace("\r\n", "\n")
    )
    assert "<strong>This build now installs on your iPhone (Tess&#39;s iPhone).</strong>" in (
        tess.html
    )
    assert NOW_INSTALLS not in crew.last_mail(crew.dan).text  # the last build had his already
    assert "Dan" not in tess.text

    await crew.ship(adhoc_ipa([DAN_IPHONE, TESS_IPHONE], "1.2", "3"))
    assert NOW_INSTALLS not in crew.last_mail(crew.tess).text  # nothing new for anyone


async def test_several_devices_gained_are_named_together_and_an_ipad_as_an_ipad(
    crew: Crew,
) -> None:
    await crew.enroll(crew.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    await crew.ship(adhoc_ipa([DAN_IPHONE], "1.0", "1"))

    await crew.ship(adhoc_ipa([DAN_IPHONE, TESS_IPHONE, TESS_IPAD], "1.1", "2"))

    assert (
        "This build now installs on your iPad (Tess's iPad) and your iPhone (Tess's iPhone)."
        in crew.last_mail(crew.tess).text
    )


@pytest.mark.parametrize("before", ["enterprise", "not kept"])
async def test_nothing_is_said_when_the_previous_build_s_devices_are_not_known_to_be_missed(
    crew: Crew, before: str
) -> None:
    if before == "enterprise":  # it installed on any device: nothing was missed
        await crew.ship(adhoc_ipa([], "1.0", "1", kind="enterprise"))
    else:  # verified before profiles were kept: what it missed is not known
        first = await crew.ship(adhoc_ipa([DAN_IPHONE], "1.0", "1"))
        ctx: AppContext = crew.team.app.state.ctx
        db = ctx.sessions()
        await forget_profile(db, first["buildId"])
        await finish(db, ok=True)

    await crew.ship(adhoc_ipa([DAN_IPHONE, TESS_IPHONE], "1.1", "2"))

    assert NOW_INSTALLS not in crew.last_mail(crew.tess).text


async def test_one_query_finds_the_devices_gained_for_the_whole_distribution(
    crew: Crew, team: Team
) -> None:
    others = [await team.member(f"tester{n}@example.com") for n in range(6)]
    udids = [f"00008110-{n:016X}" for n in range(6)]
    for account, udid in zip(others, udids, strict=True):
        await crew.enroll(account, udid, f"{account.email}'s iPhone")
    await crew.ship(adhoc_ipa([OLGA_IPHONE], "1.0", "1"))
    data = adhoc_ipa([*udids, TESS_IPHONE], "1.1", "2")
    build = await team.api.upload(
        team.owner, team.project["id"], crew.application["id"], data, "acme.ipa"
    )
    seen = statements_run(team.app, "build_profile_devices")

    emails = [a.email for a in [crew.tess, crew.dan, *others]]
    r = await team.client.post(
        f"/api/app-distribution/{team.project['id']}/{crew.application['id']}/builds/"
        f"{build['buildId']}/distribute",
        json={"emails": emails, "notify": True},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    await team.run_jobs()

    assert len(seen) == 1, seen
    for account in [crew.tess, *others]:
        assert NOW_INSTALLS in crew.last_mail(account).text, account.email
    assert NOW_INSTALLS not in crew.last_mail(crew.dan).text
