"""What an .apk or an .aab says about itself.

APK: the binary AndroidManifest.xml and resources.arsc, decoded by pyaxmlparser (the manifest and
resource parsers of androguard, without its analysis tools), for the package, versions, SDK
levels, the label and the launcher icon; the signing certificate from the APK Signing Block (v3,
then v2) or, for an APK signed only the old way, from its META-INF PKCS#7 signature.

AAB: base/manifest/AndroidManifest.xml is a protobuf XmlNode (aapt2's Resources.proto), read by
the small decoder below; only the fields a manifest needs are interpreted.

Every part is read through archive.read_entry with a bound, and the signing block by seeking,
never by loading the file.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import struct
import zipfile
from collections.abc import Iterator
from typing import IO, Any

from asn1crypto import cms  # type: ignore[import-untyped]
from pyaxmlparser.arscparser import ARSCParser  # type: ignore[import-untyped]
from pyaxmlparser.arscutil import ARSCResTableConfig  # type: ignore[import-untyped]
from pyaxmlparser.axmlprinter import AXMLPrinter  # type: ignore[import-untyped]

from buildbay.builds.archive import MetadataError, Parsed, open_archive, read_entry

MANIFEST_LIMIT = 4 * 1024 * 1024  # a large app's manifest is ~100 KiB
RESOURCES_LIMIT = 64 * 1024 * 1024  # resources.arsc: tens of MiB in the largest apps
ICON_LIMIT = 2 * 1024 * 1024
SIGNING_BLOCK_LIMIT = 16 * 1024 * 1024  # a few KiB in practice
SIGNATURE_LIMIT = 1024 * 1024  # META-INF/*.RSA
PROTO_DEPTH_LIMIT = 100
PROTO_NODES_LIMIT = 200_000
# What a file says costs no more than this, however many it claims: the icon's configurations
# considered and files decoded, the old-style signature files tried, the signing block's pairs
# and the items looked at on each level of a signature scheme's block.
ICON_CONFIGS_LIMIT = 100
ICON_TRIES_LIMIT = 8
SIGNATURES_LIMIT = 4
SIGNING_PAIRS_LIMIT = 64
SIGNERS_LIMIT = 8

ANDROID = "{http://schemas.android.com/apk/res/android}"
_V1_SIGNATURE = re.compile(r"^META-INF/[^/]+\.(RSA|DSA|EC)$", re.IGNORECASE)
_SIG_BLOCK_MAGIC = b"APK Sig Block 42"
_SIG_V3 = (0xF05368C0, 0x1B93AD61)  # v3 and v3.1 (key rotation): the current certificate
_SIG_V2 = 0x7109871A

# pyaxmlparser logs each oddity of a hostile file as a warning; the outcome is what counts here.
logging.getLogger("pyaxmlparser").setLevel(logging.ERROR)


# -- APK ------------------------------------------------------------------------------------------


def parse_apk(file: IO[bytes]) -> Parsed:
    """Package, versions, SDK levels, name, signing certificate and icon of an .apk."""
    archive, names = open_archive(file)
    with archive:
        entry = names.get("AndroidManifest.xml")
        if entry is None:
            raise MetadataError("no AndroidManifest.xml")
        manifest = _binary_xml(read_entry(archive, entry, MANIFEST_LIMIT))
        package = manifest.get("package")
        if not package:
            raise MetadataError("the manifest names no package")
        resources = None
        if (table := names.get("resources.arsc")) is not None:
            resources = _resource_table(read_entry(archive, table, RESOURCES_LIMIT))
        uses_sdk = manifest.find("uses-sdk")
        application = manifest.find("application")
        label = application.get(ANDROID + "label") if application is not None else None
        icon_ref = application.get(ANDROID + "icon") if application is not None else None
        metadata: dict[str, Any] = {
            "packageName": package,
            "versionName": _string(resources, manifest.get(ANDROID + "versionName")),
            "versionCode": _integer(manifest.get(ANDROID + "versionCode")),
            "minSdk": _integer(uses_sdk.get(ANDROID + "minSdkVersion"))
            if uses_sdk is not None
            else None,
            "targetSdk": _integer(uses_sdk.get(ANDROID + "targetSdkVersion"))
            if uses_sdk is not None
            else None,
            "appName": _string(resources, label),
            "signingCertificateSha256": _certificate_sha256(file, archive, names),
        }
        icon = _icon(archive, names, resources, icon_ref)
    return Parsed(metadata, icon, platform="android")


def _binary_xml(data: bytes) -> Any:
    try:
        printer = AXMLPrinter(data)
        root = printer.get_xml_obj() if printer.is_valid() else None
    except Exception as exc:  # a hostile manifest can break the decoder in many ways
        raise MetadataError(f"AndroidManifest.xml does not decode: {type(exc).__name__}") from None
    if root is None or root.tag != "manifest":
        raise MetadataError("AndroidManifest.xml is not a binary Android manifest")
    return root


def _resource_table(data: bytes) -> Any:
    try:
        return ARSCParser(data)
    except Exception:  # without the table, names and icons stay unknown; the rest is still good
        return None


def _integer(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 0)  # decimal, or 0x... as some tools write it
    except ValueError:
        return None


def _resolved(resources: Any, reference: str | None) -> list[tuple[Any, str]]:
    """Every (configuration, value) of a resource reference such as `@7F030000`."""
    if resources is None or not reference or not reference.startswith("@"):
        return []
    try:
        resource_id, package = resources.parse_id(reference)
        if package not in (None, "") or resource_id is None:
            return []  # the framework's resources (@android:...) are not in the file
        return list(resources.get_resolved_res_configs(resource_id))
    except Exception:
        return []


def _string(resources: Any, value: str | None) -> str | None:
    """A label: as it is, or the default configuration's value of the string it refers to."""
    if not value:
        return None
    if not value.startswith("@"):
        return value
    for config, text in _resolved(resources, value):
        if config == ARSCResTableConfig.default_config() or not config.get_language():
            return str(text) if text else None
    candidates = _resolved(resources, value)
    return str(candidates[0][1]) if candidates and candidates[0][1] else None


