"""What a macOS build says about itself: a `.zip` of an `.app` (its Info.plist, its main
executable's architectures and its .icns icon), a `.pkg` (its Distribution or PackageInfo XML,
inside a xar archive) and a `.dmg` (recognised only: reading a disk image takes Apple's tools,
so its version comes from verify's fields).

Everything is read within fixed bounds, as builds/archive.py reads an .ipa: each entry at most a
bounded number of bytes whatever the archive says, the icon's pixels counted before decoding.
"""

from __future__ import annotations

import io
import plistlib
import re
import struct
import zipfile
import zlib
from typing import IO, Any
from xml.etree.ElementTree import Element

from PIL import Image

from buildbay.builds.archive import (
    MetadataError,
    Parsed,
    open_archive,
    platform_of_entries,
    read_entry,
    read_head,
)
from buildbay.builds.desktop import (
    architecture_of,
    child,
    children,
    local_name,
    parse_xml,
    tail,
    text_value,
)

PLIST_LIMIT = 1024 * 1024  # Info.plist
ICNS_LIMIT = 8 * 1024 * 1024  # an .icns file (every size of the icon, 1024 px included)
ICON_SIDE_LIMIT = 2048  # pixels on either side of the icon decoded
ICON_SIDE_KEPT = 512  # the icon kept: at most this many pixels a side
EXECUTABLE_HEAD = 4096  # bytes of the main executable read for its architectures
FAT_ARCHES_LIMIT = 32

# `<name>.app/Contents/Info.plist` at the top of the archive, as `ditto -ck --keepParent` and
# electron-builder's mac `zip` make it: the app itself, not the helper apps nested in it.
_APP_INFO = re.compile(r"^(?!__MACOSX/)([^/]+\.app)/Contents/Info\.plist$")

_FAT_MAGIC = 0xCAFEBABE
_FAT_MAGIC_64 = 0xCAFEBABF
_MACHO_64 = b"\xcf\xfa\xed\xfe"  # 0xFEEDFACF, little-endian: every 64-bit Mac executable
_CPU_TYPES = {0x01000007: "x86_64", 0x0100000C: "arm64"}


def parse_app_zip(file: IO[bytes]) -> Parsed:
    """A `.zip` holding a macOS `.app` at its top: the app's bundle id, versions, minimum
    macOS, name, architectures and icon. A zip without one is a zip of something else: no
    metadata (a Windows or Linux application's portable zip), and the platform its entries
    name, if any (an .msix or an .ipa renamed)."""
    archive, names = open_archive(file)
    with archive:
        infos = [(m.group(1), e) for name, e in names.items() if (m := _APP_INFO.match(name))]
        if not infos:
            return Parsed({}, platform=platform_of_entries(names))
        if len(infos) > 1:
            raise MetadataError("more than one .app at the top of the archive")
        app, entry = infos[0]
        info = _plist(read_entry(archive, entry, PLIST_LIMIT))
        bundle_id = text_value(info.get("CFBundleIdentifier"))
        if bundle_id is None:
            raise MetadataError(f"{app}/Contents/Info.plist has no CFBundleIdentifier")
        metadata: dict[str, Any] = {
            "bundleId": bundle_id,
            "shortVersion": text_value(info.get("CFBundleShortVersionString")),
            "buildNumber": text_value(info.get("CFBundleVersion")),
            "minOs": text_value(info.get("LSMinimumSystemVersion")),
            "appName": text_value(info.get("CFBundleDisplayName"))
            or text_value(info.get("CFBundleName")),
        }
        executable = text_value(info.get("CFBundleExecutable"))
        if executable is not None and "/" not in executable:
            found = names.get(f"{app}/Contents/MacOS/{executable}")
            if found is not None:
                metadata["arch"] = _architectures(read_head(archive, found, EXECUTABLE_HEAD))
        icon = _icon(archive, names, app, info)
    return Parsed({k: v for k, v in metadata.items() if v is not None}, icon, platform="macos")


def _plist(data: bytes) -> dict[str, Any]:
    try:
        value = plistlib.loads(data)
    except Exception as exc:  # plistlib raises several types for malformed input
        raise MetadataError(f"Info.plist is not a property list: {type(exc).__name__}") from None
    if not isinstance(value, dict):
        raise MetadataError("Info.plist is not a dictionary")
    return value


