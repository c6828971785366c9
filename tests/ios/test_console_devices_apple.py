"""The project's devices page with Apple (issue 37): an admin saves the project's App Store
Connect key (never shown again: "Key ABC123 saved"), a refused key is said beside its field and
never put back in the page, and developers register devices with Apple, one or all those
missing, each outcome in words. Apple is a stand-in of our own that checks each request as
Apple documents it (tests/ios/apple_receiver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from buildbay.db.engine import finish
from tests.conftest import Account, Api
from tests.console.test_mail_pages import browser, post, sign_in
from tests.ios.apple_receiver import (
    Answer,
    AppleReceiver,
    apple_error,
    apple_receiving,
    new_team_key,
)
from tests.ios.console_devices import DAN_IPHONE, TESS_IPAD, TESS_IPHONE, enroll
from tests.ios.test_console_devices_install_page import text

__all__ = ["browser"]


@pytest.fixture
def receiver(clock: FrozenClock) -> Iterator[AppleReceiver]:
    with apple_receiving() as r:
        r.now_from(clock.now)
        yield r


@pytest.fixture
def settings(settings: Settings, receiver: AppleReceiver) -> Settings:
    settings.apple_api_url = receiver.url
    settings.apple_api_timeout_seconds = 10
    return settings


class Lead:
    def __init__(self, api: Api, app: FastAPI, owner: Account) -> None:
        self.api, self.app, self.owner = api, app, owner
        self.project: dict[str, str]
        self.tess: Account
        self.dev: Account
        self.devices: dict[str, str] = {}

    @property
    def page(self) -> str:
        return f"/projects/{self.project['id']}/devices"

    async def enroll(
        self, account: Account, udid: str, name: str, model: str = "iPhone15,2"
    ) -> str:
        ctx: AppContext = self.app.state.ctx
        db = ctx.sessions()
        device_id = await enroll(db, account.user["id"], udid, name, model)
        await finish(db, ok=True)
        self.devices[name] = device_id
        return device_id


@pytest.fixture
async def lead(api: Api, app: FastAPI, owner: Account, browser: httpx.AsyncClient) -> Lead:
    lead = Lead(api, app, owner)
    lead.project = await api.project(owner, "Acme")
    lead.tess = await api.register("tess@example.com")
    lead.dev = await api.register("dev@example.com")
    await api.add_member(owner, lead.project["id"], lead.tess, "tester")
    await api.add_member(owner, lead.project["id"], lead.dev, "developer")
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    await lead.enroll(lead.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    await lead.enroll(lead.dev, DAN_IPHONE, "Dev's iPhone")
    await sign_in(browser, owner.email)
    return lead


async def _save_key(lead: Lead, browser: httpx.AsyncClient, receiver: AppleReceiver) -> str:
    key = receiver.trust(new_team_key())
    r = await post(browser, f"{lead.page}/apple-key", key.body(), page=lead.page)
    assert (r.status_code, r.headers["location"]) == (303, f"{lead.page}#apple"), r.text
    return key.key_id


async def test_an_admin_saves_the_key_which_is_never_shown_again(
    lead: Lead, browser: httpx.AsyncClient, receiver: AppleReceiver
) -> None:
    before = await browser.get(lead.page)
    assert "Add the App Store Connect API key" in text(before)
    assert "Register with Apple" not in text(before)  # no key: nothing to send with
    assert f'action="{lead.page}/apple"' not in before.text

    key_id = await _save_key(lead, browser, receiver)

    r = await browser.get(lead.page)
    shown = text(r)
    assert f"Key {key_id} saved." in shown
    assert f"Key {key_id} (issuer " in shown
    assert "BEGIN PRIVATE KEY" not in r.text
    assert next(key.pem for key in receiver.keys.values()).splitlines()[1] not in r.text
    assert "Register all missing" in shown


async def test_a_refused_key_is_said_beside_its_field_and_never_put_back(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    secret = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5IGF0IGFsbA==\n-----END PRIVATE KEY-----\n"

    wrong = {"keyId": "ABC", "issuerId": "x", "privateKey": secret}
    bad_id = await post(browser, f"{lead.page}/apple-key", wrong, page=lead.page)
    bad_key = await post(browser, f"{lead.page}/apple-key", {
        "keyId": "2X9R4HXF34", "issuerId": "57246542-96fe-1a63-e053-0824d011072a",
        "privateKey": secret}, page=lead.page)  # fmt: skip

    assert bad_id.status_code == 422
    said = text(bad_id)
    assert "The key ID must be the key's ID as App Store Connect shows it" in said
    assert "The issuer ID must be the issuer ID App Store Connect shows" in said
    assert 'aria-describedby="e-apple-key-id"' in bad_id.text
    assert bad_key.status_code == 422
    assert "The private key " in text(bad_key)
    assert 'value="2X9R4HXF34"' in bad_key.text
    for r in (bad_id, bad_key):
        assert "bm90IGEga2V5" not in r.text
        assert "privateKey" not in text(r)
        assert "keyId:" not in text(r)


async def test_a_developer_registers_one_device_then_all_those_missing(
    lead: Lead, app: FastAPI, receiver: AppleReceiver
) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://testserver") as developer:  # fmt: skip
        await sign_in(developer, lead.owner.email)
        await _save_key(lead, developer, receiver)
        developer.cookies.clear()
        await sign_in(developer, lead.dev.email)
        iphone = lead.devices["Tess's iPhone"]

        r = await post(developer, f"{lead.page}/{iphone}/apple", {}, page=lead.page)
        assert (r.status_code, r.headers["location"]) == (303, f"{lead.page}#device-{iphone}")
        assert "Tess's iPhone is registered with Apple." in text(await developer.get(lead.page))
        await post(developer, f"{lead.page}/{iphone}/apple", {}, page=lead.page)
        assert "Tess's iPhone was registered with Apple before: nothing sent." in text(
            await developer.get(lead.page)
        )

        receiver.devices[DAN_IPHONE] = "APPLE1"  # Apple has it already
        r = await post(developer, f"{lead.page}/apple", {}, page=lead.page)
        assert (r.status_code, r.headers["location"]) == (303, f"{lead.page}#apple")
        after = await developer.get(lead.page)
        assert "2 devices registered with Apple (1 Apple had already)." in text(after)
        assert after.text.count('class="apple">registered ') == 3
        await post(developer, f"{lead.page}/apple", {}, page=lead.page)
        assert "Every device is registered with Apple already: nothing sent." in text(
            await developer.get(lead.page)
        )
    assert all(not received.problems for received in receiver.received)
    assert sorted(receiver.udids) == sorted([TESS_IPHONE, TESS_IPAD, DAN_IPHONE])


async def test_apple_s_refusals_are_said_in_words(
    lead: Lead, browser: httpx.AsyncClient, receiver: AppleReceiver
) -> None:
    no_key = await post(browser, f"{lead.page}/apple", {}, page=lead.page)
    assert no_key.status_code == 303
    assert "Not registered with Apple: The project has no App Store Connect API key" in text(
        await browser.get(lead.page)
    )

    await _save_key(lead, browser, receiver)
    rejected = apple_error(
        401, "NOT_AUTHORIZED", "Authentication credentials are missing or invalid.",
        "Provide a properly configured and signed bearer token.",
    )  # fmt: skip
    receiver.answers.append(Answer(401, rejected))
    ipad = lead.devices["Tess's iPad"]
    r = await post(browser, f"{lead.page}/{ipad}/apple", {}, page=lead.page)
    assert r.status_code == 303
    shown = text(await browser.get(lead.page))
    assert "Not registered with Apple: " in shown
    assert "key" in shown.split("Not registered with Apple: ")[1].lower()

    # The yearly limit mid-way: what Apple registered before stands, and the notice says so.
    limit = apple_error(403, "FORBIDDEN_ERROR", "This request is forbidden for security reasons",
                        "Your development team has reached the maximum number of registered "
                        "iPhone devices.")  # fmt: skip
    receiver.answers += [Answer(201), Answer(403, limit)]
    r = await post(browser, f"{lead.page}/apple", {}, page=lead.page)
    assert r.status_code == 303
    after = await browser.get(lead.page)
    assert "Registering with Apple stopped after 1 device: " in text(after)
    assert after.text.count('class="apple">registered ') == 1


async def test_a_developer_may_not_touch_the_key_and_a_tester_nothing(
    lead: Lead, app: FastAPI, receiver: AppleReceiver
) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://testserver") as other:  # fmt: skip
        await sign_in(other, lead.dev.email)
        page = await other.get(lead.page)
        assert "Add the App Store Connect API key" not in page.text
        assert "An admin of Acme can add the key here." in text(page)
        r = await post(other, f"{lead.page}/apple-key", new_team_key().body(), page=lead.page)
        assert r.status_code == 403
        other.cookies.clear()
        await sign_in(other, lead.tess.email)
        token = (await other.get("/account")).text.split('name="csrf" value="')[1].split('"')[0]
        r = await other.post(f"{lead.page}/apple", data={"csrf": token},
                             headers={"Origin": "http://testserver"})  # fmt: skip
        assert r.status_code == 403
    assert receiver.received == []
