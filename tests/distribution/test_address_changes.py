"""Builds given to a person follow the person, not the address they had (issue 36's change of
address): once a tester moves their account to another address, whoever holds the old one next
and joins the project is not given what was distributed to the tester."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from buildbay.context import AppContext
from buildbay.db.engine import finish
from buildbay.invitations.caps import blocked_addresses
from buildbay.mail.message import ONE_CLICK
from tests.conftest import Account, assert_problem
from tests.distribution.conftest import Team

CORP = "ada@corp.example"


async def _move(team: Team, ada: Account, new_email: str) -> None:
    """Ada moves her account to `new_email`, following the mailed link."""
    r = await team.client.post(
        "/api/auth/email-change",
        json={"newEmail": new_email, "password": ada.password},
        headers=ada.headers,
    )
    assert r.status_code == 202, r.text
    await team.run_jobs()
    [mail] = [m for m in team.mails_to(new_email) if "Confirm" in m.message["Subject"]]
    [token] = parse_qs(urlsplit(mail.link("http")).query)["token"]
    r = await team.client.post("/api/auth/email-change/confirm", json={"token": token})
    assert r.status_code == 204, r.text


async def _join_by_invitation(team: Team, email: str) -> Account:
    """A new account of `email` joins as a tester with the link mailed to that address."""
    newcomer = await team.api.register(email)
    r = await team.client.post(
        f"/api/projects/{team.project['id']}/invitations",
        json={"email": email, "role": "tester"},
        headers=team.owner.headers,
    )
    assert r.status_code == 201, r.text
    await team.run_jobs()
    [mail] = [m for m in team.mails_to(email) if "invited you" in m.message["Subject"]]
    token = mail.link("http://testserver/invitations/").rsplit("/", 1)[1]
    r = await team.client.post(
        "/api/invitations/accept", json={"token": token}, headers=newcomer.headers
    )
    assert r.status_code == 200, r.text
    return newcomer


async def _builds_of(team: Team, account: Account) -> list[str]:
    r = await team.client.get(team.builds, headers=account.headers)
    assert r.status_code == 200, r.text
    return [b["buildId"] for b in r.json()["builds"]]


async def test_a_build_given_to_a_tester_by_name_stays_theirs_when_their_address_moves(
    team: Team,
) -> None:
    ada = await team.member(CORP)
    private = await team.group("nobody yet")
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": [private]},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    build: dict[str, Any] = await team.upload()
    await team.distribute(build["buildId"], emails=[CORP])
    await team.run_jobs()
    assert await _builds_of(team, ada) == [build["buildId"]]

    await _move(team, ada, "ada@home.example")
    newcomer = await _join_by_invitation(team, CORP)

    assert await _builds_of(team, newcomer) == []
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=newcomer.headers)
    assert_problem(r, 403, "not_distributed")
    r = await team.client.get(
        f"{team.builds}/{build['buildId']}/download", headers=newcomer.headers
    )
    assert_problem(r, 403, "not_distributed")
    # Ada, at her new address, still has it.
    assert await _builds_of(team, ada) == [build["buildId"]]


async def test_the_install_links_mailed_to_the_old_address_stop_working_when_it_moves(
    team: Team,
) -> None:
    """A personal link counts what is done through it as its person's: once Ada left the
    mailbox, whoever reads it next must not install her builds as her."""
    ada = await team.member(CORP)
    build: dict[str, Any] = await team.upload()  # to everyone: mailed with Ada's own link
    await team.run_jobs()
    [mail] = [m for m in team.mails_to(CORP) if "ready to test" in m.message["Subject"]]
    link = str(mail.link("http://testserver/install/"))
    assert (await team.client.get(f"{link}/download")).status_code == 302

    await _move(team, ada, "ada@home.example")

    for path in ("", "/download"):
        assert_problem(await team.client.get(link + path), 410, "install_link_revoked")
    # Ada still has the build, at her new address, from her account.
    assert await _builds_of(team, ada) == [build["buildId"]]


async def test_the_unsubscribe_link_mailed_to_the_old_address_neither_names_nor_acts_on_the_new(
    team: Team,
) -> None:
    """The old mailbox's unsubscribe link must not tell its reader where Ada went, nor let them
    block invitations to her new address or stop her mails."""
    ada = await team.member(CORP)
    await team.upload()
    await team.run_jobs()
    [mail] = [m for m in team.mails_to(CORP) if "ready to test" in m.message["Subject"]]
    url = str(mail.message["List-Unsubscribe"]).strip().strip("<>")
    assert url.startswith("http://testserver/unsubscribe/")

    await _move(team, ada, "ada@home.example")

    page = await team.client.get(url)
    assert "ada@home.example" not in page.text
    assert page.status_code == 404, page.text
    for target in (url, f"{url}/invitations"):
        r = await team.client.post(target, data={"action": "block"})
        assert r.status_code == 404, r.text
        assert "ada@home.example" not in r.text
    me = await team.client.get("/api/auth/me", headers=ada.headers)
    assert me.json()["notifyNewBuilds"] is True
    ctx: AppContext = team.app.state.ctx
    db = ctx.sessions()
    try:
        assert await blocked_addresses(db, ["ada@home.example"]) == set()
    finally:
        await finish(db, ok=True)
    # Her new mails' links are hers.
    await team.upload()
    await team.run_jobs()
    [mail] = [m for m in team.mails_to("ada@home.example") if "ready" in m.message["Subject"]]
    url = str(mail.message["List-Unsubscribe"]).strip().strip("<>")
    page = await team.client.get(url)
    assert page.status_code == 200, page.text
    assert "Stop the e-mails Buildbay sends ada@home.example" in page.text


async def test_a_link_of_a_mail_sent_before_links_named_their_address_still_works(
    team: Team,
) -> None:
    ada = await team.member(CORP)
    ctx: AppContext = team.app.state.ctx
    links = ctx.unsubscribe
    legacy = f"{ada.user['id']}.{links._mac(ada.user['id'], None)}"  # as issue 34's mails had

    r = await team.client.post(f"/unsubscribe/{legacy}", content=ONE_CLICK)

    assert r.status_code == 200, r.text
    me = await team.client.get("/api/auth/me", headers=ada.headers)
    assert me.json()["notifyNewBuilds"] is False
