"""Issue 37, "Enrolling a device", end to end through the app: the profile service .mobileconfig
(for a signed-in person, or the person of a personal install link), the device's CMS-signed
answer made the way a device makes it (tests/ios/enrolling.py), and the page after it; and
everything a device, a forger or a slow client may send instead, refused with nothing stored."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import plistlib
import socket
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs7
from fastapi import FastAPI
from sqlalchemy import func, select

from buildbay.auth.models import User
from buildbay.builds.models import InstallLink
from buildbay.clock import FrozenClock
from buildbay.config import ConfigurationError, Settings
from buildbay.context import AppContext
from buildbay.devices.models import Device, DeviceChallenge
from buildbay.ids import new_id
from tests.conftest import BASE_URL, Account, Api
from tests.console.test_mail_pages import sign_in
from tests.ios.enrolling import (
    UDID,
    Chain,
    Profile,
    answer,
    device_chain,
    enroll,
    enrolled_path,
    make_chain,
    read_profile,
    sign,
    signed_answer,
    text_of,
)

pytestmark = pytest.mark.usefixtures("no_leaks")

REGISTER = "/devices/register.mobileconfig"
HTML = {"Accept": "text/html"}


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A person's browser: keeps the console's cookies."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client


@pytest.fixture
async def ada(api: Api, browser: httpx.AsyncClient) -> Account:
    """A tester signed in to the console on `browser`."""
    account = await api.register("ada@example.com")
    await sign_in(browser, account.email)
    return account


async def _profile(browser: httpx.AsyncClient, query: str = "") -> Profile:
    return read_profile(await browser.get(REGISTER + query))


async def _count(app: FastAPI, *where: Any, model: Any = Device) -> int:
    ctx: AppContext = app.state.ctx
    async with ctx.sessions() as db:
        return int(await db.scalar(select(func.count()).select_from(model).where(*where)) or 0)


async def _devices(client: httpx.AsyncClient, account: Account) -> list[dict[str, Any]]:
    r = await client.get("/api/account/devices", headers=account.headers)
    assert r.status_code == 200, r.text
    devices: list[dict[str, Any]] = r.json()["devices"]
    return devices


# -- the profile ------------------------------------------------------------------------------


async def test_a_signed_in_tester_gets_a_profile_service_profile(
    app: FastAPI, browser: httpx.AsyncClient, ada: Account
) -> None:
    r = await browser.get(REGISTER)

    profile = read_profile(r)
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["content-disposition"] == (
        'attachment; filename="register-device.mobileconfig"'
    )
    payload = profile.payload
    assert payload["PayloadType"] == "Profile Service"
    assert payload["PayloadVersion"] == 1
    assert payload["PayloadIdentifier"] == "local.buildbay.profile-service"  # host `testserver`
    assert len(payload["PayloadUUID"]) == 36
    assert payload["PayloadUUID"] == payload["PayloadUUID"].upper()
    assert payload["PayloadDisplayName"] == "Buildbay: register this device"
    assert payload["PayloadOrganization"] == "Buildbay (testserver)"
    assert "UDID" in payload["PayloadDescription"]
    content = payload["PayloadContent"]
    assert content["DeviceAttributes"] == ["UDID", "PRODUCT", "VERSION", "SERIAL", "DEVICE_NAME"]
    challenge = content["Challenge"]
    assert len(challenge) >= 43  # 256 bits
    assert content["URL"] == f"{BASE_URL}/devices/enroll/{challenge}"
    # Stored as its hash only, bound to the person, for an hour.
    ctx: AppContext = app.state.ctx
    async with ctx.sessions() as db:
        [stored] = (await db.scalars(select(DeviceChallenge))).all()
    assert stored.token_hash == hashlib.sha256(challenge.encode()).hexdigest()
    assert stored.user_id == ada.user["id"]
    assert stored.expires_at - stored.created_at == timedelta(hours=1)
    assert stored.used_at is None
    # Each request a challenge of its own, and a new UUID.
    again = await _profile(browser)
    assert again.challenge != challenge
    assert again.payload["PayloadUUID"] != payload["PayloadUUID"]


async def test_someone_not_signed_in_goes_to_sign_in_and_comes_back(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    r = await client.get(f"{REGISTER}?build=bld_01M8172YFE2B5AGRMG9R9ACW0T", headers=HTML)

    assert r.status_code == 303
    assert r.headers["location"] == (
        "/login?next=%2Fdevices%2Fregister.mobileconfig%3Fbuild%3Dbld_01M8172YFE2B5AGRMG9R9ACW0T"
    )
    assert await _count(app, model=DeviceChallenge) == 0


async def test_a_signed_profile_verifies_with_the_configured_certificate(
    settings: Settings, clock: FrozenClock, api: Api, tmp_path: Path
) -> None:
    from buildbay.app import create_app  # an app of its own: signing set before it is built

    server = make_chain("buildbay.example.com", rsa_key=True)
    fullchain, privkey = server.pem()
    (tmp_path / "fullchain.pem").write_bytes(fullchain)
    (tmp_path / "privkey.pem").write_bytes(privkey)
    (tmp_path / "root.pem").write_bytes(server.root.public_bytes(_PEM))
    signed = settings.model_copy(
        update={
            "profile_signing_cert": tmp_path / "fullchain.pem",
            "profile_signing_key": tmp_path / "privkey.pem",
        }
    )
    app = create_app(signed, clock=clock, migrate_on_start=False)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as browser:
            account = await Api(browser).register("ada@example.com")
            await sign_in(browser, account.email)
            r = await browser.get(REGISTER)
    finally:
        await app.state.ctx.dispose()

    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-apple-aspen-config"
    assert not r.content.startswith(b"<?xml")  # DER, not the plist itself
    (tmp_path / "profile.der").write_bytes(r.content)
    # OpenSSL checks the signature with the certificate the profile carries...
    inner = _openssl("smime", "-verify", "-inform", "DER", "-noverify", "-in",
                     tmp_path / "profile.der")  # fmt: skip
    # ...and, given the root, the whole chain up from the server's certificate.
    chained = _openssl("cms", "-verify", "-inform", "DER", "-CAfile", tmp_path / "root.pem",
                       "-purpose", "any", "-in", tmp_path / "profile.der")  # fmt: skip
    assert inner == chained
    payload = plistlib.loads(inner)
    assert payload["PayloadType"] == "Profile Service"
    assert payload["PayloadContent"]["URL"].startswith(f"{BASE_URL}/devices/enroll/")
    # It carries the certificate and its intermediate (iOS builds the path to a known root).
    carried = pkcs7.load_der_pkcs7_certificates(r.content)
    assert {c.subject for c in carried} == {server.certificate.subject, server.intermediate.subject}


_PEM = serialization.Encoding.PEM


def _openssl(*args: object) -> bytes:
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def test_signing_settings_that_cannot_sign_stop_the_server_with_a_clear_error(
    tmp_path: Path,
) -> None:
    server, other = make_chain("buildbay.example.com"), make_chain("elsewhere.example.com")
    fullchain, _ = server.pem()
    _, other_key = other.pem()
    (tmp_path / "fullchain.pem").write_bytes(fullchain)
    (tmp_path / "other.pem").write_bytes(other_key)

    with pytest.raises(ConfigurationError, match="Set both BUILDBAY_PROFILE_SIGNING_CERT"):
        Settings(profile_signing_cert=tmp_path / "fullchain.pem")
    with pytest.raises(ConfigurationError, match=r"No certificate in .* is for the key"):
        Settings(
            profile_signing_cert=tmp_path / "fullchain.pem",
            profile_signing_key=tmp_path / "other.pem",
        )
    with pytest.raises(ConfigurationError, match="not a PEM certificate"):
        Settings(
            profile_signing_cert=tmp_path / "other.pem",
            profile_signing_key=tmp_path / "other.pem",
        )
    with pytest.raises(ConfigurationError, match="cannot read the key"):
        Settings(
            profile_signing_cert=tmp_path / "fullchain.pem",
            profile_signing_key=tmp_path / "missing.pem",
        )


# -- enrolling --------------------------------------------------------------------------------


async def test_a_device_enrolls_and_its_safari_is_told_what_happens_next(
    app: FastAPI, client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    profile = await _profile(browser)

    # The device posts without the browser's cookies: only the challenge says whose it is.
    r = await enroll(client, profile, signed_answer(profile.challenge))

    page_path = enrolled_path(r)
    assert page_path.startswith("/devices/enrolled/")
    [device] = await _devices(client, ada)
    assert device == {
        "id": device["id"],
        "udid": UDID,
        "name": "Ada's iPhone",
        "model": "iPhone14,2",
        "osVersion": "21E236",
        "platform": "ios",
        "serial": "F2LXK0ABCD12",
        "testerId": ada.user["id"],
        "enrolledAt": device["enrolledAt"],
        "lastSeenAt": device["enrolledAt"],
    }
    assert device["id"].startswith("dev_")
    page = await client.get(page_path)  # no session: the device's Safari has none
    assert page.status_code == 200, page.text
    said = text_of(page.text)
    assert "Ada's iPhone is registered" in said
    assert f"UDID {UDID}" in said
    assert "The developers must add this device to the app's provisioning profile" in said
    assert "You will get a mail when a build for your device is ready" in said
    assert "Back to the build" not in said  # registered from the console, not from a build
    assert page.headers["cache-control"] == "no-store"
    assert page_path != f"/devices/enrolled/{device['id']}"  # signed, not the id alone
    # The challenge is spent.
    assert await _count(app, DeviceChallenge.used_at.is_not(None), model=DeviceChallenge) == 1


async def test_an_ipad_and_a_lower_case_udid_are_recorded_as_apple_writes_them(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    udid = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
    profile = await _profile(browser)
    answered = signed_answer(profile.challenge, UDID=udid, PRODUCT="iPad13,1", SERIAL=None)

    enrolled_path(await enroll(client, profile, answered))

    [device] = await _devices(client, ada)
    assert (device["udid"], device["platform"], device["serial"]) == (udid.upper(), "ipados", None)


async def test_a_device_name_reaches_the_page_neutralised(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    name = "<script>alert(1)</script>\u202e\nPhone" + "x" * 80
    profile = await _profile(browser)

    answered = signed_answer(profile.challenge, DEVICE_NAME=name)
    page_path = enrolled_path(await enroll(client, profile, answered))

    [device] = await _devices(client, ada)
    # No control or bidirectional control, at most Apple's 50 characters.
    assert device["name"] == ("<script>alert(1)</script> Phone" + "x" * 80)[:50]
    page = await client.get(page_path)
    assert "<script>alert" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


async def test_a_device_without_a_name_is_named_for_its_family(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    profile = await _profile(browser)
    answered = signed_answer(profile.challenge, DEVICE_NAME=None, PRODUCT="iPhone16,1")

    enrolled_path(await enroll(client, profile, answered))

    assert [d["name"] for d in await _devices(client, ada)] == ["iPhone"]


async def test_an_answer_as_openssl_writes_it_ber_and_sha1_is_taken(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account, tmp_path: Path
) -> None:
    """Devices have signed with SHA-1, and CMS from OpenSSL-based code streams in BER
    (indefinite lengths): the answer is read either way."""
    chain = device_chain()
    certificate, key = chain.pem()
    (tmp_path / "device.pem").write_bytes(certificate)
    (tmp_path / "key.pem").write_bytes(key)
    profile = await _profile(browser)
    (tmp_path / "answer.plist").write_bytes(plistlib.dumps(answer(profile.challenge)))
    body = _openssl("cms", "-sign", "-binary", "-nodetach", "-stream", "-md", "sha1",
                    "-in", tmp_path / "answer.plist", "-signer", tmp_path / "device.pem",
                    "-inkey", tmp_path / "key.pem", "-outform", "DER")  # fmt: skip
    assert body[1] == 0x80  # an indefinite length

    enrolled_path(await enroll(client, profile, body))

    assert [d["udid"] for d in await _devices(client, ada)] == [UDID]


async def test_enrolling_the_same_udid_again_updates_it_and_moves_it_to_its_new_holder(
    app: FastAPI,
    client: httpx.AsyncClient,
    browser: httpx.AsyncClient,
    ada: Account,
    api: Api,
    clock: FrozenClock,
) -> None:
    profile = await _profile(browser)
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
    [first] = await _devices(client, ada)
    r = await client.patch(
        f"/api/account/devices/{first['id']}", json={"name": "Test phone"}, headers=ada.headers
    )
    assert r.status_code == 200, r.text

    # Ada updates iOS and enrolls it again: the same row, her own name for it kept.
    clock.advance(hours=2)
    profile = await _profile(browser)
    enrolled_path(
        await enroll(client, profile, signed_answer(profile.challenge, VERSION="22A3354"))
    )
    [again] = await _devices(client, ada)
    assert again == {**first, "name": "Test phone", "osVersion": "22A3354",
                     "lastSeenAt": again["lastSeenAt"]}  # fmt: skip
    assert again["lastSeenAt"] > first["lastSeenAt"]

    # She hands it to Bob, who enrolls it: his now, under the name it tells.
    bob = await api.register("bob@example.com")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as bobs_browser:
        await sign_in(bobs_browser, bob.email)
        profile = await _profile(bobs_browser)
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
    assert await _devices(client, ada) == []
    [moved] = await _devices(client, bob)
    assert moved["id"] == first["id"]
    assert (moved["testerId"], moved["name"]) == (bob.user["id"], "Ada's iPhone")
    assert moved["enrolledAt"] > first["enrolledAt"]
    assert await _count(app) == 1


# -- personal and shared install links --------------------------------------------------------


async def _build_with_tester(api: Api, owner: Account, tester: Account) -> dict[str, Any]:
    project = await api.project(owner)
    app = await api.application(owner, project["id"], "Acme iOS", platform="other")
    await api.add_member(owner, project["id"], tester, "tester")
    return await api.upload(owner, project["id"], app["id"])


async def _personal_link(app: FastAPI, build_id: str, person: Account) -> str:
    """A personal install link, as a distribution mails one (distribution/service.py writes
    the rows): its token."""
    ctx: AppContext = app.state.ctx
    now = ctx.clock.now()
    link_id = new_id("inl")
    async with ctx.sessions() as db, db.begin():
        db.add(InstallLink(id=link_id, build_id=build_id, created_by=None,
                           owner_id=person.user["id"], created_at=now,
                           expires_at=now + timedelta(days=7), revoked_at=None))  # fmt: skip
    return ctx.install_tokens.token(link_id)


async def test_a_personal_install_link_enrolls_its_person_and_leads_back_to_the_build(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    tess = await api.register("tess@example.com")
    build = await _build_with_tester(api, owner, tess)
    token = await _personal_link(app, build["buildId"], tess)

    # The iPhone's Safari, signed in nowhere: the link is the credential.
    profile = read_profile(await client.get(f"/install/{token}/register-device"))
    page_path = enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))

    [device] = await _devices(client, tess)
    assert device["testerId"] == tess.user["id"]
    page = await client.get(page_path)
    assert f'href="{BASE_URL}/install/{token}">Back to the build' in page.text


async def test_someone_else_signed_in_cannot_use_a_personal_link_to_enroll(
    app: FastAPI, client: httpx.AsyncClient, browser: httpx.AsyncClient, api: Api, owner: Account,
    ada: Account,
) -> None:  # fmt: skip
    tess = await api.register("tess@example.com")
    build = await _build_with_tester(api, owner, tess)
    token = await _personal_link(app, build["buildId"], tess)

    r = await browser.get(f"/install/{token}/register-device")

    assert r.status_code == 403
    assert "This install link is someone else&#39;s" in r.text
    assert await _count(app, model=DeviceChallenge) == 0


async def test_a_shared_install_link_cannot_enroll_and_says_what_to_do(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    tess = await api.register("tess@example.com")
    build = await _build_with_tester(api, owner, tess)
    base = f"/api/app-distribution/{build['projectId']}/{build['applicationId']}/builds"
    r = await client.post(f"{base}/{build['buildId']}/install-link", headers=owner.headers)
    assert r.status_code == 201, r.text
    shared = r.json()["url"].rsplit("/", 1)[1]

    r = await client.get(f"/install/{shared}/register-device")

    assert r.status_code == 403
    assert r.headers["content-type"].startswith("text/html")
    said = text_of(r.text)
    assert "Sign in to register this device" in said
    assert "ask the developers for an install link of your own" in said
    assert (
        'href="/login?next=%2Fdevices%2Fregister.mobileconfig%3Fbuild%3D' + build["buildId"]
    ) in r.text
    assert await _count(app, model=DeviceChallenge) == 0
    # An unknown link is a 404 page.
    r = await client.get("/install/inl_nope.AAAA/register-device")
    assert r.status_code == 404
    assert "Registration link not found" in r.text


async def test_a_build_the_person_is_no_member_of_is_not_led_back_to(
    app: FastAPI, client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account, api: Api,
    owner: Account,
) -> None:  # fmt: skip
    tess = await api.register("tess@example.com")
    build = await _build_with_tester(api, owner, tess)

    profile = await _profile(browser, f"?build={build['buildId']}")
    answered = await enroll(client, profile, signed_answer(profile.challenge))
    page = await client.get(enrolled_path(answered))

    assert "Back to the build" not in page.text
    ctx: AppContext = app.state.ctx
    async with ctx.sessions() as db:
        assert await db.scalar(select(DeviceChallenge.build_id)) is None


# -- what is refused ---------------------------------------------------------------------------


def _tampered_signature(challenge: str) -> bytes:
    body = bytearray(signed_answer(challenge))
    body[-2] ^= 0x01  # inside the signature, the last field of the structure
    return bytes(body)


def _tampered_content(challenge: str) -> bytes:
    body = signed_answer(challenge)
    return body.replace(UDID.encode(), UDID.replace("001A", "001B").encode())


def _tampered_unattributed(challenge: str) -> bytes:
    """Signed over the content itself (no signed attributes), then changed."""
    body = sign(plistlib.dumps(answer(challenge)), attributes=False)
    return body.replace(UDID.encode(), UDID.replace("001A", "001B").encode())


def _signed_by_another_key(challenge: str) -> bytes:
    """Signed by one key, carrying the certificate of another."""
    mine, other = device_chain(), make_chain("Another iPhone")
    forged = Chain(mine.root, mine.intermediate, mine.certificate, other.key)
    return sign(plistlib.dumps(answer(challenge)), forged)


# An XML entity declaration (the start of a "billion laughs"): plistlib refuses every one.
_ENTITY = (
    b'<?xml version="1.0"?><!DOCTYPE plist [<!ENTITY a "aaaaaaaaaa">]>'
    b"<plist><dict><key>UDID</key><string>&a;</string></dict></plist>"
)

REFUSED = {
    "garbage": (lambda c: b"\x00\x01 not a CMS message at all", "answer_not_signed"),
    "a plist, unsigned": (lambda c: plistlib.dumps(answer(c)), "answer_not_signed"),
    "a tampered signature": (_tampered_signature, "answer_not_signed"),
    "a tampered content": (_tampered_content, "answer_not_signed"),
    "a tampered content signed without attributes": (_tampered_unattributed, "answer_not_signed"),
    "a certificate that is not the signer's": (_signed_by_another_key, "answer_not_signed"),
    "signed, not a plist": (lambda c: sign(b"UDID=" + UDID.encode()), "answer_not_a_plist"),
    "a plist that is a list": (lambda c: sign(plistlib.dumps([UDID])), "answer_not_a_plist"),
    "a binary plist": (
        lambda c: sign(plistlib.dumps(answer(c), fmt=plistlib.FMT_BINARY)),
        "answer_not_a_plist",
    ),
    "an XML entity": (lambda c: sign(_ENTITY), "answer_not_a_plist"),
    "no UDID": (lambda c: signed_answer(c, UDID=None), "udid_missing"),
    "a UDID of 39 digits": (lambda c: signed_answer(c, UDID="a" * 39), "udid_invalid"),
    "a UDID that is not hex": (lambda c: signed_answer(c, UDID="G" * 40), "udid_invalid"),
    "a UDID that is a number": (lambda c: signed_answer(c, UDID=12345), "udid_missing"),
    "no PRODUCT": (lambda c: signed_answer(c, PRODUCT=None), "device_attribute_invalid"),
    "a VERSION with a line break": (
        lambda c: signed_answer(c, VERSION="21E\n236"),
        "device_attribute_invalid",
    ),
    "no CHALLENGE": (lambda c: signed_answer(None), "challenge_missing"),
    "another CHALLENGE": (lambda c: signed_answer(c + "x"), "challenge_mismatch"),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_bad_answers_are_refused_with_a_page_and_nothing_stored(
    case: str, app: FastAPI, client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    make, _ = REFUSED[case]
    profile = await _profile(browser)

    r = await enroll(client, profile, make(profile.challenge))

    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "This device could not be registered" in r.text
    assert await _count(app) == 0
    # The challenge was not spent: the device's real answer still goes through.
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))


async def test_each_refusal_says_why(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    profile = await _profile(browser)
    for case, (make, reason) in REFUSED.items():
        r = await enroll(client, profile, make(profile.challenge))
        assert r.status_code == 400, case
        assert _SAID[reason] in text_of(r.text), (case, r.text)


# What the page of each refusal (docs/api.md's codes) says.
_SAID = {
    "answer_not_signed": "This is not a device's signed answer",
    "answer_not_a_plist": "property list",
    "udid_missing": "The answer names no UDID",
    "udid_invalid": "The answer's UDID is not one",
    "device_attribute_invalid": "is missing or not what a device sends",
    "challenge_missing": "The answer carries no challenge",
    "challenge_mismatch": "The answer carries another challenge than its address",
}


async def test_an_unknown_a_used_and_an_expired_challenge_are_refused(
    app: FastAPI,
    client: httpx.AsyncClient,
    browser: httpx.AsyncClient,
    ada: Account,
    clock: FrozenClock,
) -> None:
    r = await client.post("/devices/enroll/no-such-challenge", content=signed_answer("x"))
    assert r.status_code == 404
    assert "Registration link not found" in r.text

    profile = await _profile(browser)
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
    # Replayed: the same answer again.
    r = await enroll(client, profile, signed_answer(profile.challenge))
    assert r.status_code == 410
    assert "was used already" in text_of(r.text)

    late = await _profile(browser)
    clock.advance(hours=1)
    r = await enroll(client, late, signed_answer(late.challenge, UDID="B" * 40))
    assert r.status_code == 410
    assert "has expired" in text_of(r.text)
    assert [d["udid"] for d in await _devices(client, ada)] == [UDID]


class _Counting:
    """A request body that counts how much of it the server pulled."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.pulled = total, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.pulled < self.total:
            size = min(self.chunk, self.total - self.pulled)
            self.pulled += size
            yield b"\x30" * size


