"""Public join links of tester groups (issue 40) over HTTP: made, read and revoked by the team
(developer+), their token shown once; the public page and its form, the confirmation mail read
from a real SMTP server, confirming (a new account, no password), the limits (maxTesters,
domains after NFKC and IDNA, expiry, revocation, the rate limit) and the project's tester rules
(blocked addresses)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from html import unescape
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from buildbay.clock import FrozenClock
from buildbay.config import Settings, SignupMode
from buildbay.distribution.join_links import normal_domain, sweep_join_requests
from buildbay.distribution.models import JoinRequest
from buildbay.middleware import loggable_path
from tests.conftest import BASE_URL, assert_problem, iso_z
from tests.distribution.conftest import Team
from tests.invitations.test_invitation_bypasses import block

ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Keeps cookies as a browser does (the console's are Secure: https, in process)."""
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as client:
        yield client


def link_path(team: Team, group_id: str) -> str:
    return f"{team.groups}/{group_id}/join-link"


async def make_link(team: Team, group_id: str, **body: Any) -> dict[str, Any]:
    r = await team.client.post(link_path(team, group_id), json=body, headers=team.owner.headers)
    assert r.status_code == 201, r.text
    made: dict[str, Any] = r.json()
    return made


def page_path(made: dict[str, Any]) -> str:
    return "/join/" + str(made["url"]).rsplit("/join/", 1)[1]


async def csrf_of(browser: httpx.AsyncClient, path: str) -> str:
    page = await browser.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found[1]


async def ask_to_join(browser: httpx.AsyncClient, path: str, email: str) -> httpx.Response:
    csrf = await csrf_of(browser, path)
    return await browser.post(path, data={"csrf": csrf, "email": email}, headers=ORIGIN)


async def confirmation_of(team: Team, email: str) -> str:
    await team.run_jobs()
    [mail] = team.mails_to(email)
    link = mail.link("http")
    assert link.startswith(f"{BASE_URL}/join-confirm/bbc_")
    return link.removeprefix(BASE_URL)


async def confirm(browser: httpx.AsyncClient, path: str) -> httpx.Response:
    csrf = await csrf_of(browser, path)
    return await browser.post(path, data={"csrf": csrf}, headers=ORIGIN)


def fullwidth(text: str) -> str:
    """`text` in fullwidth forms (U+FF01..U+FF5E), which NFKC makes ASCII again."""
    return "".join(chr(ord(c) + 0xFEE0) for c in text)


def alert(page: httpx.Response) -> str:
    found = re.findall(r'role="alert"[^>]*>(.*?)</p>', page.text, re.S)
    assert found, page.text[:3000]
    return unescape(found[0])


# -- the team's side ------------------------------------------------------------------------------


async def test_a_developer_makes_reads_replaces_and_revokes_a_groups_link(
    team: Team, clock: FrozenClock
) -> None:
    dev = await team.member("dev@example.com", "developer")
    qa = await team.group("QA")
    expires = clock.now() + timedelta(days=30)
    path = link_path(team, qa)

    r = await team.client.post(
        path,
        json={"maxTesters": 100, "allowedEmailDomains": ["Example.COM"],
              "expiresAt": iso_z(expires)},
        headers=dev.headers,
    )  # fmt: skip

    assert r.status_code == 201, r.text
    made = r.json()
    assert set(made) == {"id", "groupId", "state", "maxTesters", "allowedEmailDomains",
                         "expiresAt", "createdAt", "joinedCount", "inGroupCount", "url",
                         "confirmationMailsToday", "confirmationMailsPerDay"}  # fmt: skip
    assert made["url"].startswith(f"{BASE_URL}/join/bbj_")
    assert (made["state"], made["maxTesters"], made["joinedCount"]) == ("live", 100, 0)
    assert made["allowedEmailDomains"] == ["example.com"]
    assert made["expiresAt"] == iso_z(expires)
    r = await team.client.get(path, headers=dev.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {k: v for k, v in made.items() if k != "url"}  # never the URL again

    # Made again: a new token, the old link's page says it was turned off.
    again = await make_link(team, qa)
    assert again["url"] != made["url"]
    assert again["maxTesters"] is None
    r = await team.client.get(page_path(made))
    assert r.status_code == 410
    assert "turned off" in alert(r)
    assert (await team.client.get(page_path(again))).status_code == 200

    r = await team.client.delete(path, headers=dev.headers)
    assert r.status_code == 204
    assert_problem(await team.client.get(path, headers=dev.headers), 404, "join_link_not_found")
    assert_problem(await team.client.delete(path, headers=dev.headers), 404, "join_link_not_found")
    r = await team.client.get(page_path(again))
    assert r.status_code == 410
    assert "turned off by the project's team" in alert(r)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"maxTesters": 0}, "maxTesters"),
        ({"maxTesters": 10001}, "maxTesters"),
        ({"maxTesters": "many"}, "maxTesters"),
        ({"allowedEmailDomains": ["not a domain"]}, "allowedEmailDomains[0]"),
        ({"allowedEmailDomains": ["a@b.example"]}, "allowedEmailDomains[0]"),
        ({"allowedEmailDomains": ["x.example"] * 51}, "allowedEmailDomains"),
        ({"expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt"),
        ({"expiresAt": "2030-01-01T00:00:00"}, "expiresAt"),  # no time zone
        ({"token": "mine"}, "token"),
    ],
)
async def test_a_link_with_bad_fields_is_refused_with_422(
    team: Team, body: dict[str, Any], field: str
) -> None:
    qa = await team.group("QA")
    r = await team.client.post(link_path(team, qa), json=body, headers=team.owner.headers)
    problem = assert_problem(r, 422)
    assert field in [e["field"] for e in problem["errors"]], problem
    assert_problem(await team.client.get(link_path(team, qa), headers=team.owner.headers), 404)


