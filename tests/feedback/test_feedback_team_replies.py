"""The team's comments on feedback (issue 38): written by developers and above, read by them and
the tester who sent the feedback, mailed to that tester (through the outbox, to a real SMTP
server) with what the team typed neutralised; and `feedback.updated`, told to a real webhook
receiver that verifies each message with `standardwebhooks`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.feedback.dependencies import feedback_reads
from tests.conftest import Account, Api, assert_problem, iso_z
from tests.feedback.team import Team, png
from tests.invitations.test_invitation_bypasses import block
from tests.smtp import SmtpSink, smtp
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Receiver, receiving

__all__ = ["smtp"]

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings.model_copy(update={"webhook_allow_http": True, "webhook_allow_private": True})


@pytest.fixture
async def app(settings: Settings, clock: FrozenClock) -> AsyncIterator[FastAPI]:
    application = create_app(settings, clock=clock, migrate_on_start=False)
    yield application
    ctx: AppContext = application.state.ctx
    await ctx.webhook_sender.aclose()
    await ctx.dispose()


@pytest.fixture
async def team(client: httpx.AsyncClient, api: Api, app: FastAPI, owner: Account) -> Team:
    return await Team(client, api, app, owner).start()


@pytest.fixture
def receiver() -> Any:
    with receiving() as r:
        yield r


def _mails_to(smtp: SmtpSink, email: str) -> list[Any]:
    return [m for m in smtp.messages() if m.recipients == [email]]


async def test_a_comment_reaches_the_tester_who_sent_the_feedback_by_mail(
    team: Team, smtp: SmtpSink
) -> None:
    tess = await team.member("tess@example.com")
    dev = await team.member("dev@example.com", "developer")
    fid = await team.feedback(await team.build(), tess, text="Crash when I <b>tap</b> save")
    await team.run_jobs()
    smtp.received.clear()

    # What the team types: markup, a line break, a bidirectional override, a stray control.
    reply = "Fixed in the next build.\nThanks <script>alert(1)</script> \u202eevil\x07!"
    r = await team.post_comment(dev, fid, f"  {reply}  ")
    assert r.status_code == 201, r.text
    comment = r.json()
    assert comment["text"] == reply  # stored as typed (trimmed): pages escape it
    assert comment["feedbackId"] == fid
    assert comment["author"] == {"id": dev.user["id"], "name": dev.user["name"], "email": dev.email}
    assert comment["createdAt"] == iso_z(team.ctx.clock.now())
    assert comment["id"].startswith("fbc_")
    await team.run_jobs()

    [mail] = _mails_to(smtp, "tess@example.com")
    subject = str(mail.message["Subject"])
    assert subject == f"{dev.user['name']} replied to your feedback on Acme Android"
    text, html = mail.text.replace("\r\n", "\n"), mail.html
    assert "Fixed in the next build.\nThanks <script>alert(1)</script> evil!" in text
    assert "\u202e" not in text
    assert "\x07" not in text
    assert "\u202e" not in html
    assert "\x07" not in html
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Crash when I &lt;b&gt;tap&lt;/b&gt; save" in html  # their own words, quoted
    assert "Crash when I <b>tap</b> save" in text
    # Their own feedback's page, where the replies are (console/tester_feedback.py).
    page = f"http://testserver/account/feedback#{fid}"
    assert page in text
    assert f'href="{page}"' in html
    # No unsubscribe link that would turn off something else (new builds).
    assert mail.message["List-Unsubscribe"] is None
    # Nobody else is mailed.
    assert [m.recipients for m in smtp.messages()] == [["tess@example.com"]]

    # The tester reads it; so does the team.
    for who in (tess, dev, team.owner):
        r = await team.get(who, f"{team.inbox}/{fid}/comments")
        assert r.status_code == 200, r.text
        assert [c["id"] for c in r.json()["comments"]] == [comment["id"]]


async def test_comments_page_newest_first_and_refuse_bad_text(team: Team) -> None:
    tess = await team.member("tess@example.com")
    fid = await team.feedback(await team.build(), tess)
    made = []
    for n in range(5):
        r = await team.post_comment(team.owner, fid, f"Reply {n}")
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
    seen, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        r = await team.get(tess, f"{team.inbox}/{fid}/comments", **params)
        seen += [c["id"] for c in r.json()["comments"]]
        if (cursor := r.json()["nextCursor"]) is None:
            break
    assert seen == list(reversed(made))
    r = await team.get(team.owner, f"{team.inbox}/{fid}")
    assert r.json()["commentsCount"] == 5

    for text in ("", "   \n ", "x" * 10_001, None, 7, ["a"], "a\x00b"):
        problem = assert_problem(await team.post_comment(team.owner, fid, text), 422)
        assert problem["errors"][0]["field"] == "text", problem
    r = await team.client.post(
        f"{team.inbox}/{fid}/comments",
        json={"text": "ok", "author": "x"},
        headers=team.owner.headers,
    )
    assert_problem(r, 422, "validation_error")
    r = await team.post_comment(team.owner, fid, "y" * 10_000)
    assert r.status_code == 201
    # Testers do not write comments; a stranger even less.
    assert_problem(await team.post_comment(tess, fid, "Me too"), 403, "insufficient_role")
    stranger = await team.api.register("stranger@example.com")
    assert_problem(await team.post_comment(stranger, fid, "Hi"), 403, "not_a_member")
    r = await team.post_comment(team.owner, "fbk_00000000000000000000000000", "Hi")
    assert_problem(r, 404, "feedback_not_found")
    r = await team.get(team.owner, f"{team.inbox}/{fid}")
    assert r.json()["commentsCount"] == 6


async def test_who_gets_no_mail_for_a_comment(team: Team, smtp: SmtpSink) -> None:
    tess = await team.member("tess@example.com")
    gone = await team.member("gone@example.com")
    dev = await team.member("dev@example.com", "developer")
    build = await team.build()
    anonymous = await team.feedback(build, None, email="ring@beta.example")
    by_gone = await team.feedback(build, gone)
    by_dev = await team.feedback(build, dev)
    by_tess = await team.feedback(build, tess)
    r = await team.client.delete(
        f"/api/projects/{team.pid}/members/{gone.user['id']}", headers=team.owner.headers
    )
    assert r.status_code == 204
    await team.run_jobs()
    smtp.received.clear()

    # An app's reporter, named only by an address: no mail (triage.py says why).
    assert (await team.post_comment(dev, anonymous, "Thanks")).status_code == 201
    # A former member: no mail; the comment stands.
    assert (await team.post_comment(dev, by_gone, "Thanks")).status_code == 201
    # The author's own feedback: no mail to themselves.
    assert (await team.post_comment(dev, by_dev, "Note to self")).status_code == 201
    # Someone who blocked all mail from this server on the unsubscribe page: none either.
    await _block(team, "tess@example.com")
    assert (await team.post_comment(dev, by_tess, "Thanks")).status_code == 201
    await team.run_jobs()
    assert smtp.messages() == []


async def _block(team: Team, email: str) -> None:
    """The address's owner blocks mail from the one-click link of an invitation mail."""
    await block(team.client, team.app, email)


