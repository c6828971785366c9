"""Android fixtures for the tests: the committed APKs (tests/fixtures/android/make_apk.sh) with
what Android's own tools read from them, and .aab files whose protobuf manifest is encoded by
Google's protobuf library from the field numbers of aapt2's Resources.proto (an encoder
independent of the decoder under test)."""

from __future__ import annotations

import io
import os
import re
import struct
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

FIXTURES = Path(__file__).parent.parent / "fixtures" / "android"
APK = FIXTURES / "demo.apk"  # signed v2 + v3
APK_V1 = FIXTURES / "demo-v1.apk"  # signed only with a JAR signature


@cache
def expected() -> dict[str, Any]:
    """What `aapt dump badging`, `apksigner` and `keytool` said about the fixtures."""
    text = (FIXTURES / "expected.txt").read_text()

    def find(pattern: str) -> str:
        match = re.search(pattern, text)
        assert match, pattern
        return match.group(1)

    return {
        "packageName": find(r"package: name='([^']+)'"),
        "versionCode": int(find(r"versionCode='(\d+)'")),
        "versionName": find(r"versionName='([^']+)'"),
        "minSdk": int(find(r"sdkVersion:'(\d+)'")),
        "targetSdk": int(find(r"targetSdkVersion:'(\d+)'")),
        "appName": find(r"application-label:'([^']+)'"),
        "certificate": find(r"certificate SHA-256 digest: ([0-9a-f]{64})"),
        "certificateV1": find(r"demo-v1.apk\s+SHA256: ([0-9A-F:]+)").replace(":", "").lower(),
    }


_PROTO = """
XmlNode: element=1:XmlElement text=2:string
XmlElement: namespace_uri=2:string name=3:string attribute=4*:XmlAttribute child=5*:XmlNode
XmlAttribute: namespace_uri=1:string name=2:string value=3:string resource_id=5:uint32 compiled_item=6:Item
Item: str=2:String prim=7:Primitive
String: value=1:string
Primitive: int_decimal_value=6:int32
"""  # noqa: E501


