"""CMS (PKCS#7) both ways for device enrollment: the signature on the .mobileconfig the server
hands out, and the check of the signed answer a device sends back.

Read with asn1crypto, checked and signed with `cryptography`: no DER is written or read by hand.

What the check of a device's answer proves: the content is exactly what the key of the
certificate embedded in the answer signed (a changed byte of the content or of the signature is
refused). What it does not prove: that the certificate is a real Apple device's. Apple issues
each device an identity under its "Apple iPhone Device CA", but publishes no stable trust anchor
for it (the CA certificate of its own documentation expired in 2014, and devices answer under
several intermediates since), so a chain check would refuse real iPhones or trust whatever we
pinned. The challenge is what binds an answer to a person (devices/enrollment.py): a tester
can only ever add a device to their own account, and developers choose which devices go into a
profile (docs/ios-devices.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asn1crypto import cms as asn1_cms  # type: ignore[import-untyped]
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.serialization import pkcs7

# The digests a device's signature may use. SHA-1 included: iOS signed its profile service
# answers with it for years, and the signature proves little on its own anyway (above).
_DIGESTS: dict[str, type[hashes.HashAlgorithm]] = {
    "sha1": hashes.SHA1,
    "sha224": hashes.SHA224,
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}


class UnverifiedAnswer(ValueError):
    """A device's answer that is not a CMS SignedData whose one signature verifies; the message
    says why, in words for the page that refuses it."""


@dataclass(frozen=True, slots=True)
class SignedContent:
    content: bytes  # what the signer signed: a device's answer, an XML plist
    signer: str  # the signer certificate's subject, as RFC 4514 text (for the log)


def signed_content(der: bytes) -> SignedContent:
    """The content of a CMS SignedData (DER, or BER as some devices write it) whose one signer
    signed it with the key of a certificate the structure carries. UnverifiedAnswer otherwise:
    for garbage, a detached or unsigned structure, an unknown algorithm, a changed content or
    signature."""
    try:
        return _signed_content(der)
    except UnverifiedAnswer:
        raise
    except InvalidSignature:
        raise UnverifiedAnswer("Its signature does not match what it carries") from None
    except Exception:  # asn1crypto reports malformed input in many exception types
        raise UnverifiedAnswer("It is not a CMS signed message (PKCS#7)") from None


def _signed_content(der: bytes) -> SignedContent:
    info = asn1_cms.ContentInfo.load(der, strict=True)
    if info["content_type"].native != "signed_data":
        raise UnverifiedAnswer("It is a CMS message, but not a signed one")
    signed = info["content"]
    encapsulated = signed["encap_content_info"]
    if encapsulated["content_type"].native != "data" or encapsulated["content"].native is None:
        raise UnverifiedAnswer("The signed message carries no content")
    content: bytes = encapsulated["content"].native
    signers = list(signed["signer_infos"])
    if len(signers) != 1:
        raise UnverifiedAnswer(f"The message has {len(signers)} signatures; a device makes one")
    signer = signers[0]
    certificate = _signer_certificate(signed, signer["sid"])
    digest_name = signer["digest_algorithm"]["algorithm"].native
    digest = _DIGESTS.get(digest_name)
    if digest is None:
        raise UnverifiedAnswer(f"Its digest algorithm ({digest_name}) is not one we check")
    signed_bytes = _what_was_signed(signer, content, digest)
    _verify(certificate, signer, signed_bytes, digest())
    return SignedContent(content, certificate.subject.rfc4514_string())


def _signer_certificate(signed: Any, sid: Any) -> x509.Certificate:
    """The certificate of the signer `sid` names, among those the message carries."""
    for choice in signed["certificates"] or []:
        if choice.name != "certificate":
            continue
        certificate = choice.chosen
        if sid.name == "issuer_and_serial_number":
            named = sid.chosen
            if (
                certificate.issuer == named["issuer"]
                and certificate.serial_number == named["serial_number"].native
            ):
                return x509.load_der_x509_certificate(certificate.dump())
        elif certificate.key_identifier == sid.chosen.native:
            return x509.load_der_x509_certificate(certificate.dump())
    raise UnverifiedAnswer("The message does not carry its signer's certificate")


def _what_was_signed(signer: Any, content: bytes, digest: type[hashes.HashAlgorithm]) -> bytes:
    """The bytes the signature is over: the content itself, or the signed attributes, which
    must then hold the content's digest (RFC 5652, 5.4)."""
    attributes = signer["signed_attrs"]
    if not attributes:
        return content
    found = {attribute["type"].native: attribute["values"] for attribute in attributes}
    if "message_digest" not in found or "content_type" not in found:
        raise UnverifiedAnswer("Its signed attributes lack the content's digest or type")
    if found["content_type"][0].native != "data":
        raise UnverifiedAnswer("Its signed attributes name another content type")
    hasher = hashes.Hash(digest())
    hasher.update(content)
    # A digest of public content, not a secret: compared plainly.
    if hasher.finalize() != found["message_digest"][0].native:
        raise UnverifiedAnswer("Its content is not the content that was signed")
    # Signed as a SET OF (its universal tag), not as the [0] IMPLICIT it is written with.
    signed_bytes: bytes = attributes.untag().dump()
    return signed_bytes


