"""Issue 37, "Events and mail": an enrolled device is told as `device.enrolled` to every project
of its tester (a real receiver checks each message with `standardwebhooks`), and mailed, through
the outbox and a real SMTP server, to each developer of those projects who asked for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from tests.conftest import BASE_URL, Account, Api
from tests.console.test_mail_pages import sign_in
from tests.ios.enrolling import (
    UDID,
    enroll,
    enroll_device,
    enrolled_path,
    read_profile,
    signed_answer,
)
from tests.smtp import SmtpSink, smtp
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Receiver, receiving

__all__ = ["smtp"]

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    return settings.model_copy(
        update={
            "webhook_allow_http": True,
            "webhook_allow_private": True,
            "smtp_url": SecretStr(smtp.url),
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
def hooks(client: httpx.AsyncClient, app: FastAPI, api: Api) -> Hooks:
    return Hooks(client, app, api)


async def _events(hooks: Hooks, receiver: Receiver) -> list[dict[str, Any]]:
    await hooks.run()
    assert all(m.verified_by for m in receiver.received)  # standardwebhooks verified each
    payloads = [m.payload for m in receiver.received]
    receiver.received.clear()
    return payloads


async def test_an_enrolled_device_is_told_to_every_project_of_its_tester(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    acme, other = await api.project(owner, "Acme"), await api.project(owner, "Other")
    elsewhere = await api.project(owner, "Not hers")
    tess = await api.register("tess@example.com")
    await api.add_member(owner, acme["id"], tess, "tester")
    await api.add_member(owner, other["id"], tess, "tester")
    for project in (acme, other, elsewhere):
        events = ["device.enrolled", "member.added"]
        await hooks.create(owner, project["id"], receiver.url, events, receiver=receiver)
    await _events(hooks, receiver)

    device = await enroll_device(hooks.app, tess, DEVICE_NAME="Tess <3 iPhone")

    told = await _events(hooks, receiver)
    assert sorted(e["data"]["projectName"] for e in told) == ["Acme", "Other"]
    by_project = {e["data"]["projectId"]: e for e in told}
    event = by_project[acme["id"]]
    assert event["type"] == "device.enrolled"
    assert event["data"] == {
        **device,
        "tester": {"id": tess.user["id"], "name": tess.user["name"], "email": tess.email},
        "reenrolled": False,
        "projectId": acme["id"],
        "projectName": "Acme",
        "consoleUrl": f"{BASE_URL}/projects/{acme['id']}",
    }
    assert device["name"] == "Tess <3 iPhone"

    # Enrolled again (after an iOS update): told again, as such.
    await enroll_device(hooks.app, tess, VERSION="22A3354")
    again = await _events(hooks, receiver)
    assert [e["data"]["reenrolled"] for e in again] == [True, True]
    assert {e["data"]["osVersion"] for e in again} == {"22A3354"}


async def test_an_endpoint_that_did_not_subscribe_hears_nothing(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    acme = await api.project(owner, "Acme")
    tess = await api.register("tess@example.com")
    await api.add_member(owner, acme["id"], tess, "tester")
    await hooks.create(owner, acme["id"], receiver.url, ["build.ready"], receiver=receiver)

    await enroll_device(hooks.app, tess)

    assert await _events(hooks, receiver) == []


async def test_developers_who_asked_get_one_mail_per_enrolled_device(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, smtp: SmtpSink
) -> None:
    acme, other = await api.project(owner, "Acme <Labs>"), await api.project(owner, "Other")
    dev, admin = await api.register("dev@example.com"), await api.register("admin@example.com")
    tess = await api.register("tess@example.com")
    for project in (acme, other):
        await api.add_member(owner, project["id"], dev, "developer")
        await api.add_member(owner, project["id"], tess, "tester")
    await api.add_member(owner, acme["id"], admin, "admin")  # who did not ask
    for project in (acme, other):
        r = await client.put(f"/api/projects/{project['id']}/members/me/device-mail",
                             json={"deviceMail": True}, headers=dev.headers)  # fmt: skip
        assert r.status_code == 200, r.text
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    before = len(smtp.messages())

    await enroll_device(app, tess, DEVICE_NAME="<b>Tess</b>'s iPhone")
    await ctx.jobs.run_until_idle()

    [mail] = smtp.messages()[before:]  # one mail, naming both projects
    assert mail.recipients == ["dev@example.com"]
    assert mail.message["Subject"] == f"{tess.user['name']} enrolled a device: <b>Tess</b>'s iPhone"
    assert UDID in mail.text
    assert "<b>Tess</b>'s iPhone" in mail.text
    assert "iPhone14,2" in mail.text
    assert "provisioning profile" in mail.text
    assert f"Acme <Labs>: {BASE_URL}/projects/{acme['id']}" in mail.text
    assert f"Other: {BASE_URL}/projects/{other['id']}" in mail.text
    # The HTML part escapes whatever the device and the people named.
    assert "&lt;b&gt;Tess&lt;/b&gt;" in mail.html
    assert "<b>Tess</b>" not in mail.html
    assert "Acme &lt;Labs&gt;" in mail.html

    # The same tester enrolling the same device again is no news.
    await enroll_device(app, tess, VERSION="22A3354")
    await ctx.jobs.run_until_idle()
    assert smtp.messages()[before + 1 :] == []
    # A developer's own device is not mailed to them.
    await enroll_device(app, dev, UDID="C" * 40)
    await ctx.jobs.run_until_idle()
    assert smtp.messages()[before + 1 :] == []


async def test_a_refused_answer_tells_no_one(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver, smtp: SmtpSink
) -> None:
    """The event and the mail go with the enrollment's transaction: the answer replayed to a
    spent challenge records nothing, and tells nothing."""
    acme = await api.project(owner, "Acme")
    tess = await api.register("tess@example.com")
    await api.add_member(owner, acme["id"], tess, "tester")
    await hooks.create(owner, acme["id"], receiver.url, ["device.enrolled"], receiver=receiver)
    r = await hooks.client.put(f"/api/projects/{acme['id']}/members/me/device-mail",
                               json={"deviceMail": True}, headers=owner.headers)  # fmt: skip
    assert r.status_code == 200, r.text
    transport = httpx.ASGITransport(app=hooks.app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as browser:
        await sign_in(browser, tess.email)
        profile = read_profile(await browser.get("/devices/register.mobileconfig"))
    await _events(hooks, receiver)
    before = len(smtp.messages())

    enrolled_path(await enroll(hooks.client, profile, signed_answer(profile.challenge)))
    r = await enroll(hooks.client, profile, signed_answer(profile.challenge))
    assert r.status_code == 410

    assert len(await _events(hooks, receiver)) == 1
    assert len(smtp.messages()) == before + 1
