"""Enrolling a device: Apple's over-the-air profile service, in three steps.

1. A person who may enroll (signed in, or holding their own install link) gets a profile
   service `.mobileconfig`: a temporary profile that asks the device for its UDID, model,
   system version, serial number and name, to be sent to `/devices/enroll/<challenge>`. The
   challenge is random, stored hashed, bound to that person, single use, and lives an hour.
2. The device POSTs its answer there: a CMS SignedData (devices/cms.py) whose content is an XML
   plist of those attributes and the challenge again. Checked, the device is recorded as the
   challenge's person's (devices/service.py), in the transaction that spends the challenge.
3. The answer is a 301 to a page the device's Safari opens, without a session: its address holds
   a signed reference that lives an hour (`EnrolledLinks`), not the device's id alone.

Apple's documentation: "Over-the-Air Profile Delivery and Configuration", the Profile Service
payload; the payload keys as in its Configuration Profile Reference.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import plistlib
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit
from xml.parsers.expat import ExpatError

from sqlalchemy import bindparam, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.reads import user_by_id
from buildbay.auth.tokens import derive_key, hash_token
from buildbay.builds.install import InstallTokens
from buildbay.builds.models import Build, InstallLink
from buildbay.console_urls import build_url
from buildbay.constant_time import same_secret
from buildbay.db.reads import Reads
from buildbay.devices.cms import ProfileSigner, UnverifiedAnswer, signed_content
from buildbay.devices.enums import normalise_udid
from buildbay.devices.models import DeviceChallenge
from buildbay.devices.records import DeviceRecord
from buildbay.devices.service import DeviceDescription, DeviceService, Enrolled, device_by_id
from buildbay.errors import BadRequest, Gone, NotFound
from buildbay.ids import ID_PATTERN
from buildbay.projects.models import ProjectMember
from buildbay.text import BIDI_CONTROLS, CONTROL, WHITESPACE, shown_text_problem

CHALLENGE_LIFETIME = timedelta(hours=1)
# A device's answer is a few kilobytes (a plist of five strings and its certificates).
MAX_ANSWER_BYTES = 64 * 1024
PROFILE_MEDIA_TYPE = "application/x-apple-aspen-config"
DEVICE_ATTRIBUTES = ["UDID", "PRODUCT", "VERSION", "SERIAL", "DEVICE_NAME"]
ENROLL_PATH = "/devices/enroll"
ENROLLED_PATH = "/devices/enrolled"
ENROLLED_PAGE_LIFETIME = timedelta(hours=1)
# The name a device is recorded under at most: Apple's limit for a registered device's name.
NAME_MAX = 50

# What a device says of its model, system and serial: printable ASCII, no space.
_PRODUCT = re.compile(r"[\x21-\x7e]{1,64}")
_VERSION = re.compile(r"[\x21-\x7e]{1,32}")
_SERIAL = re.compile(r"[\x21-\x7e]{1,64}")
_NOT_SHOWN = str.maketrans(dict.fromkeys(map(ord, CONTROL + BIDI_CONTROLS), " "))


@dataclass(frozen=True, slots=True)
class ChallengeRecord:
    token_hash: str
    user_id: str
    build_id: str | None
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None


_CHALLENGE = select(
    DeviceChallenge.token_hash,
    DeviceChallenge.user_id,
    DeviceChallenge.build_id,
    DeviceChallenge.created_at,
    DeviceChallenge.expires_at,
    DeviceChallenge.used_at,
).where(DeviceChallenge.token_hash == bindparam("token_hash"))
_MEMBER_OF_BUILDS_PROJECT = (
    select(Build.id)
    .join(ProjectMember, ProjectMember.project_id == Build.project_id)
    .where(Build.id == bindparam("build_id"), ProjectMember.user_id == bindparam("user_id"))
)
_BUILD_PLACE = select(Build.project_id, Build.application_id).where(
    Build.id == bindparam("build_id")
)
_OWN_LIVE_LINK = (
    select(InstallLink.id)
    .where(
        InstallLink.build_id == bindparam("build_id"),
        InstallLink.owner_id == bindparam("owner_id"),
        InstallLink.revoked_at.is_(None),
        InstallLink.expires_at > bindparam("now"),
    )
    .order_by(InstallLink.id.desc())
    .limit(1)
)


def profile_service(public_url: str, challenge: str, account: str) -> dict[str, Any]:
    """The Profile Service payload: where the device sends which of its attributes, with the
    challenge that binds its answer to the person who asked for the profile, and that person's
    address (`account`) in the description iOS shows before it installs the profile: someone
    handed another's profile sees whose account their device would join."""
    host = urlsplit(public_url).hostname or "localhost"
    return {
        "PayloadType": "Profile Service",
        "PayloadVersion": 1,
        "PayloadIdentifier": f"{_reverse_dns(host)}.buildbay.profile-service",
        "PayloadUUID": str(uuid.uuid4()).upper(),
        "PayloadDisplayName": "Buildbay: register this device",
        "PayloadOrganization": f"Buildbay ({host})",
        "PayloadDescription": (
            f"Registers this device to the Buildbay account of {account} at {host}: sends its "
            "UDID, model, system version, serial number and name there, so that the developers "
            "can make builds that install on it. Nothing stays installed: the profile only asks "
            "the device for these. If this is not your account, do not install it."
        ),
        "PayloadContent": {
            "URL": f"{public_url}{ENROLL_PATH}/{challenge}",
            "DeviceAttributes": list(DEVICE_ATTRIBUTES),
            "Challenge": challenge,
        },
    }


