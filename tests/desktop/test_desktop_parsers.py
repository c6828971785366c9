"""The desktop parsers on their own (builds/macos.py, windows.py, linux.py): what each reads,
its bounds, and that no damage to a file makes read_metadata raise."""

from __future__ import annotations

import io
import lzma
import random
import re
import struct
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
import zstandard

from buildbay.builds.archive import MetadataError
from buildbay.builds.linux import CONTROL_TAR_LIMIT, parse_deb, parse_rpm
from buildbay.builds.macos import (
    XAR_TOC_LIMIT,
    architecture_of_app,
    icns_png,
    parse_app_zip,
    parse_pkg,
)
from buildbay.builds.metadata import DESKTOP_FILES, Reading, read_metadata, wrong_platform_problem
from buildbay.builds.updaters import UpdaterFields, ed_signature_problem, with_fields
from buildbay.builds.windows import RESOURCES_LIMIT, parse_exe, parse_msix
from buildbay.config import Settings
from buildbay.errors import ValidationFailed
from tests.desktop import files

MiB = files.MiB


def _read(data: bytes, name: str) -> Reading:
    return read_metadata(lambda: io.BytesIO(data), name)


def _bytes(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)


# -- what each reads -----------------------------------------------------------------------------


def test_a_zip_without_an_app_has_no_metadata_and_names_the_platform_its_entries_say() -> None:
    assert parse_app_zip(_bytes(files.zip_of({"Example/Example.exe": b"MZ"}))).metadata == {}
    assert parse_app_zip(_bytes(files.msix())).platform == "windows"
    assert parse_app_zip(_bytes(files.zip_of({"Payload/X.app/Info.plist": b""}))).platform == "ios"


def test_two_apps_at_the_top_of_a_zip_are_refused() -> None:
    data = files.zip_of({f"{name}.app/Contents/Info.plist": b"<plist/>" for name in ("One", "Two")})
    with pytest.raises(MetadataError, match=re.escape("more than one .app")):
        parse_app_zip(_bytes(data))


def test_an_app_without_an_icon_or_an_executable_still_reads() -> None:
    info = {k: v for k, v in files.APP_INFO.items() if k not in ("CFBundleIconFile",)}
    parsed = parse_app_zip(_bytes(files.app_zip(info, executable=b"#!/bin/sh\n")))
    assert parsed.icon_png is None
    assert "arch" not in parsed.metadata
    assert parsed.metadata["bundleId"] == "com.example.desktop"


def test_an_icon_that_is_not_an_icns_is_no_icon() -> None:
    parsed = parse_app_zip(_bytes(files.app_zip(icon=b"\x89PNG not an icns")))
    assert parsed.icon_png is None
    assert parsed.metadata["shortVersion"] == "1.4.2"


def test_a_huge_icon_is_refused_before_it_is_decoded() -> None:
    header = b"icns" + struct.pack(">I", 8 + 8 + 100)
    # An 'ic10' (1024 px, PNG) entry whose PNG says 60000 x 60000 pixels.
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
    png += struct.pack(">IIBBBBB", 60000, 60000, 8, 6, 0, 0, 0) + b"\0" * 4
    data = header + b"ic10" + struct.pack(">I", 8 + len(png)) + png
    with pytest.raises(MetadataError):
        icns_png(data)


@pytest.mark.parametrize(
    ("arch", "expected"),
    [("arm64 x86_64", "universal"), ("x86_64", "x64"), ("arm64", "arm64"), (None, None)],
)
def test_an_app_s_architectures_in_an_updater_s_words(arch: str | None, expected: str) -> None:
    assert architecture_of_app(arch) == expected


def test_a_pkg_of_pkgbuild_reads_its_package_info() -> None:
    info = b'<?xml version="1.0"?><pkg-info identifier="com.example.tool" version="3.1"/>'
    parsed = parse_pkg(_bytes(files.xar({"PackageInfo": info, "Bom": b"x"}, compress=False)))
    assert parsed.metadata == {"packageId": "com.example.tool", "shortVersion": "3.1"}


def test_a_pkg_whose_table_of_contents_inflates_past_its_bound_is_refused() -> None:
    toc = b"<xar><toc>" + b" " * (XAR_TOC_LIMIT + 10) + b"</toc></xar>"
    packed = zlib.compress(toc)
    # The header understates the size: the inflation itself stops at the bound.
    header = struct.pack(">4sHHQQI", b"xar!", 28, 1, len(packed), 100, 1)
    with pytest.raises(MetadataError, match="larger than"):
        parse_pkg(_bytes(header + packed))