async def test_who_may_make_a_link_and_for_which_group(team: Team) -> None:
    tess = await team.member("tess@example.com")
    qa = await team.group("QA")
    stranger = await team.api.register("stranger@example.com")

    r = await team.client.post(link_path(team, qa), json={}, headers=tess.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await team.client.get(link_path(team, qa), headers=tess.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await team.client.delete(link_path(team, qa), headers=stranger.headers)
    assert_problem(r, 403, "not_a_member")
    r = await team.client.post(link_path(team, qa), json={})
    assert_problem(r, 401)
    r = await team.client.post(link_path(team, "everyone"), json={}, headers=team.owner.headers)
    assert_problem(r, 409, "builtin_group")
    r = await team.client.post(link_path(team, "grp_nope"), json={}, headers=team.owner.headers)
    assert_problem(r, 404, "group_not_found")


def test_the_access_log_hides_join_and_confirmation_tokens() -> None:
    assert loggable_path("/join/bbj_secret") == "/join/{token}"
    assert loggable_path("/join-confirm/bbc_secret") == "/join-confirm/{token}"


# -- joining -----------------------------------------------------------------------------------


async def test_a_stranger_joins_from_the_mail_and_sees_the_groups_builds(
    team: Team, browser: httpx.AsyncClient
) -> None:
    qa = await team.group("QA <b>&</b>")
    build = await team.upload()
    await team.distribute(build["buildId"], groups=[qa])
    made = await make_link(team, qa, maxTesters=5)

    page = await browser.get(page_path(made))
    assert page.status_code == 200
    assert "Join QA &lt;b&gt;&amp;&lt;/b&gt;" in page.text  # escaped
    r = await ask_to_join(browser, page_path(made), "Newbie@Example.com")
    assert r.status_code == 200
    assert "If this address can join" in r.text
    path = await confirmation_of(team, "newbie@example.com")

    # Opening the mail's link joins nobody (mail scanners open links): its button does.
    opened = await browser.get(path)
    assert opened.status_code == 200
    assert "Join QA &lt;b&gt;" in opened.text
    assert (await team.client.get(link_path(team, qa), headers=team.owner.headers)).json()[
        "joinedCount"
    ] == 0
    r = await confirm(browser, path)

    assert (r.status_code, r.headers["location"]) == (303, f"/projects/{team.project['id']}")
    app_page = await browser.get(f"/projects/{team.project['id']}/apps/{team.application['id']}")
    assert app_page.status_code == 200, app_page.text[:500]
    assert build["buildId"] in app_page.text
    r = await team.client.get(f"{team.groups}/{qa}/testers", headers=team.owner.headers)
    [tester] = r.json()["testers"]
    assert (tester["email"], tester["role"], tester["emailVerified"]) == (
        "newbie@example.com", "tester", True,
    )  # fmt: skip
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert r.json()["joinedCount"] == 1
    # The mail's link is used once.
    again = await browser.get(path)
    assert again.status_code == 410


async def test_someone_in_the_group_already_is_told_so_and_not_counted(
    team: Team, browser: httpx.AsyncClient
) -> None:
    tess = await team.member("tess@example.com")
    qa = await team.group("QA", tess.email)
    made = await make_link(team, qa)
    await ask_to_join(browser, page_path(made), tess.email)
    path = await confirmation_of(team, tess.email)

    r = await confirm(browser, path)

    # An account of its own (a password): its owner signs in to reach the project.
    assert (r.status_code, r.headers["location"]) == (
        303, f"/login?next=/projects/{team.project['id']}",
    )  # fmt: skip
    page = await browser.get("/login")
    assert "You are in the group QA already" in page.text
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert r.json()["joinedCount"] == 0


async def test_an_address_with_an_account_gets_the_same_answer_as_one_without(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await team.api.register("known@example.com")
    qa = await team.group("QA")
    made = await make_link(team, qa)

    known = await ask_to_join(browser, page_path(made), "known@example.com")
    unknown = await ask_to_join(browser, page_path(made), "unknown@example.com")

    strip = re.compile(r'name="csrf" value="[^"]+"|<script[^>]*nonce="[^"]+"')
    assert known.status_code == unknown.status_code == 200
    assert strip.sub("", known.text) == strip.sub("", unknown.text)
    await team.run_jobs()
    assert len(team.mails_to("known@example.com")) == len(team.mails_to("unknown@example.com"))


@pytest.mark.parametrize(
    ("allowed", "email"),
    [
        ("bücher.example", "ann@xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "ann@bücher.example"),
        (fullwidth("example.com"), "ann@example.com"),  # fullwidth letters and full stop
        ("example.com", "ann@" + fullwidth("EXAMPLE") + ".com"),
    ],
)
async def test_domains_are_compared_after_nfkc_and_idna(
    team: Team, browser: httpx.AsyncClient, allowed: str, email: str
) -> None:
    qa = await team.group("QA")
    made = await make_link(team, qa, allowedEmailDomains=[allowed])
    r = await ask_to_join(browser, page_path(made), email)
    assert r.status_code == 200, alert(r)
    assert "If this address can join" in r.text


def test_domain_normalisation() -> None:
    assert normal_domain("Bücher.Example.") == "xn--bcher-kva.example"
    assert normal_domain("@" + fullwidth("example.com")) == "example.com"
    assert normal_domain("not a domain") is None


async def test_an_address_of_another_domain_is_refused_and_mailed_nothing(
    team: Team, browser: httpx.AsyncClient
) -> None:
    qa = await team.group("QA")
    made = await make_link(team, qa, allowedEmailDomains=["example.com", "bücher.example"])

    r = await ask_to_join(browser, page_path(made), "eve@example.com.evil.test")

    assert r.status_code == 422
    assert alert(r) == ("This link takes addresses of example.com, xn--bcher-kva.example only."), (
        alert(r)
    )
    await team.run_jobs()
    assert team.mails_to("eve@example.com.evil.test") == []


async def test_an_expired_link_and_a_revoked_one_say_so_and_join_nobody(
    team: Team, browser: httpx.AsyncClient, clock: FrozenClock
) -> None:
    qa = await team.group("QA")
    made = await make_link(team, qa, expiresAt=iso_z(clock.now() + timedelta(hours=1)))
    await ask_to_join(browser, page_path(made), "late@example.com")
    path = await confirmation_of(team, "late@example.com")
    clock.advance(hours=1)

    r = await browser.get(page_path(made))
    assert r.status_code == 410
    assert "has expired" in alert(r)
    csrf = await csrf_of(browser, "/login")  # the expired page has no form: posted anyway
    r = await browser.post(page_path(made), data={"csrf": csrf, "email": "later@example.com"},
                           headers=ORIGIN)  # fmt: skip
    assert r.status_code == 409
    assert "has expired" in alert(r)
    r = await confirm(browser, path)
    assert r.status_code == 409
    assert "has expired" in alert(r)
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert (r.json()["state"], r.json()["joinedCount"]) == ("expired", 0)

    other = await team.group("Beta")
    made = await make_link(team, other)
    await ask_to_join(browser, page_path(made), "gone@example.com")
    path = await confirmation_of(team, "gone@example.com")
    await team.client.delete(link_path(team, other), headers=team.owner.headers)
    r = await confirm(browser, path)
    assert r.status_code == 409
    assert "turned off" in alert(r)
    r = await team.client.get(f"{team.groups}/{other}/testers", headers=team.owner.headers)
    assert r.json()["testers"] == []


async def test_a_full_link_refuses_the_next_one(team: Team, browser: httpx.AsyncClient) -> None:
    qa = await team.group("QA")
    made = await make_link(team, qa, maxTesters=1)
    paths = []
    for email in ("first@example.com", "second@example.com"):
        await ask_to_join(browser, page_path(made), email)
        paths.append(await confirmation_of(team, email))

    first = await confirm(browser, paths[0])
    browser.cookies.clear()
    second = await confirm(browser, paths[1])

    assert first.status_code == 303
    assert second.status_code == 409
    assert "as many testers as it takes" in alert(second)
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert (r.json()["state"], r.json()["joinedCount"]) == ("full", 1)


async def test_asking_is_rate_limited_per_address(team: Team, browser: httpx.AsyncClient) -> None:
    qa = await team.group("QA")
    made = await make_link(team, qa)
    for _ in range(5):
        r = await ask_to_join(browser, page_path(made), "many@example.com")
        assert r.status_code == 200
    r = await ask_to_join(browser, page_path(made), "many@example.com")
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) > 0
    assert "Too many requests to join" in alert(r)
    r = await ask_to_join(browser, page_path(made), "other@example.com")
    assert r.status_code == 200


async def test_a_blocked_address_is_mailed_nothing_and_told_nothing_different(
    team: Team, browser: httpx.AsyncClient, app: FastAPI
) -> None:
    await block(team.client, app, "blocked@example.com")
    qa = await team.group("QA")
    made = await make_link(team, qa)

    r = await ask_to_join(browser, page_path(made), "blocked@example.com")

    assert r.status_code == 200
    assert "If this address can join" in r.text
    await team.run_jobs()
    assert team.mails_to("blocked@example.com") == []


async def test_an_unknown_link_has_a_page_that_says_what_to_do(
    browser: httpx.AsyncClient,
) -> None:
    r = await browser.get("/join/bbj_nothing")
    assert r.status_code == 404
    assert "This join link is not valid" in r.text
    r = await browser.get("/join-confirm/bbc_nothing")
    assert r.status_code == 410


# -- the group page's forms --------------------------------------------------------------------


async def _sign_in(browser: httpx.AsyncClient, team: Team) -> None:
    csrf = await csrf_of(browser, "/login")
    form = {"csrf": csrf, "email": team.owner.email, "password": team.owner.password}
    r = await browser.post("/login", data=form, headers=ORIGIN)
    assert r.status_code == 303, r.text


def field_errors(page: httpx.Response) -> list[str]:
    found = re.findall(r'<p class="error[^"]*" id="e-[^"]+" role="alert">(.*?)</p>', page.text)
    return [unescape(text) for text in found]


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ({"maxTesters": "0"}, "Enter a whole number from 1 to 10,000, or leave it empty."),
        ({"maxTesters": "ten"}, "Enter a whole number from 1 to 10,000, or leave it empty."),
        ({"expiresOn": "31/01/2030"}, "Enter a date such as 2030-01-31, or leave it empty."),
        ({"expiresOn": "2020-01-31"}, "Choose a day after today, or leave it empty."),
        ({"domains": "example.com, not_a"}, "not_a is not a domain name such as example.com."),
        # The API takes at most 50 (its schema); the form no more.
        ({"domains": " ".join(f"d{n}.example" for n in range(51))}, "Enter at most 50 domains."),
    ],
)
async def test_the_group_pages_form_says_what_is_wrong_and_makes_nothing(
    team: Team, browser: httpx.AsyncClient, form: dict[str, str], said: str
) -> None:
    qa = await team.group("QA")
    await _sign_in(browser, team)
    path = f"/projects/{team.project['id']}/groups/{qa}/join-link"
    csrf = await csrf_of(browser, f"/projects/{team.project['id']}/groups")

    r = await browser.post(path, data={"csrf": csrf, **form}, headers=ORIGIN)

    assert r.status_code == 422
    assert any(said in error for error in field_errors(r)), field_errors(r)
    assert_problem(await team.client.get(link_path(team, qa), headers=team.owner.headers), 404)


async def test_a_tester_sees_no_join_link_and_cannot_make_one(
    team: Team, browser: httpx.AsyncClient
) -> None:
    tess = await team.member("tess@example.com")
    qa = await team.group("QA", tess.email)
    await make_link(team, qa)
    csrf = await csrf_of(browser, "/login")
    form = {"csrf": csrf, "email": tess.email, "password": tess.password}
    assert (await browser.post("/login", data=form, headers=ORIGIN)).status_code == 303

    page = await browser.get(f"/projects/{team.project['id']}/groups")
    assert page.status_code == 200
    assert "join-link" not in page.text
    csrf = await csrf_of(browser, f"/projects/{team.project['id']}/groups")
    r = await browser.post(
        f"/projects/{team.project['id']}/groups/{qa}/join-link/revoke",
        data={"csrf": csrf}, headers=ORIGIN,
    )  # fmt: skip
    assert r.status_code == 403
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert r.json()["state"] == "live"


async def test_the_sweeper_forgets_confirmations_a_day_after_they_expire(
    team: Team, browser: httpx.AsyncClient, app: FastAPI, clock: FrozenClock
) -> None:
    qa = await team.group("QA")
    made = await make_link(team, qa)
    await ask_to_join(browser, page_path(made), "slow@example.com")
    ctx = app.state.ctx

    async def kept() -> int:
        async with ctx.sessions() as db:
            return int(await db.scalar(select(func.count()).select_from(JoinRequest)) or 0)

    clock.advance(days=2)
    async with ctx.sessions() as db, db.begin():
        await sweep_join_requests(db, clock.now())
    assert await kept() == 1  # expired a day ago: kept a day more
    clock.advance(seconds=1)
    async with ctx.sessions() as db, db.begin():
        await sweep_join_requests(db, clock.now())
    assert await kept() == 0


async def test_opening_the_page_and_asking_are_rate_limited_per_client_ip(
    team: Team, browser: httpx.AsyncClient
) -> None:
    qa = await team.group("QA")
    made = await make_link(team, qa, allowedEmailDomains=["example.com"])
    csrf = await csrf_of(browser, page_path(made))  # one page of the 60 a minute
    for n in range(30):  # refused domains count too
        r = await browser.post(page_path(made), headers=ORIGIN,
                               data={"csrf": csrf, "email": f"p{n}@elsewhere.test"})  # fmt: skip
        assert r.status_code == 422
    r = await browser.post(page_path(made), headers=ORIGIN,
                           data={"csrf": csrf, "email": "new@example.com"})  # fmt: skip
    assert r.status_code == 429
    assert "Too many requests to join" in alert(r)

    for _ in range(59):
        assert (await browser.get(page_path(made))).status_code == 200
    r = await browser.get(page_path(made))
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) > 0
    assert "Too many pages opened from here" in alert(r)