def _architectures(data: bytes) -> str | None:
    """The architectures a Mach-O executable's first bytes name (`x86_64`, `arm64`, or both
    joined by a space for a universal one), or None for what is not one."""
    if len(data) < 8:
        return None
    if data[:4] == _MACHO_64:
        (cpu,) = struct.unpack_from("<I", data, 4)
        return _CPU_TYPES.get(cpu)
    magic, count = struct.unpack_from(">II", data)
    if magic not in (_FAT_MAGIC, _FAT_MAGIC_64) or not 0 < count <= FAT_ARCHES_LIMIT:
        return None
    size = 20 if magic == _FAT_MAGIC else 32  # fat_arch, fat_arch_64
    found: dict[str, None] = {}
    for index in range(count):
        at = 8 + index * size
        if at + 4 > len(data):
            break
        (cpu,) = struct.unpack_from(">I", data, at)
        if cpu in _CPU_TYPES:
            found[_CPU_TYPES[cpu]] = None
    return " ".join(sorted(found)) or None


def architecture_of_app(arch: str | None) -> str | None:
    """An .app's executable architectures in an updater's words (both: `universal`)."""
    if arch == "arm64 x86_64":
        return "universal"
    return architecture_of(arch)


def _icon(
    archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo], app: str, info: dict[str, Any]
) -> bytes | None:
    """The app's icon (`CFBundleIconFile`, an .icns in Contents/Resources) as a PNG, if Pillow
    reads it; None otherwise (an icon is a nicety: its absence refuses nothing)."""
    name = text_value(info.get("CFBundleIconFile"))
    if name is None or "/" in name:
        return None
    if not name.endswith(".icns"):
        name += ".icns"
    entry = names.get(f"{app}/Contents/Resources/{name}")
    if entry is None or entry.file_size > ICNS_LIMIT:
        return None
    try:
        return icns_png(read_entry(archive, entry, ICNS_LIMIT))
    except MetadataError:
        return None


def icns_png(data: bytes) -> bytes:
    """The largest image of an .icns file, as a PNG of at most ICON_SIDE_KEPT pixels a side
    (re-encoded: nothing of the file but its pixels is kept)."""
    try:
        with Image.open(io.BytesIO(data), formats=["ICNS"]) as image:
            width, height = image.size
            if max(width, height) > ICON_SIDE_LIMIT:
                raise MetadataError("icon too large")
            image.load()
            icon = image.convert("RGBA")
    except MetadataError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # Pillow raises many types for a damaged image: no icon, no more
        raise MetadataError(f"not an icon Pillow reads: {type(exc).__name__}") from None
    icon.thumbnail((ICON_SIDE_KEPT, ICON_SIDE_KEPT))
    out = io.BytesIO()
    icon.save(out, format="PNG")
    return out.getvalue()


# -- .pkg: a xar archive ---------------------------------------------------------------------------

XAR_TOC_LIMIT = 4 * 1024 * 1024  # the table of contents, compressed or not
XAR_DOCUMENT_LIMIT = 1024 * 1024  # the Distribution or PackageInfo document
XAR_FILES_LIMIT = 100_000  # <file> elements looked at in the table of contents
_XAR_HEADER = struct.Struct(">4sHHQQI")
_XAR_MAGIC = b"xar!"


def parse_pkg(file: IO[bytes]) -> Parsed:
    """An installer package (a xar archive): the product's id, version, title and minimum
    macOS from its Distribution (productbuild), else its PackageInfo (pkgbuild)."""
    heap, toc = _xar_toc(file)
    documents = _xar_documents(toc)
    if "Distribution" in documents:
        metadata = _distribution(_xar_read(file, heap, documents["Distribution"], "Distribution"))
    elif "PackageInfo" in documents:
        metadata = _package_info(_xar_read(file, heap, documents["PackageInfo"], "PackageInfo"))
    else:
        raise MetadataError("the package has neither a Distribution nor a PackageInfo")
    return Parsed({k: v for k, v in metadata.items() if v is not None}, None, platform="macos")


def _xar_toc(file: IO[bytes]) -> tuple[int, Element]:
    """Where the xar's heap starts, and its table of contents (zlib-compressed XML)."""
    file.seek(0)
    header = file.read(_XAR_HEADER.size)
    if len(header) < _XAR_HEADER.size or header[:4] != _XAR_MAGIC:
        raise MetadataError("not a xar archive (an installer package starts with xar!)")
    _, header_size, _, compressed, uncompressed, _ = _XAR_HEADER.unpack(header)
    if header_size < _XAR_HEADER.size:
        raise MetadataError("the xar header is shorter than its fields")
    if compressed > XAR_TOC_LIMIT or uncompressed > XAR_TOC_LIMIT:
        raise MetadataError(f"the table of contents is larger than {XAR_TOC_LIMIT} bytes")
    file.seek(header_size)
    data = file.read(compressed)
    if len(data) < compressed:
        raise MetadataError("the file ends inside its table of contents")
    toc = _inflate(data, XAR_TOC_LIMIT, "the table of contents")
    return header_size + compressed, parse_xml(toc, "the table of contents")


