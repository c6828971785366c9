"""Install links follow membership (issue 34): a personal link (a tester's own, from their
distribution mail) opens only while its person may open the build, asked at each open, so that
leaving the project, a lower role, leaving the only group the build reached them through or the
group's deletion ends it, with the answer of a revoked link; testers list only their own links
and neither create nor revoke any; the list says whose each personal link is."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Account, assert_problem
from tests.console.test_distribution_pages import browser
from tests.console.test_mail_pages import sign_in
from tests.distribution.conftest import Team

__all__ = ["browser"]

HTML = {"Accept": "text/html"}


async def _to_group(team: Team, group_id: str) -> dict[str, Any]:
    """A build distributed (and mailed) to one group only."""
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": [group_id]},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    build = await team.upload()
    await team.run_jobs()
    return build


def _link_of(team: Team, account: Account) -> str:
    [mail] = team.mails_to(account.email)
    return str(mail.link("http://testserver/install/"))


async def _works(team: Team, link: str) -> None:
    page = await team.client.get(link, headers=HTML)
    assert page.status_code == 200, page.text
    assert "Download" in page.text
    download = await team.client.get(f"{link}/download")
    assert download.status_code == 302, download.text


async def _dead(team: Team, link: str) -> None:
    """Answered exactly as a revoked link is: nothing says whose it was or why."""
    for path in ("", "/download", "/icon.png"):
        r = await team.client.get(link + path)
        assert_problem(r, 410, "install_link_revoked")
        assert r.json()["detail"] == "This install link was revoked"
    page = await team.client.get(link, headers=HTML)
    assert page.status_code == 410
    assert "Install link no longer works" in page.text
    assert "This install link was revoked" in page.text


async def _sees(team: Team, account: Account, build: dict[str, Any]) -> int:
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=account.headers)
    return r.status_code


async def test_a_personal_link_dies_with_the_membership_and_lives_again_with_it(
    team: Team,
) -> None:
    tess = await team.member("tess@example.com")
    build = await team.upload()
    await team.run_jobs()
    link = _link_of(team, tess)
    await _works(team, link)

    r = await team.client.delete(
        f"/api/projects/{team.project['id']}/members/{tess.user['id']}",
        headers=team.owner.headers,
    )
    assert r.status_code == 204, r.text
    await _dead(team, link)

    # Asked at each open: back in the project (and so in `everyone`), the link works again.
    await team.api.add_member(team.owner, team.project["id"], tess, "tester")
    assert await _sees(team, tess, build) == 200
    await _works(team, link)


async def test_leaving_the_only_group_a_build_reached_a_tester_through_ends_build_and_link(
    team: Team,
) -> None:
    tess = await team.member("tess@example.com")
    qa = await team.group("QA", tess.email)
    beta = await team.group("Beta", tess.email)
    for_all = await team.upload()  # to everyone: hers whatever groups she leaves
    await team.run_jobs()
    [everyones] = [m.link("http://testserver/install/") for m in team.mails_to(tess.email)]
    build = await _to_group(team, qa)
    link = team.mails_to(tess.email)[-1].link("http://testserver/install/")
    await _works(team, link)
    # Given to Beta as well: leaving QA leaves her the build through Beta.
    await team.distribute(build["buildId"], groups=[beta])
    r = await team.client.delete(f"{team.groups}/{qa}/testers/{tess.user['id']}",
                                 headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 204, r.text
    await _works(team, link)

    r = await team.client.delete(f"{team.groups}/{beta}/testers/{tess.user['id']}",
                                 headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 204, r.text

    await _dead(team, link)
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=tess.headers)
    assert_problem(r, 403, "not_distributed")
    r = await team.client.get(team.builds, headers=tess.headers)
    assert [b["buildId"] for b in r.json()["builds"]] == [for_all["buildId"]]
    await _works(team, everyones)


async def test_a_deleted_group_ends_the_links_it_gave(team: Team) -> None:
    tess = await team.member("tess@example.com")
    qa = await team.group("QA", tess.email)
    build = await _to_group(team, qa)
    link = _link_of(team, tess)
    await _works(team, link)

    r = await team.client.delete(f"{team.groups}/{qa}", headers=team.owner.headers)
    assert r.status_code == 204, r.text

    await _dead(team, link)
    assert await _sees(team, tess, build) == 403


async def test_a_developer_s_link_works_outside_the_groups_until_they_are_a_tester(
    team: Team,
) -> None:
    dev = await team.member("dev@example.com", "developer")
    qa = await team.group("QA", dev.email)
    build = await _to_group(team, qa)
    link = _link_of(team, dev)
    r = await team.client.delete(f"{team.groups}/{qa}/testers/{dev.user['id']}",
                                 headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 204, r.text
    await _works(team, link)  # a developer opens every build

    r = await team.client.put(
        f"/api/projects/{team.project['id']}/members/{dev.user['id']}",
        json={"role": "tester"},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text

    await _dead(team, link)
    assert await _sees(team, dev, build) == 403


async def test_a_build_named_to_a_tester_stays_theirs_whatever_groups_they_leave(
    team: Team,
) -> None:
    tess = await team.member("tess@example.com")
    qa = await team.group("QA", tess.email)
    build = await _to_group(team, qa)
    link = _link_of(team, tess)
    # Given to her by name as well (her row, written by the group's job, becomes hers).
    await team.distribute(build["buildId"], emails=[tess.email])

    r = await team.client.delete(f"{team.groups}/{qa}/testers/{tess.user['id']}",
                                 headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 204, r.text

    await _works(team, link)
    assert await _sees(team, tess, build) == 200


async def test_testers_list_only_their_own_links_and_neither_create_nor_revoke(
    team: Team,
) -> None:
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")
    build = await team.upload()
    await team.run_jobs()
    links = f"{team.builds}/{build['buildId']}/install-links"
    r = await team.client.post(f"{team.builds}/{build['buildId']}/install-link",
                               headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 201, r.text
    shared = r.json()
    assert (shared["shared"], shared["owner"]) == (True, None)
    assert shared["createdBy"] == team.owner.user["id"]

    r = await team.client.get(links, headers=tess.headers)

    assert r.status_code == 200, r.text
    [own] = r.json()["installLinks"]
    assert own["url"] == _link_of(team, tess)
    assert own["shared"] is False
    assert own["owner"] == {"userId": tess.user["id"], "email": tess.email,
                            "name": tess.user["name"]}  # fmt: skip
    assert own["createdBy"] is None  # made by the server, with her mail

    # A developer lists them all, each saying whose it is.
    r = await team.client.get(links, headers=team.owner.headers)
    listed = {link["url"]: link for link in r.json()["installLinks"]}
    assert set(listed) == {shared["url"], _link_of(team, tess), _link_of(team, tom)}
    assert listed[_link_of(team, tom)]["owner"]["email"] == tom.email
    assert listed[shared["url"]]["shared"] is True

    r = await team.client.post(f"{team.builds}/{build['buildId']}/install-link",
                               headers=tess.headers)  # fmt: skip
    assert_problem(r, 403, "insufficient_role")
    for link_id in (own["linkId"], shared["linkId"]):
        r = await team.client.delete(f"{links}/{link_id}", headers=tess.headers)
        assert_problem(r, 403, "insufficient_role")
    await _works(team, own["url"])
    r = await team.client.get(links, headers=team.owner.headers)
    assert all(link["revokedAt"] is None for link in r.json()["installLinks"])


async def test_what_is_done_through_a_personal_link_is_its_person_s_and_no_one_else_s(
    team: Team, browser: httpx.AsyncClient
) -> None:
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")
    build = await team.upload()
    await team.run_jobs()
    link = _link_of(team, tess)
    path = "/install/" + link.rsplit("/install/", 1)[1]

    # Tom, signed in on his browser, holds Tess's link: refused, and nothing is counted.
    await sign_in(browser, tom.email)
    r = await browser.get(path, headers=HTML)
    assert r.status_code == 403
    assert "This install link is someone else&#39;s" in r.text
    r = await browser.get(f"{path}/download")
    assert_problem(r, 403, "not_your_install_link")
    # Tess, signed in or not, uses it as hers.
    r = await team.client.get(f"{link}/download")
    assert r.status_code == 302, r.text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=team.app),
                                 base_url=str(browser.base_url)) as hers:  # fmt: skip
        await sign_in(hers, tess.email)
        r = await hers.get(f"{path}/download")
        assert r.status_code == 302, r.text

    r = await team.client.get(f"{team.builds}/{build['buildId']}/installs",
                              headers=team.owner.headers)  # fmt: skip
    by_email = {t["email"]: t for t in r.json()["testers"]}
    assert by_email[tess.email]["downloads"] == 2
    assert by_email[tom.email]["downloads"] == 0
    assert (r.json()["anonymousOpens"], r.json()["anonymousDownloads"]) == (0, 0)


async def test_a_tester_is_never_handed_the_shared_link_which_would_outlive_their_access(
    team: Team,
) -> None:
    """A build's installUrl is its newest shared link: a developer's to hand out. A tester
    reads it null (their own link is their mail's), so removing them from the project leaves
    them no link that still opens."""
    tess = await team.member("tess@example.com")
    build = await team.upload()
    await team.run_jobs()
    r = await team.client.post(
        f"{team.builds}/{build['buildId']}/install-link", json=None,
        headers=team.owner.headers,
    )  # fmt: skip
    assert r.status_code == 201, r.text
    shared = r.json()["url"]

    for path in (f"/{build['buildId']}", "", "/latest"):
        as_owner = await team.client.get(team.builds + path, headers=team.owner.headers)
        as_tester = await team.client.get(team.builds + path, headers=tess.headers)
        assert as_owner.status_code == as_tester.status_code == 200, as_tester.text
        owners, testers = as_owner.json(), as_tester.json()
        if path == "":
            [owners], [testers] = owners["builds"], testers["builds"]
        assert owners["installUrl"] == shared
        assert testers["installUrl"] is None
        assert shared not in as_tester.text
