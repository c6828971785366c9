"""Reading an .apk and an .aab: real fixtures, checked against Android's own tools, and hostile
archives."""

from __future__ import annotations

import io
import random
import struct
import time
import tracemalloc
import zipfile

import pytest

from buildbay.builds.android import MANIFEST_LIMIT, parse_aab, parse_apk
from buildbay.builds.archive import MetadataError
from buildbay.builds.metadata import read_metadata
from tests.builds.android_files import APK, APK_V1, aab, expected, proto_manifest


def _apk(path: object = APK) -> io.BytesIO:
    return io.BytesIO(APK.read_bytes() if path is APK else APK_V1.read_bytes())


def test_an_apk_gives_what_aapt_and_apksigner_read_from_it() -> None:
    want = expected()
    parsed = parse_apk(_apk())
    assert parsed.metadata == {
        "packageName": want["packageName"],
        "versionName": want["versionName"],
        "versionCode": want["versionCode"],
        "minSdk": want["minSdk"],
        "targetSdk": want["targetSdk"],
        "appName": want["appName"],
        "signingCertificateSha256": want["certificate"],
    }


def test_the_icon_is_the_densest_png_of_the_launcher_icon() -> None:
    icon = parse_apk(_apk()).icon_png
    assert icon is not None
    assert icon.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", icon[16:24])
    assert (width, height) == (96, 96)  # xhdpi, not the 48 px mdpi one


def test_an_apk_signed_only_the_old_way_gives_its_certificate_from_meta_inf() -> None:
    metadata = parse_apk(_apk(APK_V1)).metadata
    assert metadata["signingCertificateSha256"] == expected()["certificateV1"]
    assert metadata["packageName"] == expected()["packageName"]


def test_an_aab_gives_package_versions_and_sdk_from_its_protobuf_manifest() -> None:
    parsed = parse_aab(io.BytesIO(aab()))
    assert parsed.metadata == {
        "packageName": "dev.buildbay.bundle",
        "versionName": "3.1.0",
        "versionCode": 310,
        "minSdk": 26,
        "targetSdk": None,
    }


def test_an_aab_with_raw_text_values_reads_the_same() -> None:
    manifest = proto_manifest(version_code=7, min_sdk=21, compiled=False)
    metadata = parse_aab(io.BytesIO(aab(manifest))).metadata
    assert (metadata["versionCode"], metadata["minSdk"]) == (7, 21)


def _zip(entries: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    buffer.seek(0)
    return buffer


MANIFEST = "AndroidManifest.xml"


@pytest.mark.parametrize(
    ("parse", "archive", "reason"),
    [
        (parse_apk, io.BytesIO(APK.read_bytes()[:4000]), "not a zip archive"),
        (parse_apk, _zip({"classes.dex": b"dex"}), "no AndroidManifest.xml"),
        (parse_apk, _zip({MANIFEST: b"<manifest/>"}), "not a binary Android manifest"),
        (parse_apk, _zip({MANIFEST: b"\x03\x00\x08\x00" + b"\xff" * 64}), None),
        (parse_aab, io.BytesIO(b"PK\x05\x06" + b"\0" * 18), "no base/manifest"),
        (parse_aab, io.BytesIO(aab(b"\x0a\xff\xff\xff\xff\x0f")), "truncated protobuf"),
        (parse_aab, io.BytesIO(aab(b"\x0a\x02\x1a\x00")), "not a manifest"),
        (parse_aab, io.BytesIO(aab(proto_manifest(package=""))), "names no package"),
    ],
)
def test_a_broken_android_file_is_a_metadata_error(
    parse: object, archive: io.BytesIO, reason: str | None
) -> None:
    with pytest.raises(MetadataError) as raised:
        parse(archive)  # type: ignore[operator]
    if reason:
        assert reason in str(raised.value)


def test_a_zip_bomb_manifest_is_refused_without_inflating_it() -> None:
    # 64 MiB of zeros deflate to 64 KiB; its header says so and the bound refuses it unread.
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("AndroidManifest.xml", "w") as entry,
    ):
        chunk = bytes(1024 * 1024)
        for _ in range(64):
            entry.write(chunk)
    buffer.seek(0)
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(MetadataError, match="larger than"):
        parse_apk(buffer)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * MANIFEST_LIMIT
    assert time.perf_counter() - started < 5


def test_a_manifest_that_lies_about_its_size_is_cut_at_the_bound() -> None:
    # 50 MB manifest whose directory entry claims 100 bytes: reading stops at the bound.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("base/manifest/AndroidManifest.xml", bytes(50_000_000))
    data = bytearray(buffer.getvalue())
    directory = data.rfind(b"PK\x01\x02")
    data[directory + 24 : directory + 28] = struct.pack("<I", 100)  # uncompressed size
    tracemalloc.start()
    with pytest.raises(MetadataError):
        parse_aab(io.BytesIO(bytes(data)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * MANIFEST_LIMIT


def test_a_deeply_nested_protobuf_manifest_is_refused() -> None:
    node = b""
    for _ in range(500):  # XmlNode{element: XmlElement{name: "x", child: node}}
        element = b"\x1a\x01x" + (b"\x2a" + _varint(len(node)) + node if node else b"")
        node = b"\x0a" + _varint(len(element)) + element
    with pytest.raises(MetadataError, match="nests too deeply"):
        parse_aab(io.BytesIO(aab(node)))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_names_that_are_not_utf8_do_not_break_parsing() -> None:
    data = APK.read_bytes()
    # Entry names stored with bytes that are not UTF-8 (flag bit 11 clear: cp437 in Python).
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as target:
            for info in source.infolist():
                target.writestr(info, source.read(info))
            target.writestr(b"res/\xff\xfe.png".decode("cp437"), b"x")
    buffer.seek(0)
    assert parse_apk(buffer).metadata["packageName"] == expected()["packageName"]


def test_corrupted_apks_never_escape_as_anything_but_a_reading() -> None:
    """Random byte damage anywhere in the file: read_metadata answers, whatever the parser met."""
    original = APK.read_bytes()
    rng = random.Random(20261122)
    for _ in range(150):
        damaged = bytearray(original)
        for _ in range(rng.randint(1, 20)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        reading = read_metadata(lambda d=bytes(damaged): io.BytesIO(d), "app.apk")
        assert (reading.metadata is None) == (reading.error is not None)
