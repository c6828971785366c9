"""What a Windows build says about itself: an `.msix` / `.appx` (AppxManifest.xml), an
`.msixbundle` / `.appxbundle` (AppxBundleManifest.xml), an `.exe` (its PE version resource, read
with pefile) and an `.msi` (recognised only: its version comes from verify's fields).

An .exe is often an installer of hundreds of MiB (the app packed after the executable's own
sections): only its headers and its resource section are read, each within a bound, and pefile
is given those alone.
"""

from __future__ import annotations

import struct
from typing import IO, Any
from xml.etree.ElementTree import Element

import pefile  # type: ignore[import-untyped]

from buildbay.builds.archive import MetadataError, Parsed, open_archive, read_entry
from buildbay.builds.desktop import child, children, head, local_name, parse_xml, text_value

MANIFEST_LIMIT = 1024 * 1024  # AppxManifest.xml, AppxBundleManifest.xml
PE_HEADERS_LIMIT = 64 * 1024  # an executable's headers (DOS, PE, section table)
RESOURCES_LIMIT = 16 * 1024 * 1024  # its resource section (icons, version, manifest)

_OLE_SIGNATURE = bytes.fromhex("d0cf11e0a1b11ae1")  # a compound file: every .msi is one
_MACHINES = {0x8664: "x64", 0xAA64: "arm64", 0x14C: "x86", 0x1C4: "arm"}


# -- .msix, .appx ----------------------------------------------------------------------------------


def parse_msix(file: IO[bytes]) -> Parsed:
    """An app package's identity (name, publisher, version, architecture), display name and
    minimum Windows version (the TargetDeviceFamily's MinVersion, Windows.Desktop's first)."""
    manifest = _manifest(file, "AppxManifest.xml", "Package")
    identity = child(manifest, "Identity")
    if identity is None:
        raise MetadataError("AppxManifest.xml has no Identity")
    properties = child(manifest, "Properties")
    display = child(properties, "DisplayName") if properties is not None else None
    families = [
        f
        for deps in children(manifest, "Dependencies")
        for f in children(deps, "TargetDeviceFamily")
    ]
    families.sort(key=lambda f: f.get("Name") != "Windows.Desktop")
    metadata: dict[str, Any] = {
        **_identity(identity),
        "arch": text_value(identity.get("ProcessorArchitecture")),
        "minOs": text_value(families[0].get("MinVersion")) if families else None,
        "appName": _display_name(display.text if display is not None else None),
    }
    return Parsed({k: v for k, v in metadata.items() if v is not None}, platform="windows")


def parse_msix_bundle(file: IO[bytes]) -> Parsed:
    """A bundle of app packages: its identity (name, publisher, version)."""
    manifest = _manifest(file, "AppxMetadata/AppxBundleManifest.xml", "Bundle")
    identity = child(manifest, "Identity")
    if identity is None:
        raise MetadataError("AppxBundleManifest.xml has no Identity")
    metadata = _identity(identity)
    return Parsed({k: v for k, v in metadata.items() if v is not None}, platform="windows")


def _manifest(file: IO[bytes], name: str, root: str) -> Element:
    archive, names = open_archive(file)
    with archive:
        entry = names.get(name)
        if entry is None:
            raise MetadataError(f"no {name} in the package")
        data = read_entry(archive, entry, MANIFEST_LIMIT)
    manifest = parse_xml(data, name)
    if local_name(manifest) != root:
        raise MetadataError(f"{name} is not a {root} manifest")
    return manifest


def _identity(identity: Element) -> dict[str, Any]:
    name = text_value(identity.get("Name"))
    if name is None:
        raise MetadataError("the manifest's Identity has no Name")
    return {
        "identityName": name,
        "publisher": text_value(identity.get("Publisher")),
        "shortVersion": text_value(identity.get("Version")),
    }


def _display_name(value: str | None) -> str | None:
    """The package's display name, unless it names a resource (`ms-resource:AppName`), which
    only Windows resolves."""
    name = text_value(value)
    return None if name is None or name.startswith("ms-resource:") else name


# -- .exe ------------------------------------------------------------------------------------------


