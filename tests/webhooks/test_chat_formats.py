"""Chat formats: each endpoint's message as its own real receiver gets it, checked against the
structure and limits its target documents (written here from the targets' documentation, not
taken from webhooks/chat.py), for a build with the longest notes the API takes, with text that
would be markup or a mention in a chat."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from buildbay.builds.schemas import MAX_NOTES_LENGTH
from buildbay.config import Settings
from tests.conftest import Account, Api, assert_problem
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Receiver, receiving

pytestmark = pytest.mark.usefixtures("no_leaks")

FORMATS = ["slack", "discord", "teams", "google-chat"]
MiB = 1024 * 1024
# Markup and mentions of every target, quotes and backslashes (JSON escapes them: longer),
# and characters of 2 to 4 bytes in UTF-8.
HOSTILE = 'Fix <b>crash</b> & *bold* _it_ @channel <!everyone> <@123> <users/all> "q" \\ ü € 😀\n'


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # A multipart build over 1 MiB is checked in the background (build.failed's way).
    return settings.model_copy(update={"verify_inline_max_bytes": MiB, "quota_bytes_free": 0})


@contextlib.contextmanager
def receivers(count: int) -> Iterator[list[Receiver]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(receiving()) for _ in range(count)]


async def chat_hook(
    hooks: Hooks, owner: Account, project_id: str, url: str, fmt: str, events: list[str]
) -> dict[str, Any]:
    await hooks.run()
    r = await hooks.client.post(
        f"/api/projects/{project_id}/webhooks",
        json={"url": url, "events": events, "format": fmt},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    assert created["format"] == fmt
    return created


def message(receiver: Receiver) -> dict[str, Any]:
    """The one message the receiver got: unsigned JSON."""
    [got] = receiver.received
    receiver.received.clear()
    assert got.headers["content-type"] == "application/json"
    assert not any(h.startswith("webhook-") for h in got.headers)  # chat formats: unsigned
    body: dict[str, Any] = json.loads(got.body)
    return body


# -- each target's documented structure and limits --------------------------------------------


def texts(value: Any) -> Iterator[str]:
    """Every string in a message."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)


def u16(text: str) -> int:
    """Characters as Slack and Discord may count them: UTF-16 code units (an emoji is 2), never
    fewer than code points, so a message within this is within either count."""
    return len(text.encode("utf-16-le")) // 2


def check_slack(m: dict[str, Any], raw: bytes) -> str:
    """Block Kit (docs.slack.dev/reference/block-kit/blocks): at most 50 blocks; a section's
    text at most 3,000 characters, its fields at most 10 of 2,000; a header's plain text at
    most 150; a button's text 75, its URL 3,000. Mrkdwn escapes `&`, `<`, `>`. Answers the
    mrkdwn texts, joined."""
    assert isinstance(m["text"], str)
    assert m["text"]
    blocks = m["blocks"]
    assert 1 <= len(blocks) <= 50
    mrkdwn = []
    for block in blocks:
        kind = block["type"]
        assert kind in {"header", "section", "actions", "context", "divider", "image"}
        if kind == "header":
            assert block["text"]["type"] == "plain_text"
            assert 1 <= u16(block["text"]["text"]) <= 150
        if kind == "section":
            if "text" in block:
                assert block["text"]["type"] == "mrkdwn"
                assert u16(block["text"]["text"]) <= 3000
                mrkdwn.append(block["text"]["text"])
            assert len(block.get("fields", [])) <= 10
            for f in block.get("fields", []):
                assert f["type"] == "mrkdwn"
                assert u16(f["text"]) <= 2000
                mrkdwn.append(f["text"])
            if "accessory" in block:
                assert block["accessory"]["type"] == "image"
                assert block["accessory"]["image_url"].startswith("http")
        if kind == "actions":
            assert 1 <= len(block["elements"]) <= 25
            for button in block["elements"]:
                assert button["type"] == "button"
                assert u16(button["text"]["text"]) <= 75
                assert button["url"].startswith("http")
                assert u16(button["url"]) <= 3000
        if kind == "context":
            assert len(block["elements"]) <= 10
            mrkdwn += [e["text"] for e in block["elements"]]
    joined = "\n".join(mrkdwn)
    # No markup but the message's own: every <, > and & of people's text arrives escaped.
    assert "<" not in joined
    assert ">" not in joined
    assert "<" not in m["text"]
    return joined


