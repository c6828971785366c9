"""People who join a group (or the project, for `everyone`) after a build went to it: they
are its recipients from then on, for the lead's reports, without a backlog of mails; named by
e-mail afterwards, they are mailed once; named by a group and by e-mail at once, counted once."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from buildbay.clock import FrozenClock
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.distribution.models import BuildRecipient
from tests.conftest import iso_z
from tests.distribution.conftest import Team


async def _distribute_automatically_to(team: Team, *groups: str) -> None:
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": list(groups)},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text


async def _reached(team: Team, build_id: str) -> dict[str, dict[str, Any]]:
    """The build's installs report, per e-mail, of the people it reached."""
    r = await team.client.get(f"{team.builds}/{build_id}/installs", headers=team.owner.headers)
    assert r.status_code == 200, r.text
    return {t["email"]: t for t in r.json()["testers"] if t["reachedAt"] is not None}


async def _recipient_builds(team: Team, email: str) -> list[str]:
    """Straight from the table: the builds with a recipient row for the e-mail."""
    ctx: AppContext = team.app.state.ctx
    reads = Reads.on(ctx.read_engine)
    try:
        rows = await reads.all(select(BuildRecipient.build_id).where(BuildRecipient.email == email))
    finally:
        await reads.close()
    return sorted(row["build_id"] for row in rows)


async def test_a_tester_added_to_a_group_later_is_in_the_report_and_not_mailed(
    team: Team, clock: FrozenClock
) -> None:
    qa = await team.group("QA")
    await _distribute_automatically_to(team, qa)
    build = await team.upload()
    await team.run_jobs()  # the group's distribution is done
    tess = await team.member("tess@example.com")
    clock.advance(hours=1)

    await team.group_add(qa, tess.email)
    await team.run_jobs()

    reached = await _reached(team, build["buildId"])
    assert reached[tess.email]["userId"] == tess.user["id"]
    assert reached[tess.email]["reachedAt"] == iso_z(clock.now())
    assert reached[tess.email]["notifiedAt"] is None
    assert team.mails_to(tess.email) == []


async def test_an_invitation_accepted_into_a_group_is_mailed_the_newest_build_only(
    team: Team, clock: FrozenClock
) -> None:
    """Invited into a group before signing up: never told of its builds while invited, they
    are mailed the newest of the application (their own install link) when they join; the
    older one is theirs too, unmailed."""
    qa = await team.group("QA")
    await _distribute_automatically_to(team, qa)
    older = await team.upload()
    clock.advance(minutes=5)
    newest = await team.upload()
    await team.run_jobs()
    r = await team.client.post(
        f"{team.groups}/{qa}/testers", json={"emails": ["new@example.com"]},
        headers=team.owner.headers,
    )  # fmt: skip
    assert r.json()["invited"] == ["new@example.com"], r.text
    await team.run_jobs()
    [invitation] = team.mails_to("new@example.com")
    token = invitation.link("http").rsplit("/", 1)[1]
    newcomer = await team.api.register("new@example.com")

    r = await team.client.post(
        "/api/invitations/accept", json={"token": token}, headers=newcomer.headers
    )
    assert r.status_code == 200, r.text
    await team.run_jobs()

    reached = await _reached(team, older["buildId"])
    assert reached["new@example.com"]["userId"] == newcomer.user["id"]
    assert reached["new@example.com"]["notifiedAt"] is None
    reached = await _reached(team, newest["buildId"])
    assert reached["new@example.com"]["notifiedAt"] == iso_z(clock.now())
    _, build_mail = team.mails_to("new@example.com")
    assert "ready to test" in str(build_mail.message["Subject"])
    r = await team.client.get(
        build_mail.link("http://testserver/install/"), headers={"Accept": "text/html"}
    )
    assert r.status_code == 200, r.text


async def test_joining_with_new_build_mails_off_mails_nothing(team: Team) -> None:
    qa = await team.group("QA")
    await _distribute_automatically_to(team, qa)
    await team.upload()
    await team.group_add(qa, "new@example.com")
    await team.run_jobs()
    [invitation] = team.mails_to("new@example.com")
    newcomer = await team.api.register("new@example.com")
    r = await team.client.put(
        "/api/auth/me", json={"notifyNewBuilds": False}, headers=newcomer.headers
    )
    assert r.status_code == 200, r.text

    token = invitation.link("http").rsplit("/", 1)[1]
    r = await team.client.post(
        "/api/invitations/accept", json={"token": token}, headers=newcomer.headers
    )
    assert r.status_code == 200, r.text
    await team.run_jobs()

    assert len(team.mails_to("new@example.com")) == 1  # the invitation only