def _icon(
    archive: zipfile.ZipFile,
    names: dict[str, zipfile.ZipInfo],
    resources: Any,
    reference: str | None,
) -> bytes | None:
    """The densest PNG the icon resource has (adaptive icons are XML: not shown)."""
    files = []
    for config, path in _resolved(resources, reference)[:ICON_CONFIGS_LIMIT]:
        entry = names.get(str(path))
        if entry is not None and str(path).endswith(".png") and entry.file_size <= ICON_LIMIT:
            try:
                density = int(config.get_density())
            except Exception:
                density = 0
            files.append((density if density < 0xFFFE else 0, entry))
    for _, entry in sorted(files, key=lambda pair: pair[0], reverse=True)[:ICON_TRIES_LIMIT]:
        try:
            data = read_entry(archive, entry, ICON_LIMIT)
        except MetadataError:
            continue
        if data.startswith(b"\x89PNG\r\n\x1a\n"):
            return data
    return None


# -- signing certificate -------------------------------------------------------------------------


def _certificate_sha256(
    file: IO[bytes], archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo]
) -> str | None:
    """SHA-256 of the signer's certificate (DER), as `apksigner verify --print-certs` shows it."""
    block = _signing_block(file, archive)
    for scheme in (*_SIG_V3, _SIG_V2):
        if scheme in block:
            certificate = _first_certificate(block[scheme])
            if certificate is not None:
                return hashlib.sha256(certificate).hexdigest()
    signatures = (entry for name, entry in names.items() if _V1_SIGNATURE.match(name))
    for entry in itertools.islice(signatures, SIGNATURES_LIMIT):
        try:
            signed = cms.ContentInfo.load(read_entry(archive, entry, SIGNATURE_LIMIT))
            certificate = signed["content"]["certificates"][0].chosen.dump()
        except (MetadataError, ValueError, TypeError, KeyError, IndexError):
            continue
        return hashlib.sha256(certificate).hexdigest()
    return None


def _signing_block(file: IO[bytes], archive: zipfile.ZipFile) -> dict[int, bytes]:
    """The APK Signing Block's values by id: it sits just before the central directory."""
    central_directory = getattr(archive, "start_dir", None)
    if not isinstance(central_directory, int) or central_directory < 32:
        return {}
    try:
        file.seek(central_directory - 24)
        footer = file.read(24)
        if len(footer) != 24 or footer[8:] != _SIG_BLOCK_MAGIC:
            return {}
        (size,) = struct.unpack("<Q", footer[:8])
        if not 24 <= size <= SIGNING_BLOCK_LIMIT or size + 8 > central_directory:
            return {}
        file.seek(central_directory - size - 8)
        block = file.read(size + 8)
    except (OSError, ValueError):
        return {}
    if len(block) != size + 8 or struct.unpack("<Q", block[:8])[0] != size:
        return {}
    values: dict[int, bytes] = {}
    offset, end = 8, len(block) - 24
    for _ in range(SIGNING_PAIRS_LIMIT):  # a signature scheme, a padding, a stamp: a handful
        if offset + 12 > end:
            break
        length, key = struct.unpack("<QI", block[offset : offset + 12])
        if length < 4 or offset + 8 + length > end:
            break
        if key in (*_SIG_V3, _SIG_V2):
            values[key] = block[offset + 12 : offset + 8 + length]
        offset += 8 + length
    return values


def _prefixed(data: bytes) -> Iterator[bytes]:
    """The first SIGNERS_LIMIT items of a sequence of uint32-length-prefixed values."""
    offset = 0
    for _ in range(SIGNERS_LIMIT):
        if offset + 4 > len(data):
            return
        (length,) = struct.unpack("<I", data[offset : offset + 4])
        item = data[offset + 4 : offset + 4 + length]
        if len(item) != length:
            return
        yield item
        offset += 4 + length


def _first_certificate(scheme_block: bytes) -> bytes | None:
    # signers -> signer -> signed data -> (digests, certificates, ...) -> certificate
    for signers in _prefixed(scheme_block):
        for signer in _prefixed(signers):
            for signed_data in _prefixed(signer):
                sections = _prefixed(signed_data)
                next(sections, None)  # digests
                certificates = next(sections, None)
                if certificates is not None:
                    return next(_prefixed(certificates), None)
                return None
    return None


