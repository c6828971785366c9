"""Chat messages made from events whose every field is as long or as odd as it may come (the
names and a build's `source` from other parts of the server, read defensively): each stays
within its target's documented limits, checked by test_chat_formats' own reading of them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from buildbay.builds.schemas import MAX_NOTES_LENGTH
from buildbay.webhooks.chat import render
from buildbay.webhooks.enums import WebhookFormat
from buildbay.webhooks.events import SUBSCRIBABLE
from tests.webhooks.test_chat_formats import CHECKS, HOSTILE, no_mention

LONG = (HOSTILE * 800)[:5000]


def _data(**changes: Any) -> dict[str, Any]:
    return {
        "projectName": LONG[:500],
        "applicationName": LONG[:500],
        "version": LONG[:300],
        "notes": (HOSTILE * 200)[:MAX_NOTES_LENGTH],
        "fileName": LONG[:255],
        "uploader": {"name": LONG[:300], "email": "a@example.com"},
        "downloadedBy": {"name": LONG[:300]},
        "source": {
            "branch": LONG,
            "commit": LONG,
            "tag": LONG,
            "repository": LONG,
            "ciRunUrl": "https://ci.example/" + "r" * 2900,
        },
        "metadataError": LONG[:500],
        "consoleUrl": "https://buildbay.example/projects/p/apps/a/builds/b",
        "installUrl": "https://buildbay.example/install/" + "t" * 200,
        "iconUrl": "https://buildbay.example/api/icon",
        "text": (HOSTILE * 200)[:5000],
        "category": LONG[:100],
        "name": LONG[:300],
        "email": "e@example.com",
        "role": "tester",
        **changes,
    }


@pytest.mark.parametrize("fmt", [f for f in WebhookFormat if f is not WebhookFormat.STANDARD])
@pytest.mark.parametrize("event", [e.value for e in SUBSCRIBABLE] + ["webhook.test"])
def test_every_event_with_the_longest_fields_stays_within_limits(
    fmt: WebhookFormat, event: str
) -> None:
    message = render(fmt, event, _data())
    CHECKS[fmt.value](message, json.dumps(message, ensure_ascii=False).encode())
    no_mention(message)


@pytest.mark.parametrize("fmt", [f for f in WebhookFormat if f is not WebhookFormat.STANDARD])
def test_fields_of_unexpected_types_are_left_out_not_a_failure(fmt: WebhookFormat) -> None:
    odd = _data(source="main", uploader=["x"], notes=42, version=None, consoleUrl="javascript:x",
                installUrl=None, applicationName={"a": 1})  # fmt: skip
    message = render(fmt, "build.ready", odd)
    CHECKS[fmt.value](message, json.dumps(message, ensure_ascii=False).encode())
    assert "javascript:" not in json.dumps(message)


@pytest.mark.parametrize("fmt", [f for f in WebhookFormat if f is not WebhookFormat.STANDARD])
def test_notes_of_four_byte_characters_fit_in_bytes_and_in_utf16_counts(
    fmt: WebhookFormat,
) -> None:
    # 10,000 emoji: 40,000 bytes in UTF-8, 20,000 UTF-16 code units.
    message = render(fmt, "build.ready", _data(notes="\U0001f600" * MAX_NOTES_LENGTH))
    raw = json.dumps(message, ensure_ascii=False).encode()
    shown = CHECKS[fmt.value](message, raw)
    assert "\U0001f600" * 100 in shown
    assert "\U0001f600…" in shown  # cut, and says so


def test_a_ci_run_url_cannot_write_a_link_of_its_own_into_discords_markdown() -> None:
    # An http(s) address may hold `)` and `[`: in a markdown link they would end it and start
    # another, labelled as the caller likes, pointing anywhere.
    sneaky = "https://ci.example/run)[Install](https://evil.example/x"
    message = render(WebhookFormat.DISCORD, "build.ready", _data(
        source={"ciRunUrl": sneaky}, installUrl="https://buildbay.example/install/t",
    ))  # fmt: skip
    [links] = [f["value"] for f in message["embeds"][0]["fields"] if f["name"] == "Links"]
    found = re.findall(r"\[([^\]]*)\]\(([^)\s]*)\)", links)
    assert [label for label, _ in found] == ["Install", "Open build", "CI run"]
    assert all(
        url.startswith(("https://buildbay.example/", "https://ci.example/")) for _, url in found
    )


def _teams_texts(message: dict[str, Any]) -> list[str]:
    """The TextBlocks' texts and the facts' values of a Teams card, in order."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "TextBlock":
                found.append(node["text"])
            for fact in node.get("facts", []) if node.get("type") == "FactSet" else []:
                found.append(fact["value"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(message["attachments"][0]["content"]["body"])
    return found


def test_names_and_facts_are_text_in_a_teams_card_not_markdown() -> None:
    """An Adaptive Card's TextBlock and FactSet read markdown: a branch, a name or a title
    must not make a link or emphasis of its own in the team's chat."""
    hostile = "*x* _y_ `z` [Install](https://evil.example/x) {{DATE(2030-01-01T00:00:00Z)}}"
    message = render(WebhookFormat.TEAMS, "build.ready", _data(
        applicationName="**App**", version="1.0", notes="Keep **this**",
        uploader={"name": "- Mallory"}, source={"branch": hostile},
    ))  # fmt: skip
    texts = _teams_texts(message)

    assert texts[0] == "\\*\\*App\\*\\* 1.0 is ready"
    branch = ("\\*x\\* \\_y\\_ \\`z\\` \\[Install\\](https://evil.example/x) "
              "{\u2060{DATE(2030-01-01T00:00:00Z)}}")  # fmt: skip
    assert branch in texts
    assert "\\- Mallory" in texts
    assert "Keep **this**" in texts  # a build's notes keep the team's own markdown
    assert not any("[Install](" in text for text in texts)


@pytest.mark.parametrize("fmt", [WebhookFormat.DISCORD, WebhookFormat.TEAMS])
def test_a_feedbacks_text_writes_no_link_into_the_teams_chat(fmt: WebhookFormat) -> None:
    """Feedback comes from whoever holds the app: its text is shown, not read as markdown."""
    text = "Crashes. [Open build](https://evil.example/login) **now**"
    message = render(fmt, "feedback.created", _data(text=text))
    if fmt is WebhookFormat.DISCORD:
        shown = message["embeds"][0]["description"]
    else:
        shown = " ".join(_teams_texts(message))
    assert "[Open build](" not in shown
    assert "\\[Open build\\]" in shown
    assert "\\*\\*now\\*\\*" in shown
