"""What an upload in parts keeps on disk so that running it again resumes it: the build it
uploads to, and the file as it was (path, size, modification time, SHA-256). One small JSON file
per (server, project, application, file), under the config directory's `uploads/`.

A file that changed since (another size or modification time) starts a new upload: its parts
would not be the same bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class UploadState:
    base_url: str
    project_id: str
    app_id: str
    path: str
    size: int
    mtime_ns: int
    sha256: str
    build_id: str


def state_file(directory: Path, base_url: str, project_id: str, app_id: str, file: Path) -> Path:
    """Where the state of uploading `file` to this application of this server is kept."""
    identity = "\n".join((base_url, project_id, app_id, str(file.resolve())))
    return directory / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"


def load(path: Path) -> UploadState | None:
    """The state kept at `path`, or None (none, or unreadable: the upload starts again)."""
    try:
        raw = json.loads(path.read_text())
        return UploadState(**{name: raw[name] for name in UploadState.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(path: Path, state: UploadState) -> None:
    """Written to a private temporary file, then renamed over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(state), out)
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise


def forget(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def file_identity(file: Path) -> tuple[int, int]:
    """Size and modification time (ns) of `file`: what says it is still the same bytes."""
    st = file.stat()
    return st.st_size, st.st_mtime_ns