def _verify(
    certificate: x509.Certificate, signer: Any, data: bytes, digest: hashes.HashAlgorithm
) -> None:
    """InvalidSignature unless the certificate's key signed `data`."""
    signature: bytes = signer["signature"].native
    algorithm = signer["signature_algorithm"]
    key = certificate.public_key()
    kind = algorithm.signature_algo
    if isinstance(key, rsa.RSAPublicKey) and kind == "rsassa_pkcs1v15":
        key.verify(signature, data, padding.PKCS1v15(), digest)
    elif isinstance(key, rsa.RSAPublicKey) and kind == "rsassa_pss":
        parameters = algorithm["parameters"]
        pss_digest = _DIGESTS.get(parameters["hash_algorithm"]["algorithm"].native)
        if pss_digest is None:
            raise UnverifiedAnswer("Its RSA-PSS digest is not one we check")
        salt = parameters["salt_length"].native
        key.verify(signature, data, padding.PSS(padding.MGF1(pss_digest()), salt), pss_digest())
    elif isinstance(key, ec.EllipticCurvePublicKey) and kind == "ecdsa":
        key.verify(signature, data, ec.ECDSA(digest))
    else:
        raise UnverifiedAnswer("It is signed with a kind of key we do not check")


# -- signing the profile ----------------------------------------------------------------------

SigningKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


class SigningSetupError(ValueError):
    """The profile signing certificate or key cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class ProfileSigner:
    """Signs the .mobileconfig with a certificate iOS can trust (the server's TLS certificate,
    e.g. Let's Encrypt's `fullchain.pem` and `privkey.pem`), so the install prompt says
    "Verified"; the chain goes with it, for iOS to build the path to a root it knows."""

    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...]
    key: SigningKey

    @classmethod
    def load(cls, certificate_path: Path, key_path: Path) -> ProfileSigner:
        """The certificate whose key is in `key_path` (PEM, not encrypted; RSA or EC), found
        among the PEM certificates of `certificate_path`, and the others as its chain."""
        certificates = _read(certificate_path, "certificate", x509.load_pem_x509_certificates)
        key = _read(key_path, "key", lambda data: serialization.load_pem_private_key(data, None))
        if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
            raise SigningSetupError(
                f"{key_path}: an RSA or EC private key is needed to sign a profile "
                f"(this one is {type(key).__name__})"
            )
        public = _public_bytes(key.public_key())
        mine = [c for c in certificates if _public_bytes(c.public_key()) == public]
        if not mine:
            raise SigningSetupError(
                f"No certificate in {certificate_path} is for the key in {key_path}"
            )
        chain = tuple(c for c in certificates if c is not mine[0])
        return cls(mine[0], chain, key)

    def sign(self, content: bytes) -> bytes:
        """`content` in a CMS SignedData (DER), with the certificate and its chain."""
        builder = (
            pkcs7.PKCS7SignatureBuilder()
            .set_data(content)
            .add_signer(self.certificate, self.key, hashes.SHA256())
        )
        for certificate in self.chain:
            builder = builder.add_certificate(certificate)
        return builder.sign(serialization.Encoding.DER, [pkcs7.PKCS7Options.Binary])


def _public_bytes(key: Any) -> bytes:
    data: bytes = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return data


def _read(path: Path, what: str, load: Any) -> Any:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningSetupError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    try:
        return load(data)
    except TypeError:  # an encrypted key: no password is given
        raise SigningSetupError(f"{path}: the key must not be encrypted") from None
    except ValueError:
        raise SigningSetupError(f"{path}: not a PEM {what}") from None