async def test_triage_is_told_by_a_self_contained_feedback_updated_event(
    team: Team, receiver: Receiver, app: FastAPI, api: Api
) -> None:
    hooks = Hooks(team.client, app, api)
    tess = await team.member("tess@example.com")
    dev = await team.member("dev@example.com", "developer")
    build = await team.build()
    fid = await team.feedback(build, tess, text="Crash", screenshots=2)
    await hooks.create(team.owner, team.pid, receiver.url, ["feedback.updated"], receiver)
    other = await hooks.create(team.owner, team.pid, receiver.url, ["build.ready"])

    r = await team.patch(dev, fid, {"status": "triaged", "assignee": dev.user["id"]})
    assert r.status_code == 200, r.text
    # The same values again change nothing, and tell nothing; nor does a comment.
    assert (await team.patch(dev, fid, {"status": "triaged"})).status_code == 200
    assert (await team.post_comment(dev, fid, "On it")).status_code == 201
    r = await team.patch(team.owner, fid, {"assignee": None, "status": "resolved"})
    assert r.status_code == 200, r.text
    await hooks.run()

    messages = receiver.by_type("feedback.updated")
    assert len(messages) == 2
    assert all(m.verified_by for m in messages)  # standardwebhooks verified each
    # Two deliveries may arrive in either order: each is told apart by what it says.
    by_status = {m.payload["data"]["status"]: m.payload["data"] for m in messages}
    first, second = by_status["triaged"], by_status["resolved"]
    assert first["id"] == fid
    assert first["status"] == "triaged"
    assert first["assignee"] == {"id": dev.user["id"], "name": dev.user["name"], "email": dev.email}
    assert first["previous"] == {"status": "new", "assignee": None}
    assert first["projectId"] == team.pid
    assert first["projectName"] == "Acme"
    assert first["applicationName"] == "Acme Android"
    assert first["buildId"] == build["buildId"]
    assert first["tester"] == {"id": tess.user["id"], "email": "tess@example.com"}
    assert first["text"] == "Crash"
    assert first["commentsCount"] == 0
    assert "version" in first
    assert first["consoleUrl"] == f"http://testserver/projects/{team.pid}/feedback/{first['id']}"
    assert second["status"] == "resolved"
    assert second["assignee"] is None
    assert second["commentsCount"] == 1
    assert second["previous"] == {
        "status": "triaged",
        "assignee": {"id": dev.user["id"], "name": dev.user["name"], "email": dev.email},
    }
    # The endpoint that did not subscribe got nothing of it.
    deliveries = await hooks.deliveries(team.owner, team.pid, other["id"])
    assert deliveries == []
    # The screenshots' addresses work for 7 days, as feedback.created's: a chat's readers open
    # them later. The API's own last minutes.
    shots = first["screenshots"]
    assert [(s["width"], s["height"]) for s in shots] == [(4, 3), (5, 3)]
    assert {s["url"] for s in shots}.isdisjoint(s["url"] for s in r.json()["screenshots"])
    team.ctx.clock.advance(days=6, hours=23)  # type: ignore[attr-defined]
    for shot, data in zip(shots, (png(4, 3), png(5, 3)), strict=True):
        r = await team.client.get(shot["url"])
        assert r.status_code == 200, r.text
        assert r.content == data
    team.ctx.clock.advance(hours=2)  # type: ignore[attr-defined]
    assert_problem(await team.client.get(shots[0]["url"]), 403, "url_expired")


async def test_latest_comments_of_several_feedback_in_one_read(team: Team) -> None:
    """The tester's own page shows each feedback's newest replies, oldest first: read for a
    whole page at once, each feedback's own cut at `per_feedback`, none for one without."""
    tess = await team.member("tess@example.com")
    build = await team.build()
    busy, quiet, other = [await team.feedback(build, tess) for _ in range(3)]
    for n in range(4):
        await team.comment_row(busy, team.owner, f"busy {n}")
    await team.comment_row(other, team.owner, "other 0")
    async with team.ctx.sessions() as db:
        found = await feedback_reads(team.ctx, Reads.within(db)).latest_comments(
            [busy, quiet, other], 3
        )
    assert {fid: [c.text for c in comments] for fid, comments in found.items()} == {
        busy: ["busy 1", "busy 2", "busy 3"],
        other: ["other 0"],
    }
