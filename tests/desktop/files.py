"""Desktop build files, made the way their makers make them where this machine has the tools:

- `.deb`: Debian's `dpkg-deb --build`;
- `.rpm`: `rpmbuild` (Debian's `rpm` package) from a spec file;
- `.exe`: a real PE linked by the MinGW-w64 binutils (`as`, `windres`, `ld`: Debian's
  `binutils-mingw-w64-x86-64`) from a one-instruction program and a VERSIONINFO resource script;
- `.msix`: a zip with AppxManifest.xml, [Content_Types].xml and AppxBlockMap.xml, as MSIX has
  (makeappx is Windows-only; the manifest is what verify reads);
- a `.zip`'ed `.app`: Info.plist (plistlib), the main executable's Mach-O header, and an .icns
  icon written by Pillow;
- `.pkg`: a xar archive written here (no xar tool in Debian): header, zlib'ed table of contents,
  and the Distribution document in its heap, as productbuild lays them out;
- `.dmg`, `.msi`, `.AppImage`: only their first or last bytes are read, so those are written
  here (a UDIF koly trailer, a compound file's signature, an ELF header with the AppImage mark).

A tool that is missing skips the test that needs it, with the reason; under CI
(BUILDBAY_REQUIRE_SERVICES) it fails it: .ci/run installs them.
"""

from __future__ import annotations

import io
import plistlib
import shutil
import struct
import subprocess
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.conftest import REQUIRE_SERVICES

MiB = 1024 * 1024


def tool(name: str, package: str) -> str:
    """The path of a command-line tool, or skip (fail under CI) naming its Debian package."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (Debian package {package})"
        if REQUIRE_SERVICES:
            pytest.fail(message + ": .ci/run installs it")
        pytest.skip(message)
    return found


def run(*command: str, cwd: Path | None = None) -> None:
    subprocess.run(command, check=True, capture_output=True, cwd=cwd, timeout=120)


# -- .deb --------------------------------------------------------------------------------------


def deb(
    tmp_path: Path,
    package: str = "example-app",
    version: str = "1.4.2-1",
    architecture: str = "amd64",
    *,
    compression: str = "xz",
    description: str = "An example desktop app\n Built for the tests.",
    extra_control: str = "",
) -> bytes:
    """A Debian package built by dpkg-deb, with one file under /opt."""
    dpkg_deb = tool("dpkg-deb", "dpkg")
    root = tmp_path / f"deb-{package}-{compression}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "opt" / package).mkdir(parents=True)
    (root / "opt" / package / "README").write_text("hello\n")
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: {architecture}\n"
        f"Maintainer: Example <dev@example.com>\nDescription: {description}\n{extra_control}"
    )
    out = tmp_path / f"{package}-{compression}.deb"
    run(dpkg_deb, "--root-owner-group", f"-Z{compression}", "--build", str(root), str(out))
    return out.read_bytes()


def ar(members: list[tuple[str, bytes]]) -> bytes:
    """An ar archive (what a .deb is), for packages dpkg-deb would not build."""
    out = b"!<arch>\n"
    for name, data in members:
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


def tar_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# -- .rpm --------------------------------------------------------------------------------------


def rpm(
    tmp_path: Path,
    name: str = "example-app",
    version: str = "1.4.2",
    release: str = "3",
    architecture: str = "x86_64",
) -> bytes:
    """An RPM package built by rpmbuild, with one file under /opt."""
    rpmbuild = tool("rpmbuild", "rpm")
    top = tmp_path / f"rpm-{name}"
    spec = tmp_path / f"{name}.spec"
    spec.write_text(
        f"Name: {name}\nVersion: {version}\nRelease: {release}\n"
        "Summary: An example desktop app\nLicense: MIT\n"
        f"BuildArch: {architecture}\n"
        "%description\nAn example.\n"
        "%install\nmkdir -p %{buildroot}/opt/example\necho hi > %{buildroot}/opt/example/readme\n"
        "%files\n/opt/example/readme\n"
    )
    run(
        rpmbuild, "--define", f"_topdir {top}", "--define", "__os_install_post %{nil}",
        "-bb", str(spec),
    )  # fmt: skip
    (built,) = (top / "RPMS").rglob("*.rpm")
    return built.read_bytes()


# -- .exe --------------------------------------------------------------------------------------

VERSION_RESOURCE = """1 VERSIONINFO
FILEVERSION {file_commas}
PRODUCTVERSION {product_commas}
FILEOS 0x40004
FILETYPE 0x1
BEGIN
  BLOCK "StringFileInfo"
  BEGIN
    BLOCK "040904b0"
    BEGIN
      VALUE "CompanyName", "{company}"
      VALUE "FileVersion", "{file_version}"
      VALUE "ProductName", "{product}"
      VALUE "ProductVersion", "{product_version}"
    END
  END
  BLOCK "VarFileInfo"
  BEGIN
    VALUE "Translation", 0x409, 1200
  END
