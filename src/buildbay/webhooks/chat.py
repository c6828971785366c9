"""Chat messages made from webhook events: what an endpoint whose `format` is not `standard`
is sent instead of the signed event (the same outbox, retries and address rules).

Each format is a builder of the message its receiver documents, from the event's `data` (the
same JSON the standard event carries): a build's app icon, name, version (code), branch and
commit when the build has them, notes, "Install" and "Open build" buttons and who uploaded it;
any other event is one sentence and a button to its console page.

- Slack: an incoming-webhook message with Block Kit blocks (mrkdwn: `&`, `<`, `>` escaped, so
  no `<!channel>`, `<!everyone>` or link can be written by a build's notes).
- Discord: an execute-webhook message with one embed; `allowed_mentions` parses none, so
  nothing in it pings anyone; names are written with markdown's characters escaped.
- Teams: an Adaptive Card posted through a Power Automate Workflows webhook (its TextBlocks
  and facts read a subset of CommonMark: people's text is written with it escaped).
- Google Chat: a `cardsV2` message (its text is HTML: escaped).

Each message is made within its target's documented limits (LIMITS, docs/api.md#chat-formats):
the notes are cut, with an ellipsis, to the longest that fits; `checks` measures a message
against them (the console's preview shows it). Text written by people (notes, names, branches)
has `@channel`, `@here`, `@everyone` and `@all` broken with a word joiner in every format. A
build's notes keep their markdown (the team wrote them); a feedback's text, written by whoever
holds the app (its reporter may be anyone), is escaped like a name: no link of its own in the
team's chat.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from buildbay.webhooks.enums import WebhookFormat

Message = dict[str, Any]

# The documented limits each message is made within (and checked against).
SLACK_BLOCKS = 50  # blocks in a message
SLACK_SECTION_TEXT = 3000  # a section's text
SLACK_FIELD_TEXT = 2000  # each of a section's fields
SLACK_FIELDS = 10  # fields of a section
SLACK_HEADER_TEXT = 150  # a header's plain text
SLACK_BUTTON_TEXT = 75
SLACK_URL = 3000  # a button's or an image's URL
SLACK_CONTEXT_ELEMENTS = 10
SLACK_FALLBACK_TEXT = 3000  # the message's top-level `text` (notifications): kept as short
DISCORD_EMBED_TOTAL = 6000  # title, description, field names and values, footer, author name
DISCORD_TITLE = 256
DISCORD_DESCRIPTION = 4096
DISCORD_FIELDS = 25
DISCORD_FIELD_NAME = 256
DISCORD_FIELD_VALUE = 1024
DISCORD_FOOTER = 2048
DISCORD_AUTHOR = 256
DISCORD_CONTENT = 2000
TEAMS_BYTES = 28_000  # "28 KB" for a message through a Teams webhook: the body, in bytes
GOOGLE_CHAT_BYTES = 32_000  # a message, text and cards, in bytes
GOOGLE_CHAT_TEXT = 4096  # kept for a card's paragraph of notes (reads well; not a limit)
GOOGLE_CHAT_WIDGETS = 100  # widgets of a card (more are dropped)
NOTES_SHOWN = 3000  # notes longer than this are cut in every format: the build page has them

ELLIPSIS = "…"
WORD_JOINER = "\u2060"
_GRAVE = "\u02cb"  # stands for a backtick inside a code span, which it would end
_MENTION = re.compile(r"@(channel|here|everyone|all|room)\b", re.IGNORECASE)
_BUILD_EVENTS = {
    "build.ready": "is ready",
    "build.distributed": "was sent to testers",
    "build.downloaded": "was downloaded",
    "build.deleted": "was deleted",
    "build.failed": "failed verification",
}
_INSTALLABLE = {"build.ready", "build.distributed", "build.downloaded"}
_COLORS = {"build.failed": 0xD93025, "build.deleted": 0x80868B}
_COLOR = 0x2F6FEB


@dataclass(frozen=True, slots=True)
class HostRule:
    """Which format an address whose host (lower case, no final dot) and path match needs.
    The one table of these hints: `suggested_format` reads it, and the console's form gets it
    as JSON (`hint_table`) for its script to say the same while the address is typed."""

    format: WebhookFormat
    shown: str  # how the console's hint names the addresses
    hosts: tuple[str, ...] = ()  # the host is one of these
    suffixes: tuple[str, ...] = ()  # ... or ends with one of these
    within: tuple[str, ...] = ()  # ... or holds one of these
    path_prefix: str = ""  # and the path starts with this

    def matches(self, host: str, path: str) -> bool:
        return (
            host in self.hosts
            or host.endswith(self.suffixes)
            or any(part in host for part in self.within)
        ) and path.startswith(self.path_prefix)


# Where a URL's host says which format its receiver needs (a hint; the admin decides).
HOST_RULES = (
    HostRule(WebhookFormat.SLACK, "hooks.slack.com", hosts=("hooks.slack.com",)),
    HostRule(
        WebhookFormat.DISCORD,
        "discord.com/api/webhooks",
        hosts=("discord.com", "discordapp.com", "ptb.discord.com", "canary.discord.com"),
        path_prefix="/api/webhooks/",
    ),
    HostRule(
        WebhookFormat.TEAMS,
        "a Power Automate Workflows address (*.logic.azure.com, *.powerplatform.com, "
        "webhook.office.com)",
        hosts=("webhook.office.com",),
        suffixes=(".logic.azure.com", ".powerautomate.com", ".webhook.office.com"),
        within=(".powerplatform.com",),
    ),
    HostRule(WebhookFormat.GOOGLE_CHAT, "chat.googleapis.com", hosts=("chat.googleapis.com",)),
)


def hint_table() -> list[dict[str, Any]]:
    """HOST_RULES as the console's script reads them (static/console.js)."""
    return [
        {"format": r.format.value, "hosts": r.hosts, "suffixes": r.suffixes,
         "within": r.within, "pathPrefix": r.path_prefix}
        for r in HOST_RULES
    ]  # fmt: skip


