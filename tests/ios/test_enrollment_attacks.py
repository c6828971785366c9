"""Issue 37's enrollment as an attacker tries it: an answer forged with a certificate of one's
own (the server cannot tell a device's from it: devices/cms.py), under one's own challenge, for
a UDID that is someone else's (every ad-hoc .ipa's profile lists its devices' UDIDs to whoever
downloads it), and the page after enrolling, kept open while the device changes hands."""

from __future__ import annotations

import plistlib
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import BASE_URL, Account, Api
from tests.console.test_mail_pages import sign_in
from tests.ios.enrolling import (
    UDID,
    Profile,
    answer,
    enroll,
    enrolled_path,
    make_chain,
    read_profile,
    sign,
    signed_answer,
    text_of,
)
from tests.ios.test_enrollment import _build_with_tester, _personal_link

pytestmark = pytest.mark.usefixtures("no_leaks")


async def _profile(app: FastAPI, account: Account, query: str = "") -> Profile:
    """The profile `account` downloads, signed in to the console on a browser of their own."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as browser:
        await sign_in(browser, account.email)
        return read_profile(await browser.get("/devices/register.mobileconfig" + query))


def _forged(challenge: str, **attributes: Any) -> bytes:
    """An answer signed by a key and certificate the forger made: no device's."""
    return sign(plistlib.dumps(answer(challenge, **attributes)), make_chain("Forged iPhone"))


async def _udids(client: httpx.AsyncClient, account: Account) -> list[str]:
    r = await client.get("/api/account/devices", headers=account.headers)
    assert r.status_code == 200, r.text
    return [d["udid"] for d in r.json()["devices"]]


async def test_the_page_after_enrolling_is_gone_once_the_device_is_someone_elses(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    """Mallory's page, made when she enrolled a phone from a build, would otherwise show the
    phone's next holder's device and lead to *their* personal install link: a credential."""
    mallory = await api.register("mallory@example.com")
    bob = await api.register("bob@example.com")
    build = await _build_with_tester(api, owner, bob)
    await api.add_member(owner, build["projectId"], mallory, "tester")
    bobs_link = await _personal_link(app, build["buildId"], bob)
    profile = await _profile(app, mallory, f"?build={build['buildId']}")
    mallorys_page = enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
    assert (await client.get(mallorys_page)).status_code == 200

    # Within the hour, the phone is Bob's: he enrolls it through his own install link.
    profile = read_profile(await client.get(f"/install/{bobs_link}/register-device"))
    bobs_page = enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
    assert await _udids(client, bob) == [UDID]

    r = await client.get(mallorys_page)
    assert r.status_code == 410
    assert bobs_link not in r.text
    assert "This device was removed" in text_of(r.text)
    r = await client.get(bobs_page)
    assert r.status_code == 200
    assert f'href="{BASE_URL}/install/{bobs_link}"' in r.text


async def test_a_forged_answer_cannot_take_someone_elses_device(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    """Bob's phone is enrolled; Mallory, a tester of the same project, read its UDID in an
    ad-hoc build's profile. Her answers, under her own challenge with a certificate of her own,
    leave Bob's device his: without its serial number, or with another."""
    mallory = await api.register("mallory@example.com")
    bob = await api.register("bob@example.com")
    build = await _build_with_tester(api, owner, bob)
    await api.add_member(owner, build["projectId"], mallory, "tester")
    profile = await _profile(app, bob)
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))

    for attributes in ({"SERIAL": None}, {"SERIAL": "C39XK1ZZZZ99"}):
        profile = await _profile(app, mallory)
        r = await enroll(client, profile, _forged(profile.challenge, **attributes))

        assert r.status_code == 409, r.text
        assert r.headers["content-type"].startswith("text/html")
        assert "registered to another account" in text_of(r.text)
        assert await _udids(client, bob) == [UDID]
        assert await _udids(client, mallory) == []
    # Nothing was stored, the challenge not spent: a device of her own still enrolls with it.
    enrolled_path(await enroll(client, profile, _forged(profile.challenge, UDID="C" * 40)))
    assert await _udids(client, mallory) == ["C" * 40]

    # The phone itself, handed on to Mallory, names its serial number: hers now.
    profile = await _profile(app, mallory)
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
    assert sorted(await _udids(client, mallory)) == [UDID, "C" * 40]
    assert await _udids(client, bob) == []


async def test_a_device_recorded_without_a_serial_number_goes_to_the_phone_that_names_one(
    app: FastAPI, client: httpx.AsyncClient, api: Api
) -> None:
    """A forger who enrolls a UDID first (without a serial number: they do not know it) does
    not keep the device from its holder."""
    mallory = await api.register("mallory@example.com")
    bob = await api.register("bob@example.com")
    profile = await _profile(app, mallory)
    enrolled_path(await enroll(client, profile, _forged(profile.challenge, SERIAL=None)))

    profile = await _profile(app, bob)
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))

    assert await _udids(client, bob) == [UDID]
    assert await _udids(client, mallory) == []


async def test_a_device_name_that_shows_nothing_is_named_for_its_family(
    app: FastAPI, client: httpx.AsyncClient, api: Api
) -> None:
    """Zero-width characters alone would show developers (their list, their mail, Apple's) a
    device without a name: the account's own rename refuses such a name (422), and an answer's
    is replaced as an absent one is."""
    ada = await api.register("ada@example.com")
    profile = await _profile(app, ada)
    answered = signed_answer(profile.challenge, DEVICE_NAME="\u200b\u2060\ufeff\u00ad \u200b")

    enrolled_path(await enroll(client, profile, answered))

    r = await client.get("/api/account/devices", headers=ada.headers)
    assert [d["name"] for d in r.json()["devices"]] == ["iPhone"]


async def test_the_profile_says_whose_account_the_device_joins(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    """Mallory's profile, sent to Bob to install ("register for the beta"), would enroll Bob's
    phone into her account and show her its UDID and serial number: the profile iOS shows Bob
    before he installs it names the account his device would join."""
    mallory = await api.register("mallory@example.com")
    profile = await _profile(app, mallory)
    assert "mallory@example.com" in profile.payload["PayloadDescription"]

    # The same through a personal install link: the link's person.
    tess = await api.register("tess@example.com")
    build = await _build_with_tester(api, owner, tess)
    token = await _personal_link(app, build["buildId"], tess)
    profile = read_profile(await client.get(f"/install/{token}/register-device"))
    assert "tess@example.com" in profile.payload["PayloadDescription"]
    # An address with what XML would read is text in the plist (plistlib escapes it).
    odd = await api.register("o'brien&co@example.com")
    profile = await _profile(app, odd)
    assert "o'brien&co@example.com" in profile.payload["PayloadDescription"]
    assert b"o&apos;brien&amp;co@example.com" in profile.body or b"o'brien&amp;co" in profile.body