async def test_a_new_member_is_a_recipient_of_the_builds_of_everyone_unmailed(
    team: Team,
) -> None:
    build = await team.upload()  # to everyone, the default
    await team.run_jobs()

    tess = await team.member("tess@example.com")
    await team.run_jobs()

    reached = await _reached(team, build["buildId"])
    assert reached[tess.email]["notifiedAt"] is None
    assert team.mails_to(tess.email) == []


async def test_named_by_email_after_joining_the_group_late_a_member_is_mailed_once(
    team: Team,
) -> None:
    qa = await team.group("QA")
    await _distribute_automatically_to(team, qa)
    build = await team.upload()
    await team.run_jobs()  # the group's job has run
    tess = await team.member("tess@example.com")
    await team.group_add(qa, tess.email)

    result = await team.distribute(build["buildId"], emails=[tess.email])
    await team.run_jobs()

    # She had the build already (she joined the group): mailed now, not newly reached.
    assert (result["testersReached"], result["notified"]) == (0, 1)
    assert len(team.mails_to(tess.email)) == 1
    reached = await _reached(team, build["buildId"])
    assert reached[tess.email]["notifiedAt"] is not None
    again = await team.distribute(build["buildId"], emails=[tess.email])
    await team.run_jobs()
    assert (again["testersReached"], again["notified"]) == (0, 0)
    assert len(team.mails_to(tess.email)) == 1


async def test_a_group_and_a_members_email_at_once_count_and_mail_them_once(
    team: Team,
) -> None:
    await _distribute_automatically_to(team)
    tess = await team.member("tess@example.com")
    qa = await team.group("QA", tess.email)
    build = await team.upload()

    result = await team.distribute(build["buildId"], groups=[qa], emails=[tess.email])
    await team.run_jobs()

    assert (result["testersReached"], result["notified"]) == (1, 1)
    assert len(team.mails_to(tess.email)) == 1
    assert (await _reached(team, build["buildId"]))[tess.email]["notifiedAt"] is not None


async def test_named_by_email_while_the_groups_job_is_pending_a_member_counts_once(
    team: Team,
) -> None:
    await _distribute_automatically_to(team)
    tess = await team.member("tess@example.com")
    qa = await team.group("QA", tess.email)
    build = await team.upload()

    first = await team.distribute(build["buildId"], groups=[qa])  # its job has not run
    second = await team.distribute(build["buildId"], emails=[tess.email])
    await team.run_jobs()

    assert (first["testersReached"], first["notified"]) == (1, 1)
    assert (second["testersReached"], second["notified"]) == (0, 0)
    assert len(team.mails_to(tess.email)) == 1


async def test_joining_a_group_reaches_none_of_its_deleted_builds(team: Team) -> None:
    qa = await team.group("QA")
    await _distribute_automatically_to(team, qa)
    kept = await team.upload()
    deleted = await team.upload()
    await team.run_jobs()
    r = await team.client.delete(f"{team.builds}/{deleted['buildId']}", headers=team.owner.headers)
    assert r.status_code == 204, r.text
    tess = await team.member("tess@example.com")

    await team.group_add(qa, tess.email)

    assert await _recipient_builds(team, tess.email) == [kept["buildId"]]


async def test_an_email_reached_before_joining_is_the_members_once_they_accept(
    team: Team,
) -> None:
    await _distribute_automatically_to(team)
    build = await team.upload()
    await team.distribute(build["buildId"], emails=["new@example.com"])
    await team.run_jobs()
    [invitation] = team.mails_to("new@example.com")
    token = invitation.link("http").rsplit("/", 1)[1]
    newcomer = await team.api.register("new@example.com")
    r = await team.client.post(
        "/api/invitations/accept", json={"token": token}, headers=newcomer.headers
    )
    assert r.status_code == 200, r.text

    r = await team.client.get(
        f"{team.builds}/{build['buildId']}/download", headers=newcomer.headers
    )
    assert r.status_code == 302, r.text

    r = await team.client.get(
        f"{team.builds}/{build['buildId']}/installs", headers=team.owner.headers
    )
    [theirs] = [t for t in r.json()["testers"] if t["email"] == "new@example.com"]
    assert theirs["userId"] == newcomer.user["id"]
    assert theirs["reachedAt"] is not None
    assert theirs["downloads"] == 1