def suggested_format(url: str) -> WebhookFormat | None:
    """The chat format a URL looks like it needs (None: nothing known: `standard` is
    likely)."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower().rstrip(".")
    except ValueError:
        return None
    for rule in HOST_RULES:
        if rule.matches(host, parts.path):
            return rule.format
    return None


def neutral(text: str) -> str:
    """`text` with broadcast mentions (`@channel`, `@everyone`, ...) that no chat reads as
    one: a word joiner after the `@`."""
    return _MENTION.sub(lambda m: "@" + WORD_JOINER + m.group(1), text)


def units(text: str) -> int:
    """A text's length as Slack and Discord may count it: in UTF-16 code units, as JavaScript
    does (an emoji counts 2). Never less than its characters: a limit in either holds."""
    return len(text.encode("utf-16-le")) // 2


def cut(text: str, limit: int, measure: Callable[[str], int] = units) -> str:
    """`text`, or its longest beginning that with an ellipsis measures at most `limit`."""
    if measure(text) <= limit:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if measure(text[:middle].rstrip() + ELLIPSIS) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low].rstrip() + ELLIPSIS


def _str(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _http(value: Any) -> str | None:
    url = _str(value)
    return url if url and url.startswith(("https://", "http://")) else None


@dataclass
class Summary:
    """What a message says, in plain text (each format escapes it its own way)."""

    title: str
    url: str | None = None  # the console page
    facts: list[tuple[str, str]] = field(default_factory=list)
    codes: set[str] = field(default_factory=set)  # the facts shown as code (branch, commit)
    notes: str | None = None
    notes_label: str = "Notes"
    notes_markdown: bool = True  # the notes' own markdown is kept (a build's, not feedback's)
    buttons: list[tuple[str, str]] = field(default_factory=list)
    icon: str | None = None
    color: int = _COLOR
    footer: str = "Buildbay"


def summary(event_type: str, data: dict[str, Any]) -> Summary:
    """The event as a few lines a person reads."""
    project = _str(data.get("projectName")) or "the project"
    footer = f"{project} · Buildbay"
    console = _http(data.get("consoleUrl"))
    if event_type in _BUILD_EVENTS:
        return _build_summary(event_type, data, footer, console)
    open_ = [("Open in Buildbay", console)] if console else []
    if event_type in ("feedback.created", "feedback.updated"):
        app = _str(data.get("applicationName")) or "an app"
        version = _str(data.get("version")) or _str(data.get("buildVersion"))
        on = f"{app} {version}" if version else app
        by = _person(data.get("tester")) or _str(data.get("reporterEmail"))
        if event_type == "feedback.created":
            title = f"New feedback on {on}" + (f" from {by}" if by else "")
        else:
            title = f"Feedback on {on} is now {_str(data.get('status')) or 'changed'}"
        facts = [("Category", c)] if (c := _str(data.get("category"))) else []
        text = _str(data.get("text")) if event_type == "feedback.created" else None
        return Summary(title, console, facts, notes=text, notes_label="Feedback",
                       notes_markdown=False, buttons=open_, footer=footer)  # fmt: skip
    who = _str(data.get("name")) or _str(data.get("email")) or "Someone"
    role = _str(data.get("role")) or "member"
    titles = {
        "application.created": f"The app {_str(data.get('name')) or ''} was added to {project}",
        "application.deleted": f"The app {_str(data.get('name')) or ''} was deleted from {project}",
        "member.added": f"{who} joined {project} as {role}",
        "member.removed": f"{who} left {project}",
        "member.role_changed": f"{who} is now {role} in {project}",
        "device.enrolled": f"A device was enrolled in {project}",
        "webhook.test": f"A test message from Buildbay for {project}: this chat gets its events",
    }
    title = " ".join(titles.get(event_type, f"{event_type} in {project}").split())
    return Summary(title, console, buttons=open_, footer=footer)


def _person(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    return _str(value.get("name")) or _str(value.get("email"))


def _build_summary(
    event_type: str, data: dict[str, Any], footer: str, console: str | None
) -> Summary:
    app = _str(data.get("applicationName")) or "A build"
    version = _str(data.get("version"))
    name = f"{app} {version}" if version else f"{app} ({_str(data.get('fileName')) or 'a build'})"
    title = f"{name} {_BUILD_EVENTS[event_type]}"
    by = _person(data.get("downloadedBy"))
    if event_type == "build.downloaded" and by:
        title += f" by {by}"
    facts: list[tuple[str, str]] = []
    if version:
        facts.append(("Version", version))
    # `source` (issue 40's build source metadata), read as it may come: a dict of strings.
    found = data.get("source")
    source: dict[str, Any] = found if isinstance(found, dict) else {}
    branch, commit = _str(source.get("branch")), _str(source.get("commit"))
    if branch:
        facts.append(("Branch", branch))
    if commit:
        facts.append(("Commit", commit[:12]))
    if tag := _str(source.get("tag")):
        facts.append(("Tag", tag))
    if uploader := _person(data.get("uploader")):
        facts.append(("Uploaded by", uploader))
    if event_type == "build.failed" and (why := _str(data.get("metadataError"))):
        facts.append(("Why", why))
    shared = _http(data.get("installUrl")) if event_type in _INSTALLABLE else None
    # Install: by the build's shared install link, or on its console page (a signed-in
    # tester's Install).
    install = shared or (console if event_type in _INSTALLABLE else None)
    buttons = [("Install", install)] if install else []
    if console:
        buttons.append(("Open build" if event_type != "build.deleted" else "Open app", console))
    if ci_run := _http(source.get("ciRunUrl")):
        buttons.append(("CI run", ci_run))
    # The icon by the build's shared install link (public while the link lives), if any.
    icon = f"{shared}/icon.png" if shared and data.get("iconUrl") else None
    return Summary(
        title, console, facts, codes={"Branch", "Commit", "Tag"}, notes=_str(data.get("notes")),
        notes_label="Release notes", buttons=buttons, icon=icon,
        color=_COLORS.get(event_type, _COLOR), footer=footer,
    )  # fmt: skip


# -- the formats ------------------------------------------------------------------------------


def _slack_escape(text: str) -> str:
    return neutral(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_mrkdwn(text: str, limit: int) -> str:
    return cut(text, limit, lambda t: units(_slack_escape(t)))


def _slack_value(value: str, code: bool) -> str:
    """A fact's value in mrkdwn: escaped, cut to fit a field (a code span for a branch or
    commit, without the backticks that would end it)."""
    room = SLACK_FIELD_TEXT - 40
    if code:
        return f"`{_slack_escape(_slack_mrkdwn(value.replace('`', _GRAVE), room))}`"
    return _slack_escape(_slack_mrkdwn(value, room))


def _slack(s: Summary, notes: str | None) -> Message:
    esc = _slack_escape
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "emoji": True,
                                    "text": cut(neutral(s.title), SLACK_HEADER_TEXT)}},
    ]  # fmt: skip
    if s.facts:
        fields = [
            {"type": "mrkdwn", "text": f"*{label}*\n" + _slack_value(value, label in s.codes)}
            for label, value in s.facts[:SLACK_FIELDS]
        ]
        section: dict[str, Any] = {"type": "section", "fields": fields}
        if s.icon and len(s.icon) <= SLACK_URL:
            section["accessory"] = {"type": "image", "image_url": s.icon, "alt_text": "App icon"}
        blocks.append(section)
    if notes:
        text = esc(f"*{s.notes_label}*\n") + esc(
            _slack_mrkdwn(notes, SLACK_SECTION_TEXT - units(s.notes_label) - 3)
        )
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    buttons = [
        {"type": "button", "text": {"type": "plain_text", "text": label},
         "url": url, "action_id": f"buildbay-{i}"}
        | ({"style": "primary"} if label == "Install" else {})
        for i, (label, url) in enumerate(s.buttons) if len(url) <= SLACK_URL
    ]  # fmt: skip
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": esc(s.footer)}]})
    return {"text": _slack_escape(_slack_mrkdwn(s.title, SLACK_FALLBACK_TEXT)), "blocks": blocks}


_DISCORD_MARKDOWN = re.compile(r"([\\*_~`|>#\[\]()<:-])")


def _discord_escape(text: str) -> str:
    return _DISCORD_MARKDOWN.sub(r"\\\1", neutral(text))


def _discord_value(value: str, code: bool) -> str:
    """A fact's value in Discord's markdown: escaped, cut to fit a field (a code span for a
    branch or commit)."""
    if code:
        return f"`{cut(neutral(value).replace('`', _GRAVE), DISCORD_FIELD_VALUE - 2)}`"
    return _discord_escape(cut(value, DISCORD_FIELD_VALUE, lambda t: units(_discord_escape(t))))


_LINK_BREAKERS = str.maketrans(
    {"(": "%28", ")": "%29", "[": "%5B", "]": "%5D", "<": "%3C", ">": "%3E", "\\": "%5C"}
)


def _markdown_url(url: str) -> str:
    """`url` as a markdown link's target: the characters that would end the link (and start
    another, labelled and aimed as a build's CI run URL likes) percent-encoded, which the web
    reads as the same address."""
    return url.translate(_LINK_BREAKERS)


def _discord(s: Summary, notes: str | None) -> Message:
    embed: dict[str, Any] = {
        "title": cut(neutral(s.title), DISCORD_TITLE),
        "color": s.color,
        "footer": {"text": cut(neutral(s.footer), DISCORD_FOOTER)},
    }
    if s.url:
        embed["url"] = s.url
    if notes and s.notes_markdown:
        embed["description"] = cut(neutral(notes), DISCORD_DESCRIPTION)
    elif notes:
        embed["description"] = _discord_escape(
            cut(notes, DISCORD_DESCRIPTION, lambda t: units(_discord_escape(t)))
        )
    fields = [
        {"name": label, "value": _discord_value(value, label in s.codes), "inline": True}
        for label, value in s.facts
    ]
    links = ""
    for label, url in s.buttons:  # the links that fit a field, whole
        link = f"[{label}]({_markdown_url(url)})"
        if units(links + " · " + link) <= DISCORD_FIELD_VALUE:
            links = f"{links} · {link}" if links else link
    if links:
        fields.append({"name": "Links", "value": links, "inline": False})
    embed["fields"] = fields[:DISCORD_FIELDS]
    if s.icon:
        embed["thumbnail"] = {"url": s.icon}
    return {"username": "Buildbay", "allowed_mentions": {"parse": []}, "embeds": [embed]}


_TEAMS_MARKDOWN = re.compile(r"([\\*_`\[\]])")
_TEAMS_LINE_MARK = re.compile(r"^(\s*)([-+]|\d+\.)(?=\s)", re.MULTILINE)


def _teams_escape(text: str) -> str:
    """`text` as an Adaptive Card's markdown shows it as written: CommonMark's emphasis,
    code and link characters and a line's list mark backslash-escaped, and `{{` (a card's
    DATE()/TIME() functions) broken by a word joiner."""
    escaped = _TEAMS_MARKDOWN.sub(r"\\\1", neutral(text))
    escaped = _TEAMS_LINE_MARK.sub(lambda m: m[1] + m[2][:-1] + "\\" + m[2][-1], escaped)
    return escaped.replace("{{", "{" + WORD_JOINER + "{")


def _teams(s: Summary, notes: str | None) -> Message:
    head: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": _teams_escape(s.title), "weight": "Bolder",
         "size": "Medium", "wrap": True},
    ]  # fmt: skip
    if s.icon:
        head = [
            {"type": "ColumnSet", "columns": [
                {"type": "Column", "width": "auto", "items": [
                    {"type": "Image", "url": s.icon, "size": "Small", "altText": "App icon"}]},
                {"type": "Column", "width": "stretch", "items": head},
            ]},
        ]  # fmt: skip
    body: list[dict[str, Any]] = head
    if s.facts:
        body.append({"type": "FactSet", "facts": [
            {"title": label, "value": _teams_escape(value)}
            for label, value in s.facts]})  # fmt: skip
    if notes:
        body.append({"type": "TextBlock", "text": s.notes_label, "weight": "Bolder",
                     "spacing": "Medium"})  # fmt: skip
        text = neutral(notes) if s.notes_markdown else _teams_escape(notes)
        body.append({"type": "TextBlock", "text": text, "wrap": True})
    body.append({"type": "TextBlock", "text": _teams_escape(s.footer), "isSubtle": True,
                 "size": "Small", "wrap": True})  # fmt: skip
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": [{"type": "Action.OpenUrl", "title": label, "url": url}
                    for label, url in s.buttons],
    }  # fmt: skip
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
             "content": card},
        ],
    }  # fmt: skip


def _google_escape(text: str) -> str:
    return html.escape(neutral(text), quote=False)


def _google_chat(s: Summary, notes: str | None) -> Message:
    header: dict[str, Any] = {"title": neutral(s.title), "subtitle": neutral(s.footer)}
    if s.icon:
        header |= {"imageUrl": s.icon, "imageType": "SQUARE", "imageAltText": "App icon"}
    widgets: list[dict[str, Any]] = [
        {"decoratedText": {"topLabel": label, "text": _google_escape(value),
                           "wrapText": True}}
        for label, value in s.facts
    ]  # fmt: skip
    if notes:
        text = cut(notes, GOOGLE_CHAT_TEXT, lambda t: len(_google_escape(t)))
        widgets.append(
            {
                "textParagraph": {
                    "text": f"<b>{s.notes_label}</b><br>"
                    + _google_escape(text).replace("\n", "<br>")
                }
            }
        )
    if s.buttons:
        widgets.append({"buttonList": {"buttons": [
            {"text": label, "onClick": {"openLink": {"url": url}}} for label, url in s.buttons
        ]}})  # fmt: skip
    if not widgets:  # a section has at least one
        widgets.append({"textParagraph": {"text": _google_escape(s.title)}})
    return {
        # The notification's text: Chat's own markup (`<users/all>`, `<url|text>`), with no
        # escape for `<`: people's angle brackets become look-alikes there.
        "text": neutral(s.title).replace("<", "\u2039").replace(">", "\u203a"),
        "cardsV2": [{"cardId": "buildbay", "card": {"header": header,
                                                    "sections": [{"widgets": widgets}]}}],
    }  # fmt: skip


_BUILDERS: dict[WebhookFormat, Callable[[Summary, str | None], Message]] = {
    WebhookFormat.SLACK: _slack,
    WebhookFormat.DISCORD: _discord,
    WebhookFormat.TEAMS: _teams,
    WebhookFormat.GOOGLE_CHAT: _google_chat,
}


# -- limits -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """One documented limit, and what the message measures against it."""

    what: str
    measured: int
    limit: int

    @property
    def ok(self) -> bool:
        return self.measured <= self.limit


def body_of(message: Message) -> str:
    """The message as sent."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def _slack_checks(m: Message) -> list[Check]:
    blocks = m.get("blocks", [])
    found = [
        Check("blocks", len(blocks), SLACK_BLOCKS),
        Check("the message's text", units(m.get("text", "")), SLACK_FALLBACK_TEXT),
    ]
    for b in blocks:
        kind = b["type"]
        if kind == "header":
            found.append(Check("a header's text", units(b["text"]["text"]), SLACK_HEADER_TEXT))
        elif kind == "section":
            if "text" in b:
                found.append(
                    Check("a section's text", units(b["text"]["text"]), SLACK_SECTION_TEXT)
                )
            fields = b.get("fields", [])
            found.append(Check("a section's fields", len(fields), SLACK_FIELDS))
            found += [Check("a field's text", units(f["text"]), SLACK_FIELD_TEXT) for f in fields]
            if image := b.get("accessory"):
                found.append(Check("an image's URL", units(image["image_url"]), SLACK_URL))
        elif kind == "actions":
            for e in b["elements"]:
                found.append(Check("a button's text", units(e["text"]["text"]), SLACK_BUTTON_TEXT))
                found.append(Check("a button's URL", units(e["url"]), SLACK_URL))
        elif kind == "context":
            found.append(Check("a context's elements", len(b["elements"]), SLACK_CONTEXT_ELEMENTS))
            found += [Check("a context's text", units(e["text"]), SLACK_SECTION_TEXT)
                      for e in b["elements"]]  # fmt: skip
    return found