def test_a_pkg_whose_document_is_past_the_end_is_refused() -> None:
    data = files.pkg()
    with pytest.raises(MetadataError, match="the file ends inside Distribution"):
        parse_pkg(_bytes(data[:-20]))


def test_an_msix_with_a_resource_display_name_has_no_app_name() -> None:
    parsed = parse_msix(_bytes(files.msix(display_name="ms-resource:AppName")))
    assert "appName" not in parsed.metadata


def test_an_msix_manifest_that_is_not_xml_is_refused() -> None:
    with pytest.raises(MetadataError, match="not well-formed XML"):
        parse_msix(_bytes(files.msix("<Package><Identity Name=")))


def test_an_msix_manifest_larger_than_its_bound_is_refused() -> None:
    manifest = files.appx_manifest().replace("<Resources>", "<!--" + "x" * MiB + "--><Resources>")
    with pytest.raises(
        MetadataError, match=re.escape("AppxManifest.xml is larger than 1048576 bytes")
    ):
        parse_msix(_bytes(files.msix(manifest)))


def test_an_msix_bundle_reads_its_identity() -> None:
    manifest = (
        '<?xml version="1.0"?><Bundle xmlns="http://schemas.microsoft.com/appx/2013/bundle">'
        '<Identity Name="Example.App" Publisher="CN=Example" Version="2.0.0.0"/></Bundle>'
    )
    data = files.zip_of({"AppxMetadata/AppxBundleManifest.xml": manifest.encode()})
    reading = _read(data, "Example.msixbundle")
    assert reading.metadata == {
        "identityName": "Example.App",
        "publisher": "CN=Example",
        "shortVersion": "2.0.0.0",
    }
    assert reading.platform == "windows"


def test_an_exe_whose_resource_section_is_past_its_bound_is_refused(tmp_path: Path) -> None:
    data = bytearray(files.exe(tmp_path))
    pe = data.index(b"PE\0\0")
    sections = pe + 24 + struct.unpack_from("<H", data, pe + 20)[0]
    for at in range(sections, sections + 40 * 8, 40):
        if data[at : at + 5] == b".rsrc":
            struct.pack_into("<I", data, at + 16, RESOURCES_LIMIT + 512)  # SizeOfRawData
            break
    else:
        pytest.fail("no .rsrc section")
    with pytest.raises(MetadataError, match="its resources are larger than"):
        parse_exe(_bytes(bytes(data)))


