"""A test iPhone for the profile service: a certificate chain made with `cryptography` (a root,
an intermediate, the device's own certificate, as Apple's device CA issues one), the answer
plist a device sends, signed in a CMS SignedData by the device's key, and the steps of an
enrollment over HTTP (the profile, the device's POST, the page after it).

Nothing here is the server's code: the CMS is made by `cryptography`'s PKCS7SignatureBuilder (or
by `openssl cms`), and the profile read back with `plistlib`."""

from __future__ import annotations

import functools
import html
import plistlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import NameOID
from fastapi import FastAPI

from tests.conftest import BASE_URL, Account
from tests.console.test_mail_pages import sign_in

UDID = "00008030-001A2B3C4D5E6F70"
PROFILE_TYPE = "application/x-apple-aspen-config"
Key = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Test Devices Inc."),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def certificate(
    subject: str, key: Key, issuer: str, issuer_key: Key, *, ca: bool, days: int = 30
) -> x509.Certificate:
    now = datetime.now(UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )


@dataclass(frozen=True)
class Chain:
    root: x509.Certificate
    intermediate: x509.Certificate
    certificate: x509.Certificate  # the device's (or the server's) own
    key: Key

    def pem(self) -> tuple[bytes, bytes]:
        """The certificate then its intermediate, and the key, as Let's Encrypt writes them:
        `fullchain.pem` (no root) and `privkey.pem`."""
        certificates = b"".join(
            c.public_bytes(serialization.Encoding.PEM)
            for c in (self.certificate, self.intermediate)
        )
        key = self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return certificates, key


def make_chain(leaf: str, *, rsa_key: bool = False) -> Chain:
    def new_key() -> Key:
        if rsa_key:
            return rsa.generate_private_key(65537, 2048)
        return ec.generate_private_key(ec.SECP256R1())

    root_key, intermediate_key, key = new_key(), new_key(), new_key()
    root = certificate("Test Root CA", root_key, "Test Root CA", root_key, ca=True)
    intermediate = certificate(
        "Test iPhone Device CA", intermediate_key, "Test Root CA", root_key, ca=True
    )
    leaf_certificate = certificate(leaf, key, "Test iPhone Device CA", intermediate_key, ca=False)
    return Chain(root, intermediate, leaf_certificate, key)


@functools.cache
def device_chain() -> Chain:
    """The test iPhone's identity, made once a session."""
    return make_chain(UDID)


def answer(challenge: str | None, **attributes: Any) -> dict[str, Any]:
    """What a device answers a profile service: the attributes asked for, and the challenge."""
    found: dict[str, Any] = {
        "UDID": UDID,
        "PRODUCT": "iPhone14,2",
        "VERSION": "21E236",
        "SERIAL": "F2LXK0ABCD12",
        "DEVICE_NAME": "Ada's iPhone",
    }
    if challenge is not None:
        found["CHALLENGE"] = challenge
    found.update(attributes)
    return {k: v for k, v in found.items() if v is not None}


def sign(content: bytes, chain: Chain | None = None, *, attributes: bool = True) -> bytes:
    """`content` in a CMS SignedData (DER) signed by the device's key, carrying its
    certificate and the intermediate, as a device's answer does."""
    chain = chain or device_chain()
    options = [pkcs7.PKCS7Options.Binary]
    if not attributes:
        options.append(pkcs7.PKCS7Options.NoAttributes)
    return (
        pkcs7.PKCS7SignatureBuilder()
        .set_data(content)
        .add_signer(chain.certificate, chain.key, hashes.SHA256())
        .add_certificate(chain.intermediate)
        .sign(serialization.Encoding.DER, options)
    )


def signed_answer(challenge: str | None, **attributes: Any) -> bytes:
    return sign(plistlib.dumps(answer(challenge, **attributes)))


def path_of(url: str) -> str:
    assert url.startswith(BASE_URL), url
    return url.removeprefix(BASE_URL)


@dataclass
class Profile:
    """A profile service .mobileconfig as served, and what it asks for."""

    body: bytes
    payload: dict[str, Any]

    @property
    def url(self) -> str:
        return str(self.payload["PayloadContent"]["URL"])

    @property
    def challenge(self) -> str:
        return str(self.payload["PayloadContent"]["Challenge"])

    @property
    def enroll_path(self) -> str:
        return urlsplit(self.url).path


def read_profile(response: httpx.Response) -> Profile:
    """An unsigned profile, read back with plistlib."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == PROFILE_TYPE
    return Profile(response.content, plistlib.loads(response.content))


async def enroll(client: httpx.AsyncClient, profile: Profile, body: bytes) -> httpx.Response:
    """The device's POST of its answer to the profile's URL."""
    return await client.post(
        profile.enroll_path, content=body, headers={"Content-Type": "application/pkcs7-signature"}
    )


def enrolled_path(response: httpx.Response) -> str:
    """Where a successful enrollment sends the device's Safari."""
    assert response.status_code == 301, response.text
    return path_of(response.headers["location"])


def text_of(page: str) -> str:
    """A page's text, as a person reads it: without tags, entities unescaped, spaces folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


async def enroll_device(app: FastAPI, account: Account, **attributes: Any) -> dict[str, Any]:
    """`account` enrolls a device as a tester does: signed in to the console on their browser,
    the profile, the device's signed answer; the device as the API then shows it."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as browser:
        await sign_in(browser, account.email)
        profile = read_profile(await browser.get("/devices/register.mobileconfig"))
        answered = signed_answer(profile.challenge, **attributes)
        enrolled_path(await enroll(browser, profile, answered))
        r = await browser.get("/api/account/devices", headers=account.headers)
    assert r.status_code == 200, r.text
    udid = str(attributes.get("UDID", UDID)).upper()
    [device] = [d for d in r.json()["devices"] if d["udid"] == udid]
    return dict(device)