def _reverse_dns(host: str) -> str:
    """`buildbay.example.com` as a payload identifier's prefix, `com.example.buildbay`; an
    address or a bare name gives `local`."""
    if "." not in host or host.replace(".", "").isdigit() or ":" in host:
        return "local"
    return ".".join(reversed([label for label in host.lower().split(".") if label]))


def mobileconfig(payload: dict[str, Any], signer: ProfileSigner | None) -> bytes:
    """The profile as served: an XML plist, signed (CMS, DER) when a signer is set."""
    document = plistlib.dumps(payload, fmt=plistlib.FMT_XML)
    return signer.sign(document) if signer is not None else document


def read_answer(body: bytes) -> tuple[DeviceDescription, str]:
    """What a device's signed answer says (its attributes, and the challenge it carries), or
    400 for anything that is not a signed plist of a device's attributes."""
    try:
        content = signed_content(body).content
    except UnverifiedAnswer as exc:
        raise BadRequest(
            f"This is not a device's signed answer: {exc}.", code="answer_not_signed"
        ) from None
    try:
        # XML, as devices write it: the binary format's object references are no reader's
        # business here.
        attributes = plistlib.loads(content, fmt=plistlib.FMT_XML)
    except (plistlib.InvalidFileException, ExpatError, ValueError, TypeError, OverflowError,
            RecursionError):  # fmt: skip
        raise BadRequest(
            "The signed answer does not hold an XML property list", code="answer_not_a_plist"
        ) from None
    if not isinstance(attributes, dict):
        raise BadRequest("The signed answer's property list is not a dictionary",
                         code="answer_not_a_plist")  # fmt: skip
    udid = attributes.get("UDID")
    if not isinstance(udid, str) or not udid.strip():
        raise BadRequest("The answer names no UDID", code="udid_missing")
    normal = normalise_udid(udid)
    if normal is None:
        raise BadRequest(
            "The answer's UDID is not one: 40 hexadecimal digits, 8 and 16 joined by a dash, "
            "or a Mac's UUID",
            code="udid_invalid",
        )
    product = _attribute(attributes, "PRODUCT", _PRODUCT)
    version = _attribute(attributes, "VERSION", _VERSION)
    serial = _attribute(attributes, "SERIAL", _SERIAL) if "SERIAL" in attributes else None
    challenge = attributes.get("CHALLENGE")
    if not isinstance(challenge, str):
        raise BadRequest("The answer carries no challenge", code="challenge_missing")
    name = _shown_name(attributes.get("DEVICE_NAME"), product)
    return DeviceDescription(normal, product, version, serial, name), challenge


