from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from fastapi import FastAPI

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.storage.base import StorageUnavailable
from buildbay.storage.local import DOWNLOAD_PATH, UPLOAD_PATH, LocalStorage
from tests.builds.conftest import DATA, Builds, storage_key_of
from tests.conftest import Account, Api, assert_problem, iso_z


async def test_three_step_upload_makes_a_ready_build(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    data = b"PK\x03\x04" + b"x" * 100_000

    build = await api.upload(owner, project["id"], app["id"], data, notes="First cut")

    assert build["status"] == "ready"
    assert build["sha256"] == hashlib.sha256(data).hexdigest()
    assert build["fileSize"] == len(data)
    assert build["notes"] == "First cut"
    assert build["uploadedBy"] == owner.user["id"]
    r = await client.get(build["downloadUrl"], headers=owner.headers)
    assert r.status_code == 302
    r = await client.get(r.headers["location"])
    assert r.status_code == 200
    assert r.content == data
    assert 'filename="app-release.apk"' in r.headers["content-disposition"]


async def test_verify_rejects_an_upload_that_never_arrived(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    base = f"/api/app-distribution/{project['id']}/{app['id']}/builds"
    r = await client.post(
        f"{base}/upload-link", json={"fileName": "a.apk", "fileSize": 10}, headers=owner.headers
    )
    build_id = r.json()["buildId"]
    r = await client.post(f"{base}/verify", json={"buildId": build_id}, headers=owner.headers)
    assert_problem(r, 422, "upload_incomplete")


# -- step 1: upload link --------------------------------------------------------------------------


def tamper(url: str, **changes: str) -> str:
    """The URL with query parameters changed."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | changes
    return urlunsplit(parts._replace(query=urlencode(query)))


def flip_last(text: str) -> str:
    return text[:-1] + ("0" if text[-1] != "0" else "1")


@pytest.mark.parametrize(
    "file_name",
    [
        "",
        "   ",
        "a" * 256,
        "dir/app.apk",
        "dir\\app.apk",
        "app\x00.apk",
        "app\x01.apk",
        "app\x1f.apk",
        "app\x7f.apk",
        "app\t1.apk",
        ".",
        "..",
        "../../etc/passwd",
        "..\\..\\boot.ini",
        "/etc/passwd",
        "app\x85.apk",  # NEL: a C1 control character, a line break to some readers
        "app\x9b31m.apk",  # CSI: a terminal escape in one character
        "setup\u202ekpa.exe",  # right-to-left override: shows as "setupexe.apk"
        "app\u2066x\u2069.apk",
        "app\u2028.apk",
    ],
)
async def test_upload_link_refuses_a_file_name_that_is_not_a_plain_name(
    builds: Builds, file_name: str
) -> None:
    r = await builds.request_link({"fileName": file_name, "fileSize": 10})

    body = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["fileName"]


@pytest.mark.parametrize(
    "file_name",
    [
        "a" * 255,
        "a",
        "...",
        "app release (1).apk",
        "アプリ.ipa",
        "\u0641\u0627\u06cc\u0644\u200c\u0647\u0627.apk",  # Persian, with a zero-width non-joiner
        "\U0001f469\u200d\U0001f4bb.apk",  # an emoji sequence joined by U+200D
    ],
)
async def test_upload_link_accepts_a_plain_file_name(builds: Builds, file_name: str) -> None:
    r = await builds.request_link({"fileName": file_name, "fileSize": 10})

    assert r.status_code == 201, r.text
    r = await builds.get(r.json()["buildId"])
    assert r.json()["fileName"] == file_name


@pytest.mark.parametrize("file_size", [0, -1, "12", 1.5, True, None, [1], 0.0])
async def test_upload_link_refuses_a_file_size_that_is_not_a_positive_integer(
    builds: Builds, file_size: Any
) -> None:
    r = await builds.request_link({"fileName": "a.apk", "fileSize": file_size})

    body = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["fileSize"]


async def test_upload_link_takes_a_whole_number_written_with_a_fraction(builds: Builds) -> None:
    # JSON has one kind of number; to JSON Schema, and so to the OpenAPI document, 12.0 is the
    # integer 12.
    r = await builds.request_link({"fileName": "a.apk", "fileSize": 12.0})

    assert r.status_code == 201, r.text
    assert (await builds.get(r.json()["buildId"])).json()["fileSize"] == 12


async def test_upload_link_needs_file_name_and_file_size(builds: Builds) -> None:
    r = await builds.request_link({})

    body = assert_problem(r, 422, "validation_error")
    assert sorted(e["field"] for e in body["errors"]) == ["fileName", "fileSize"]
    assert {e["message"] for e in body["errors"]} == {"is required"}


@pytest.mark.parametrize(
    "sha256",
    ["", "abc", "a" * 63, "a" * 65, "g" * 64, " " * 64, "0x" + "a" * 62, 123],
)
async def test_upload_link_refuses_a_sha256_that_is_not_64_hex_digits(
    builds: Builds, sha256: Any
) -> None:
    r = await builds.request_link({"fileName": "a.apk", "fileSize": 10, "sha256": sha256})

    body = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["sha256"]


@pytest.mark.parametrize("field", ["status", "buildId", "storageKey", "file_name", "plan"])
async def test_upload_link_refuses_an_unknown_field(builds: Builds, field: str) -> None:
    r = await builds.request_link({"fileName": "a.apk", "fileSize": 10, field: "ready"})

    body = assert_problem(r, 422, "validation_error")
    assert body["errors"] == [{"field": field, "message": "is not a field of this request"}]


async def test_upload_link_above_the_plan_maximum_is_413(
    builds: Builds, settings: Settings
) -> None:
    r = await builds.request_link(
        {"fileName": "a.apk", "fileSize": settings.max_upload_bytes_free + 1}
    )

    assert_problem(r, 413, "file_too_large")


async def test_upload_link_answers_the_upload_instructions(
    builds: Builds, clock: FrozenClock
) -> None:
    r = await builds.request_link({"fileName": "app-release.apk", "fileSize": 1234})

    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {
        "uploadUrl",
        "buildId",
        "expiresAt",
        "uploadMethod",
        "uploadHeaders",
        "multipart",
    }
    assert body["multipart"] is None  # one PUT
    assert body["uploadUrl"].startswith(f"http://testserver{UPLOAD_PATH}")
    assert body["buildId"].startswith("bld_")
    assert body["expiresAt"] == iso_z(clock.now() + timedelta(hours=1))
    assert body["expiresAt"].endswith("Z")
    assert body["uploadMethod"] == "PUT"
    assert body["uploadHeaders"] == {"Content-Type": "application/octet-stream"}


async def test_upload_link_creates_a_pending_build(builds: Builds, clock: FrozenClock) -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    link = await builds.link(b"x" * 10, sha256=digest.upper())

    r = await builds.get(link["buildId"])

    assert r.status_code == 200, r.text
    build = r.json()
    assert build["status"] == "pending"
    assert build["sha256"] is None  # the declared one is checked at verify, not shown as the fact
    assert build["fileSize"] == 10
    assert build["verifiedAt"] is None
    assert build["downloadUrl"] is None
    assert build["createdAt"] == iso_z(clock.now())
    assert build["expiresAt"] == link["expiresAt"]
    assert build["uploadedBy"] == builds.owner.user["id"]


async def test_a_declared_sha256_is_compared_case_insensitively(builds: Builds) -> None:
    link = await builds.pending(DATA, sha256=hashlib.sha256(DATA).hexdigest().upper())

    r = await builds.verify(link["buildId"])

    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(DATA).hexdigest()


# -- step 2: PUT the bytes ------------------------------------------------------------------------


async def test_put_stores_the_bytes_and_answers_size_and_sha256(builds: Builds) -> None:
    data = os.urandom(300_000)
    link = await builds.link(data)

    r = await builds.put(link, data)

    assert r.status_code == 200, r.text
    assert r.json() == {
        "buildId": link["buildId"],
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert builds.storage.path_of(storage_key_of(link)).read_bytes() == data


async def test_put_takes_a_chunked_body_without_content_length(builds: Builds) -> None:
    data = os.urandom(200_000)
    link = await builds.link(data)

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 10_000):
            yield data[start : start + 10_000]

    r = await builds.client.put(link["uploadUrl"], content=body())

    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(data).hexdigest()


async def test_put_needs_no_authorization_header(builds: Builds) -> None:
    link = await builds.link()

    r = await builds.client.put(link["uploadUrl"], content=DATA)

    assert r.status_code == 200, r.text
    assert r.json()["buildId"] == link["buildId"]


Query = dict[str, str]
URL_ALTERATIONS: dict[str, Callable[[Query], Query]] = {
    "signature changed": lambda q: q | {"signature": flip_last(q["signature"])},
    "signature zeroed": lambda q: q | {"signature": "0" * 64},
    "signature empty": lambda q: q | {"signature": ""},
    "signature missing": lambda q: {k: v for k, v in q.items() if k != "signature"},
    "expires extended": lambda q: q | {"expires": str(int(q["expires"]) + 3600)},
    "expires not a number": lambda q: q | {"expires": "later"},
    "expires missing": lambda q: {k: v for k, v in q.items() if k != "expires"},
    "size negative": lambda q: q | {"size": "-1"},
    "size missing": lambda q: {k: v for k, v in q.items() if k != "size"},
    "no query at all": lambda q: {},
}


@pytest.mark.parametrize("alteration", list(URL_ALTERATIONS))
async def test_put_to_an_altered_or_incomplete_url_is_403(builds: Builds, alteration: str) -> None:
    link = await builds.link()
    parts = urlsplit(link["uploadUrl"])
    query = URL_ALTERATIONS[alteration](dict(parse_qsl(parts.query)))

    r = await builds.client.put(urlunsplit(parts._replace(query=urlencode(query))), content=DATA)

    assert_problem(r, 403, "invalid_signature")
    assert await builds.storage.stat(storage_key_of(link)) is None


async def test_put_with_an_altered_size_is_403_even_with_a_matching_body(builds: Builds) -> None:
    link = await builds.link(DATA)
    bigger = DATA + b"!"

    r = await builds.client.put(tamper(link["uploadUrl"], size=str(len(bigger))), content=bigger)

    assert_problem(r, 403, "invalid_signature")
    assert await builds.storage.stat(storage_key_of(link)) is None


async def test_put_to_another_build_key_with_a_valid_signature_is_403(builds: Builds) -> None:
    link = await builds.link()
    victim = await builds.link()
    parts = urlsplit(link["uploadUrl"])
    victim_path = urlsplit(victim["uploadUrl"]).path

    r = await builds.client.put(urlunsplit(parts._replace(path=victim_path)), content=DATA)

    assert_problem(r, 403, "invalid_signature")
    assert await builds.storage.stat(storage_key_of(victim)) is None


async def test_put_with_a_traversal_key_is_403(builds: Builds) -> None:
    link = await builds.link()
    parts = urlsplit(link["uploadUrl"])

    r = await builds.client.put(
        urlunsplit(parts._replace(path=f"{UPLOAD_PATH}..%2F..%2Fescape")), content=DATA
    )

    assert_problem(r, 403, "invalid_signature")


@pytest.mark.parametrize(
    "file_name",
    [
        "..%2F..%2Fescape.apk",
        "%2e%2e",
        "....",
        "..apk",
        'say "hi"; filename=evil.exe',
        "<img src=x onerror=alert(1)>.apk",
        "CON",
    ],
)
async def test_a_hostile_but_plain_file_name_never_becomes_a_path(
    builds: Builds, settings: Settings, file_name: str
) -> None:
    assert isinstance(builds.storage, LocalStorage)
    before = files_under(settings.data_dir)

    build = await builds.ready(DATA, fileName=file_name)

    # The bytes are stored under the build's own key; the name is only shown.
    key = f"{builds.project_id}/{builds.app_id}/{build['buildId']}"
    stored = builds.storage.path_of(key)
    added = [p for p in files_under(settings.data_dir) if p not in before]
    assert stored in added
    assert {p.parent for p in added if p.parent.name != "locks"} == {stored.parent}
    assert all(file_name not in str(p.relative_to(settings.data_dir)) for p in added)
    # And the download names it in a Content-Disposition that cannot be read any other way.
    r = await builds.client.get(build["downloadUrl"], headers=builds.owner.headers)
    r = await builds.client.get(r.headers["location"])
    assert r.status_code == 200
    assert r.content == DATA
    disposition = Message()
    disposition["content-disposition"] = r.headers["content-disposition"]
    params = disposition.get_params(header="content-disposition")
    assert params is not None
    assert [name for name, _ in params] == ["attachment", "filename"]  # nothing slipped in
    assert disposition.get_filename() == file_name


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


# Percent-encoded: a client removes a plain `..` from a URL before sending it, and the server
# decodes the path to the same `..` either way.
@pytest.mark.parametrize(
    "path",
    [
        "..%2F..%2Fcanary",
        "%2e%2e%2F%2e%2e%2Fcanary",
        "{key}%2F..%2F..%2F..%2F..%2Fcanary",
        "{key}%2F..%2F..%2F..%2F..%2F..%2Fcanary",
    ],
)
async def test_the_download_address_never_serves_a_file_beside_the_objects(
    builds: Builds, settings: Settings, path: str
) -> None:
    assert isinstance(builds.storage, LocalStorage)
    canary = settings.data_dir / "canary"
    canary.write_text("a file of the server's own")
    (builds.storage.root / "canary").write_text("a file of the server's own")
    build = await builds.ready(DATA)
    r = await builds.client.get(build["downloadUrl"], headers=builds.owner.headers)
    location = urlsplit(r.headers["location"])
    key = location.path.removeprefix(DOWNLOAD_PATH)

    r = await builds.client.get(
        urlunsplit(location._replace(path=DOWNLOAD_PATH + path.format(key=key)))
    )

    assert_problem(r, 403, "invalid_signature")
    assert "server's own" not in r.text


@pytest.mark.parametrize("key", ["../../canary", "../objects/../../canary", "/etc/hostname"])
async def test_storage_refuses_a_traversal_key_even_with_a_valid_signature(
    app: FastAPI, builds: Builds, settings: Settings, clock: FrozenClock, key: str
) -> None:
    # As if the signing key had leaked: the paths are still checked on their own.
    assert isinstance(builds.storage, LocalStorage)
    canary = settings.data_dir / "canary"
    canary.write_text("a file of the server's own")
    signer = app.state.ctx.signer
    expires = int(clock.now().timestamp()) + 60
    before = files_under(settings.data_dir)

    path = quote(key, safe="")  # sent as it is, not resolved by the client

    signature = signer.sign("GET", f"{key}\nx", expires)
    query = urlencode({"name": "x", "expires": expires, "signature": signature})
    r = await builds.client.get(f"{DOWNLOAD_PATH}{path}?{query}")
    assert_problem(r, 404, "object_not_found")
    assert "server's own" not in r.text

    signature = signer.sign("PUT", key, expires, 4)
    query = urlencode({"size": 4, "expires": expires, "signature": signature})
    r = await builds.client.put(f"{UPLOAD_PATH}{path}?{query}", content=b"evil")
    assert_problem(r, 404, "build_not_found")
    assert files_under(settings.data_dir) == before
    assert canary.read_text() == "a file of the server's own"


async def test_put_works_until_the_link_expires(builds: Builds, clock: FrozenClock) -> None:
    link = await builds.link()
    clock.advance(minutes=59, seconds=58)

    r = await builds.put(link)

    assert r.status_code == 200, r.text


async def test_put_after_the_link_expired_is_403(builds: Builds, clock: FrozenClock) -> None:
    link = await builds.link()
    clock.advance(hours=1, seconds=1)

    r = await builds.put(link)

    assert_problem(r, 403, "url_expired")
    assert await builds.storage.stat(storage_key_of(link)) is None


async def test_put_of_a_body_longer_than_declared_is_413_and_keeps_nothing(
    builds: Builds,
) -> None:
    link = await builds.link(DATA)

    r = await builds.put(link, DATA + b"!")

    assert_problem(r, 413, "upload_too_large")
    assert await builds.storage.stat(storage_key_of(link)) is None


async def test_put_of_a_chunked_body_longer_than_declared_is_413_and_keeps_nothing(
    builds: Builds,
) -> None:
    link = await builds.link(DATA)

    async def body() -> AsyncIterator[bytes]:
        yield DATA
        yield b"one byte too many"

    r = await builds.client.put(link["uploadUrl"], content=body())

    assert_problem(r, 413, "upload_too_large")
    assert await builds.storage.stat(storage_key_of(link)) is None
    assert list((builds.storage.root / "incoming").iterdir()) == []


async def test_put_of_a_body_shorter_than_declared_is_400_and_keeps_nothing(
    builds: Builds,
) -> None:
    link = await builds.link(DATA)

    r = await builds.put(link, DATA[:-1])

    assert_problem(r, 400, "upload_too_short")
    assert await builds.storage.stat(storage_key_of(link)) is None


async def test_put_of_a_chunked_body_shorter_than_declared_is_400_and_keeps_nothing(
    builds: Builds,
) -> None:
    link = await builds.link(DATA)

    async def body() -> AsyncIterator[bytes]:
        yield DATA[:5]
        yield DATA[5:-1]

    r = await builds.client.put(link["uploadUrl"], content=body())

    assert_problem(r, 400, "upload_too_short")
    assert await builds.storage.stat(storage_key_of(link)) is None
    assert list((builds.storage.root / "incoming").iterdir()) == []


async def test_put_after_verify_is_409_and_the_bytes_stay(builds: Builds) -> None:
    link = await builds.pending(DATA)
    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text

    r = await builds.put(link, DATA.upper())

    assert_problem(r, 409, "build_already_verified")
    assert builds.storage.path_of(storage_key_of(link)).read_bytes() == DATA


async def test_put_after_the_build_was_deleted_is_404(builds: Builds) -> None:
    link = await builds.link()
    r = await builds.client.delete(f"{builds.base}/{link['buildId']}", headers=builds.owner.headers)
    assert r.status_code == 204

    r = await builds.put(link)

    assert_problem(r, 404, "build_not_found")
    assert await builds.storage.stat(storage_key_of(link)) is None


async def test_a_repeat_put_before_verify_replaces_the_bytes(builds: Builds) -> None:
    first, second = b"A" * 1000, b"B" * 1000
    link = await builds.link(first)
    assert (await builds.put(link, first)).status_code == 200

    r = await builds.put(link, second)

    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(second).hexdigest()
    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(second).hexdigest()
    r = await builds.client.get(
        f"{builds.base}/{link['buildId']}/download", headers=builds.owner.headers
    )
    r = await builds.client.get(r.headers["location"])
    assert r.content == second


# -- step 3: verify -------------------------------------------------------------------------------


async def test_verify_without_bytes_is_422_and_the_build_stays_pending(builds: Builds) -> None:
    link = await builds.link()

    r = await builds.verify(link["buildId"])

    assert_problem(r, 422, "upload_incomplete")
    r = await builds.get(link["buildId"])
    assert r.json()["status"] == "pending"
    assert r.json()["verifiedAt"] is None


async def test_verify_with_a_sha256_mismatch_is_422_and_the_build_stays_pending(
    builds: Builds,
) -> None:
    link = await builds.pending(DATA, sha256=hashlib.sha256(b"other bytes").hexdigest())

    r = await builds.verify(link["buildId"])

    body = assert_problem(r, 422, "checksum_mismatch")
    assert hashlib.sha256(DATA).hexdigest() in body["detail"]
    r = await builds.get(link["buildId"])
    assert r.json()["status"] == "pending"
    assert r.json()["sha256"] is None
    assert r.json()["verifiedAt"] is None


async def test_after_a_sha256_mismatch_a_put_again_replaces_the_bytes_and_verifies(
    builds: Builds,
) -> None:
    sha256 = hashlib.sha256(DATA).hexdigest()
    link = await builds.link(DATA, sha256=sha256)
    corrupted = bytearray(DATA)
    corrupted[len(DATA) // 2] ^= 0xFF
    assert (await builds.put(link, bytes(corrupted))).status_code == 200
    r = await builds.verify(link["buildId"])
    body = assert_problem(r, 422, "checksum_mismatch")
    assert f"not the declared {sha256}" in body["detail"]
    build = (await builds.get(link["buildId"])).json()
    assert (build["status"], build["failureCode"]) == ("pending", "checksum_mismatch")

    r = await builds.put(link, DATA)  # the same address, before verify: the bytes replaced
    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == sha256
    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["sha256"], r.json()["failureCode"]) == (
        "ready", sha256, None,
    )  # fmt: skip


async def test_verify_makes_the_build_ready(builds: Builds, clock: FrozenClock) -> None:
    link = await builds.pending(DATA, sha256=hashlib.sha256(DATA).hexdigest())
    clock.advance(minutes=3)

    r = await builds.verify(link["buildId"], notes="Fixes the login crash")

    assert r.status_code == 200, r.text
    build = r.json()
    assert build["buildId"] == link["buildId"]
    assert build["projectId"] == builds.project_id
    assert build["applicationId"] == builds.app_id
    assert build["status"] == "ready"
    assert build["sha256"] == hashlib.sha256(DATA).hexdigest()
    assert build["fileName"] == "app-release.apk"
    assert build["fileSize"] == len(DATA)
    assert build["notes"] == "Fixes the login crash"
    assert build["verifiedAt"] == iso_z(clock.now())
    assert build["expiresAt"] is None  # a ready build does not expire: only its link did
    assert build["downloadUrl"] == (f"http://testserver{builds.base}/{link['buildId']}/download")
    assert (await builds.get(link["buildId"])).json() == build


async def test_verify_twice_answers_the_same_build(builds: Builds, clock: FrozenClock) -> None:
    link = await builds.pending()
    first = await builds.verify(link["buildId"], notes="first")
    clock.advance(minutes=1)

    again = await builds.verify(link["buildId"], notes="second")

    assert first.status_code == 200, first.text
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert again.json()["notes"] == "first"


async def test_verify_takes_notes_of_up_to_10000_characters(builds: Builds) -> None:
    link = await builds.pending()

    r = await builds.verify(link["buildId"], notes="n" * 10_000)

    assert r.status_code == 200, r.text
    assert r.json()["notes"] == "n" * 10_000


async def test_verify_with_notes_over_10000_characters_is_422(builds: Builds) -> None:
    link = await builds.pending()

    r = await builds.verify(link["buildId"], notes="n" * 10_001)

    body = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["notes"]
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"


async def test_verify_refuses_unknown_fields(builds: Builds) -> None:
    link = await builds.pending()

    r = await builds.verify(link["buildId"], status="ready")

    body = assert_problem(r, 422, "validation_error")
    assert body["errors"] == [{"field": "status", "message": "is not a field of this request"}]


async def test_verify_of_an_unknown_build_is_404(builds: Builds) -> None:
    r = await builds.verify("bld_01JAAAAAAAAAAAAAAAAAAAAAAA")

    assert_problem(r, 404, "build_not_found")


async def test_verify_of_a_build_of_another_application_is_404(builds: Builds, api: Api) -> None:
    link = await builds.pending()
    other = await api.application(builds.owner, builds.project_id, "Acme iOS")
    other_base = f"/api/app-distribution/{builds.project_id}/{other['id']}/builds"

    r = await builds.client.post(
        f"{other_base}/verify", json={"buildId": link["buildId"]}, headers=builds.owner.headers
    )

    assert_problem(r, 404, "build_not_found")
    r = await builds.client.get(f"{other_base}/{link['buildId']}", headers=builds.owner.headers)
    assert_problem(r, 404, "build_not_found")
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"


# -- a crash never yields a ready build without its bytes -----------------------------------------


async def test_verify_after_the_stored_bytes_vanished_is_422_and_stays_pending(
    builds: Builds,
) -> None:
    link = await builds.pending()
    builds.storage.path_of(storage_key_of(link)).unlink()

    r = await builds.verify(link["buildId"])

    assert_problem(r, 422, "upload_incomplete")
    r = await builds.get(link["buildId"])
    assert r.json()["status"] == "pending"
    assert r.json()["sha256"] is None


async def test_verify_of_truncated_bytes_is_422_and_stays_pending(builds: Builds) -> None:
    link = await builds.pending()
    with builds.storage.path_of(storage_key_of(link)).open("r+b") as f:
        f.truncate(3)

    r = await builds.verify(link["buildId"])

    body = assert_problem(r, 422, "upload_incomplete")
    assert f"3 of the declared {len(DATA)} bytes" in body["detail"]
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"


async def test_verify_hashes_the_bytes_when_the_sidecar_hash_is_lost(builds: Builds) -> None:
    link = await builds.pending(DATA, sha256=hashlib.sha256(DATA).hexdigest())
    path = builds.storage.path_of(storage_key_of(link))
    path.with_name(path.name + ".sha256").unlink()  # a crash between the rename and the sidecar

    r = await builds.verify(link["buildId"])

    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(DATA).hexdigest()


async def test_verify_checks_bytes_replaced_behind_its_back(builds: Builds) -> None:
    link = await builds.pending(DATA, sha256=hashlib.sha256(DATA).hexdigest())
    path = builds.storage.path_of(storage_key_of(link))
    swapped = path.with_name("swapped")
    swapped.write_bytes(DATA.upper())  # same size, other bytes, a new inode
    swapped.replace(path)

    r = await builds.verify(link["buildId"])

    assert_problem(r, 422, "checksum_mismatch")
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"


async def test_a_storage_outage_during_verify_is_503_and_the_build_stays_pending(
    builds: Builds, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = await builds.pending()

    async def unreachable(key: str) -> None:
        raise StorageUnavailable("The build store failed: simulated")

    monkeypatch.setattr(builds.storage, "stat", unreachable)
    r = await builds.verify(link["buildId"])
    monkeypatch.undo()

    assert_problem(r, 503, "storage_unavailable")
    assert "Retry-After" in r.headers
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"
    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"


async def test_a_failed_put_after_a_good_one_keeps_the_good_bytes(builds: Builds) -> None:
    link = await builds.pending(DATA)

    r = await builds.put(link, DATA[:4])

    assert_problem(r, 400, "upload_too_short")
    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(DATA).hexdigest()


class HeldBody:
    """A PUT body that sends its first bytes, then waits to be released before the rest."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data[:5]
        self.started.set()
        await self.release.wait()
        yield self.data[5:]


async def test_a_put_that_finishes_after_verify_cannot_change_the_verified_bytes(
    builds: Builds,
) -> None:
    link = await builds.pending(DATA)
    late = HeldBody(DATA.upper())
    async with asyncio.timeout(10):
        put = asyncio.create_task(builds.client.put(link["uploadUrl"], content=late))
        await late.started.wait()
        verified = await builds.verify(link["buildId"])
        late.release.set()
        r = await put

    assert verified.status_code == 200, verified.text
    assert_problem(r, 409, "build_already_verified")
    r = await builds.client.get(
        f"{builds.base}/{link['buildId']}/download", headers=builds.owner.headers
    )
    r = await builds.client.get(r.headers["location"])
    assert hashlib.sha256(r.content).hexdigest() == verified.json()["sha256"]


async def test_a_put_that_finishes_after_delete_leaves_no_bytes(builds: Builds) -> None:
    link = await builds.link(DATA)
    late = HeldBody(DATA)
    async with asyncio.timeout(10):
        put = asyncio.create_task(builds.client.put(link["uploadUrl"], content=late))
        await late.started.wait()
        deleted = await builds.client.delete(
            f"{builds.base}/{link['buildId']}", headers=builds.owner.headers
        )
        late.release.set()
        r = await put

    assert deleted.status_code == 204
    assert_problem(r, 404, "build_not_found")
    assert await builds.storage.stat(storage_key_of(link)) is None