END
"""


def exe(
    tmp_path: Path,
    *,
    product: str = "Example App",
    company: str = "Example Corp",
    product_version: str = "1.4.2",
    file_version: str = "1.4.2.812",
    with_version: bool = True,
) -> bytes:
    """A 64-bit Windows executable linked by the MinGW-w64 binutils, with a version resource."""
    prefix = "x86_64-w64-mingw32-"
    assembler = tool(prefix + "as", "binutils-mingw-w64-x86-64")
    windres = tool(prefix + "windres", "binutils-mingw-w64-x86-64")
    linker = tool(prefix + "ld", "binutils-mingw-w64-x86-64")
    work = tmp_path / "exe"
    work.mkdir(exist_ok=True)
    (work / "main.s").write_text(".globl _start\n.text\n_start:\n    ret\n")
    run(assembler, "main.s", "-o", "main.o", cwd=work)
    objects = ["main.o"]
    if with_version:
        commas = lambda v: ",".join((v.split(".") + ["0"] * 4)[:4])  # noqa: E731
        (work / "version.rc").write_text(
            VERSION_RESOURCE.format(
                file_commas=commas(file_version), product_commas=commas(product_version),
                company=company, file_version=file_version, product=product,
                product_version=product_version,
            )
        )  # fmt: skip
        # No C preprocessor is needed for this script (windres would look for MinGW's gcc).
        run(windres, "--preprocessor=cat", "version.rc", "-O", "coff", "-o", "version.o", cwd=work)
        objects.append("version.o")
    run(linker, *objects, "-o", "app.exe", "--subsystem", "windows", "-e", "_start", cwd=work)
    return (work / "app.exe").read_bytes()


# -- .msix -------------------------------------------------------------------------------------

CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="xml" ContentType="application/vnd.ms-appx.manifest+xml"/>'
    '<Default Extension="exe" ContentType="application/x-msdownload"/>'
    '<Override PartName="/AppxBlockMap.xml" ContentType="application/vnd.ms-appx.blockmap+xml"/>'
    "</Types>"
)


def appx_manifest(
    name: str = "Example.DesktopApp",
    publisher: str = "CN=Example Corp, O=Example Corp, C=US",
    version: str = "1.4.2.0",
    architecture: str = "x64",
    display_name: str = "Example App",
    min_version: str = "10.0.17763.0",
) -> str:
    return f"""<?xml version="1.0" encoding="utf-8"?>
<Package xmlns="http://schemas.microsoft.com/appx/manifest/foundation/windows10"
  xmlns:uap="http://schemas.microsoft.com/appx/manifest/uap/windows10"
  xmlns:rescap="http://schemas.microsoft.com/appx/manifest/foundation/windows10/restrictedcapabilities"
  IgnorableNamespaces="uap rescap">
  <Identity Name="{name}" Publisher="{publisher}" Version="{version}"
    ProcessorArchitecture="{architecture}"/>
  <Properties>
    <DisplayName>{display_name}</DisplayName>
    <PublisherDisplayName>Example Corp</PublisherDisplayName>
    <Logo>Assets\\StoreLogo.png</Logo>
  </Properties>
  <Dependencies>
    <TargetDeviceFamily Name="Windows.Universal" MinVersion="10.0.10240.0"
      MaxVersionTested="10.0.22621.0"/>
    <TargetDeviceFamily Name="Windows.Desktop" MinVersion="{min_version}"
      MaxVersionTested="10.0.22621.0"/>
  </Dependencies>
  <Resources><Resource Language="en-us"/></Resources>
  <Applications>
    <Application Id="App" Executable="Example.exe" EntryPoint="Windows.FullTrustApplication">
      <uap:VisualElements DisplayName="{display_name}" Description="An example"
        BackgroundColor="transparent" Square150x150Logo="Assets\\Square150x150Logo.png"
        Square44x44Logo="Assets\\Square44x44Logo.png"/>
    </Application>
  </Applications>
  <Capabilities><rescap:Capability Name="runFullTrust"/></Capabilities>
