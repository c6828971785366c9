"""What a Linux build says about itself: a `.deb` (its control file: package, version,
architecture, description), an `.rpm` (its header, read with rpmfile: name, version, release,
architecture, summary), an `.AppImage` and a `.snap` (recognised, with the AppImage's
architecture from its ELF header), and a `.tar.gz` / `.tar.xz` (recognised only). What a file
does not say (an AppImage's version) comes from verify's fields.

Every size is checked before anything is read or inflated: the control archive, the control
file, the rpm's headers; a decompression stops at its bound, whatever the file claims.
"""

from __future__ import annotations

import io
import lzma
import struct
import tarfile
import zlib
from typing import IO, Any

import zstandard
from rpmfile import headers as rpm_headers  # type: ignore[import-untyped]
from rpmfile.errors import RPMError  # type: ignore[import-untyped]

from buildbay.builds.archive import MetadataError, Parsed
from buildbay.builds.desktop import head, text_value

CONTROL_ARCHIVE_LIMIT = 4 * 1024 * 1024  # control.tar.* as stored in the .deb
CONTROL_TAR_LIMIT = 16 * 1024 * 1024  # ... once inflated
CONTROL_LIMIT = 1024 * 1024  # the control file itself
CONTROL_MEMBERS_LIMIT = 10_000  # entries of control.tar looked at
AR_MEMBERS_LIMIT = 8  # members of the .deb's ar archive looked at (a .deb has three)
ZSTD_WINDOW_LIMIT = 32 * 1024 * 1024  # what a zstd frame may ask to hold while it inflates
DESCRIPTION_MAX = 200  # the first line of a package's description

_AR_MAGIC = b"!<arch>\n"
_AR_MEMBER = struct.Struct("16s12s6s6s8s10s2s")


# -- .deb ------------------------------------------------------------------------------------------


def parse_deb(file: IO[bytes]) -> Parsed:
    """A Debian package's control file: Package, Version, Architecture and the first line
    of its Description."""
    name, data = _control_archive(file)
    control = _control_file(_inflated(name, data))
    fields = _control_fields(control)
    package = fields.get("package")
    if not package:
        raise MetadataError("its control file has no Package")
    description = fields.get("description", "").split("\n", 1)[0].strip()
    metadata: dict[str, Any] = {
        "package": package,
        "shortVersion": fields.get("version") or None,
        "arch": fields.get("architecture") or None,
        "description": description[:DESCRIPTION_MAX] or None,
    }
    return Parsed({k: v for k, v in metadata.items() if v is not None}, platform="linux")


def _control_archive(file: IO[bytes]) -> tuple[str, bytes]:
    """The name (control.tar, .gz, .xz or .zst) and bytes of the package's control archive."""
    file.seek(0)
    if file.read(len(_AR_MAGIC)) != _AR_MAGIC:
        raise MetadataError("not a Debian package (a .deb is an ar archive)")
    offset = len(_AR_MAGIC)
    for _ in range(AR_MEMBERS_LIMIT):
        file.seek(offset)
        header = file.read(_AR_MEMBER.size)
        if len(header) < _AR_MEMBER.size:
            break
        name_field, *_, size_field, magic = _AR_MEMBER.unpack(header)
        if magic != b"`\n":
            raise MetadataError("a member of the ar archive has a broken header")
        try:
            size = int(size_field.decode("ascii").strip())
            name = name_field.decode("ascii").strip().rstrip("/")
        except (UnicodeDecodeError, ValueError):
            raise MetadataError("a member of the ar archive has a broken header") from None
        if size < 0:
            raise MetadataError("a member of the ar archive has a broken header")
        if name.startswith("control.tar"):
            if size > CONTROL_ARCHIVE_LIMIT:
                raise MetadataError(f"{name} is larger than {CONTROL_ARCHIVE_LIMIT} bytes")
            data = file.read(size)
            if len(data) < size:
                raise MetadataError(f"the file ends inside {name}")
            return name, data
        offset += _AR_MEMBER.size + size + (size & 1)  # members start at even offsets
    raise MetadataError("no control.tar in the package")