async def test_an_address_past_its_days_join_mails_is_mailed_nothing_more(
    team: Team, browser: httpx.AsyncClient
) -> None:
    """An address gets at most three join mails a day, whatever link they come from; the page
    answers the same. They are not its invitations: the team still invites it that day."""
    qa, beta = await team.group("QA"), await team.group("Beta")
    made, other = await make_link(team, qa), await make_link(team, beta)
    for made_ in (made, made, other, other):
        r = await ask_to_join(browser, page_path(made_), "popular@example.com")
        assert r.status_code == 200
        assert "If this address can join" in r.text
    await team.run_jobs()
    assert len(team.mails_to("popular@example.com")) == 3

    r = await invite(team, "popular@example.com")
    assert r.status_code == 201, r.text


async def invite(team: Team, email: str) -> httpx.Response:
    return await team.client.post(
        f"/api/projects/{team.project['id']}/invitations",
        json={"email": email, "role": "tester"},
        headers=team.owner.headers,
    )


async def test_whoever_holds_a_public_link_cannot_spend_the_teams_invitations(
    team: Team, browser: httpx.AsyncClient, settings: Settings
) -> None:
    """The drain: a public link's holder types address after address. The link's mails are
    its own budget's, not the invitation caps of its maker or the project: the team still
    invites the people it chose."""
    settings.invitations_per_account_per_day_free = 3
    settings.invitations_per_project_per_day_free = 3
    qa = await team.group("QA")
    made = await make_link(team, qa)

    for n in range(6):
        r = await ask_to_join(browser, page_path(made), f"drain{n}@example.com")
        assert r.status_code == 200, alert(r)
    await team.run_jobs()
    assert all(len(team.mails_to(f"drain{n}@example.com")) == 1 for n in range(6))

    for n in range(3):
        r = await invite(team, f"chosen{n}@example.com")
        assert r.status_code == 201, r.text
    assert_problem(await invite(team, "chosen3@example.com"), 429, "invitation_limit")


