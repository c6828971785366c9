"""Windows App Installer's file for a channel: where an MSIX-packaged app looks for its
updates (schema http://schemas.microsoft.com/appx/appinstaller/2018).

It names the newest package offered on the channel (by its 4-part version), with the identity
its AppxManifest.xml declares, read at verify (builds/windows.py: `identityName`,
`publisher`, `shortVersion`, `arch`): App Installer installs an update only if Name and
Publisher match the installed package's. A bundle (.msixbundle, .appxbundle) is a
MainBundle, one package a MainPackage with its ProcessorArchitecture. The app checks on every
launch (OnLaunch, HoursBetweenUpdateChecks 0); a mandatory build blocks the launch until it
is installed (UpdateBlocksActivation, with the prompt it needs).
"""

from __future__ import annotations

from xml.etree.ElementTree import Element, SubElement, tostring

from buildbay.errors import NotFound
from buildbay.feeds.builds import FeedBuild, newest
from buildbay.feeds.urls import appinstaller_url, download_url

NAMESPACE = "http://schemas.microsoft.com/appx/appinstaller/2018"
PACKAGES = ("msix", "appx")
BUNDLES = ("msixbundle", "appxbundle")
# ProcessorArchitecture's values in the schema.
ARCHITECTURES = ("x86", "x64", "arm", "arm64", "neutral")


def _identity(build: FeedBuild) -> tuple[str, str, str] | None:
    name, publisher = build.metadata.get("identityName"), build.metadata.get("publisher")
    version = build.version
    if isinstance(name, str) and isinstance(publisher, str) and version is not None:
        return name, publisher, version
    return None


def appinstaller(
    builds: list[FeedBuild], *, channel: str, public_url: str, update_key: str
) -> bytes:
    """404 `no_build` if the channel offers no MSIX package whose identity was read."""
    eligible = [
        b for b in builds if b.suffix in PACKAGES + BUNDLES and _identity(b) is not None
    ]  # fmt: skip
    best = newest(eligible)
    if best is None:
        raise NotFound(
            f'The channel "{channel}" offers no MSIX package (.msix, .appx, .msixbundle, '
            ".appxbundle) yet: App Installer installs only those",
            code="no_build",
        )
    identity = _identity(best)
    assert identity is not None  # by `eligible`
    name, publisher, version = identity
    root = Element(
        "AppInstaller",
        {
            "xmlns": NAMESPACE,
            "Uri": appinstaller_url(public_url, update_key, channel),
            "Version": version,
        },
    )
    attributes = {
        "Name": name,
        "Publisher": publisher,
        "Version": version,
    }
    if best.suffix in PACKAGES:
        arch = best.metadata.get("arch")
        attributes["ProcessorArchitecture"] = (
            arch.lower() if isinstance(arch, str) and arch.lower() in ARCHITECTURES else "neutral"
        )
    attributes["Uri"] = download_url(public_url, update_key, best.id, best.file_name)
    SubElement(root, "MainBundle" if best.suffix in BUNDLES else "MainPackage", attributes)
    settings = SubElement(root, "UpdateSettings")
    on_launch = {"HoursBetweenUpdateChecks": "0"}
    if best.mandatory:
        on_launch |= {"ShowPrompt": "true", "UpdateBlocksActivation": "true"}
    SubElement(settings, "OnLaunch", on_launch)
    body: bytes = tostring(root, encoding="utf-8", xml_declaration=True)
    return body