def _discord_checks(m: Message) -> list[Check]:
    found = [Check("the message's content", units(m.get("content", "")), DISCORD_CONTENT)]
    for e in m.get("embeds", []):
        fields = e.get("fields", [])
        total = (
            units(e.get("title", ""))
            + units(e.get("description", ""))
            + sum(units(f["name"]) + units(f["value"]) for f in fields)
            + units(e.get("footer", {}).get("text", ""))
            + units(e.get("author", {}).get("name", ""))
        )
        found += [
            Check("an embed's characters in all", total, DISCORD_EMBED_TOTAL),
            Check("an embed's title", units(e.get("title", "")), DISCORD_TITLE),
            Check("an embed's description", units(e.get("description", "")), DISCORD_DESCRIPTION),
            Check("an embed's fields", len(fields), DISCORD_FIELDS),
            Check("an embed's footer", units(e.get("footer", {}).get("text", "")), DISCORD_FOOTER),
        ]
        found += [Check("a field's name", units(f["name"]), DISCORD_FIELD_NAME) for f in fields]
        found += [Check("a field's value", units(f["value"]), DISCORD_FIELD_VALUE) for f in fields]
    return found


def _size(limit: int) -> Callable[[Message], list[Check]]:
    return lambda m: [Check("the message's bytes", len(body_of(m).encode()), limit)]