async def test_a_links_budget_of_the_day_stops_its_page_and_the_group_page_says_so(
    team: Team, browser: httpx.AsyncClient, settings: Settings, clock: FrozenClock
) -> None:
    settings.join_link_mails_per_day = 2
    qa = await team.group("QA")
    made = await make_link(team, qa)
    assert made["confirmationMailsPerDay"] == 2
    for n in range(2):
        assert (await ask_to_join(browser, page_path(made), f"p{n}@example.com")).status_code == 200

    r = await ask_to_join(browser, page_path(made), "late@example.com")

    assert r.status_code == 429
    assert 0 < int(r.headers["Retry-After"]) <= 86400
    assert alert(r) == (
        "This join link has sent as many confirmation mails as it may today; try again tomorrow."
    )
    await team.run_jobs()
    assert team.mails_to("late@example.com") == []
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert (r.json()["confirmationMailsToday"], r.json()["state"]) == (2, "live")
    await _sign_in(browser, team)
    page = unescape((await browser.get(f"/projects/{team.project['id']}/groups")).text)
    assert "This link sent its 2 confirmation mails of the day" in page
    assert "Your own invitations are not affected" in page

    clock.advance(seconds=86400)  # the next UTC day
    browser.cookies.clear()
    assert (await ask_to_join(browser, page_path(made), "late@example.com")).status_code == 200
    await team.run_jobs()
    assert len(team.mails_to("late@example.com")) == 1