def check_discord(m: dict[str, Any], raw: bytes) -> str:
    """Execute Webhook (discord.com/developers/docs/resources/webhook): at most 10 embeds;
    an embed's title 256, description 4,096, 25 fields of name 256 and value 1,024, footer
    2,048, author's name 256, and 6,000 characters in all of them together."""
    assert m["allowed_mentions"] == {"parse": []}  # nothing pings anyone
    assert u16(m.get("content", "")) <= 2000
    assert 1 <= len(m["embeds"]) <= 10
    total = 0
    for e in m["embeds"]:
        assert u16(e["title"]) <= 256
        assert u16(e.get("description", "")) <= 4096
        assert len(e.get("fields", [])) <= 25
        for f in e.get("fields", []):
            assert 1 <= u16(f["name"]) <= 256
            assert 1 <= u16(f["value"]) <= 1024
        assert u16(e.get("footer", {}).get("text", "")) <= 2048
        total += (
            u16(e["title"])
            + u16(e.get("description", ""))
            + u16(e.get("footer", {}).get("text", ""))
            + u16(e.get("author", {}).get("name", ""))
        )
        total += sum(u16(f["name"]) + u16(f["value"]) for f in e.get("fields", []))
        assert isinstance(e["color"], int)
    assert total <= 6000
    return str(m["embeds"][0].get("description", ""))