def test_an_exe_s_headers_alone_are_read_whatever_its_size(tmp_path: Path) -> None:
    """An installer of 256 MiB: its payload after the sections is never read."""
    head = files.exe(tmp_path)
    reads: list[int] = []

    class Counting(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            reads.append(len(data))
            return data

    size = 256 * MiB
    big = Counting(head + bytes(size - len(head)))
    parsed = parse_exe(big)
    assert parsed.metadata["productVersion"] == "1.4.2"
    assert sum(reads) < 128 * 1024


@pytest.mark.parametrize("compression", ["gz", "xz", "zst"])
def test_a_control_archive_that_inflates_past_its_bound_is_refused(compression: str) -> None:
    zeros = bytes(CONTROL_TAR_LIMIT + MiB)
    packed = {
        "gz": lambda: _gzip(zeros),
        "xz": lambda: lzma.compress(zeros),
        "zst": lambda: zstandard.ZstdCompressor().compress(zeros),
    }[compression]()
    data = files.ar([("debian-binary", b"2.0\n"), (f"control.tar.{compression}", packed)])
    tracemalloc.start()
    try:
        with pytest.raises(MetadataError, match="inflates to more than 16777216 bytes"):
            parse_deb(_bytes(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * CONTROL_TAR_LIMIT


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def test_a_control_archive_stored_larger_than_its_bound_is_refused_unread() -> None:
    header = f"{'control.tar.gz':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{9_999_999_999:<10}`\n".encode()
    data = b"!<arch>\n" + f"{'debian-binary':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{4:<10}`\n".encode()
    data += b"2.0\n" + header
    with pytest.raises(
        MetadataError, match=re.escape("control.tar.gz is larger than 4194304 bytes")
    ):
        parse_deb(_bytes(data))


def test_a_deb_without_a_control_archive_is_refused() -> None:
    data = files.ar([("debian-binary", b"2.0\n"), ("data.tar", files.tar_of({}))])
    with pytest.raises(MetadataError, match=re.escape("no control.tar in the package")):
        parse_deb(_bytes(data))


def test_a_deb_whose_control_has_no_package_is_refused() -> None:
    tar = files.tar_of({"./control": b"Version: 1.0\nArchitecture: all\n"})
    with pytest.raises(MetadataError, match="no Package"):
        parse_deb(_bytes(files.ar([("debian-binary", b"2.0\n"), ("control.tar", tar)])))


def test_an_rpm_reads_only_its_headers(tmp_path: Path) -> None:
    whole = files.rpm(tmp_path)
    reads: list[int] = []

    class Counting(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            reads.append(len(data))
            return data

    parse_rpm(Counting(whole))
    assert sum(reads) < len(whole)


def test_an_rpm_header_that_claims_too_many_entries_is_refused(tmp_path: Path) -> None:
    whole = bytearray(files.rpm(tmp_path))
    whole[96 + 8 : 96 + 12] = (10**6).to_bytes(4, "big")
    with pytest.raises(MetadataError, match="signature header is larger than"):
        parse_rpm(_bytes(bytes(whole)))


# -- never an exception, whatever the damage -----------------------------------------------------


def _formats(tmp_path: Path) -> dict[str, bytes]:
    return {
        "x.deb": files.deb(tmp_path, compression="gzip"),
        "x.rpm": files.rpm(tmp_path),
        "x.exe": files.exe(tmp_path),
        "x.msix": files.msix(),
        "x.zip": files.app_zip(),
        "x.pkg": files.pkg(),
    }


READER_CPU_SECONDS = Settings.model_fields["parse_cpu_seconds"].default


def test_random_damage_anywhere_never_makes_reading_raise(tmp_path: Path) -> None:
    """Flipped bytes, cut files: read_metadata answers a Reading (metadata, an error or a
    refusal), whatever the parser met, and quickly."""
    rng = random.Random(39)
    for name, whole in _formats(tmp_path).items():
        assert _read(whole, name).metadata, name
        for _ in range(60):
            damaged = bytearray(whole)
            for _ in range(rng.randint(1, 8)):
                at = rng.randrange(min(len(damaged), 8192))
                damaged[at] = rng.randrange(256)
            if rng.random() < 0.3:
                del damaged[rng.randrange(len(damaged)) :]
            started = time.process_time()
            reading = _read(bytes(damaged), name)
            # Within the processor time a build file's reader grants a file (builds/readers.py):
            # processor time, which a machine busy with other work does not inflate (the wall
            # clock did, 5 s for an .exe whose pefile collects this process's garbage on error).
            assert time.process_time() - started < READER_CPU_SECONDS, name
            assert isinstance(reading, Reading)
            if reading.metadata is None:
                assert reading.error or reading.refused or name == "x.zip", name


# -- the platform's files, and verify's fields ---------------------------------------------------


def test_each_desktop_platform_takes_its_own_files_only() -> None:
    assert wrong_platform_problem("macos", "Example.dmg") is None
    assert wrong_platform_problem("windows", "Setup.EXE") is None
    assert wrong_platform_problem("linux", "Example-x86_64.AppImage") is None
    assert wrong_platform_problem("linux", "example.tar.gz") is None
    assert wrong_platform_problem("other", "anything.bin") is None
    assert wrong_platform_problem("macos", "setup.exe") == (
        'This is a macOS application: it takes .dmg, .pkg or .zip files, and "setup.exe" is not one'
    )
    assert set(DESKTOP_FILES) == {"macos", "windows", "linux"}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("A" * 86 + "==", None),
        ("A" * 84 + "==", "is 63 bytes, not the 64 of an Ed25519 signature"),
        ("not base64!", "is not base64"),
    ],
)
def test_a_sparkle_signature_is_64_bytes_of_base64(value: str, problem: str | None) -> None:
    assert ed_signature_problem(value) == problem


def test_fields_fill_what_the_file_does_not_say_and_must_agree_with_what_it_does() -> None:
    metadata = {"package": "x", "shortVersion": "1.0", "arch": "arm64"}
    merged, architecture = with_fields(
        metadata, "deb", UpdaterFields(version="1.0", minimum_os_version="12")
    )
    assert merged == {**metadata, "minOs": "12", "fromVerify": ["minOs"]}
    assert architecture == "arm64"
    with pytest.raises(ValidationFailed) as refused:
        with_fields(metadata, "deb", UpdaterFields(build_number="2", architecture="x64"))
    assert refused.value.code == "metadata_mismatch"
    assert with_fields(None, "dmg", UpdaterFields()) == (None, None)


def test_fields_survive_the_background_job_s_payload() -> None:
    fields = UpdaterFields(architecture="x64", version="1.0")
    assert UpdaterFields.of_json(fields.to_json()) == fields
    assert UpdaterFields.of_json(None) == UpdaterFields()
    assert UpdaterFields.of_json({"version": "2", "unknown": 1}) == UpdaterFields(version="2")