async def test_a_link_keeps_working_when_its_maker_leaves_the_project(
    team: Team, browser: httpx.AsyncClient
) -> None:
    """The link is the project's: a change of staff does not break the group's public
    entrance; whoever manages the groups still sees, replaces or revokes it."""
    dev = await team.member("dev@example.com", "developer")
    qa = await team.group("QA")
    r = await team.client.post(link_path(team, qa), json={}, headers=dev.headers)
    assert r.status_code == 201, r.text
    made = r.json()
    r = await team.client.delete(
        f"/api/projects/{team.project['id']}/members/{dev.user['id']}", headers=team.owner.headers
    )
    assert r.status_code == 204, r.text

    await ask_to_join(browser, page_path(made), "after@example.com")
    r = await confirm(browser, await confirmation_of(team, "after@example.com"))

    assert r.status_code == 303
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert r.json()["joinedCount"] == 1
    assert (await team.client.get(link_path(team, qa), headers=dev.headers)).status_code == 403


async def test_a_server_that_takes_no_new_accounts_joins_only_existing_ones(
    team: Team, browser: httpx.AsyncClient, app: FastAPI
) -> None:
    app.state.ctx.settings.signup = SignupMode.CLOSED
    member = await team.api.login(team.owner)  # an account before the doors closed
    qa = await team.group("QA")
    made = await make_link(team, qa)
    await ask_to_join(browser, page_path(made), "nobody@example.com")
    path = await confirmation_of(team, "nobody@example.com")

    r = await confirm(browser, path)

    assert r.status_code == 403
    assert "This server takes no new accounts" in alert(r)
    r = await team.client.get(link_path(team, qa), headers=member.headers)
    assert r.json()["joinedCount"] == 0


