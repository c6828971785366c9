"""Reading an .ipa: the fields, the provisioning profile, the icon, and hostile archives."""

from __future__ import annotations

import io
import os
import plistlib
import struct
import tracemalloc
import zipfile
import zlib
from datetime import datetime
from typing import Any

import pytest

from buildbay.builds.archive import MetadataError
from buildbay.builds.ipa import PLIST_LIMIT, normal_png, parse_ipa

PNG = b"\x89PNG\r\n\x1a\n"
INFO: dict[str, Any] = {
    "CFBundleIdentifier": "com.example.app",
    "CFBundleShortVersionString": "2.4.0",
    "CFBundleVersion": "812",
    "MinimumOSVersion": "16.0",
    "CFBundleDisplayName": "Example",
    "CFBundleName": "ExampleApp",
    "CFBundleIcons": {"CFBundlePrimaryIcon": {"CFBundleIconFiles": ["AppIcon60x60"]}},
}


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def cgbi_png(width: int, height: int) -> tuple[bytes, bytes]:
    """An icon as Xcode writes it (CgBI, BGRA, raw deflate), and its pixels as RGBA rows."""
    rgba = bytes(
        (x * 7 + y * 3 + c * 50) % 256
        for y in range(height)
        for x in range(width)
        for c in range(4)
    )
    rows_rgba, rows_bgra = b"", b""
    for y in range(height):
        line = rgba[y * width * 4 : (y + 1) * width * 4]
        bgra = bytearray(line)
        bgra[0::4], bgra[2::4] = line[2::4], line[0::4]
        rows_rgba += b"\x00" + line
        rows_bgra += b"\x00" + bytes(bgra)
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    idat = raw.compress(rows_bgra) + raw.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    png = (
        PNG
        + _chunk(b"CgBI", b"\x50\x00\x20\x06")
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", idat)
        + _chunk(b"IEND", b"")
    )
    return png, rows_rgba


def profile(**fields: Any) -> bytes:
    body = plistlib.dumps({"ExpirationDate": datetime(2027, 3, 1, 12, 0, 0), **fields})
    return (
        b"0\x82\x0b\x1f\x06\t*\x86H\x86\xf7\r\x01\x07\x02" + os.urandom(40) + body + os.urandom(300)
    )


def ipa(
    info: dict[str, Any] | bytes = INFO,
    *,
    extra: dict[str, bytes] | None = None,
    app: str = "Example.app",
) -> io.BytesIO:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        data = info if isinstance(info, bytes) else plistlib.dumps(info, fmt=plistlib.FMT_BINARY)
        z.writestr(f"Payload/{app}/Info.plist", data)
        z.writestr(f"Payload/{app}/Example", os.urandom(1000))
        for name, content in (extra or {}).items():
            z.writestr(f"Payload/{app}/{name}", content)
    out.seek(0)
    return out


def test_an_ipa_gives_its_identity_versions_and_name() -> None:
    parsed = parse_ipa(ipa())
    assert parsed.metadata == {
        "bundleId": "com.example.app",
        "shortVersion": "2.4.0",
        "buildNumber": "812",
        "minOs": "16.0",
        "appName": "Example",
        "provisioning": None,
    }
    assert parsed.icon_png is None