# -- AAB ------------------------------------------------------------------------------------------

AAB_MANIFEST = "base/manifest/AndroidManifest.xml"


def parse_aab(file: IO[bytes]) -> Parsed:
    """Package, versions and SDK levels of an .aab (its manifest is protobuf)."""
    archive, names = open_archive(file)
    with archive:
        entry = names.get(AAB_MANIFEST)
        if entry is None:
            raise MetadataError(f"no {AAB_MANIFEST}")
        manifest = _proto_element(read_entry(archive, entry, MANIFEST_LIMIT))
    if manifest.name != "manifest":
        raise MetadataError(f"{AAB_MANIFEST} is not a manifest")
    package = manifest.attributes.get("package")
    if not isinstance(package, str) or not package:
        raise MetadataError("the manifest names no package")
    uses_sdk = next((child for child in manifest.children if child.name == "uses-sdk"), None)
    sdk = uses_sdk.attributes if uses_sdk is not None else {}
    version_name = manifest.attributes.get("versionName")
    return Parsed(
        {
            "packageName": package,
            "versionName": str(version_name) if version_name not in (None, "") else None,
            "versionCode": _proto_int(manifest.attributes.get("versionCode")),
            "minSdk": _proto_int(sdk.get("minSdkVersion")),
            "targetSdk": _proto_int(sdk.get("targetSdkVersion")),
        },
        None,
        platform="android",
    )


class _Element:
    __slots__ = ("attributes", "children", "name")

    def __init__(self) -> None:
        self.name = ""
        self.attributes: dict[str, str | int] = {}
        self.children: list[_Element] = []


def _proto_int(value: str | int | None) -> int | None:
    if isinstance(value, int):
        return value
    return _integer(value)


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of a protobuf message: bytes for length-delimited
    fields, an int for varints; fixed-width fields are skipped over."""
    offset, end = 0, len(data)
    while offset < end:
        key, offset = _varint(data, offset)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, offset = _varint(data, offset)
            yield number, wire, value
        elif wire == 2:
            length, offset = _varint(data, offset)
            if offset + length > end:
                raise MetadataError("truncated protobuf field")
            yield number, wire, data[offset : offset + length]
            offset += length
        elif wire in (1, 5):
            offset += 8 if wire == 1 else 4
            if offset > end:
                raise MetadataError("truncated protobuf field")
        else:
            raise MetadataError(f"protobuf wire type {wire} is not valid here")


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if offset >= len(data) or shift > 63:
            raise MetadataError("bad protobuf varint")
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, offset
        shift += 7


def _proto_element(node: bytes) -> _Element:
    """The root element of an XmlNode, with its attributes and child elements."""
    budget = [PROTO_NODES_LIMIT]
    for number, _, value in _fields(node):
        if number == 1 and isinstance(value, bytes):  # XmlNode.element
            return _element(value, 0, budget)
    raise MetadataError("the protobuf manifest has no root element")


def _element(data: bytes, depth: int, budget: list[int]) -> _Element:
    if depth > PROTO_DEPTH_LIMIT:
        raise MetadataError("the manifest nests too deeply")
    budget[0] -= 1
    if budget[0] < 0:
        raise MetadataError("the manifest has too many elements")
    element = _Element()
    for number, _, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 3:  # XmlElement.name
            element.name = value.decode("utf-8", "replace")
        elif number == 4:  # XmlElement.attribute
            name, attribute = _attribute(value)
            if name:
                element.attributes[name] = attribute
        elif number == 5:  # XmlElement.child: an XmlNode; text nodes are ignored
            for child_number, _, child in _fields(value):
                if child_number == 1 and isinstance(child, bytes):
                    element.children.append(_element(child, depth + 1, budget))
    return element


def _attribute(data: bytes) -> tuple[str, str | int]:
    """(name, value) of an XmlAttribute: its raw text, or else its compiled integer."""
    name, text = "", ""
    compiled: str | int | None = None
    for number, _, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 2:
            name = value.decode("utf-8", "replace")
        elif number == 3:
            text = value.decode("utf-8", "replace")
        elif number == 6:  # Item: str = 2 (String.value = 1), prim = 7
            for item_number, _, item in _fields(value):
                if item_number == 2 and isinstance(item, bytes):
                    compiled = _string_value(item)
                elif item_number == 7 and isinstance(item, bytes):
                    compiled = _primitive(item)
    if text:
        return name, text
    return name, compiled if compiled is not None else ""


def _string_value(data: bytes) -> str | None:
    # String: value = 1
    for number, _, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            return value.decode("utf-8", "replace")
    return None


def _primitive(data: bytes) -> int | None:
    # Primitive: int_decimal_value = 6 (int32), int_hexadecimal_value = 7 (uint32)
    for number, wire, value in _fields(data):
        if wire == 0 and number in (6, 7) and isinstance(value, int):
            return value - (1 << 64) if value >= 1 << 63 else value
    return None