def _google_checks(m: Message) -> list[Check]:
    widgets = sum(
        len(section["widgets"]) for card in m["cardsV2"] for section in card["card"]["sections"]
    )
    return [*_size(GOOGLE_CHAT_BYTES)(m), Check("a card's widgets", widgets, GOOGLE_CHAT_WIDGETS)]


_CHECKS: dict[WebhookFormat, Callable[[Message], list[Check]]] = {
    WebhookFormat.SLACK: _slack_checks,
    WebhookFormat.DISCORD: _discord_checks,
    WebhookFormat.TEAMS: _size(TEAMS_BYTES),
    WebhookFormat.GOOGLE_CHAT: _google_checks,
}


def checks(fmt: WebhookFormat, message: Message) -> list[Check]:
    """The message measured against its target's documented limits."""
    return _CHECKS[fmt](message)


def _fits(fmt: WebhookFormat, message: Message) -> bool:
    return all(c.ok for c in checks(fmt, message))


def render(fmt: WebhookFormat, event_type: str, data: dict[str, Any]) -> Message:
    """The chat message of the event, within the target's limits: the notes are cut (with an
    ellipsis) to the longest that fits, or left out; never a message over a limit."""
    s = summary(event_type, data)
    make = _BUILDERS[fmt]
    notes = cut(s.notes, NOTES_SHOWN) if s.notes else None
    message = make(s, notes)
    if _fits(fmt, message):
        return message
    if notes:
        low, high = 0, len(notes)
        while low < high:
            middle = (low + high + 1) // 2
            if _fits(fmt, make(s, cut(notes, middle))):
                low = middle
            else:
                high = middle - 1
        message = make(s, cut(notes, low) if low else None)
        if _fits(fmt, message):
            return message
    # What could not fit is not the notes (a very long name, a fact): the title alone.
    bare = Summary(cut(s.title, 140), s.url, buttons=s.buttons[:2], footer=cut(s.footer, 140))
    return make(bare, None)


def render_body(fmt: WebhookFormat, event_type: str, data: dict[str, Any]) -> str:
    return body_of(render(fmt, event_type, data))
