"""A feedback is told of: a `feedback.created` event (verified by a real receiver with the
`standardwebhooks` package, its screenshots' addresses good for 7 days) and a mail to each
developer of the project who asked for one (through a real SMTP server), both through the
outbox, with the feedback's own transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.feedback.submitting import World, make_world, opened, png, screenshots
from tests.smtp import SmtpSink
from tests.webhooks.receiver import Receiver, receiving

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink().start()
    try:
        yield sink
    finally:
        sink.stop()


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    return settings.model_copy(
        update={
            "smtp_url": SecretStr(smtp.url),
            "webhook_allow_http": True,
            "webhook_allow_private": True,
        }
    )


@pytest.fixture
async def app(settings: Settings, clock: FrozenClock) -> AsyncIterator[FastAPI]:
    application = create_app(settings, clock=clock, migrate_on_start=False)
    yield application
    ctx: AppContext = application.state.ctx
    await ctx.webhook_sender.aclose()
    await ctx.dispose()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


@pytest.fixture
async def world(api: Api, client: httpx.AsyncClient, app: FastAPI, owner: Account) -> World:
    return await make_world(api, client, app, owner)


async def run_outbox(world: World) -> None:
    jobs = world.ctx.jobs
    assert jobs is not None
    await jobs.run_until_idle()


async def mail_opt_in(world: World, account: Account, enabled: bool = True) -> httpx.Response:
    return await world.client.put(
        f"/api/projects/{world.project['id']}/members/me/feedback-mail",
        json={"feedbackMail": enabled},
        headers=account.headers,
    )


async def test_feedback_created_is_a_self_contained_signed_event(
    world: World, receiver: Receiver, clock: FrozenClock
) -> None:
    await run_outbox(world)  # the sign-ups' mails
    r = await world.client.post(
        f"/api/projects/{world.project['id']}/webhooks",
        json={"url": receiver.url, "events": ["feedback.created"]},
        headers=world.owner.headers,
    )
    assert r.status_code == 201, r.text
    receiver.secrets.append(r.json()["secret"])

    r = await world.send(
        world.tester,
        {"text": "Crash on rotate", "context": '{"model": "Pixel 8"}'},
        screenshots(png((12, 10))),
    )
    assert r.status_code == 201, r.text
    sent = r.json()
    await run_outbox(world)

    [message] = receiver.received
    assert message.verified_by  # standardwebhooks verified the signature
    event = message.payload
    assert event["type"] == "feedback.created"
    data = event["data"]
    for name in ("id", "buildId", "tester", "reporterEmail", "category", "text", "context",
                 "status", "createdAt"):  # fmt: skip
        assert data[name] == sent[name], name
    assert data["projectId"] == world.project["id"]
    assert data["applicationId"] == world.application["id"]
    assert (data["projectName"], data["applicationName"]) == ("Acme", "Acme Android")
    assert data["buildFileName"] == "app-release.apk"
    assert "version" in data
    assert data["consoleUrl"] == f"{BASE_URL}/projects/{world.project['id']}/feedback/{sent['id']}"
    # Its screenshots' addresses last days, not minutes: a chat message links to them.
    [shot] = data["screenshots"]
    assert shot["id"] == sent["screenshots"][0]["id"]
    clock.advance(days=6, hours=23)
    served = await world.client.get(shot["url"].removeprefix(BASE_URL))
    assert served.status_code == 200, served.text
    assert opened(served.content).size == (12, 10)
    clock.advance(hours=2)
    assert_problem(await world.client.get(shot["url"].removeprefix(BASE_URL)), 403, "url_expired")


async def test_a_developer_reads_and_sets_their_feedback_mail_as_their_device_mail(
    world: World,
) -> None:
    """`{"feedbackMail": bool}` both ways, as `.../members/me/device-mail` has `deviceMail`."""
    path = f"/api/projects/{world.project['id']}/members/me/feedback-mail"
    dev = world.developer.headers
    r = await world.client.get(path, headers=dev)
    assert (r.status_code, r.json()) == (200, {"feedbackMail": False})
    r = await world.client.put(path, json={"feedbackMail": True}, headers=dev)
    assert (r.status_code, r.json()) == (200, {"feedbackMail": True})
    assert (await world.client.get(path, headers=dev)).json() == {"feedbackMail": True}
    # The owner's own wish is apart from the developer's.
    assert (await world.client.get(path, headers=world.owner.headers)).json() == {
        "feedbackMail": False
    }
    # The body names the setting as the answer does: the former `enabled` is refused.
    r = await world.client.put(path, json={"enabled": False}, headers=dev)
    assert_problem(r, 422, "validation_error")
    assert {e["field"] for e in r.json()["errors"]} >= {"feedbackMail"}
    r = await world.client.put(path, json={"feedbackMail": "no"}, headers=dev)
    assert_problem(r, 422, "validation_error")
    assert (await world.client.get(path, headers=dev)).json() == {"feedbackMail": True}
    # A tester has no such mail to read.
    r = await world.client.get(path, headers=world.tester.headers)
    assert_problem(r, 403, "insufficient_role")


async def test_developers_who_asked_get_a_mail_for_each_feedback(
    world: World, api: Api, smtp: SmtpSink
) -> None:
    admin = await api.register("admin@example.com")
    await api.add_member(world.owner, world.project["id"], admin, "admin")
    quiet = await api.register("quiet@example.com")
    await api.add_member(world.owner, world.project["id"], quiet, "developer")
    for account in (world.developer, admin, world.owner):
        r = await mail_opt_in(world, account)
        assert r.status_code == 200, r.text
        assert r.json() == {"feedbackMail": True}
    r = await mail_opt_in(world, world.owner, enabled=False)  # changed their mind
    assert r.json() == {"feedbackMail": False}
    # A tester cannot ask: the mails are the team's.
    assert_problem(await mail_opt_in(world, world.tester), 403, "insufficient_role")
    await run_outbox(world)
    before = len(smtp.messages())

    text = "<script>alert(1)</script> Crash when I rotate\nthe phone"
    r = await world.send(world.tester, {"text": text, "category": "crash"}, screenshots(png()))
    assert r.status_code == 201, r.text
    await run_outbox(world)

    mails = smtp.messages()[before:]
    assert sorted(m.recipients[0] for m in mails) == sorted([world.developer.email, admin.email])
    mail = mails[0]
    assert str(mail.message["Subject"]).startswith("Crash feedback on Acme Android")
    assert world.tester.email in mail.text
    assert "Crash when I rotate\nthe phone" in mail.text.replace("\r\n", "\n")
    assert "with 1 screenshot" in mail.text
    # It links to the feedback's page in the team's inbox (console/feedback.py).
    assert f"/projects/{world.project['id']}/feedback/{r.json()['id']}" in mail.text
    # The HTML part escapes what the tester wrote.
    assert "<script>" not in mail.html
    assert "&lt;script&gt;" in mail.html


async def test_a_feedback_mail_reads_as_it_was_written_and_says_whose_address_is_unchecked(
    world: World, smtp: SmtpSink
) -> None:
    await mail_opt_in(world, world.developer)
    await run_outbox(world)
    before = len(smtp.messages())
    # A right-to-left override makes "invoice\u202egpj.exe" read "invoiceexe.jpg"; an
    # escape sequence clears a terminal mail reader's screen; a bell rings.
    text = "Open invoice\u202egpj.exe\u202c\x1b[2J\x07 from the menu\r\nthen\ttap"
    r = await world.send(world.tester, {"text": text})
    assert r.status_code == 201, r.text
    assert r.json()["text"] == text  # kept as sent: only the mail leaves them out
    await run_outbox(world)
    [member] = smtp.messages()[before:]
    r = await world.client.put(
        f"/api/projects/{world.project['id']}/applications/{world.application['id']}",
        json={"feedbackMode": "anyone-with-update-key"},
        headers=world.owner.headers,
    )
    assert r.status_code == 200, r.text
    key = {"Authorization": f"UpdateKey {world.application['updateKey']}"}
    r = await world.send(
        key, {"text": "Please look at https://example.net/x", "reporterEmail": world.owner.email}
    )
    assert r.status_code == 201, r.text
    await run_outbox(world)

    [app] = smtp.messages()[before + 1 :]
    for part in (member.text, member.html):
        assert not set(part) & {"\u202e", "\u202c", "\x1b", "\x07"}
    assert "Open invoicegpj.exe[2J from the menu\nthen    tap" in member.text.replace("\r\n", "\n")
    assert f"{world.tester.email} sent crash feedback" in member.text
    assert "not checked" not in member.text
    # Anyone with the update key may type the owner's address: the mail does not vouch for it.
    unchecked = f"{world.owner.email} (an address typed into the app, not checked) sent"
    assert unchecked in app.text
    assert unchecked in app.html.replace("<strong>", "").replace("</strong>", "")
    # How to stop them, as the API takes it.
    assert '{"feedbackMail": false}' in member.text
    r = await world.client.put(
        f"/api/projects/{world.project['id']}/members/me/feedback-mail",
        json={"feedbackMail": False},
        headers=world.developer.headers,
    )
    assert r.status_code == 200, r.text


async def test_a_developer_s_own_feedback_mails_nobody_but_the_others(
    world: World, smtp: SmtpSink
) -> None:
    await mail_opt_in(world, world.developer)
    await run_outbox(world)
    before = len(smtp.messages())
    r = await world.send(world.developer, {"text": "Found while testing"})
    assert r.status_code == 201, r.text
    await run_outbox(world)
    assert smtp.messages()[before:] == []


async def test_feedback_that_fails_tells_nobody(
    world: World, receiver: Receiver, smtp: SmtpSink
) -> None:
    await mail_opt_in(world, world.developer)
    r = await world.client.post(
        f"/api/projects/{world.project['id']}/webhooks",
        json={"url": receiver.url, "events": ["feedback.created"]},
        headers=world.owner.headers,
    )
    assert r.status_code == 201, r.text
    await run_outbox(world)
    before = len(smtp.messages())

    r = await world.send(world.tester, files=screenshots(png(), b"not an image"))
    assert_problem(r, 422, "unreadable_screenshot")
    await run_outbox(world)

    assert receiver.received == []
    assert smtp.messages()[before:] == []