def check_teams(m: dict[str, Any], raw: bytes) -> str:
    """A Workflows webhook's message (learn.microsoft.com, Teams webhooks): `type: message`
    with an Adaptive Card attachment; at most 28 KB."""
    assert len(raw) <= 28_000
    assert m["type"] == "message"
    [attachment] = m["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard"
    assert card["version"] in {"1.2", "1.3", "1.4", "1.5"}
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    for action in card.get("actions", []):
        assert action["type"] == "Action.OpenUrl"
        assert action["url"].startswith("http")
    blocks = [t for t in _walk(card["body"]) if t.get("type") == "TextBlock"]
    assert blocks
    return "\n".join(b["text"] for b in blocks)


def _walk(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for item in items:
        yield item
        for key in ("columns", "items"):
            yield from _walk(item.get(key, []))


def check_google_chat(m: dict[str, Any], raw: bytes) -> str:
    """A cardsV2 message (developers.google.com/workspace/chat): at most 32,000 bytes; a card
    of sections of widgets, at most 100 widgets."""
    assert len(raw) <= 32_000
    assert "<" not in m.get("text", "")  # Chat's own markup (`<users/all>`) in the text
    [card] = m["cardsV2"]
    assert card["cardId"]
    assert card["card"]["header"]["title"]
    widgets = [w for s in card["card"]["sections"] for w in s["widgets"]]
    assert 1 <= len(widgets) <= 100
    for w in widgets:
        assert len(w) == 1
        assert next(iter(w)) in {"decoratedText", "textParagraph", "buttonList"}
    text = "\n".join(w["textParagraph"]["text"] for w in widgets if "textParagraph" in w)
    # HTML: people's < arrive escaped; the only tags are the message's own.
    assert "<b>crash" not in text
    assert "<users/all>" not in text
    return text


CHECKS = {
    "slack": check_slack,
    "discord": check_discord,
    "teams": check_teams,
    "google-chat": check_google_chat,
}


def no_mention(m: dict[str, Any]) -> None:
    """No broadcast mention written by people's text arrives whole in any string."""
    for text in texts(m):
        # (Slack's `<!everyone>` is text elsewhere; check_slack finds no `<` in Slack's.)
        for mention in ("@channel", "@everyone", "@here"):
            assert mention not in text, text


# -- the tests --------------------------------------------------------------------------------


async def test_each_format_sends_a_build_as_its_target_documents_unsigned(
    hooks: Hooks, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    with receivers(4) as got:
        for fmt, receiver in zip(FORMATS, got, strict=True):
            await chat_hook(hooks, owner, project["id"], receiver.url, fmt, ["build.ready"])
        build = await api.upload(
            owner, project["id"], app["id"], notes="Fixes sign-in.\n" + HOSTILE
        )
        await hooks.run()
        page = (
            f"http://testserver/projects/{project['id']}/apps/{app['id']}/builds/{build['buildId']}"
        )
        for fmt, receiver in zip(FORMATS, got, strict=True):
            m = message(receiver)
            shown = CHECKS[fmt](m, json.dumps(m, ensure_ascii=False).encode())
            no_mention(m)
            everything = "\n".join(texts(m))
            assert "Acme Android" in everything, fmt
            assert "is ready" in everything, fmt
            assert "Fixes sign-in." in shown, fmt
            assert owner.user["name"] in everything, fmt  # who uploaded
            assert page in everything, fmt  # Open build (and Install, on the tester's page)


async def test_the_longest_notes_stay_within_every_target_s_limits_cut_with_an_ellipsis(
    hooks: Hooks, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    notes = (HOSTILE * (MAX_NOTES_LENGTH // len(HOSTILE) + 1))[: MAX_NOTES_LENGTH - 1] + "Z"
    assert len(notes) == MAX_NOTES_LENGTH
    with receivers(4) as got:
        for fmt, receiver in zip(FORMATS, got, strict=True):
            await chat_hook(hooks, owner, project["id"], receiver.url, fmt, ["build.ready"])
        build = await api.upload(owner, project["id"], app["id"], notes=notes)
        assert build["notes"] == notes  # the API's longest
        await hooks.run()
        for fmt, receiver in zip(FORMATS, got, strict=True):
            [raw] = [r.body for r in receiver.received]
            m = message(receiver)
            shown = CHECKS[fmt](m, raw)
            no_mention(m)
            assert "Fix " in shown, fmt  # the notes, from their start
            assert "Z" not in shown, fmt  # not to their end:
            assert "…" in shown, fmt  # cut, and says so


async def test_markup_and_mentions_in_the_notes_are_text_in_each_chat(
    hooks: Hooks, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"], name="R&D <beta> *app*")
    with receivers(4) as got:
        for fmt, receiver in zip(FORMATS, got, strict=True):
            await chat_hook(hooks, owner, project["id"], receiver.url, fmt, ["build.ready"])
        await api.upload(owner, project["id"], app["id"], notes=HOSTILE)
        await hooks.run()
        slack, discord, teams, google = (message(r) for r in got)
    for m in (slack, discord, teams, google):
        no_mention(m)
    notes = check_slack(slack, b"")
    assert "Fix &lt;b&gt;crash&lt;/b&gt; &amp; *bold*" in notes
    assert "&lt;!everyone&gt;" in notes
    assert "&lt;@123&gt;" in notes
    assert "R&amp;D &lt;beta&gt;" in slack["text"]
    assert slack["blocks"][0]["text"]["text"].startswith("R&D <beta> *app*")  # plain text
    embed = discord["embeds"][0]
    assert embed["title"].startswith("R&D <beta> *app*")  # a title is not markdown
    assert "<@123>" in embed["description"]  # shown, and pings nobody (allowed_mentions)
    assert "\\*" not in embed["description"]  # the notes' own markdown is kept
    google_text = check_google_chat(google, b"")
    assert "Fix &lt;b&gt;crash&lt;/b&gt; &amp; *bold*" in google_text
    assert "&lt;users/all&gt;" in google_text
    teams_text = check_teams(teams, json.dumps(teams).encode())
    assert "Fix <b>crash</b> & *bold*" in teams_text  # a TextBlock renders no HTML
    assert "@\u2060channel" in teams_text


async def test_other_events_are_a_sentence_and_a_link_and_the_test_is_unsigned_too(
    hooks: Hooks, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    with receivers(4) as got:
        made = [
            await chat_hook(hooks, owner, project["id"], r.url, fmt, ["member.added"])
            for fmt, r in zip(FORMATS, got, strict=True)
        ]
        tester = await api.register("tess@example.com")
        await api.add_member(owner, project["id"], tester, "tester")
        await hooks.run()
        for fmt, receiver in zip(FORMATS, got, strict=True):
            m = message(receiver)
            CHECKS[fmt](m, json.dumps(m, ensure_ascii=False).encode())
            everything = "\n".join(texts(m))
            assert "joined Acme as tester" in everything, fmt
            assert f"http://testserver/projects/{project['id']}" in everything, fmt
        for hook, (fmt, receiver) in zip(made, zip(FORMATS, got, strict=True), strict=True):
            await hooks.test(owner, project["id"], hook["id"])
            await hooks.run()
            m = message(receiver)
            CHECKS[fmt](m, json.dumps(m, ensure_ascii=False).encode())
            assert "A test message from Buildbay for Acme" in "\n".join(texts(m)), fmt
            [delivery] = [
                d
                for d in await hooks.deliveries(owner, project["id"], hook["id"])
                if d["eventType"] == "webhook.test"
            ]
            assert delivery["status"] == "delivered"


async def test_a_standard_endpoint_beside_a_chat_one_still_gets_the_signed_event(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await hooks.create(owner, project["id"], receiver.url, ["build.ready"], receiver=receiver)
    with receiving() as slack:
        await chat_hook(hooks, owner, project["id"], slack.url, "slack", ["build.ready"])
        build = await api.upload(owner, project["id"], app["id"], notes=HOSTILE)
        await hooks.run()
        assert "blocks" in message(slack)
    [event] = receiver.received
    assert event.verified_by  # by the standardwebhooks package
    assert event.payload["type"] == "build.ready"
    assert event.payload["data"]["notes"] == HOSTILE.strip()
    assert event.payload["data"]["buildId"] == build["buildId"]


async def test_the_format_is_chosen_changed_and_refused_when_unknown_with_a_hint_by_url(
    hooks: Hooks, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    base = f"/api/projects/{project['id']}/webhooks"
    hints = {
        "https://hooks.slack.com/services/T0/B0/xyz": "slack",
        "https://discord.com/api/webhooks/1/abc": "discord",
        "https://prod-01.westeurope.logic.azure.com/workflows/x/triggers/manual": "teams",
        "https://acme.webhook.office.com/webhookb2/x": "teams",
        "https://default1.environment.api.powerplatform.com/powerautomate/x": "teams",
        "https://chat.googleapis.com/v1/spaces/AAA/messages?key=k&token=t": "google-chat",
        "https://ci.example.com/hooks": None,
        "https://discord.com/channels/1": None,
    }
    for url, hint in hints.items():
        r = await hooks.client.post(base, json={"url": url, "events": ["build.ready"]},
                                    headers=owner.headers)  # fmt: skip
        assert r.status_code == 201, r.text
        assert (r.json()["format"], r.json()["suggestedFormat"]) == ("standard", hint), url
    r = await hooks.client.put(f"{base}/{r.json()['id']}", json={"format": "discord"},
                               headers=owner.headers)  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["format"] == "discord"
    bad = await hooks.client.post(
        base, json={"url": "https://x.example/", "events": ["build.ready"], "format": "irc"},
        headers=owner.headers,
    )  # fmt: skip
    assert_problem(bad, 422)
    assert "format" in bad.text


async def test_build_failed_is_sent_when_the_background_check_refuses_a_build(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await hooks.create(owner, project["id"], receiver.url, ["build.failed"], receiver=receiver)
    with receiving() as slack:
        await chat_hook(hooks, owner, project["id"], slack.url, "slack", ["build.failed"])
        data = hashlib.sha256(b"x").digest() * (6 * MiB // 32)
        base = f"/api/app-distribution/{project['id']}/{app['id']}/builds"
        r = await hooks.client.post(
            f"{base}/upload-link",
            json={"fileName": "app-release.apk", "fileSize": len(data), "multipart": True,
                  "sha256": "0" * 64},
            headers=owner.headers,
        )  # fmt: skip
        assert r.status_code == 201, r.text
        build_id = r.json()["buildId"]
        r = await hooks.client.post(f"{base}/{build_id}/parts", json={"partNumbers": [1]},
                                    headers=owner.headers)  # fmt: skip
        assert r.status_code == 200, r.text
        [part] = r.json()["parts"]
        r = await hooks.client.put(part["url"], content=data, headers=part["headers"])
        assert r.status_code == 200, r.text
        r = await hooks.client.post(f"{base}/verify", json={"buildId": build_id},
                                    headers=owner.headers)  # fmt: skip
        assert r.status_code == 202, r.text
        await hooks.run()
        m = message(slack)
        joined = check_slack(m, b"")
        assert "failed verification" in m["text"]
        assert "sha256" in joined  # why
    [event] = receiver.received
    assert event.verified_by
    assert event.payload["type"] == "build.failed"
    assert event.payload["data"]["status"] == "failed"
    assert event.payload["data"]["failureCode"] == "checksum_mismatch"