def _inflated(name: str, data: bytes) -> bytes:
    """control.tar's bytes, inflated: at most CONTROL_TAR_LIMIT of them."""
    limit = CONTROL_TAR_LIMIT
    try:
        if name == "control.tar":
            out = data
        elif name == "control.tar.gz":
            out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, limit + 1)
        elif name == "control.tar.xz":
            out = lzma.LZMADecompressor().decompress(data, limit + 1)
        elif name == "control.tar.zst":
            out = _zstd(data, limit + 1)
        else:
            raise MetadataError(f"{name[:40]} is in a compression not read here")
    except (zlib.error, lzma.LZMAError, zstandard.ZstdError) as exc:
        raise MetadataError(f"{name} does not inflate: {exc}") from None
    if len(out) > limit:
        raise MetadataError(f"{name} inflates to more than {limit} bytes")
    return out


def _zstd(data: bytes, most: int) -> bytes:
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_WINDOW_LIMIT)
    out = bytearray()
    with decompressor.stream_reader(io.BytesIO(data)) as reader:
        while len(out) < most and (chunk := reader.read(min(1024 * 1024, most - len(out)))):
            out += chunk
    return bytes(out)


def _control_file(tar_bytes: bytes) -> str:
    data: bytes | None = None
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            for index, member in enumerate(tar):
                if index >= CONTROL_MEMBERS_LIMIT:
                    break
                if member.name not in ("./control", "control") or not member.isfile():
                    continue
                if member.size > CONTROL_LIMIT:
                    raise MetadataError(f"its control file is larger than {CONTROL_LIMIT} bytes")
                extracted = tar.extractfile(member)
                data = extracted.read(CONTROL_LIMIT + 1) if extracted is not None else b""
                break
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise MetadataError(f"control.tar is not a tar archive: {exc}") from None
    if data is None:
        raise MetadataError("no control file in control.tar")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MetadataError("its control file is not UTF-8 text") from None


def _control_fields(control: str) -> dict[str, str]:
    """The first paragraph of a control file, by lower-cased field name (deb822: `Name:
    value`, continued on lines that start with a space or a tab)."""
    fields: dict[str, str] = {}
    current: str | None = None
    for line in control.splitlines():
        if not line.strip():
            if fields:
                break  # the end of the first paragraph
            continue
        if line[0] in " \t":
            if current is not None:
                fields[current] += "\n" + line.strip()
            continue
        if line.startswith("#"):
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise MetadataError("its control file has a line that is not a field")
        current = name.strip().lower()
        fields.setdefault(current, value.strip())
    return fields


# -- .rpm ------------------------------------------------------------------------------------------

RPM_SIGNATURE_LIMIT = 1024 * 1024  # the signature header's index and data
RPM_HEADER_LIMIT = 32 * 1024 * 1024  # the main header's (every file's name, the changelog)
RPM_INDEX_LIMIT = 100_000  # entries in a header's index
_RPM_LEAD = struct.Struct(">4sBBhh66shh16s")
_RPM_LEAD_MAGIC = b"\xed\xab\xee\xdb"
_RPM_HEADER = struct.Struct(">3sB4sII")
_RPM_HEADER_MAGIC = b"\x8e\xad\xe8"


def parse_rpm(file: IO[bytes]) -> Parsed:
    """An RPM package's name, version, release, architecture and summary.

    The lead and both headers' sizes are checked here first (rpmfile reads whatever sizes a
    file states, and looks for a header byte by byte); rpmfile then decodes the headers from
    those bytes alone."""
    file.seek(0)
    lead = file.read(_RPM_LEAD.size)
    if len(lead) < _RPM_LEAD.size or lead[:4] != _RPM_LEAD_MAGIC:
        raise MetadataError("not an RPM package (no RPM lead)")
    signature = _rpm_header(file, "signature header", RPM_SIGNATURE_LIMIT)
    padding = file.read(-len(signature) % 8)  # the signature header is padded to 8 bytes
    main = _rpm_header(file, "header", RPM_HEADER_LIMIT)
    declared = _signed_size(signature)
    if declared is not None:
        whole = len(lead) + len(signature) + len(padding) + declared
        size = file.seek(0, io.SEEK_END)
        if size < whole:
            raise MetadataError(f"the file ends before its payload does ({size} of {whole} bytes)")
    try:
        _, tags = rpm_headers.get_headers(io.BytesIO(lead + signature + padding + main))
    except (RPMError, AssertionError, struct.error, ValueError, IndexError, TypeError) as exc:
        raise MetadataError(f"its header cannot be read: {type(exc).__name__}") from None
    name = _rpm_text(tags.get("name"), "name")
    if name is None:
        raise MetadataError("its header has no name")
    metadata: dict[str, Any] = {
        "package": name,
        "shortVersion": _rpm_text(tags.get("version"), "version"),
        "buildNumber": _rpm_text(tags.get("release"), "release"),
        "arch": _rpm_text(tags.get("arch"), "arch"),
        "description": _rpm_text(tags.get("summary"), "summary"),
    }
    if isinstance(metadata["description"], str):
        metadata["description"] = metadata["description"][:DESCRIPTION_MAX]
    return Parsed({k: v for k, v in metadata.items() if v is not None}, platform="linux")


