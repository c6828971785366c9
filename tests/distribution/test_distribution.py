"""Distributing builds: automatically to the application's groups when a build becomes ready,
and on request to groups and e-mails; mails (each with the tester's own install link) go once
per person and build; testers see only what reached them."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from sqlalchemy import delete, select

from buildbay.auth.models import User
from buildbay.clock import FrozenClock
from buildbay.config import Plan
from buildbay.context import AppContext
from buildbay.ids import new_id
from buildbay.jobs.models import Job
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember
from tests.conftest import assert_problem, iso_z
from tests.distribution.conftest import Team


async def test_a_ready_build_reaches_everyone_and_each_tester_gets_their_own_link(
    team: Team, clock: FrozenClock
) -> None:
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")

    build = await team.upload(notes="Fixes login")
    await team.run_jobs()

    [to_tess] = team.mails_to(tess.email)
    [to_tom] = team.mails_to(tom.email)
    assert team.mails_to(team.owner.email) == []  # the uploader knows
    tess_link = to_tess.link("http://testserver/install/")
    tom_link = to_tom.link("http://testserver/install/")
    assert tess_link != tom_link
    assert "Fixes login" in to_tess.text
    assert to_tess.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    r = await team.client.get(tess_link, headers={"Accept": "text/html"})
    assert r.status_code == 200, r.text
    # The link lives the application's installLinkDays (14 by default).
    r = await team.client.get(
        f"{team.builds}/{build['buildId']}/install-links", headers=team.owner.headers
    )
    expiries = {link["expiresAt"] for link in r.json()["installLinks"]}
    assert expiries == {iso_z(clock.now() + timedelta(days=14))}
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=tess.headers)
    assert r.status_code == 200, r.text


async def test_testers_past_one_statements_worth_still_get_one_mail_and_link_each(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The links are given to testers a chunk per statement: chunks of two here, so that
    # three testers take two.
    monkeypatch.setattr("buildbay.distribution.service.LINKS_PER_STATEMENT", 2)
    testers = [await team.member(f"t{n}@example.com") for n in range(3)]

    await team.upload()
    await team.run_jobs()

    links = set()
    for tester in testers:
        [mail] = team.mails_to(tester.email)
        link = mail.link("http://testserver/install/")
        r = await team.client.get(link, headers={"Accept": "text/html"})
        assert r.status_code == 200, r.text
        links.add(link)
    assert len(links) == 3


async def test_distributing_again_mails_nobody_twice(team: Team) -> None:
    tess = await team.member("tess@example.com")
    group_id = await team.group("QA", tess.email)
    build = await team.upload()

    again = await team.distribute(
        build["buildId"], groups=["everyone", group_id], emails=[tess.email]
    )
    await team.run_jobs()

    assert again == {
        "buildId": build["buildId"],
        "groups": sorted(["everyone", group_id]),
        "testersReached": 0,
        "notified": 0,
        "invitationsPending": 0,
        "unsubscribed": 0,
        "invited": [],
        "notInvited": [],
    }
    assert len(team.mails_to(tess.email)) == 1


async def test_testers_see_only_builds_distributed_to_them(team: Team) -> None:
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")
    dev = await team.member("dev@example.com", "developer")
    qa = await team.group("QA", tess.email)
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": [qa]},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text

    build = await team.upload()
    await team.run_jobs()
    path = f"{team.builds}/{build['buildId']}"

    assert len(team.mails_to(tess.email)) == 1
    assert team.mails_to(tom.email) == []
    for url in (path, f"{path}/download", f"{path}/install-links"):
        r = await team.client.get(url, headers=tom.headers)
        assert_problem(r, 403, "not_distributed")
    r = await team.client.post(f"{path}/install-link", headers=tom.headers)
    assert_problem(r, 403, "insufficient_role")  # a developer's, whatever the build
    r = await team.client.get(team.builds, headers=tom.headers)
    assert r.json()["builds"] == []
    r = await team.client.get(f"{team.builds}/latest", headers=tom.headers)
    assert_problem(r, 404, "build_not_found")
    for account in (tess, dev):
        r = await team.client.get(team.builds, headers=account.headers)
        assert [b["buildId"] for b in r.json()["builds"]] == [build["buildId"]]
        r = await team.client.get(f"{path}/download", headers=account.headers)
        assert r.status_code == 302, r.text

    # Given it by e-mail, Tom sees it too, and is mailed.
    result = await team.distribute(build["buildId"], emails=[tom.email])
    await team.run_jobs()
    assert (result["testersReached"], result["notified"]) == (1, 1)
    assert len(team.mails_to(tom.email)) == 1
    r = await team.client.get(f"{team.builds}/latest", headers=tom.headers)
    assert r.json()["buildId"] == build["buildId"]


async def test_a_tester_who_joins_a_group_later_sees_its_builds_unmailed(team: Team) -> None:
    qa = await team.group("QA")
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": [qa]},
        headers=team.owner.headers,
    )
    build = await team.upload()
    await team.run_jobs()  # the distribution is done
    tess = await team.member("tess@example.com")
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=tess.headers)
    assert_problem(r, 403, "not_distributed")

    await team.group_add(qa, tess.email)

    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=tess.headers)
    assert r.status_code == 200, r.text
    await team.run_jobs()
    assert team.mails_to(tess.email) == []


async def test_an_email_without_an_account_is_invited_and_sees_the_build_once_in(
    team: Team,
) -> None:
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": []},
        headers=team.owner.headers,
    )
    build = await team.upload()
    result = await team.distribute(build["buildId"], emails=["new@example.com"])
    await team.run_jobs()
    # Not a member yet: an invitation pending, no tester reached.
    assert (result["testersReached"], result["notified"]) == (0, 0)
    assert result["invitationsPending"] == 1
    [invitation] = team.mails_to("new@example.com")
    token = invitation.link("http").rsplit("/", 1)[1]

    newcomer = await team.api.register("new@example.com")
    r = await team.client.post(
        "/api/invitations/accept", json={"token": token}, headers=newcomer.headers
    )
    assert r.status_code == 200, r.text
    r = await team.client.get(team.builds, headers=newcomer.headers)
    assert [b["buildId"] for b in r.json()["builds"]] == [build["buildId"]]


async def test_who_turned_new_build_mails_off_is_reached_but_not_mailed(team: Team) -> None:
    tess = await team.member("tess@example.com")
    r = await team.client.put("/api/auth/me", json={"notifyNewBuilds": False}, headers=tess.headers)
    assert r.status_code == 200, r.text

    await team.upload()
    await team.run_jobs()

    assert team.mails_to(tess.email) == []


async def test_verify_distributes_with_the_same_object(team: Team) -> None:
    tess = await team.member("tess@example.com")
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": []},
        headers=team.owner.headers,
    )
    r = await team.client.post(
        f"{team.builds}/upload-link",
        json={"fileName": "a.apk", "fileSize": 3},
        headers=team.owner.headers,
    )
    link = r.json()
    r = await team.client.put(link["uploadUrl"], content=b"abc", headers=link["uploadHeaders"])
    assert r.status_code == 200, r.text

    r = await team.client.post(
        f"{team.builds}/verify",
        json={"buildId": link["buildId"], "distribute": {"emails": [tess.email]}},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    await team.run_jobs()

    assert len(team.mails_to(tess.email)) == 1


async def test_only_a_ready_build_is_distributed_and_only_by_a_developer(team: Team) -> None:
    tess = await team.member("tess@example.com")
    r = await team.client.post(
        f"{team.builds}/upload-link",
        json={"fileName": "a.apk", "fileSize": 3},
        headers=team.owner.headers,
    )
    pending = r.json()["buildId"]
    r = await team.client.post(
        f"{team.builds}/{pending}/distribute", json={}, headers=team.owner.headers
    )
    assert_problem(r, 409, "build_not_ready")
    build = await team.upload()
    r = await team.client.post(
        f"{team.builds}/{build['buildId']}/distribute", json={}, headers=tess.headers
    )
    assert_problem(r, 403, "insufficient_role")
    r = await team.client.post(
        f"{team.builds}/{build['buildId']}/distribute",
        json={"groups": ["grp_nope"]},
        headers=team.owner.headers,
    )
    assert_problem(r, 422, "group_not_found")


async def test_a_group_is_counted_at_once_and_its_testers_mailed_by_the_job(team: Team) -> None:
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": []},
        headers=team.owner.headers,
    )
    quiet = await team.member("quiet@example.com")
    r = await team.client.put(
        "/api/auth/me", json={"notifyNewBuilds": False}, headers=quiet.headers
    )
    testers = [await team.member(f"t{n}@example.com") for n in range(3)]
    qa = await team.group("QA", quiet.email, *(t.email for t in testers))
    beta = await team.group("Beta", testers[0].email)
    build = await team.upload()

    result = await team.distribute(build["buildId"], groups=[qa, beta])

    assert (result["testersReached"], result["notified"]) == (4, 3)
    assert team.smtp.messages() == []  # the job has not run yet
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=testers[1].headers)
    assert r.status_code == 200, r.text  # seen through the group at once
    await team.run_jobs()
    assert sorted(m.recipients[0] for m in team.smtp.messages()) == [
        "t0@example.com",
        "t1@example.com",
        "t2@example.com",
    ]
    again = await team.distribute(build["buildId"], groups=["everyone"])
    await team.run_jobs()
    # Only the owner is new to it, who uploaded it: no tester reached, nobody mailed.
    assert (again["testersReached"], again["notified"]) == (0, 0)
    assert len(team.smtp.messages()) == 3


async def test_a_large_groups_mails_are_composed_without_holding_the_event_loop(
    team: Team, clock: FrozenClock
) -> None:
    """Composing a mail takes the standard library about a millisecond. For a group of
    hundreds, done on the event loop's thread, every request of the process waited for all of
    them; in a worker thread, the loop keeps getting its turns. Measured by the longest wait of
    a task that only yields, against the whole job's time (no absolute figure). Composed on the
    loop, every distribution holds it that long; a stall of the test process itself (another
    CI worker taking the cores, a full garbage collection of its heap) can hold one, so the
    best of three distributions is the one judged."""
    ctx: AppContext = team.app.state.ctx
    now = clock.now()
    async with ctx.sessions() as db, db.begin():  # registering each would hash a password
        for n in range(400):
            user_id = new_id("usr")
            db.add(User(id=user_id, email=f"t{n}@example.com", name=f"T{n}", password_hash="-",
                        plan=Plan.FREE, created_at=now, updated_at=now))  # fmt: skip
            await db.flush()
            db.add(ProjectMember(project_id=team.project["id"], user_id=user_id,
                                 role=ProjectRole.TESTER, created_at=now))  # fmt: skip

    async with ctx.sessions() as db, db.begin():  # the sign-up's verification mail: not counted
        await db.execute(delete(Job).where(Job.kind == "mail"))

    async def longest_wait() -> tuple[float, float]:
        await team.upload()  # distributed to everyone: one job writes the 400 mails
        waits: list[float] = []

        async def yielding() -> None:
            last = time.perf_counter()
            while True:
                await asyncio.sleep(0)
                now = time.perf_counter()
                waits.append(now - last)
                last = now

        assert ctx.jobs is not None
        ticker = asyncio.create_task(yielding())
        started = time.perf_counter()
        assert await ctx.jobs.run_due() == 1  # the distribution's job only
        took = time.perf_counter() - started
        ticker.cancel()
        assert len(await _pending_mails(ctx)) == 400
        async with ctx.sessions() as db, db.begin():  # not sent: the next job's are measured
            await db.execute(delete(Job).where(Job.kind == "mail"))
        return max(waits), took

    tries: list[tuple[float, float]] = []
    while len(tries) < 3 and not any(wait < took / 4 for wait, took in tries):
        tries.append(await longest_wait())
    assert any(wait < took / 4 for wait, took in tries), [
        f"the loop waited {wait:.3f} s of the job's {took:.3f} s" for wait, took in tries
    ]


async def _pending_mails(ctx: AppContext) -> list[str]:
    async with ctx.sessions() as db:
        return list(await db.scalars(select(Job.id).where(Job.kind == "mail")))