async def test_an_sso_only_server_makes_no_account_through_a_join_link(
    team: Team, browser: httpx.AsyncClient, app: FastAPI
) -> None:
    # BUILDBAY_OIDC_ONLY: accounts come from the identity provider only (its allowed domains
    # included); a join link may still add an existing account, never make one.
    member = await team.api.login(team.owner)  # a session opened before: it keeps working
    qa = await team.group("QA")
    made = await make_link(team, qa)
    settings = app.state.ctx.settings
    settings.oidc_only, settings.oidc_provider_name = True, "Acme SSO"
    await ask_to_join(browser, page_path(made), "outsider@example.com")
    path = await confirmation_of(team, "outsider@example.com")

    r = await confirm(browser, path)

    assert r.status_code == 403
    assert "sign in with Acme SSO" in alert(r)
    assert "bb_session" not in "".join(r.headers.get_list("set-cookie"))
    r = await team.client.get(link_path(team, qa), headers=member.headers)
    assert r.json()["joinedCount"] == 0


async def test_a_confirmation_gives_no_unverified_account_to_whoever_signed_up_with_the_address(
    team: Team, browser: httpx.AsyncClient
) -> None:
    # Someone signs up with an address that is not theirs (never verified: they cannot read
    # its mail), then its owner joins through the link: the squatter must not become a tester.
    squatter = await team.api.register("victim@example.com")
    qa = await team.group("QA")
    build = await team.upload()
    await team.distribute(build["buildId"], groups=[qa])
    made = await make_link(team, qa)
    await ask_to_join(browser, page_path(made), "victim@example.com")
    await team.run_jobs()
    [path] = [
        line.removeprefix(BASE_URL)
        for mail in team.mails_to("victim@example.com")
        for line in mail.text.splitlines()
        if line.startswith(f"{BASE_URL}/join-confirm/")
    ]

    r = await confirm(browser, path)  # the mailbox's owner, not signed in

    assert r.status_code == 409, r.text[:500]
    assert "Forgot your password" in unescape(r.text)
    r = await team.client.get(f"/api/projects/{team.project['id']}", headers=squatter.headers)
    assert_problem(r, 403, "not_a_member")
    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)
    assert r.json()["joinedCount"] == 0

    # Signed in to that account (its password known: whoever made it), the same link joins,
    # and the mail has proved the address is the account's.
    csrf = await csrf_of(browser, "/login")
    r = await browser.post(
        "/login", data={"csrf": csrf, "email": squatter.email, "password": squatter.password},
        headers=ORIGIN,
    )  # fmt: skip
    assert r.status_code == 303, r.text[:500]
    r = await confirm(browser, path)
    assert (r.status_code, r.headers["location"]) == (303, f"/projects/{team.project['id']}")
    r = await team.client.get(f"{team.groups}/{qa}/testers", headers=team.owner.headers)
    [tester] = r.json()["testers"]
    assert (tester["email"], tester["emailVerified"]) == ("victim@example.com", True)