def test_an_xml_info_plist_is_read_too_and_the_name_falls_back_to_cfbundlename() -> None:
    info = {k: v for k, v in INFO.items() if k != "CFBundleDisplayName"}
    parsed = parse_ipa(ipa(plistlib.dumps(info, fmt=plistlib.FMT_XML)))
    assert parsed.metadata["appName"] == "ExampleApp"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"ProvisionsAllDevices": True}, {"type": "enterprise", "deviceCount": None}),
        (
            {"ProvisionedDevices": ["a", "b", "c"], "Entitlements": {"get-task-allow": True}},
            {"type": "development", "deviceCount": 3},
        ),
        (
            {"ProvisionedDevices": ["a", "b"], "Entitlements": {"get-task-allow": False}},
            {"type": "ad-hoc", "deviceCount": 2},
        ),
        ({"Entitlements": {"get-task-allow": False}}, {"type": "app-store", "deviceCount": None}),
    ],
    ids=["enterprise", "development", "ad-hoc", "app-store"],
)
def test_the_provisioning_profile_gives_its_type_expiry_and_devices(
    fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    parsed = parse_ipa(ipa(extra={"embedded.mobileprovision": profile(**fields)}))
    assert parsed.metadata["provisioning"] == {**expected, "expiresAt": "2027-03-01T12:00:00Z"}


def test_the_profile_s_udids_come_out_upper_case_once_each_and_only_udids() -> None:
    old = "0123456789abcdef0123456789abcdef01234567"
    new = "00008030-001A35E22E88802E"
    devices = [old, new, old.upper(), "not a udid", 42, new.lower()]
    parsed = parse_ipa(ipa(extra={"embedded.mobileprovision": profile(ProvisionedDevices=devices)}))
    assert parsed.profile_udids == (old.upper(), new)
    assert parsed.metadata["provisioning"]["deviceCount"] == len(devices)
    # The UDIDs stay out of the metadata, which every list of builds reads.
    assert old.upper() not in repr(parsed.metadata)
    enterprise = profile(ProvisionsAllDevices=True)
    assert parse_ipa(ipa(extra={"embedded.mobileprovision": enterprise})).profile_udids == ()


def test_the_icon_comes_out_as_a_standard_png_with_rgba_pixels() -> None:
    small, _ = cgbi_png(8, 8)
    large, rows = cgbi_png(60, 60)
    parsed = parse_ipa(ipa(extra={"AppIcon60x60@2x.png": large, "AppIcon60x60.png": small}))

    icon = parsed.icon_png
    assert icon is not None
    assert icon.startswith(PNG)
    offset, chunks = 8, {}
    while offset < len(icon):
        (length,) = struct.unpack(">I", icon[offset : offset + 4])
        kind, body = icon[offset + 4 : offset + 8], icon[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", icon[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(kind + body)
        chunks[kind] = body
        offset += 12 + length
    assert b"CgBI" not in chunks
    assert struct.unpack(">II", chunks[b"IHDR"][:8]) == (60, 60)  # the larger of the two
    assert zlib.decompress(chunks[b"IDAT"]) == rows


def test_a_standard_png_icon_is_kept_as_it_is() -> None:
    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    png = (
        PNG
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00\x01\x02\x03\x04"))
        + _chunk(b"IEND", b"")
    )
    assert normal_png(png) == png


@pytest.mark.parametrize(
    ("archive", "reason"),
    [
        (io.BytesIO(b"not a zip at all" * 100), "not a zip"),
        (io.BytesIO(ipa().getvalue()[:-200]), "not a zip"),  # truncated: no central directory
        (ipa(app="A.app", extra={"../B.app/x": b""}), None),  # still one app: parses
        (ipa(b"<plist><dict><key>x</key></plist>"), "not a property list"),
        (ipa(plistlib.dumps(["a", "list"])), "not a dictionary"),
        (ipa({"CFBundleName": "no id"}), "no CFBundleIdentifier"),
    ],
    ids=["garbage", "truncated", "odd entry", "bad plist", "plist list", "no bundle id"],
)
def test_a_broken_ipa_is_a_metadata_error(archive: io.BytesIO, reason: str | None) -> None:
    if reason is None:
        assert parse_ipa(archive).metadata["bundleId"] == "com.example.app"
        return
    with pytest.raises(MetadataError, match=reason):
        parse_ipa(archive)


def test_an_archive_without_an_app_or_with_two_is_refused() -> None:
    empty = io.BytesIO()
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("Payload/readme.txt", "no app")
    with pytest.raises(MetadataError, match="no Payload"):
        parse_ipa(empty)

    two = io.BytesIO()
    with zipfile.ZipFile(two, "w") as z:
        z.writestr("Payload/A.app/Info.plist", plistlib.dumps(INFO))
        z.writestr("Payload/B.app/Info.plist", plistlib.dumps(INFO))
    with pytest.raises(MetadataError, match="more than one"):
        parse_ipa(two)


def test_a_zip_bomb_manifest_is_refused_without_inflating_it() -> None:
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("Payload/A.app/Info.plist", b"\x00" * (50 * 1024 * 1024))
    assert len(bomb.getvalue()) < 200_000

    tracemalloc.start()
    try:
        with pytest.raises(MetadataError, match=f"larger than {PLIST_LIMIT}"):
            parse_ipa(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024  # nowhere near the 50 MiB it would inflate to


def test_a_manifest_that_lies_about_its_size_is_cut_at_the_bound() -> None:
    data = bytearray(ipa(b"<?xml " + b" " * (3 * PLIST_LIMIT)).getvalue())
    # Make both directory records claim 100 bytes: reading must stop at the bound regardless.
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(signature)
        data[at + offset : at + offset + 4] = struct.pack("<I", 100)
    tracemalloc.start()
    try:
        with pytest.raises(MetadataError):
            parse_ipa(io.BytesIO(bytes(data)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * PLIST_LIMIT  # less than the 3 MiB the entry would inflate to


def test_names_that_are_not_utf8_do_not_break_parsing() -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("Payload/Example.app/Info.plist", plistlib.dumps(INFO))
        entry = zipfile.ZipInfo("Payload/Example.app/r\x82sum\x82.txt")
        z.writestr(entry, b"cp437 name")
    assert parse_ipa(archive).metadata["bundleId"] == "com.example.app"