@cache
def _messages() -> dict[str, Any]:
    types = {
        "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
        "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    }
    file = descriptor_pb2.FileDescriptorProto(name="resources_subset.proto", package="aapt.pb")
    for line in _PROTO.strip().splitlines():
        name, fields = line.split(":", 1)
        message = file.message_type.add(name=name)
        for field in fields.split():
            field_name, spec = field.split("=")
            number, kind = spec.split(":")
            repeated = number.endswith("*")
            added = message.field.add(
                name=field_name,
                number=int(number.rstrip("*")),
                label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if repeated
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
            if kind in types:
                added.type = types[kind]
            else:
                added.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                added.type_name = f".aapt.pb.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"aapt.pb.{name}"))
        for name in ("XmlNode", "XmlElement", "XmlAttribute")
    }


ANDROID_NS = "http://schemas.android.com/apk/res/android"


def proto_manifest(
    package: str = "dev.buildbay.bundle",
    version_name: str = "3.1.0",
    version_code: int = 310,
    min_sdk: int = 26,
    *,
    compiled: bool = True,
) -> bytes:
    """An AndroidManifest.xml as aapt2 writes it into a bundle. With `compiled`, the numbers are
    compiled items with no raw text, as aapt2 leaves them."""
    m = _messages()

    def attribute(name: str, value: str | int, *, android: bool = True) -> Any:
        attr = m["XmlAttribute"](name=name, namespace_uri=ANDROID_NS if android else "")
        if isinstance(value, int) and compiled:
            attr.compiled_item.prim.int_decimal_value = value
        elif isinstance(value, str) and compiled:
            attr.value = value
            attr.compiled_item.str.value = value
        else:
            attr.value = str(value)
        return attr

    uses_sdk = m["XmlNode"]()
    uses_sdk.element.name = "uses-sdk"
    uses_sdk.element.attribute.append(attribute("minSdkVersion", min_sdk))
    application = m["XmlNode"]()
    application.element.name = "application"
    root = m["XmlNode"]()
    root.element.name = "manifest"
    root.element.attribute.extend(
        [
            attribute("package", package, android=False),
            attribute("versionCode", version_code),
            attribute("versionName", version_name),
        ]
    )
    root.element.child.extend([uses_sdk, application])
    root.element.child.add(text="\n")
    data: bytes = root.SerializeToString()
    return data


def aab(manifest: bytes | None = None) -> bytes:
    """An app bundle: the base module's protobuf manifest and a dex placeholder."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("BundleConfig.pb", b"")
        archive.writestr(
            "base/manifest/AndroidManifest.xml",
            proto_manifest() if manifest is None else manifest,
        )
        archive.writestr("base/dex/classes.dex", b"dex\n035\0")
    return buffer.getvalue()


def apk_of_size(size: int) -> bytes:
    """A readable .apk (the demo's entries) of exactly `size` bytes: random padding in a stored
    entry, for the tests that need a large build an Android application takes."""

    def built(padding: int) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(APK) as source, zipfile.ZipFile(out, "w") as target:
            for entry in source.infolist():
                target.writestr(entry, source.read(entry))
            target.writestr("assets/padding.bin", os.urandom(padding), zipfile.ZIP_STORED)
        return out.getvalue()

    overhead = len(built(0))
    if size < overhead:
        raise ValueError(f"an .apk takes at least {overhead} bytes")
    data = built(size - overhead)
    assert len(data) == size
    return data


def apk(version_code: int = 42, version_name: str = "1.4.2", min_sdk: int = 24) -> bytes:
    """The fixture APK with another versionCode, versionName and minSdk: the manifest's typed
    integers set in place and its string pool written again with the new name (its signature no
    longer matches; nothing here checks it)."""
    known = expected()
    out = io.BytesIO()
    with zipfile.ZipFile(APK) as source, zipfile.ZipFile(out, "w") as target:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename == "AndroidManifest.xml":
                for old, new in ((known["versionCode"], version_code), (known["minSdk"], min_sdk)):
                    typed = bytes([8, 0, 0, 0x10])  # a Res_value: size 8, TYPE_INT_DEC
                    before = typed + struct.pack("<I", old)
                    assert data.count(before) == 1
                    data = data.replace(before, typed + struct.pack("<i", new))
                data = _with_string(data, known["versionName"], version_name)
            target.writestr(entry, data)
    return out.getvalue()


def _with_string(manifest: bytes, old: str, new: str) -> bytes:
    """A binary XML document whose UTF-16 string pool (the first chunk) has `new` for `old`."""
    pool_type, header_size, pool_size, count, styles, flags, start, _ = struct.unpack_from(
        "<HHIIIIII", manifest, 8
    )
    assert (pool_type, styles, flags) == (1, 0, 0)  # UTF-16 strings, no styles
    pool = manifest[8 : 8 + pool_size]
    offsets = struct.unpack_from(f"<{count}I", pool, header_size)
    strings = []
    for offset in offsets:
        (length,) = struct.unpack_from("<H", pool, start + offset)
        at = start + offset + 2
        strings.append(pool[at : at + 2 * length].decode("utf-16-le"))
    assert strings.count(old) == 1
    strings = [new if s == old else s for s in strings]
    body, new_offsets = b"", []
    for text in strings:
        new_offsets.append(len(body))
        body += struct.pack("<H", len(text)) + text.encode("utf-16-le") + b"\0\0"
    body += b"\0" * (-len(body) % 4)
    size = header_size + 4 * count + len(body)
    header = struct.pack("<HHIIIIII", 1, header_size, size, count, 0, 0, start, 0)
    rest = manifest[8 + pool_size :]
    document = struct.pack("<HHI", 3, 8, 8 + size + len(rest))
    return document + header + struct.pack(f"<{count}I", *new_offsets) + body + rest