TEN_MIB = 10 * 1024 * 1024


async def test_a_10_mib_answer_is_refused_before_it_is_read(
    app: FastAPI, client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    profile = await _profile(browser)

    # Declared: refused on its Content-Length, before a byte of it is read.
    declared = _Counting(TEN_MIB)
    r = await client.post(profile.enroll_path, content=declared,
                          headers={"Content-Length": str(TEN_MIB)})  # fmt: skip
    assert r.status_code == 413
    assert "This answer is too large" in r.text
    assert declared.pulled == 0

    # Streamed without a length: given up as soon as it passes 64 KiB.
    streamed = _Counting(TEN_MIB)
    r = await client.post(profile.enroll_path, content=streamed)
    assert r.status_code == 413
    assert streamed.pulled <= 2 * 64 * 1024
    assert r.headers["connection"] == "close"  # the rest is not waited for

    assert await _count(app) == 0
    enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))


def test_a_real_server_answers_413_to_a_10_mib_answer_without_waiting_for_it(
    threaded_server: str,
) -> None:
    """Over a socket: the headers alone, a 10 MiB Content-Length, and no body; the answer comes
    at once (the body is never waited for)."""
    host, port = threaded_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            b"POST /devices/enroll/anything HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/pkcs7-signature\r\n"
            + f"Content-Length: {TEN_MIB}\r\n\r\n".encode()
        )
        head = conn.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 413 "), head
    assert "connection: close" in head.lower()