def _attribute(attributes: dict[str, Any], key: str, pattern: re.Pattern[str]) -> str:
    value = attributes.get(key)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise BadRequest(
            f"The answer's {key} is missing or not what a device sends",
            code="device_attribute_invalid",
        )
    return value


def _shown_name(value: object, product: str) -> str:
    """The device's name as pages, mails and Apple's list may show it: no control or
    bidirectional-control character, trimmed, at most NAME_MAX characters; the model's family
    (`iPhone`, `iPad`, `Mac`) if it sends none, or one that shows nothing (zero-width
    characters alone: a rename refuses such a name too)."""
    name = " ".join(value.translate(_NOT_SHOWN).split()) if isinstance(value, str) else ""
    name = name.strip(WHITESPACE)[:NAME_MAX].strip(WHITESPACE)
    if name and shown_text_problem(name) is None:
        return name
    family = re.match(r"[A-Za-z]+", product)
    return family.group() if family else "Device"


class EnrolledLinks:
    """The page a device's Safari opens once it has enrolled:
    `{device}.{person}.{build}.{expiry}.{mac}`, for an hour. No session: the device's browser
    has none; the reference is the credential. It names the person the device was enrolled for:
    once the device is someone else's, the page is gone (it would show their device, and lead
    to their own install link)."""

    def __init__(self, master_key: bytes, public_url: str) -> None:
        self._key = derive_key(master_key, "device-enrolled-page")
        self.public_url = public_url

    def _mac(self, text: str) -> str:
        digest = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:18]).decode()

    def url(self, device_id: str, user_id: str, build_id: str | None, now: datetime) -> str:
        expires = int((now + ENROLLED_PAGE_LIFETIME).timestamp())
        text = f"{device_id}.{user_id}.{build_id or '-'}.{expires}"
        return f"{self.public_url}{ENROLLED_PATH}/{text}.{self._mac(text)}"

    def open(self, reference: str, now: datetime) -> tuple[str, str, str | None]:
        """The device, its person and the build a reference names; 404 if this server did not
        make it, 410 once it has expired."""
        parts = reference.split(".")
        if len(parts) != 5 or len(reference) > 200 or not reference.isascii():
            raise _no_such_page()
        device_id, user_id, build_id, expires, mac = parts
        if not same_secret(mac, self._mac(f"{device_id}.{user_id}.{build_id}.{expires}")):
            raise _no_such_page()
        if not expires.isdigit() or int(expires) <= now.timestamp():
            raise Gone(
                "This page was for the hour after the device registered; your devices are on "
                "your account page",
                code="enrolled_page_expired",
            )
        return device_id, user_id, None if build_id == "-" else build_id


def _no_such_page() -> NotFound:
    return NotFound("There is no such page", code="enrolled_page_not_found")


@dataclass(frozen=True, slots=True)
class EnrolledPage:
    device: DeviceRecord
    back_url: str | None  # the build the tester came from: their install page, or its console page