</Package>
"""


def msix(manifest: str | bytes | None = None, **identity: Any) -> bytes:
    """An app package: the manifest, the content types and block map every package has, and
    a payload."""
    text = manifest if manifest is not None else appx_manifest(**identity)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("Example.exe", b"MZ" + bytes(1022))
        z.writestr("AppxManifest.xml", text)
        z.writestr(
            "AppxBlockMap.xml",
            '<?xml version="1.0" encoding="UTF-8"?><BlockMap '
            'xmlns="http://schemas.microsoft.com/appx/2010/blockmap" HashMethod='
            '"http://www.w3.org/2001/04/xmlenc#sha256"/>',
        )
        z.writestr("[Content_Types].xml", CONTENT_TYPES)
    return out.getvalue()


def msix_bundle(version: str = "1.4.2.0", *architectures: str) -> bytes:
    """A bundle of app packages, as makeappx bundle lays it out: its manifest under
    AppxMetadata/ naming one package per architecture, and the packages."""
    archs = architectures or ("x64", "arm64")
    packages = "".join(
        f'<Package Type="application" Version="{version}" Architecture="{arch}" '
        f'FileName="Example_{version}_{arch}.msix" Offset="0" Size="1"/>'
        for arch in archs
    )
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Bundle xmlns="http://schemas.microsoft.com/appx/2013/bundle" SchemaVersion="5.0">'
        f'<Identity Name="Example.DesktopApp" Publisher="CN=Example Corp, O=Example Corp, C=US" '
        f'Version="{version}"/>'
        f"<Packages>{packages}</Packages></Bundle>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("AppxMetadata/AppxBundleManifest.xml", manifest)
        for arch in archs:
            z.writestr(f"Example_{version}_{arch}.msix", msix(version=version, architecture=arch))
        z.writestr("[Content_Types].xml", CONTENT_TYPES)
    return out.getvalue()


# -- a .zip of an .app -------------------------------------------------------------------------

APP_INFO: dict[str, Any] = {
    "CFBundleIdentifier": "com.example.desktop",
    "CFBundleShortVersionString": "1.4.2",
    "CFBundleVersion": "812",
    "LSMinimumSystemVersion": "11.0",
    "CFBundleName": "Example",
    "CFBundleExecutable": "Example",
    "CFBundleIconFile": "AppIcon",
    "CFBundlePackageType": "APPL",
}
CPU_X86_64, CPU_ARM64 = 0x01000007, 0x0100000C


def fat_executable(*cpus: int) -> bytes:
    """The start of a universal Mach-O executable: the fat header and one entry per slice."""
    header = struct.pack(">II", 0xCAFEBABE, len(cpus))
    for index, cpu in enumerate(cpus):
        header += struct.pack(">IIIII", cpu, 3, 0x4000 * (index + 1), 0x4000, 14)
    return header + bytes(4096)


def thin_executable(cpu: int) -> bytes:
    return struct.pack("<IIIIIIII", 0xFEEDFACF, cpu, 3, 2, 0, 0, 0, 0) + bytes(4096)


def icns(side: int = 512) -> bytes:
    """An icon: blue, its lower half white."""
    image = Image.new("RGBA", (side, side), (30, 120, 200, 255))
    image.paste((255, 255, 255, 255), (0, side // 2, side, side))
    out = io.BytesIO()
    image.save(out, format="ICNS")
    return out.getvalue()


def app_zip(
    info: dict[str, Any] | bytes = APP_INFO,
    *,
    executable: bytes | None = None,
    icon: bytes | None = None,
    app: str = "Example.app",
) -> bytes:
    """A zip of a macOS app as `ditto -ck --keepParent` or electron-builder's mac zip makes it."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        plist = info if isinstance(info, bytes) else plistlib.dumps(info)
        z.writestr(f"{app}/Contents/Info.plist", plist)
        z.writestr(f"{app}/Contents/PkgInfo", b"APPL????")
        z.writestr(
            f"{app}/Contents/MacOS/Example",
            executable if executable is not None else fat_executable(CPU_X86_64, CPU_ARM64),
        )
        z.writestr(f"{app}/Contents/Resources/AppIcon.icns", icon if icon is not None else icns())
        z.writestr(
            f"{app}/Contents/Frameworks/Helper.app/Contents/Info.plist",
            plistlib.dumps({"CFBundleIdentifier": "com.example.desktop.helper"}),
        )
    return out.getvalue()


