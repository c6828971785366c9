"""Where the CLI keeps its profiles: one per environment (production, development, ...), each
with its base URL and credentials, in the user's config directory with mode 0600.

`BUILDBAY_URL` and `BUILDBAY_TOKEN` (for CI) override the profile; `BUILDBAY_CONFIG_DIR`
moves the file.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import typer

from buildbay_client.errors import BuildbayClientError

DEFAULT_PROFILE = "production"
FILE_NAME = "credentials.json"


class ProfileError(BuildbayClientError):
    """The profiles file exists but cannot be read."""


@dataclass
class Profile:
    url: str
    token: str | None = None  # an access token or an API token
    refresh_token: str | None = None
    email: str | None = None


def config_dir() -> Path:
    return Path(os.environ.get("BUILDBAY_CONFIG_DIR") or typer.get_app_dir("buildbay"))


def _path() -> Path:
    return config_dir() / FILE_NAME


def load_profiles() -> dict[str, Profile]:
    try:
        raw = json.loads(_path().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ProfileError(f"cannot read {_path()}: {exc}") from None
    profiles = raw.get("profiles", {}) if isinstance(raw, dict) else {}
    return {
        name: Profile(**{k: v for k, v in fields.items() if k in Profile.__dataclass_fields__})
        for name, fields in profiles.items()
        if isinstance(fields, dict) and isinstance(fields.get("url"), str)
    }


def save_profiles(profiles: dict[str, Profile]) -> Path:
    """Written whole to a private temporary file, flushed to disk, then renamed over the old
    one: never half a file, never readable by others (the directory is kept at 0700 too)."""
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.parent.stat().st_uid == os.getuid():
        path.parent.chmod(0o700)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".credentials-")  # 0600
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump({"profiles": {n: asdict(p) for n, p in profiles.items()}}, file, indent=2)
            file.flush()
            os.fsync(file.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