def _rpm_header(file: IO[bytes], what: str, limit: int) -> bytes:
    """A header's bytes (magic, index and data), once its sizes are within bounds."""
    start = file.read(_RPM_HEADER.size)
    if len(start) < _RPM_HEADER.size:
        raise MetadataError(f"the file ends before its {what}")
    magic, _, _, count, size = _RPM_HEADER.unpack(start)
    if magic != _RPM_HEADER_MAGIC:
        raise MetadataError(f"its {what} is not where an RPM's is")
    if count > RPM_INDEX_LIMIT or 16 * count + size > limit:
        raise MetadataError(f"its {what} is larger than {limit} bytes")
    body = file.read(16 * count + size)
    if len(body) < 16 * count + size:
        raise MetadataError(f"the file ends inside its {what}")
    return start + body


_SIGNATURE_SIZE = 1000  # RPMSIGTAG_SIZE: the header's and the payload's bytes (INT32)
_SIGNATURE_LONG_SIZE = 270  # RPMSIGTAG_LONGSIZE, for packages past 4 GiB (INT64)


def _signed_size(signature: bytes) -> int | None:
    """The size of the header and payload together that the signature header states, if it
    does: what a whole package has after its signature."""
    _, _, _, count, size = _RPM_HEADER.unpack_from(signature)
    store = _RPM_HEADER.size + 16 * count
    for index in range(count):
        tag, kind, offset, _ = struct.unpack_from(">iiii", signature, _RPM_HEADER.size + 16 * index)
        if tag == _SIGNATURE_SIZE and kind == 4 and 0 <= offset <= size - 4:
            return int(struct.unpack_from(">I", signature, store + offset)[0])
        if tag == _SIGNATURE_LONG_SIZE and kind == 5 and 0 <= offset <= size - 8:
            return int(struct.unpack_from(">Q", signature, store + offset)[0])
    return None


def _rpm_text(value: object, what: str) -> str | None:
    if isinstance(value, list):  # an i18n string or an array: the first
        value = value[0] if value else None
    if not isinstance(value, bytes):
        return None
    try:
        return text_value(value.decode("utf-8"))
    except UnicodeDecodeError:
        raise MetadataError(f"its {what} is not UTF-8 text") from None


# -- files recognised by their first bytes ---------------------------------------------------------

_ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64", 0x03: "i386", 0x28: "arm"}


def check_appimage(file: IO[bytes]) -> Parsed:
    """An AppImage: an ELF executable marked `AI` (type 1 or 2) in its identification bytes;
    its architecture from the ELF header."""
    start = head(file, 20)
    if len(start) < 20 or start[:4] != b"\x7fELF" or start[8:10] != b"AI":
        raise MetadataError("not an AppImage (an ELF executable with the AppImage mark)")
    order = "<" if start[5] == 1 else ">"
    (machine,) = struct.unpack_from(order + "H", start, 18)
    arch = _ELF_MACHINES.get(machine)
    return Parsed({"arch": arch} if arch else {}, platform="linux")


def check_snap(file: IO[bytes]) -> Parsed:
    if head(file, 4) != b"hsqs":
        raise MetadataError("not a snap (a .snap is a squashfs image)")
    return Parsed({}, platform="linux")


def check_gzip(file: IO[bytes]) -> Parsed:
    if head(file, 2) != b"\x1f\x8b":
        raise MetadataError("not gzip-compressed")
    return Parsed({})


def check_xz(file: IO[bytes]) -> Parsed:
    if head(file, 6) != b"\xfd7zXZ\x00":
        raise MetadataError("not xz-compressed")
    return Parsed({})
