"""electron-updater itself (the npm package, run by Node outside Electron with an app adapter
of the tests' own: electron_updater.py) against a real Buildbay server, pointed at its feed as
electron-builder's `publish: {provider: generic, url: .../feeds/{key}/electron, channel}` makes
an app: it finds the newer version of its channel, downloads it from the feed's download address
and checks its sha512; finds nothing new when the installed version is the latest; follows
another channel; refuses bytes whose sha512 is not the feed's; and downloads only the changed
blocks of an update, from the two builds' blockmaps, through a Range request of several ranges.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import random
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Account, Api
from tests.desktop import files
from tests.desktop.electron_updater import (
    BLOCK,
    ElectronUpdater,
    electron_updater,
    make_blockmap,
    sha512_of,
)

__all__ = ["electron_updater"]  # the fixture


@pytest.fixture
def server(threaded_server: str) -> str:
    return threaded_server


@contextlib.contextmanager
def static_feed(folder: Path) -> Iterator[str]:
    """A plain web server of `folder` (a generic provider's channel files): a channel file
    Buildbay would never write (a wrong sha512)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def channel_file(build: dict[str, Any], url: str, version: str) -> str:
    """A generic provider's channel file as electron-builder writes it, for one build."""
    return (
        f"version: {version}\n"
        f"files:\n  - url: {url}\n    sha512: {build['sha512']}\n    size: {build['fileSize']}\n"
        f"path: {url}\nsha512: {build['sha512']}\n"
        f"releaseDate: '{build['verifiedAt']}'\n"
    )


class Desktop:
    """A desktop application on the real server, its builds uploaded as CI uploads them."""

    def __init__(self, client: httpx.AsyncClient, owner: Account, app: dict[str, Any]) -> None:
        self.client, self.owner, self.app = client, owner, app
        self.base = f"/api/app-distribution/{app['projectId']}/{app['id']}/builds"

    @property
    def key(self) -> str:
        key: str = self.app["updateKey"]
        return key

    async def upload(self, data: bytes, file_name: str, **verify: Any) -> dict[str, Any]:
        r = await self.client.post(
            f"{self.base}/upload-link",
            json={"fileName": file_name, "fileSize": len(data)},
            headers=self.owner.headers,
        )
        assert r.status_code == 201, r.text
        link = r.json()
        r = await self.client.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
        assert r.status_code == 200, r.text
        r = await self.client.post(
            f"{self.base}/verify", json={"buildId": link["buildId"], **verify},
            headers=self.owner.headers,
        )  # fmt: skip
        assert r.status_code == 200, r.text
        build: dict[str, Any] = r.json()
        assert build["sha512"] == sha512_of(data)
        return build

    async def attach_blockmap(self, build: dict[str, Any], blockmap: bytes) -> None:
        r = await self.client.put(
            f"{self.base}/{build['buildId']}/blockmap",
            content=blockmap,
            headers={**self.owner.headers, "Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 200, r.text

    @property
    def feed_url(self) -> str:
        """electron-builder's `publish: {provider: generic, url}` for the application."""
        return f"{self.client.base_url}feeds/{self.key}/electron"

    def download_url(self, build: dict[str, Any]) -> str:
        path = f"feeds/{self.key}/download/{build['buildId']}/{build['fileName']}"
        return f"{self.client.base_url}{path}"


async def desktop(client: httpx.AsyncClient, platform: str) -> Desktop:
    api = Api(client)
    owner = await api.register()
    project = await api.project(owner)
    app = await api.application(owner, project["id"], name="Example", platform=platform)
    return Desktop(client, owner, app)


@pytest.fixture
async def client(server: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server + "/", timeout=60) as c:
        yield c


async def downloaded(result: dict[str, Any]) -> bytes:
    """What electron-updater put in its cache, ready to install."""
    return await asyncio.to_thread(Path(result["downloaded"]).read_bytes)


def appimage(seed: int, size: int = 2 * 1024 * 1024) -> bytes:
    head = files.appimage(size=64)
    return head + random.Random(seed).randbytes(size - len(head))


async def test_electron_updater_updates_from_buildbays_feed(
    electron_updater: ElectronUpdater, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    app = await desktop(client, "linux")
    old_data, new_data = appimage(1), appimage(2)
    await app.upload(old_data, "Example-1.0.0.AppImage", version="1.0.0")
    new = await app.upload(new_data, "Example-2.0.0.AppImage", version="2.0.0")
    installed = tmp_path / "Example-1.0.0.AppImage"
    installed.write_bytes(old_data)

    older = await electron_updater.run(
        feedUrl=app.feed_url, version="1.0.0", platform="linux",
        cacheDir=str(tmp_path / "cache-old"), installed=str(installed),
    )  # fmt: skip
    latest = await electron_updater.run(
        feedUrl=app.feed_url, version="2.0.0", platform="linux",
        cacheDir=str(tmp_path / "cache-new"),
    )  # fmt: skip

    assert older.get("error") is None, older
    assert older["updateAvailable"] is True
    assert older["version"] == "2.0.0"
    assert [f["url"] for f in older["files"]] == [app.download_url(new)]
    assert older["events"] == ["checking-for-update", "update-available", "update-downloaded"]
    assert await downloaded(older) == new_data
    assert older["sha512"] == new["sha512"]
    assert latest.get("error") is None, latest
    assert latest["updateAvailable"] is False
    assert latest["events"] == ["checking-for-update", "update-not-available"]
    assert latest["downloaded"] is None


async def test_electron_updater_follows_its_channel(
    electron_updater: ElectronUpdater, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """An app built with `channel: beta` reads beta-linux.yml: the beta channel's newest build,
    which the default channel's apps are not offered."""
    app = await desktop(client, "linux")
    r = await client.post(
        f"/api/projects/{app.app['projectId']}/applications/{app.app['id']}/channels",
        json={"name": "beta"},
        headers=app.owner.headers,
    )
    assert r.status_code == 201, r.text
    await app.upload(appimage(6), "Example-2.0.0.AppImage", version="2.0.0")
    beta = await app.upload(
        appimage(7), "Example-3.0.0-beta.1.AppImage", version="3.0.0-beta.1", channels=["beta"]
    )

    on_beta = await electron_updater.run(
        feedUrl=app.feed_url, channel="beta", version="2.0.0", platform="linux",
        cacheDir=str(tmp_path / "beta"), download=False,
    )  # fmt: skip
    on_default = await electron_updater.run(
        feedUrl=app.feed_url, version="2.0.0", platform="linux",
        cacheDir=str(tmp_path / "default"), download=False,
    )  # fmt: skip

    assert on_beta.get("error") is None, on_beta
    assert on_beta["updateAvailable"] is True
    assert on_beta["version"] == "3.0.0-beta.1"
    assert [f["url"] for f in on_beta["files"]] == [app.download_url(beta)]
    assert on_default.get("error") is None, on_default
    assert on_default["updateAvailable"] is False


async def test_electron_updater_refuses_bytes_whose_sha512_is_not_the_feeds(
    electron_updater: ElectronUpdater, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    app = await desktop(client, "linux")
    new = await app.upload(appimage(3), "Example-2.0.0.AppImage", version="2.0.0")
    other = sha512_of(b"other bytes")
    feed = tmp_path / "feed"
    feed.mkdir()
    (feed / "latest-linux.yml").write_text(
        channel_file({**new, "sha512": other}, app.download_url(new), "2.0.0")
    )
    installed = tmp_path / "Example-1.0.0.AppImage"
    installed.write_bytes(appimage(4))

    with static_feed(feed) as feed_url:
        result = await electron_updater.run(
            feedUrl=feed_url, version="1.0.0", platform="linux",
            cacheDir=str(tmp_path / "cache"), installed=str(installed),
        )  # fmt: skip

    assert result["error"]["code"] == "ERR_CHECKSUM_MISMATCH", result
    assert "update-downloaded" not in result["events"]


def installer(tmp_path: Path, version: str, payload: bytes) -> bytes:
    """A Windows installer: a real executable with its version resource, and the payload an
    installer carries after it."""
    work = tmp_path / version
    work.mkdir()
    exe = files.exe(work, product_version=version, file_version=f"{version}.0")
    return exe + payload


async def test_a_differential_download_fetches_only_the_changed_blocks(
    electron_updater: ElectronUpdater, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The installed installer and its blockmap are where an app keeps them after an update;
    the new build differs in a few blocks: electron-updater asks for those, in one request of
    several ranges (multipart/byteranges), copies the rest from the installed file, and checks
    the sha512 of what it put together."""
    app = await desktop(client, "windows")
    payload = bytearray(random.Random(5).randbytes(64 * BLOCK))
    old_data = installer(tmp_path, "1.0.0", bytes(payload))
    for block in (7, 30, 31, 50):  # changed in the new version
        at = block * BLOCK + 100
        payload[at : at + 50] = random.Random(block).randbytes(50)
    new_data = installer(tmp_path, "2.0.0", bytes(payload))
    assert len(old_data) == len(new_data)
    old = await app.upload(old_data, "Example-Setup-1.0.0.exe")
    new = await app.upload(new_data, "Example-Setup-2.0.0.exe")
    await app.attach_blockmap(old, make_blockmap(old_data))
    await app.attach_blockmap(new, make_blockmap(new_data))
    installed = tmp_path / "installer.exe"
    installed.write_bytes(old_data)

    result = await electron_updater.run(
        feedUrl=app.feed_url, version="1.0.0", platform="win32", differential=True,
        cacheDir=str(tmp_path / "cache"), installed=str(installed),
    )  # fmt: skip

    assert result.get("error") is None, result
    assert result["events"] == ["checking-for-update", "update-available", "update-downloaded"]
    assert await downloaded(result) == new_data
    assert result["sha512"] == new["sha512"]
    log = "\n".join(result["log"])
    assert "Download block maps" in log
    assert "fallback to full download" not in log
    # The installed version's blockmap, at the address electron-updater derives from the new
    # file's (feeds/download.py).
    assert "No cached blockmap for the old installer, downloading it" in log
    # DifferentialDownloader's own account: most of the file copied, the changed blocks (the
    # version resource's and the four above, two of them side by side: one range) fetched in
    # one request of several ranges.
    changed = re.search(r"File has (\d+) changed blocks", log)
    share = re.search(r"To download: .*\((\d+)%\)", log)
    assert changed is not None, log
    assert share is not None, log
    assert 4 <= int(changed[1]) <= 6
    assert int(share[1]) < 15
