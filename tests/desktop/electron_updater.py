"""electron-updater itself, run by Node outside Electron (tests/desktop/electron/driver.cjs), as
the tests' real client of the desktop feeds and their downloads.

Node.js and npm come from the machine's packages, electron-updater from the npm registry, pinned
by tests/desktop/electron/package-lock.json (`npm ci --prefix tests/desktop/electron`; .ci/run
does it). Without them the tests are skipped, saying what is missing, unless CI asks for them
(BUILDBAY_TEST_ELECTRON=required, or BUILDBAY_REQUIRE_SERVICES): then they fail.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ELECTRON = Path(__file__).resolve().parent / "electron"
DRIVER = ELECTRON / "driver.cjs"
INSTALLED = ELECTRON / "node_modules" / "electron-updater" / "package.json"


def _required() -> bool:
    return os.environ.get("BUILDBAY_TEST_ELECTRON") == "required" or bool(
        os.environ.get("BUILDBAY_REQUIRE_SERVICES")
    )


@dataclass(frozen=True)
class ElectronUpdater:
    node: str
    version: str  # electron-updater's, as installed

    async def run(self, **options: Any) -> dict[str, Any]:
        """One run of the driver (its options: driver.cjs); what it printed, parsed."""
        done = await asyncio.to_thread(
            subprocess.run,
            [self.node, str(DRIVER), json.dumps(options)],
            capture_output=True, text=True, timeout=120, cwd=ELECTRON,
        )  # fmt: skip
        lines = done.stdout.strip().splitlines()
        assert lines, f"the driver printed nothing (exit {done.returncode}): {done.stderr}"
        result: dict[str, Any] = json.loads(lines[-1])
        return result


@pytest.fixture(scope="session")
def electron_updater() -> ElectronUpdater:
    node = shutil.which("node")
    missing = None
    if node is None or shutil.which("npm") is None:
        missing = "Node.js and npm are not installed (apt-get install nodejs npm)"
    elif not INSTALLED.exists():
        missing = "electron-updater is not installed: npm ci --prefix tests/desktop/electron"
    if missing is not None:
        if _required():
            pytest.fail(f"{missing}, and the electron-updater tests are required here")
        pytest.skip(f"{missing}, for the tests with electron-updater")
    assert node is not None
    version = json.loads(INSTALLED.read_text())["version"]
    pinned = json.loads((ELECTRON / "package.json").read_text())["dependencies"]
    assert version == pinned["electron-updater"], "node_modules is stale: npm ci again"
    return ElectronUpdater(node, version)


def sha512_of(data: bytes) -> str:
    """As electron-updater reads a file's sha512: base64."""
    return base64.b64encode(hashlib.sha512(data).digest()).decode()


BLOCK = 16 * 1024


def make_blockmap(data: bytes, block: int = BLOCK) -> bytes:
    """A blockmap in electron-builder's format (gzipped JSON: version, files with each block's
    checksum and size), of fixed-size blocks. electron-updater compares the blocks of the
    installed file and the new one by checksum and size only, then checks the whole file's
    sha512: app-builder's content-defined blocks are one way to cut, fixed ones another."""
    sizes = [min(block, len(data) - at) for at in range(0, len(data), block)]
    checksums = [
        base64.b64encode(hashlib.sha256(data[at : at + block]).digest()[:18]).decode()
        for at in range(0, len(data), block)
    ]
    document = {
        "version": "2",
        "files": [{"name": "file", "offset": 0, "checksums": checksums, "sizes": sizes}],
    }
    return gzip.compress(json.dumps(document).encode(), mtime=0)
