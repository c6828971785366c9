"""A build's blockmap: the `<file>.blockmap` electron-builder writes beside a desktop installer
(gzipped JSON: the file's blocks and their checksums), which electron-updater downloads, next
to the installed copy's own, to fetch only the blocks that changed (a differential download).

A second file of the build, optional: sent after the build's own (`PUT .../builds/{id}/blockmap`,
while the build exists, pending or ready; a new one replaces it), stored under the build's
storage key + BLOCKMAP_SUFFIX, so that whatever removes a build's bytes by its prefix (an
application's or project's deletion) removes it too; a single build's removal (its deletion,
retention, a duplicate) removes it by `blockmap_key`, and the sweeper's orphan pass keeps it
while its build exists (`owner_key`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from typing import IO

from buildbay.errors import ValidationFailed

BLOCKMAP_SUFFIX = ".blockmap"
# electron-builder's blockmap of a 1 GiB installer is about 2 MiB gzipped (a block's checksum
# and size per 64 KiB or so): far above any a desktop app has.
MAX_BLOCKMAP_BYTES = 16 * 1024 * 1024
# What its JSON may take once unzipped: it compresses about 2:1, a bomb far more.
MAX_UNZIPPED_BYTES = 8 * MAX_BLOCKMAP_BYTES
CONTENT_TYPE = "application/octet-stream"


def blockmap_key(storage_key: str) -> str:
    """Where the blockmap of the build stored under `storage_key` is kept."""
    return storage_key + BLOCKMAP_SUFFIX


def owner_key(key: str) -> str | None:
    """The build's storage key a stored blockmap's key belongs to; None for another key."""
    return key.removesuffix(BLOCKMAP_SUFFIX) if key.endswith(BLOCKMAP_SUFFIX) else None


def invalid(reason: str) -> ValidationFailed:
    return ValidationFailed(
        f"This is not an electron-builder blockmap: {reason}. Send the `.blockmap` file "
        "electron-builder wrote beside the installer, as it is",
        code="invalid_blockmap",
    )


def check_blockmap(source: IO[bytes]) -> str:
    """Read the blockmap in `source` (from its start) through: gzip, then a JSON object with
    `version` and a list of `files`, as electron-updater reads it. Returns the SHA-256 (hex)
    of its bytes. Blocking: for a worker thread."""
    source.seek(0)
    digest = hashlib.sha256()
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip's header and trailer
    unzipped = bytearray()
    try:
        while block := source.read(256 * 1024):
            digest.update(block)
            unzipped += inflate.decompress(block, MAX_UNZIPPED_BYTES + 1 - len(unzipped))
            if len(unzipped) > MAX_UNZIPPED_BYTES or inflate.unconsumed_tail:
                raise invalid("it unpacks to more than any installer's blockmap")
        unzipped += inflate.flush()
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise invalid("it is not gzip-compressed") from exc
    if not inflate.eof:
        raise invalid("its gzip stream is cut short")
    try:
        document = json.loads(bytes(unzipped))
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid("it does not hold JSON") from exc
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("version"), str)
        or not isinstance(document.get("files"), list)
    ):
        raise invalid('its JSON has no "version" and "files"')
    return digest.hexdigest()
