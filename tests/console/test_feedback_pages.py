"""The feedback inbox's refusals, through the app itself (no browser; the browser scenarios are
test_feedback_inbox.py): an address the console did not give out, an assignee who may not be
one, a reply too long, a tester's post: each a page that says why in a sentence, and nothing
changed."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from tests.conftest import Account, Api
from tests.console.test_distribution_pages import text
from tests.console.test_mail_pages import browser, post, sign_in
from tests.feedback.team import Team

__all__ = ["browser"]


async def _team(client: httpx.AsyncClient, api: Api, app: FastAPI, owner: Account) -> Team:
    return await Team(client, api, app, owner).start()


async def test_the_inbox_refuses_addresses_it_did_not_give_out_in_words(
    client: httpx.AsyncClient, api: Api, app: FastAPI, owner: Account, browser: httpx.AsyncClient
) -> None:
    team = await _team(client, api, app, owner)
    await team.feedback(await team.build())
    await sign_in(browser, owner.email)
    inbox = f"/projects/{team.pid}/feedback"

    for query, said in [
        ("status=bogus", "This address asks for a status the inbox does not have."),
        ("category=praise", "This address asks for a category the inbox does not have."),
        ("build=%3Cscript%3E", "This address names an application or a build the console"),
        ("cursor=%21%21%21", "This address asks for a page of feedback that the console did not"),
    ]:
        r = await browser.get(f"{inbox}?{query}")
        assert r.status_code == 422, query
        assert said in text(r), query
        assert "<script>" not in r.text
    # Filters that match nothing are a page that says so.
    r = await browser.get(f"{inbox}?q=nothing+like+this")
    assert r.status_code == 200
    assert "No feedback matches these filters." in text(r)
    # An application of another project: not found.
    r = await browser.get(f"/projects/{team.pid}/apps/app_01M8000000000000000000000/feedback")
    assert r.status_code == 404
    assert "No application with this id in the project" in text(r)


async def test_triage_and_replies_refused_beside_their_fields_change_nothing(
    client: httpx.AsyncClient, api: Api, app: FastAPI, owner: Account, browser: httpx.AsyncClient
) -> None:
    team = await _team(client, api, app, owner)
    tess = await team.member("tess@example.com")
    fid = await team.feedback(await team.build(), tess)
    await sign_in(browser, owner.email)
    page = f"/projects/{team.pid}/feedback/{fid}"

    r = await post(browser, f"{page}/triage", {"status": "triaged", "assignee": tess.user["id"]},
                   page=page)  # fmt: skip
    assert r.status_code == 422, r.text
    assert (
        "The assignee is a tester of this project; feedback is assigned to a developer, admin "
        "or owner." in text(r)
    )
    r = await post(browser, f"{page}/triage", {"status": "done"}, page=page)
    assert r.status_code == 422, r.text
    assert "Choose a status from the list." in text(r)
    r = await post(browser, f"{page}/comments", {"text": "x" * 10_001}, page=page)
    assert r.status_code == 422, r.text
    assert "A reply is at most 10,000 characters." in text(r)
    r = await post(browser, f"{page}/comments", {"text": "   "}, page=page)
    assert r.status_code == 422, r.text
    assert "Write a reply first." in text(r)

    shown = (await team.get(owner, f"{team.inbox}/{fid}")).json()
    assert (shown["status"], shown["assignee"], shown["commentsCount"]) == ("new", None, 0)

    # A good one: back to the page, which says what was saved.
    r = await post(browser, f"{page}/triage?status=new", {"status": "resolved", "assignee": ""},
                   page=page)  # fmt: skip
    assert r.status_code == 303, r.text
    assert r.headers["location"] == f"{page}?status=new#triage"
    assert "Saved: resolved, assigned to nobody." in text(await browser.get(r.headers["location"]))


async def test_a_tester_may_not_post_triage_or_replies(
    client: httpx.AsyncClient, api: Api, app: FastAPI, owner: Account, browser: httpx.AsyncClient
) -> None:
    team = await _team(client, api, app, owner)
    tess = await team.member("tess@example.com")
    fid = await team.feedback(await team.build(), tess)
    await sign_in(browser, tess.email)
    page = f"/projects/{team.pid}/feedback/{fid}"

    for path, form in ((f"{page}/triage", {"status": "resolved"}),
                       (f"{page}/comments", {"text": "Done myself"})):  # fmt: skip
        r = await post(browser, path, form, page=f"/projects/{team.pid}")
        assert r.status_code == 403, path
        assert "developer" in text(r)
    shown = (await team.get(owner, f"{team.inbox}/{fid}")).json()
    assert (shown["status"], shown["commentsCount"]) == ("new", 0)
