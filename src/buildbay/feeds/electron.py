"""electron-updater's generic provider: the channel file it reads at `{url}/{name}.yml`.

Its name says the channel and the platform (electron-updater's Provider.getChannelFilePrefix):
`{channel}.yml` on Windows, `{channel}-mac.yml` on macOS, `{channel}-linux.yml` on Linux x64 and
`{channel}-linux-{arch}.yml` on another Linux architecture (`latest-linux-arm64.yml`); its
`latest` channel is the application's `default` one. The file describes the newest version
offered on the channel (by version, as electron-updater compares them), with every file of
that version it may install: MacUpdater takes the .zip (and picks by `arm64` in the file's
address on Apple silicon), NsisUpdater the .exe, the Linux updaters the .AppImage, .deb or
.rpm that matches how the app was installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from buildbay.errors import NotFound
from buildbay.feeds.builds import FeedBuild, channel_name, newest, platform_name
from buildbay.feeds.urls import download_url

# The files each platform's updater installs, in the order the feed lists them (the first is
# also the legacy `path`): MacUpdater needs the .zip (Squirrel.Mac), the .dmg is for people.
ELECTRON_FILES = {
    "macos": ("zip", "dmg"),
    "windows": ("exe",),
    "linux": ("appimage", "deb", "rpm"),
}
LINUX_ARCHITECTURES = ("x64", "arm64")
_LINUX = re.compile(r"(?P<channel>.+)-linux(?:-(?P<arch>[^-]+))?")
_SUFFIXES = {"macos": "-mac", "windows": "", "linux": "-linux"}


@dataclass(frozen=True, slots=True)
class ChannelFile:
    """What electron-updater asked for: a channel, and on Linux an architecture."""

    channel: str
    architecture: str | None


def expected_name(platform: str, channel: str = "latest") -> str:
    return f"{channel}{_SUFFIXES[platform]}.yml"


def channel_file(platform: str, name: str) -> ChannelFile:
    """The channel (and Linux architecture) `name` (without `.yml`) asks for, for an
    application of `platform`; 404 `wrong_feed` for another platform's file."""
    if platform == "macos" and name.endswith("-mac") and len(name) > len("-mac"):
        return ChannelFile(channel_name(name.removesuffix("-mac")), None)
    if platform == "linux" and (match := _LINUX.fullmatch(name)):
        arch = match["arch"] or "x64"
        if arch not in LINUX_ARCHITECTURES:
            raise NotFound(
                f"No Linux {arch} builds here: Buildbay's Linux feeds are for x64 "
                f"({match['channel']}-linux.yml) and arm64 ({match['channel']}-linux-arm64.yml)",
                code="unknown_architecture",
            )
        return ChannelFile(channel_name(match["channel"]), arch)
    if platform == "windows":
        return ChannelFile(channel_name(name), None)
    raise wrong_file(platform, name)


def wrong_file(platform: str, name: str) -> NotFound:
    return NotFound(
        f'"{name}.yml" is not a file electron-updater reads on {platform_name(platform)}, '
        f"the platform of this update key's application: it reads "
        f"{expected_name(platform)} for the default channel and "
        f"{expected_name(platform, '<channel>')} for another",
        code="wrong_feed",
    )


def looks_like_another_platform(name: str) -> bool:
    """A Windows application's feed asked for a macOS or Linux file name (a channel of that
    name aside)."""
    return name.endswith("-mac") or _LINUX.fullmatch(name) is not None


def _fits(build: FeedBuild, platform: str, architecture: str | None) -> bool:
    if build.suffix not in ELECTRON_FILES[platform] or not build.sha512:
        return False
    if architecture == "arm64":
        return build.architecture == "arm64"
    if architecture == "x64":  # a Linux build that does not say is taken for x64
        return build.architecture in ("x64", None)
    return True


def _rank(platform: str, build: FeedBuild) -> tuple[int, int]:
    kinds = ELECTRON_FILES[platform]
    # An x64 (or universal) Windows installer first: NsisUpdater takes the first .exe, and
    # Windows on Arm runs x64 programs.
    return kinds.index(build.suffix), int(build.architecture == "arm64")


def release_date(when: datetime | None) -> str | None:
    if when is None:
        return None
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def update_files(
    builds: list[FeedBuild], platform: str, wanted: ChannelFile
) -> tuple[FeedBuild, list[FeedBuild]]:
    """The newest build on the channel that this platform's updater installs, and every file of
    its version, in the order the feed lists them. 404 `no_build` if there is none."""
    eligible = [b for b in builds if _fits(b, platform, wanted.architecture)]
    best = newest(eligible)
    if best is None:
        what = platform_name(platform)
        if wanted.architecture == "arm64":
            what += " arm64"
        kinds = ", ".join(f".{k}" for k in ELECTRON_FILES[platform])
        raise NotFound(
            f'The channel "{wanted.channel}" offers no {what} build that electron-updater '
            f"installs ({kinds}) yet: publish one to the channel, distributed to everyone",
            code="no_build",
        )
    chosen: dict[tuple[str, str | None], FeedBuild] = {}
    for build in eligible:  # newest upload first: a re-upload of a version replaces it
        if build.version == best.version:
            chosen.setdefault((build.suffix, build.architecture), build)
    return best, sorted(chosen.values(), key=lambda b: _rank(platform, b))


def update_info(
    best: FeedBuild,
    files: list[FeedBuild],
    public_url: str,
    update_key: str,
) -> dict[str, Any]:
    """electron-updater's UpdateInfo for `best`'s version (`update_files`), with its notes and
    date (builds.release_of)."""
    first = files[0]
    info: dict[str, Any] = {
        "version": best.version or best.build_number or "0.0.0",
        "files": [
            {
                "url": download_url(public_url, update_key, b.id, b.file_name),
                "sha512": b.sha512,
                "size": b.file_size,
            }
            for b in files
        ],
        "path": download_url(public_url, update_key, first.id, first.file_name),
        "sha512": first.sha512,
    }
    if (date := release_date(best.verified_at)) is not None:
        info["releaseDate"] = date
    if best.notes:
        info["releaseNotes"] = best.notes
    rollout = min(b.rollout_percent for b in files)
    if rollout < 100:
        info["stagingPercentage"] = rollout
    return info


def render(info: dict[str, Any]) -> bytes:
    """As YAML (electron-updater reads it with js-yaml); strings that read as numbers or
    booleans are quoted, so `1.10` stays a version."""
    text = yaml.safe_dump(info, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return text.encode()