def parse_exe(file: IO[bytes]) -> Parsed:
    """An executable's architecture and, from its version resource, product name and version,
    file version and company name (an executable without one has only its architecture)."""
    headers = head(file, PE_HEADERS_LIMIT)
    if headers[:2] != b"MZ":
        raise MetadataError("not a Windows executable (no MZ header)")
    pe = _pe(headers)
    machine = pe.FILE_HEADER.Machine
    metadata: dict[str, Any] = {"arch": _MACHINES.get(machine, f"0x{machine:04x}")}
    resources = _resources(file, pe, headers)
    if resources is not None:
        metadata.update(_version_resource(resources))
    metadata["shortVersion"] = metadata.get("productVersion") or metadata.get("fileVersion")
    metadata["appName"] = metadata.pop("productName", None)
    return Parsed({k: v for k, v in metadata.items() if v is not None}, platform="windows")


def _pe(data: bytes) -> pefile.PE:
    try:
        return pefile.PE(data=data, fast_load=True)
    except pefile.PEFormatError as exc:
        raise MetadataError(f"not a Windows executable: {exc.value}") from None
    except (struct.error, ValueError, IndexError) as exc:
        raise MetadataError(f"not a Windows executable: {type(exc).__name__}") from None


def _resources(file: IO[bytes], pe: pefile.PE, headers: bytes) -> pefile.PE | None:
    """The executable as pefile sees it with only its headers and its resource section, moved
    to just after the headers; None if it has no resource section."""
    directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[
        pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"]
    ]
    if not directory.VirtualAddress or not directory.Size:
        return None
    section = next(
        (
            s
            for s in pe.sections
            if s.VirtualAddress
            <= directory.VirtualAddress
            < s.VirtualAddress + max(s.Misc_VirtualSize, s.SizeOfRawData)
        ),
        None,
    )
    if section is None or not section.SizeOfRawData:
        return None
    if section.SizeOfRawData > RESOURCES_LIMIT:
        raise MetadataError(f"its resources are larger than {RESOURCES_LIMIT} bytes")
    file.seek(pe.adjust_PointerToRawData(section.PointerToRawData))
    raw = file.read(section.SizeOfRawData)
    if len(raw) < section.SizeOfRawData:
        raise MetadataError("the file ends inside its resources")
    size = min(pe.OPTIONAL_HEADER.SizeOfHeaders, len(headers))
    at = -(-size // 0x200) * 0x200  # where pefile looks for a section's bytes: 512-byte steps
    compact = bytearray(headers[:size].ljust(at, b"\0")) + raw
    # The section's PointerToRawData (20 bytes into its header) now says where it was put.
    struct.pack_into("<I", compact, section.get_file_offset() + 20, at)
    resources = _pe(bytes(compact))
    try:
        resources.parse_data_directories(
            directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"]]
        )
    except (pefile.PEFormatError, struct.error, ValueError, IndexError, KeyError) as exc:
        raise MetadataError(f"its resources cannot be read: {type(exc).__name__}") from None
    return resources


_STRINGS = {
    b"ProductName": "productName",
    b"ProductVersion": "productVersion",
    b"FileVersion": "fileVersion",
    b"CompanyName": "companyName",
}


def _version_resource(pe: pefile.PE) -> dict[str, Any]:
    """The version resource's strings (the first string table that has them), else its fixed
    part's product and file versions (`1.2.3.4`)."""
    found: dict[str, Any] = {}
    for info in getattr(pe, "FileInfo", None) or []:
        for block in info:
            if getattr(block, "Key", None) != b"StringFileInfo":
                continue
            for table in getattr(block, "StringTable", []):
                for key, value in table.entries.items():
                    if key in _STRINGS and _STRINGS[key] not in found:
                        found[_STRINGS[key]] = _decoded(value)
    fixed = getattr(pe, "VS_FIXEDFILEINFO", None)
    if fixed:
        for key, high, low in (
            ("productVersion", fixed[0].ProductVersionMS, fixed[0].ProductVersionLS),
            ("fileVersion", fixed[0].FileVersionMS, fixed[0].FileVersionLS),
        ):
            if not found.get(key):
                found[key] = f"{high >> 16}.{high & 0xFFFF}.{low >> 16}.{low & 0xFFFF}"
    return {k: text_value(v) for k, v in found.items()}


def _decoded(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if not isinstance(value, bytes):
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise MetadataError("its version resource holds text that is not Unicode") from None


# -- .msi ------------------------------------------------------------------------------------------


def check_msi(file: IO[bytes]) -> Parsed:
    """A Windows Installer database, recognised by its compound file signature."""
    if head(file, len(_OLE_SIGNATURE)) != _OLE_SIGNATURE:
        raise MetadataError("not a Windows Installer package (an .msi is a compound file)")
    return Parsed({}, platform="windows")
