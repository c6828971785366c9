"""What verify takes beside the file for the desktop updaters (Sparkle, electron-updater, App
Installer), which only CI can say: the build's architecture, Sparkle's EdDSA signature of the
file, and the versions a file cannot tell (a .dmg's, an .msi's, an AppImage's).

A version given beside a file that states its own must agree with it: the file is what testers
install, and a feed that announced another version would offer the update again and again.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import asdict, dataclass
from typing import Any

from buildbay.builds.desktop import ARCHITECTURES, architecture_of
from buildbay.builds.macos import architecture_of_app
from buildbay.builds.metadata import DESKTOP_FILES
from buildbay.errors import ValidationFailed

SIGNATURE_BYTES = 64  # an Ed25519 signature


@dataclass(frozen=True, slots=True)
class UpdaterFields:
    architecture: str | None = None  # one of ARCHITECTURES
    sparkle_ed_signature: str | None = None  # base64 of the 64-byte signature
    minimum_os_version: str | None = None
    version: str | None = None
    build_number: str | None = None

    def to_json(self) -> dict[str, Any]:
        """For the payload of a verify finished by a job."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def of_json(cls, value: object) -> UpdaterFields:
        if not isinstance(value, dict):
            return cls()
        return cls(**{k: v for k, v in value.items() if k in cls.__dataclass_fields__})


# Each field that a file may say too: the metadata key it fills, and its name in the request.
_FILLS = (
    ("version", "shortVersion", "version"),
    ("build_number", "buildNumber", "buildNumber"),
    ("minimum_os_version", "minOs", "minimumOsVersion"),
)
FROM_VERIFY = "fromVerify"  # the metadata key listing what verify's fields gave


def needs_sha512(platform: str) -> bool:
    """Whether a build of an application of `platform` gets a SHA-512: a desktop one's, which
    desktop updaters' feeds serve (electron-updater checks the SHA-512). A phone's, or
    `other`'s, does not pay for it: hashing through SHA-512 costs more processor time than the
    SHA-256, on every byte of the upload."""
    return platform in DESKTOP_FILES


def ed_signature_problem(value: str) -> str | None:
    """Why `value` is not the base64 of an Ed25519 signature (Sparkle's `sign_update`
    output), or None."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return "is not base64"
    if len(raw) != SIGNATURE_BYTES:
        return f"is {len(raw)} bytes, not the {SIGNATURE_BYTES} of an Ed25519 signature"
    return None


def with_fields(
    metadata: dict[str, Any] | None, suffix: str, fields: UpdaterFields
) -> tuple[dict[str, Any] | None, str | None]:
    """The build's metadata with what the fields say and the file does not (listed under
    `fromVerify`), and its architecture: the field's, else the one the file names.

    ValidationFailed (`metadata_mismatch`) where a field contradicts the file."""
    merged = dict(metadata or {})
    given: list[str] = []
    for attribute, key, field in _FILLS:
        value = getattr(fields, attribute)
        if value is None:
            continue
        read = merged.get(key)
        if read is None:
            merged[key] = value
            given.append(key)
        elif read != value:
            raise ValidationFailed.for_field(
                field,
                f"the file says {read!r}; send {field} only for a file that does not say it, "
                "or the same",
                code="metadata_mismatch",
            )
    if given:
        merged[FROM_VERIFY] = given
    read_architecture = _architecture_of_file(merged, suffix)
    architecture = fields.architecture or read_architecture
    if fields.architecture and read_architecture and fields.architecture != read_architecture:
        raise ValidationFailed.for_field(
            "architecture",
            f"the file is built for {read_architecture} ({merged.get('arch')})",
            code="metadata_mismatch",
        )
    return (merged or None), architecture


def _architecture_of_file(metadata: dict[str, Any], suffix: str) -> str | None:
    arch = metadata.get("arch")
    if not isinstance(arch, str):
        return None
    found = architecture_of_app(arch) if suffix == "zip" else architecture_of(arch)
    return found if found in ARCHITECTURES else None