# -- .pkg: a xar archive -----------------------------------------------------------------------

DISTRIBUTION = """<?xml version="1.0" encoding="utf-8"?>
<installer-gui-script minSpecVersion="2">
    <title>Example App</title>
    <product id="com.example.desktop.pkg" version="1.4.2"/>
    <pkg-ref id="com.example.desktop"/>
    <allowed-os-versions><os-version min="11.0"/></allowed-os-versions>
    <options customize="never" require-scripts="false" hostArchitectures="x86_64,arm64"/>
    <choices-outline><line choice="default"/></choices-outline>
    <choice id="default" title="Example"><pkg-ref id="com.example.desktop"/></choice>
    <pkg-ref id="com.example.desktop" version="1.4.2" onConclusion="none">Example.pkg</pkg-ref>
</installer-gui-script>
"""


def xar(files: dict[str, bytes], *, compress: bool = True) -> bytes:
    """A xar archive: a 28-byte header, the zlib'ed XML table of contents, then the heap (a
    SHA-1 checksum's place first, as xar writes it, then each file, zlib'ed if `compress`)."""
    heap = bytearray(20)  # the table of contents' checksum
    entries = []
    for index, (name, data) in enumerate(files.items(), start=2):
        stored = zlib.compress(data) if compress else data
        style = "application/x-gzip" if compress else "application/octet-stream"
        entries.append(
            f'<file id="{index}"><name>{name}</name><type>file</type><data>'
            f"<length>{len(stored)}</length><offset>{len(heap)}</offset><size>{len(data)}</size>"
            f'<encoding style="{style}"/></data></file>'
        )
        heap += stored
    toc = (
        '<?xml version="1.0" encoding="UTF-8"?><xar><toc>'
        '<checksum style="sha1"><offset>0</offset><size>20</size></checksum>'
        f"<creation-time>2026-11-01T10:00:00</creation-time>{''.join(entries)}</toc></xar>"
    ).encode()
    packed = zlib.compress(toc)
    header = struct.pack(">4sHHQQI", b"xar!", 28, 1, len(packed), len(toc), 1)
    return header + packed + bytes(heap)


def pkg(distribution: str = DISTRIBUTION) -> bytes:
    return xar({"Distribution": distribution.encode(), "Example.pkg": b"not read"})


# -- files recognised by their first or last bytes ---------------------------------------------


def dmg(size: int = 64 * 1024) -> bytes:
    """A disk image's bytes as far as verify reads them: anything, then the 512-byte UDIF
    trailer (`koly`, version 4, header size 512)."""
    trailer = struct.pack(">4sII", b"koly", 4, 512).ljust(512, b"\0")
    return bytes(size - 512) + trailer


def msi(size: int = 64 * 1024) -> bytes:
    """A Windows Installer database's start: the compound file signature and header."""
    return bytes.fromhex("d0cf11e0a1b11ae1").ljust(size, b"\0")


def appimage(machine: int = 0x3E, size: int = 64 * 1024) -> bytes:
    """An AppImage's ELF header: 64-bit, little-endian, the `AI` mark and type 2, e_machine."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"AI\x02" + bytes(5)
    return (ident + struct.pack("<HH", 2, machine)).ljust(size, b"\0")


def zip_of(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


def tar_gz(files: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in (files or {"example/README": b"hello\n"}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