async def test_a_tester_removed_after_joining_still_counts_and_the_team_sees_it(
    team: Team, browser: httpx.AsyncClient
) -> None:
    """`joinedCount` counts the places of `maxTesters` the link gave: removing a tester does
    not give one back (a leaked link's newcomers, removed, make no room for more); the team
    sees how many of them are still in the group."""
    qa = await team.group("QA")
    made = await make_link(team, qa, maxTesters=2)
    joined = []
    for email in ("kept@example.com", "gone@example.com"):
        await ask_to_join(browser, page_path(made), email)
        assert (await confirm(browser, await confirmation_of(team, email))).status_code == 303
        browser.cookies.clear()
        joined.append(email)
    r = await team.client.get(f"{team.groups}/{qa}/testers", headers=team.owner.headers)
    [gone] = [t["userId"] for t in r.json()["testers"] if t["email"] == "gone@example.com"]
    r = await team.client.delete(f"{team.groups}/{qa}/testers/{gone}", headers=team.owner.headers)
    assert r.status_code == 204, r.text

    r = await team.client.get(link_path(team, qa), headers=team.owner.headers)

    assert (r.json()["joinedCount"], r.json()["inGroupCount"], r.json()["state"]) == (2, 1, "full")
    await _sign_in(browser, team)
    page = unescape((await browser.get(f"/projects/{team.project['id']}/groups")).text)
    assert "2 testers joined (1 since removed) of at most 2" in page


async def test_an_sso_only_server_sends_the_owner_of_an_unverified_account_to_the_provider(
    team: Team, browser: httpx.AsyncClient, app: FastAPI
) -> None:
    # No password reset here to prove the address: the provider's sign-in does (sso/signin.py).
    await team.api.register("victim@example.com")
    qa = await team.group("QA")
    made = await make_link(team, qa)
    await ask_to_join(browser, page_path(made), "victim@example.com")
    path = await confirmation_of(team, "victim@example.com")
    settings = app.state.ctx.settings
    settings.oidc_only, settings.oidc_provider_name = True, "Acme SSO"

    r = await confirm(browser, path)

    assert r.status_code == 409, r.text[:500]
    assert alert(r) == (
        "An account with victim@example.com exists but has not verified this address, so it "
        "may not be yours: sign in with Acme SSO (its verified address proves yours), then "
        "open this confirmation link again"
    )
    assert "password" not in alert(r)
