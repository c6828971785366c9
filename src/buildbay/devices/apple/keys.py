"""A project's App Store Connect API key: checked when an admin puts it, sealed at rest, and
opened only to sign a token for Apple (devices/apple.py).

- Checked: the private key must load (with `cryptography`) as the EC P-256 key App Store Connect
  issues (its `.p8` file is PKCS #8 PEM); what is sealed is that key written back as PKCS #8
  DER, never the text the admin sent.
- Sealed with AES-256-GCM, under a key derived with HKDF-SHA256 from BUILDBAY_SECRET_KEY for
  this purpose alone (SEAL_INFO), a fresh 96-bit nonce each time, and the project's id as
  associated data: a sealed key copied into another project's row does not open, nor one
  sealed under another secret key.
- Never shown: the API answers the key's id and issuer, who put it and when; no answer, log line
  or problem carries the private key (the schemas hold it only in the request body, and the
  request log writes no body).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime

from cryptography.exceptions import InvalidTag, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.db.concurrency import insert_unless_present
from buildbay.db.reads import Reads
from buildbay.devices.models import AppleApiKey
from buildbay.errors import Conflict, NotFound, ValidationFailed

# What the derived key is for: a key derived with another `info` is another key.
SEAL_INFO = b"buildbay/apple-api-keys/aes-256-gcm/v1"
SEAL_VERSION = b"\x01"  # the first byte of a sealed key: how it was sealed
NONCE_BYTES = 12
TAG_BYTES = 16
P8_FILE = "AuthKey_<keyId>.p8"


class SealBroken(Exception):
    """A sealed key that does not open: sealed under another secret key, for another project,
    or altered."""


class KeySeal:
    """Seals and opens the projects' private keys with one key derived from the server's."""

    def __init__(self, master_key: bytes) -> None:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=SEAL_INFO).derive(
            master_key
        )
        self._aead = AESGCM(derived)

    def seal(self, project_id: str, secret: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return SEAL_VERSION + nonce + self._aead.encrypt(nonce, secret, _bound_to(project_id))

    def open(self, project_id: str, sealed: bytes) -> bytes:
        head = len(SEAL_VERSION) + NONCE_BYTES
        if len(sealed) < head + TAG_BYTES or not sealed.startswith(SEAL_VERSION):
            raise SealBroken("not a sealed key")
        try:
            return self._aead.decrypt(sealed[1:head], sealed[head:], _bound_to(project_id))
        except InvalidTag:
            raise SealBroken("the sealed key does not open for this project") from None


def _bound_to(project_id: str) -> bytes:
    return b"apple_api_keys.project_id=" + project_id.encode()


@dataclass(frozen=True, slots=True)
class AppleKey:
    """A project's key, opened, to sign tokens with (never written anywhere)."""

    key_id: str
    issuer_id: str
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)


@dataclass(frozen=True, slots=True)
class AppleKeyRecord:
    """What the API says of a project's key: never the key itself."""

    project_id: str
    key_id: str
    issuer_id: str
    created_at: datetime
    created_by: str | None  # the admin who put it (None: their account is gone)
    created_by_email: str | None


def private_key_of(pem: str) -> ec.EllipticCurvePrivateKey:
    """The EC P-256 private key of a `.p8` file's text, or 422 `apple_key_invalid` saying why
    (in words of its own: never a piece of the text)."""
    try:
        key = serialization.load_pem_private_key(pem.strip().encode(), password=None)
    except TypeError:  # a key protected by a password
        raise _invalid("is protected by a password; App Store Connect's keys are not") from None
    except (ValueError, UnsupportedAlgorithm):
        raise _invalid(
            f"is not a private key in PEM: send the whole text of the {P8_FILE} file App Store "
            "Connect gave, from -----BEGIN PRIVATE KEY----- to -----END PRIVATE KEY-----"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise _invalid(
            "is not an App Store Connect API key: those are EC P-256 keys (they sign ES256)"
        )
    return key


def _invalid(message: str) -> ValidationFailed:
    return ValidationFailed.for_field("privateKey", message, code="apple_key_invalid")


def key_not_found() -> NotFound:
    return NotFound("The project has no App Store Connect API key", code="apple_key_not_found")


_RECORD = (
    select(
        AppleApiKey.project_id,
        AppleApiKey.key_id,
        AppleApiKey.issuer_id,
        AppleApiKey.created_at,
        AppleApiKey.created_by,
        User.email.label("created_by_email"),
    )
    .outerjoin(User, User.id == AppleApiKey.created_by)
    .where(AppleApiKey.project_id == bindparam("project_id"))
)
_SEALED = select(
    AppleApiKey.key_id, AppleApiKey.issuer_id, AppleApiKey.private_key_encrypted
).where(AppleApiKey.project_id == bindparam("project_id"))


async def apple_key_of(reads: Reads, project_id: str) -> AppleKeyRecord:
    """The project's key as the API shows it, or 404 `apple_key_not_found`."""
    row = await reads.first(_RECORD, {"project_id": project_id})
    if row is None:
        raise key_not_found()
    return AppleKeyRecord(**row)


async def usable_key(reads: Reads, seal: KeySeal, project_id: str) -> AppleKey:
    """The project's key, opened to sign with; 409 `apple_key_missing` without one, and 409
    `apple_key_unreadable` for one sealed under another BUILDBAY_SECRET_KEY."""
    row = await reads.first(_SEALED, {"project_id": project_id})
    if row is None:
        raise Conflict(
            "The project has no App Store Connect API key: an admin adds one first "
            f"(PUT /api/projects/{project_id}/apple-api-key)",
            code="apple_key_missing",
        )
    try:
        der = seal.open(project_id, row["private_key_encrypted"])
    except SealBroken:
        raise Conflict(
            "The project's App Store Connect API key cannot be opened: it was stored under "
            "another BUILDBAY_SECRET_KEY. An admin must put the key again",
            code="apple_key_unreadable",
        ) from None
    key = serialization.load_der_private_key(der, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)  # only such keys are ever sealed
    return AppleKey(row["key_id"], row["issuer_id"], key)


class AppleKeyService:
    """Puts and removes a project's key, in a unit of work."""

    def __init__(self, db: AsyncSession, now: datetime, seal: KeySeal) -> None:
        self.db = db
        self.now = now
        self.seal = seal

    async def put(
        self,
        project_id: str,
        key_id: str,
        issuer_id: str,
        private_key_pem: str,
        by: tuple[str, str],
    ) -> AppleKeyRecord:
        """Store the key (replacing the project's previous one); `by` is the admin's id and
        e-mail."""
        private_key = private_key_of(private_key_pem)
        der = private_key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        values = {
            "key_id": key_id,
            "issuer_id": issuer_id,
            "private_key_encrypted": self.seal.seal(project_id, der),
            "created_by": by[0],
            "created_at": self.now,
        }
        # Two admins putting a key at once: one inserts, the other replaces it (no 500).
        if not await insert_unless_present(
            self.db, AppleApiKey, {"project_id": project_id, **values}
        ):
            await self.db.execute(
                update(AppleApiKey).where(AppleApiKey.project_id == project_id).values(values)
            )
        return AppleKeyRecord(project_id, key_id, issuer_id, self.now, by[0], by[1])

    async def delete(self, project_id: str) -> None:
        """Forget the key (the registrations made with it stay: Apple keeps the devices)."""
        result = await self.db.execute(
            delete(AppleApiKey).where(AppleApiKey.project_id == project_id)
        )
        if not result.rowcount:  # type: ignore[attr-defined]
            raise key_not_found()