def _inflate(data: bytes, limit: int, what: str) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise MetadataError(f"{what} does not inflate: {exc}") from None
    if len(out) > limit:
        raise MetadataError(f"{what} is larger than {limit} bytes")
    return out


def _xar_documents(toc: Element) -> dict[str, Element]:
    """The top-level files of the archive by name (their <data> elements), the first
    XAR_FILES_LIMIT of them."""
    root = child(toc, "toc")
    if local_name(toc) != "xar" or root is None:
        raise MetadataError("the table of contents is not a xar one")
    found: dict[str, Element] = {}
    for entry in children(root, "file")[:XAR_FILES_LIMIT]:
        name, data = child(entry, "name"), child(entry, "data")
        if name is not None and data is not None and name.text:
            found.setdefault(name.text, data)
    return found


def _xar_read(file: IO[bytes], heap: int, data: Element, what: str) -> bytes:
    """A file of the archive: its bytes at its offset in the heap, inflated if stored so."""
    try:
        offset = int(_text_of(data, "offset"))
        length = int(_text_of(data, "length"))
    except ValueError:
        raise MetadataError(f"{what}'s offset or length is not a number") from None
    if offset < 0 or not 0 <= length <= XAR_DOCUMENT_LIMIT:
        raise MetadataError(f"{what} is larger than {XAR_DOCUMENT_LIMIT} bytes")
    file.seek(heap + offset)
    stored = file.read(length)
    if len(stored) < length:
        raise MetadataError(f"the file ends inside {what}")
    encoding = child(data, "encoding")
    style = encoding.get("style", "") if encoding is not None else ""
    if style == "application/x-gzip":  # xar's name for zlib
        return _inflate(stored, XAR_DOCUMENT_LIMIT, what)
    if style in ("", "application/octet-stream"):
        return stored
    raise MetadataError(f"{what} is stored as {style[:40]!r}, which is not read here")


def _text_of(element: Element, name: str) -> str:
    found = child(element, name)
    return (found.text or "").strip() if found is not None else ""


def _distribution(data: bytes) -> dict[str, Any]:
    """productbuild's Distribution: `<product id version>` (else the first `<pkg-ref>` with
    both), `<title>`, and the lowest `<os-version min>` allowed."""
    script = parse_xml(data, "Distribution")
    product = child(script, "product")
    ident = version = None
    if product is not None:
        ident, version = text_value(product.get("id")), text_value(product.get("version"))
    if ident is None or version is None:
        for ref in children(script, "pkg-ref"):
            if text_value(ref.get("id")) and text_value(ref.get("version")):
                ident = ident or text_value(ref.get("id"))
                version = version or text_value(ref.get("version"))
                break
    minimum = None
    for allowed in script.iter():
        if local_name(allowed) == "os-version" and (value := text_value(allowed.get("min"))):
            minimum = value
            break
    title = child(script, "title")
    return {
        "packageId": ident,
        "shortVersion": version,
        "minOs": minimum,
        "appName": text_value(title.text) if title is not None else None,
    }


def _package_info(data: bytes) -> dict[str, Any]:
    """pkgbuild's PackageInfo: `<pkg-info identifier version>`."""
    info = parse_xml(data, "PackageInfo")
    if local_name(info) != "pkg-info":
        raise MetadataError("PackageInfo is not a pkg-info document")
    return {
        "packageId": text_value(info.get("identifier")),
        "shortVersion": text_value(info.get("version")),
    }


# -- .dmg ------------------------------------------------------------------------------------------

_KOLY = b"koly"  # the trailer every UDIF disk image ends with (512 bytes)


def check_dmg(file: IO[bytes]) -> Parsed:
    """A disk image, recognised by its trailer; what is inside takes Apple's tools to read."""
    if tail(file, 512)[:4] != _KOLY:
        raise MetadataError("not a disk image (a .dmg ends with a koly trailer)")
    return Parsed({}, None, platform="macos")
