"""Deleting an application or a project while one of its uploads is putting its file in place.

The upload has checked that its build still exists and is about to rename its file into the
store when the delete commits and removes the files. Without exclusion the file lands after
the removal, under a prefix nobody will look at again: bytes kept for good. Local storage only:
an S3 PUT cannot be held (what lands there later is the sweeper's, see test_sweeper.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from buildbay.config import Settings
from buildbay.storage import local
from tests.builds.conftest import DATA, Builds

INSTALL_HELD = 10  # seconds at most that the upload waits, held before its rename
DELETE_ALONE = 2  # seconds a delete is given to finish on its own (it takes milliseconds)


class HeldInstall:
    """Holds uploads at the moment between their last check and their rename into place."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()
        install = local._install

        def held(*args: Any) -> Any:
            self.reached.set()
            self.go.wait(INSTALL_HELD)
            return install(*args)

        monkeypatch.setattr(local, "_install", held)

    async def wait_until_reached(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, INSTALL_HELD)


def objects_of(settings: Settings, *ids: str) -> list[Path]:
    root = settings.storage_dir / "objects"
    return [p for p in root.rglob("*") if p.is_file() and all(i in p.parts for i in ids)]


async def _delete_during_an_upload(
    builds: Builds,
    monkeypatch: pytest.MonkeyPatch,
    delete: Callable[[], Any],
    gone: Callable[[], Any],
) -> None:
    data = b"PK\x03\x04 the bytes of a build being deleted"
    link = await builds.link(data)
    held = HeldInstall(monkeypatch)
    upload = asyncio.ensure_future(builds.put(link, data))
    await held.wait_until_reached()

    deleting = asyncio.ensure_future(delete())
    # Unguarded, the delete committed and removed the files at once, with the upload's rename
    # still to come. Guarded, it waits for the upload to let go of its key: it cannot finish
    # while the upload is held, and the wait runs out.
    await asyncio.wait({deleting}, timeout=DELETE_ALONE)
    held.go.set()

    answers = await asyncio.gather(upload, deleting)
    assert answers[1].status_code == 204, answers[1].text
    # The upload had checked its build before the delete: it lands, and is removed with the rest.
    assert answers[0].status_code == 200, answers[0].text
    assert (await gone()).status_code == 404


async def test_an_upload_finishing_during_its_applications_delete_leaves_no_bytes(
    builds: Builds, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"/api/projects/{builds.project_id}/applications/{builds.app_id}"
    headers = builds.owner.headers

    await _delete_during_an_upload(
        builds,
        monkeypatch,
        lambda: builds.client.delete(path, headers=headers),
        lambda: builds.client.get(path, headers=headers),
    )

    assert objects_of(settings, builds.app_id) == []


async def test_an_upload_finishing_during_its_projects_delete_leaves_no_bytes(
    builds: Builds, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"/api/projects/{builds.project_id}"
    headers = builds.owner.headers

    await _delete_during_an_upload(
        builds,
        monkeypatch,
        lambda: builds.client.delete(path, headers=headers),
        lambda: builds.client.get(path, headers=headers),
    )

    assert objects_of(settings, builds.project_id) == []


async def test_an_application_deleted_without_uploads_in_flight_loses_every_file(
    builds: Builds, settings: Settings
) -> None:
    for n in range(3):
        await builds.ready(DATA + bytes([n]))  # other bytes each: the same bytes are one build
    assert len(objects_of(settings, builds.app_id)) == 6  # each object and its .sha256

    r = await builds.client.delete(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        headers=builds.owner.headers,
    )

    assert r.status_code == 204, r.text
    assert objects_of(settings, builds.app_id) == []
