"""What the desktop parsers (builds/macos.py, windows.py, linux.py) share: the bytes at either
end of a file, a bounded XML reader, and the processor architecture in an updater's words."""

from __future__ import annotations

import io
from typing import IO
from xml.etree.ElementTree import Element

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, fromstring

from buildbay.builds.archive import MetadataError

# The architectures desktop updaters tell apart (electron-updater's, Sparkle's, App
# Installer's): `universal` is one file for both (a macOS universal binary).
ARCHITECTURES = ("x64", "arm64", "universal")

# What files call them (Debian, RPM, MSIX, Apple's and electron-builder's names), in an updater's.
# Other architectures (x86, arm, all, noarch, neutral) have none: verify's `architecture` field
# says what a file built for every one is meant for.
_ARCHITECTURE_OF = {
    "amd64": "x64",
    "x86_64": "x64",
    "x64": "x64",
    "arm64": "arm64",
    "aarch64": "arm64",
    "universal": "universal",
}


def architecture_of(word: str | None) -> str | None:
    """The updater's architecture for a file's word for it (`amd64` -> `x64`), or None."""
    return _ARCHITECTURE_OF.get(word.lower()) if word else None


def head(file: IO[bytes], length: int) -> bytes:
    """The file's first `length` bytes (fewer if it is shorter)."""
    file.seek(0)
    return file.read(length)


def tail(file: IO[bytes], length: int) -> bytes:
    """The file's last `length` bytes (fewer if it is shorter)."""
    size = file.seek(0, io.SEEK_END)
    file.seek(max(0, size - length))
    return file.read(length)


def parse_xml(data: bytes, what: str) -> Element:
    """`data` as an XML document, refusing a DTD, entities and external references (no entity
    expansion: no billion laughs, no quadratic blow-up, no file or network read)."""
    try:
        return fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        raise MetadataError(f"{what} declares a DTD or entities ({type(exc).__name__})") from None
    except (ParseError, ValueError) as exc:
        raise MetadataError(f"{what} is not well-formed XML: {exc}") from None


def local_name(element: Element) -> str:
    """An element's name without its namespace (`{http://...}Identity` -> `Identity`)."""
    return element.tag.rsplit("}", 1)[-1] if isinstance(element.tag, str) else ""


def children(element: Element, name: str) -> list[Element]:
    """The element's children of this local name, whatever their namespace."""
    return [child for child in element if local_name(child) == name]


def child(element: Element, name: str) -> Element | None:
    found = children(element, name)
    return found[0] if found else None


def text_value(value: object) -> str | None:
    """A non-empty string, stripped, or None."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None