async def test_the_page_after_enrolling_lives_an_hour_and_cannot_be_forged(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account, clock: FrozenClock
) -> None:
    profile = await _profile(browser)
    page_path = enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
    [device] = await _devices(client, ada)
    device_id, person, build, expires, mac = page_path.rsplit("/", 1)[1].split(".")
    assert (device_id, person) == (device["id"], ada.user["id"])

    forged = f"/devices/enrolled/{device_id}.{person}.{build}.{int(expires) + 3600}.{mac}"
    assert (await client.get(forged)).status_code == 404
    assert (await client.get(f"/devices/enrolled/{device['id']}")).status_code == 404
    clock.advance(hours=1)
    r = await client.get(page_path)
    assert r.status_code == 410
    assert "This page has expired" in r.text


async def test_the_access_log_never_holds_a_challenge(
    client: httpx.AsyncClient,
    browser: httpx.AsyncClient,
    ada: Account,
    caplog: pytest.LogCaptureFixture,
) -> None:
    profile = await _profile(browser)
    with caplog.at_level(logging.INFO, logger="buildbay.access"):
        page_path = enrolled_path(await enroll(client, profile, signed_answer(profile.challenge)))
        await client.get(page_path)

    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "buildbay.access")
    assert '"POST /devices/enroll/{token}" 301' in logged
    assert '"GET /devices/enrolled/{token}" 200' in logged
    assert profile.challenge not in logged
    assert page_path.rsplit("/", 1)[1] not in logged


async def test_a_deleted_account_takes_its_challenges_with_it(
    app: FastAPI, client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    profile = await _profile(browser)
    ctx: AppContext = app.state.ctx
    async with ctx.sessions() as db, db.begin():
        await db.delete(await db.get_one(User, ada.user["id"]))

    r = await enroll(client, profile, signed_answer(profile.challenge))

    assert r.status_code == 404
    assert await _count(app) == 0


async def test_two_answers_to_one_challenge_at_once_enroll_once(
    app: FastAPI, client: httpx.AsyncClient, browser: httpx.AsyncClient, ada: Account
) -> None:
    profile = await _profile(browser)
    body = signed_answer(profile.challenge)

    answers = await asyncio.gather(*(enroll(client, profile, body) for _ in range(3)))

    assert sorted(r.status_code for r in answers) == [301, 410, 410]
    assert await _count(app) == 1


async def test_the_profile_service_refuses_with_pages_whatever_the_client_accepts(
    client: httpx.AsyncClient,
) -> None:
    """It is for browsers and devices, not the API: its refusals are pages (docs/api.md)."""
    r = await client.post("/devices/enroll/x", content=b"x", headers={"Accept": "application/json"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
