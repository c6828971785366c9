"""Sparkle's appcast for a channel: RSS 2.0 with Sparkle's namespace, one item per build of
the channel that Sparkle installs (.zip, .dmg, .pkg), newest upload first, the last
MAX_ITEMS.

Built with xml.etree, never by pasting text: release notes, names and versions are escaped by
the serializer, and the notes (plain text in Buildbay) reach Sparkle's release-notes view as
HTML that shows them as written (escaped, line breaks kept), never as markup of their own.

Staged rollout (docs/desktop.md): Sparkle phases an update by time, not by share: it puts
each installation in one of 7 groups, and group g is offered an item once
`pubDate + g * sparkle:phasedRolloutInterval` has passed (automatic checks only). A build held
at `rollout_percent` < 100 admits the first k of the 7 groups, k = the share in sevenths
(rounded, 1 to 6): its interval is set so that, at the time the feed is served, exactly k
groups' times have passed, `(now - pubDate) / (k - 1/2)`, and it stretches as time goes, so
the k groups stay the ones offered until the percentage is raised (at 100 the element goes,
and every group is offered the build).
"""

from __future__ import annotations

import html
import math
import re
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from xml.etree.ElementTree import Element, SubElement, register_namespace, tostring

from buildbay.channels.reads import DEFAULT_CHANNEL
from buildbay.feeds.builds import FeedBuild
from buildbay.feeds.urls import download_url, sparkle_url

SPARKLE = "http://www.andymatuschak.org/xml-namespaces/sparkle"
DC = "http://purl.org/dc/elements/1.1/"
register_namespace("sparkle", SPARKLE)
register_namespace("dc", DC)

MAX_ITEMS = 20
SPARKLE_FILES = ("zip", "dmg", "pkg")
GROUPS = 7  # Sparkle's phased rollout groups
# The interval is served per minute (the feed is cached for one), and never shorter.
INTERVAL_GRANULARITY = 60


def _s(name: str) -> str:
    return f"{{{SPARKLE}}}{name}"


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def groups_of(percent: int) -> int:
    """How many of Sparkle's 7 groups a share admits: the nearest, at least 1, and fewer than
    all while the share is under 100."""
    return min(GROUPS - 1, max(1, math.floor(percent * GROUPS / 100 + 0.5)))


def phased_interval(percent: int, published: datetime, now: datetime) -> int:
    """The sparkle:phasedRolloutInterval (seconds) under which, at `now`, exactly
    groups_of(percent) groups have been offered a build published at `published`."""
    elapsed = max(0.0, (_utc(now) - _utc(published)).total_seconds())
    elapsed -= elapsed % INTERVAL_GRANULARITY
    return max(INTERVAL_GRANULARITY, int(elapsed / (groups_of(percent) - 0.5)))


def changes_at(builds: list[FeedBuild], now: datetime) -> datetime | None:
    """When the appcast of `builds` served at `now` next differs by time alone: the next step
    (INTERVAL_GRANULARITY) of a phased rollout's interval; None: not by time."""
    steps = []
    for build in builds:
        if build.rollout_percent < 100 and build.verified_at is not None:
            published = _utc(build.verified_at)
            elapsed = max(0.0, (_utc(now) - published).total_seconds())
            step = math.floor(elapsed / INTERVAL_GRANULARITY) + 1
            steps.append(published + timedelta(seconds=step * INTERVAL_GRANULARITY))
    return min(steps, default=None)


def _uses_sparkle(root: Element) -> bool:
    prefix = f"{{{SPARKLE}}}"
    return any(
        element.tag.startswith(prefix) or any(name.startswith(prefix) for name in element.attrib)
        for element in root.iter()
    )


# What XML 1.0 cannot carry, even escaped: notes may hold a control character (a terminal's
# colour codes in a `git log` pasted by CI), and one would make the whole appcast unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def notes_html(notes: str) -> str:
    """Plain-text notes as an HTML fragment that shows them as written (without the control
    characters XML cannot carry)."""
    notes = _NOT_XML.sub("", notes)
    paragraphs = [p for p in notes.replace("\r\n", "\n").split("\n\n") if p.strip()]
    return "".join(
        "<p>" + html.escape(p.strip()).replace("\n", "<br>") + "</p>" for p in paragraphs
    )


def appcast(
    builds: list[FeedBuild],
    *,
    title: str,
    channel: str,
    public_url: str,
    update_key: str,
    now: datetime,
) -> bytes:
    items = [b for b in builds if b.suffix in SPARKLE_FILES][:MAX_ITEMS]
    rss = Element("rss", {"version": "2.0"})
    feed = SubElement(rss, "channel")
    SubElement(feed, "title").text = f"{title} ({channel})"
    SubElement(feed, "link").text = sparkle_url(public_url, update_key, channel)
    SubElement(feed, "description").text = f"Builds of {title} on its {channel} channel"
    SubElement(feed, "language").text = "en"
    for build in items:
        _item(feed, build, channel, public_url, update_key, now)
    if not _uses_sparkle(rss):
        # The serializer declares a namespace where it is used: an appcast without Sparkle's
        # elements (no item yet) still declares it, as every appcast does.
        rss.set("xmlns:sparkle", SPARKLE)
    body: bytes = tostring(rss, encoding="utf-8", xml_declaration=True)
    return body


def _item(
    feed: Element,
    build: FeedBuild,
    channel: str,
    public_url: str,
    update_key: str,
    now: datetime,
) -> None:
    item = SubElement(feed, "item")
    version = build.version or build.build_number or build.id
    SubElement(item, "title").text = f"Version {version}"
    if build.verified_at is not None:
        SubElement(item, "pubDate").text = format_datetime(_utc(build.verified_at))
    if build.build_number is not None:
        SubElement(item, _s("version")).text = build.build_number
    if build.version is not None:
        SubElement(item, _s("shortVersionString")).text = build.version
    min_os = build.metadata.get("minOs")
    if isinstance(min_os, str):
        SubElement(item, _s("minimumSystemVersion")).text = min_os
    if channel != DEFAULT_CHANNEL:
        SubElement(item, _s("channel")).text = channel
    if build.mandatory:
        SubElement(item, _s("criticalUpdate"))
    if build.rollout_percent < 100 and build.verified_at is not None:
        interval = phased_interval(build.rollout_percent, build.verified_at, now)
        SubElement(item, _s("phasedRolloutInterval")).text = str(interval)
    if build.notes:
        SubElement(item, "description").text = notes_html(build.notes)
    attributes: dict[str, Any] = {
        "url": download_url(public_url, update_key, build.id, build.file_name),
        "length": str(build.file_size),
        "type": "application/octet-stream",
    }
    if build.sparkle_ed_signature:
        attributes[_s("edSignature")] = build.sparkle_ed_signature
    SubElement(item, "enclosure", attributes)