class Enrollment:
    """The profile service: profiles handed out, answers taken. In a unit of work."""

    def __init__(
        self,
        db: AsyncSession,
        now: datetime,
        public_url: str,
        signer: ProfileSigner | None,
        devices: DeviceService,
        links: EnrolledLinks,
        install_tokens: InstallTokens,
    ) -> None:
        self.db = db
        self.now = now
        self.public_url = public_url
        self.signer = signer
        self.devices = devices
        self.links = links
        self.install_tokens = install_tokens
        self.reads = Reads.within(db)

    async def profile(self, user_id: str, build_id: str | None = None) -> bytes:
        """A new challenge for `user_id` and the .mobileconfig that carries it. `build_id`: the
        build they came from, to lead them back (kept only if they are a member of its
        project). The person's spent and expired challenges go."""
        if build_id is not None and not (
            ID_PATTERN.fullmatch(build_id)
            and await self.reads.first(
                _MEMBER_OF_BUILDS_PROJECT, {"build_id": build_id, "user_id": user_id}
            )
        ):
            build_id = None
        await self.db.execute(
            delete(DeviceChallenge)
            .where(
                DeviceChallenge.user_id == user_id,
                or_(DeviceChallenge.used_at.is_not(None), DeviceChallenge.expires_at <= self.now),
            )
            .execution_options(synchronize_session=False)
        )
        token = secrets.token_urlsafe(32)
        self.db.add(
            DeviceChallenge(
                token_hash=hash_token(token),
                user_id=user_id,
                build_id=build_id,
                created_at=self.now,
                expires_at=self.now + CHALLENGE_LIFETIME,
                used_at=None,
            )
        )
        await self.db.flush()
        person = await user_by_id(self.reads, user_id)
        assert person is not None  # signed in, or the owner of a live install link
        payload = profile_service(self.public_url, token, person.email)
        return mobileconfig(payload, self.signer)

    async def challenge(self, token: str) -> ChallengeRecord:
        """The live challenge `token` names: 404 if there is none, 410 if it was used or has
        expired. Asked before the answer is read: a stale URL costs no reading."""
        row = None
        if 0 < len(token) <= 100:
            row = await self.reads.first(_CHALLENGE, {"token_hash": hash_token(token)})
        if row is None:
            raise NotFound(
                "This registration link is unknown; download the profile again to register the "
                "device",
                code="challenge_not_found",
            )
        challenge = ChallengeRecord(**row)
        if challenge.used_at is not None:
            raise Gone(
                "This registration link was used already; download the profile again to "
                "register another device",
                code="challenge_used",
            )
        if challenge.expires_at <= self.now:
            raise Gone(
                "This registration link has expired (it lives an hour); download the profile again",
                code="challenge_expired",
            )
        return challenge

    async def answer(self, token: str, challenge: ChallengeRecord, body: bytes) -> str:
        """Take a device's answer to `challenge` (the one `token` names): the device recorded
        as the challenge's person's and the challenge spent, together; the address of the page
        that tells them so. 400 for an answer that is not a device's, 410 if another answer
        took the challenge meanwhile."""
        described, carried = read_answer(body)
        if not same_secret(carried, token):
            raise BadRequest(
                "The answer carries another challenge than its address", code="challenge_mismatch"
            )
        taken = await self.db.execute(
            update(DeviceChallenge)
            .where(
                DeviceChallenge.token_hash == challenge.token_hash,
                DeviceChallenge.used_at.is_(None),
                DeviceChallenge.expires_at > self.now,
            )
            .values(used_at=self.now)
            .execution_options(synchronize_session=False)
        )
        if not taken.rowcount:  # type: ignore[attr-defined]
            raise Gone("This registration link was used already", code="challenge_used")
        enrolled: Enrolled = await self.devices.enroll(challenge.user_id, described)
        return self.links.url(enrolled.device.id, challenge.user_id, challenge.build_id, self.now)

    async def enrolled_page(self, reference: str) -> EnrolledPage:
        """What the page after an enrollment shows: the device (410 if it was deleted since, or
        is someone else's now), and the way back to the build the tester came from, if any."""
        device_id, user_id, build_id = self.links.open(reference, self.now)
        device = await device_by_id(self.reads, device_id)
        if device is None or device.user_id != user_id:
            raise Gone("This device was removed from its account since", code="device_gone")
        return EnrolledPage(device, await self._back_to(build_id, device.user_id))

    async def _back_to(self, build_id: str | None, owner_id: str) -> str | None:
        if build_id is None:
            return None
        place = await self.reads.first(_BUILD_PLACE, {"build_id": build_id})
        if place is None:
            return None  # deleted since
        link_id = await self.reads.scalar(
            _OWN_LIVE_LINK, {"build_id": build_id, "owner_id": owner_id, "now": self.now}
        )
        if link_id is not None:
            return f"{self.public_url}/install/{self.install_tokens.token(link_id)}"
        return build_url(self.public_url, place["project_id"], place["application_id"], build_id)
