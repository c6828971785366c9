"""The feeds' addresses: what a feed links a build's file by, and what a team pastes into its
updater's configuration (the console shows them). One place, so that the download route and
the feeds agree on the shape."""

from __future__ import annotations

from urllib.parse import quote


def feeds_url(public_url: str, update_key: str) -> str:
    return f"{public_url}/feeds/{quote(update_key, safe='')}"


def download_url(public_url: str, update_key: str, build_id: str, file_name: str) -> str:
    """A build's file under the key that listed it: stable for as long as the build exists
    (a feed may be cached), `/feeds/{updateKey}/download/{buildId}/{fileName}`."""
    return (
        f"{feeds_url(public_url, update_key)}/download/{quote(build_id, safe='')}/"
        f"{quote(file_name, safe='')}"
    )


def electron_url(public_url: str, update_key: str) -> str:
    """electron-builder's `publish: {provider: generic, url}`: electron-updater appends the
    channel's file name (`latest-mac.yml`, ...)."""
    return f"{feeds_url(public_url, update_key)}/electron"


def sparkle_url(public_url: str, update_key: str, channel: str) -> str:
    """Sparkle's `SUFeedURL` for a channel."""
    return f"{feeds_url(public_url, update_key)}/sparkle/{quote(channel, safe='')}.xml"


def appinstaller_url(public_url: str, update_key: str, channel: str) -> str:
    """A channel's .appinstaller file (its `Uri`: where App Installer looks for updates)."""
    return (
        f"{feeds_url(public_url, update_key)}/appinstaller/{quote(channel, safe='')}.appinstaller"
    )


def electron_publish(public_url: str, update_key: str, channel: str) -> str:
    """electron-builder.yml's `publish` for a channel (the default one is electron-updater's
    `latest`)."""
    name = "latest" if channel == "default" else channel
    return (
        "publish:\n"
        "  provider: generic\n"
        f"  url: {electron_url(public_url, update_key)}\n"
        f"  channel: {name}\n"
    )


def feed_addresses(public_url: str, update_key: str, platform: str, channel: str) -> dict[str, str]:
    """What a team pastes to point its updaters at a channel, by what it is pasted into: the
    console's application page lists them per channel."""
    found = {"electron-builder.yml": electron_publish(public_url, update_key, channel)}
    if platform == "macos":
        found["SUFeedURL (Info.plist)"] = sparkle_url(public_url, update_key, channel)
    if platform == "windows":
        found["App Installer (MSIX)"] = appinstaller_url(public_url, update_key, channel)
    return found
