"""mail/headers.py: user text in a header neutralised, Buildbay's own headers folded and never
encoded, addresses in the form mail carries, and the message checked to hold exactly the
headers written."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildbay.mail.headers import (
    UnmailableAddress,
    UnsafeMail,
    checked_headers,
    folded,
    header_text,
    mailable_address,
)
from buildbay.mail.message import notification, render
from buildbay.mail.outbox import compose

HEADERS = {"from", "to", "subject", "date", "message-id", "auto-submitted", "mime-version",
           "content-type"}  # fmt: skip
NOW = datetime(2026, 11, 28, tzinfo=UTC)


def parsed(text: str) -> EmailMessage:
    message = email.message_from_string(text, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


@given(name=st.text(max_size=60))
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_text_in_a_subject_adds_or_changes_a_header(name: str) -> None:
    mail = render("invitation", "carol@example.com", f"{name} invited you to {name}",
                  inviter=name, project=name, role="tester", link="http://x/i/t")  # fmt: skip

    message = parsed(compose("Buildbay <builds@example.com>", mail, NOW))

    assert {k.lower() for k in message} == HEADERS
    assert message["To"] == "carol@example.com"
    shown = header_text(f"{name} invited you to {name}")
    # The same text: Python's folder may drop the space between two encoded words of its own.
    assert "".join(str(message["Subject"]).split()) == "".join(shown.split())
    assert "=?" not in str(message["Subject"])
    assert [p.get_content_type() for p in message.iter_parts()] == ["text/plain", "text/html"]


def test_header_text_splits_encoded_words_and_blanks_line_breaks() -> None:
    assert header_text("=?utf-8?q?a?=") == "= ?utf-8?q?a?="
    assert header_text("=?=?") == "= ?= ?"
    assert header_text("a\r\nb\u2028c\x00d") == "a  b c d"
    assert header_text("Q&A = ? fun") == "Q&A = ? fun"


def test_a_long_list_unsubscribe_url_is_folded_before_it_and_never_encoded() -> None:
    url = "https://builds.example.com/unsubscribe/" + "A" * 120
    assert folded("List-Unsubscribe", f"<{url}>") == f"List-Unsubscribe:\r\n <{url}>\r\n"
    assert folded("List-Unsubscribe", "<https://x/u>") == "List-Unsubscribe: <https://x/u>\r\n"
    with pytest.raises(UnsafeMail):
        folded("List-Unsubscribe", "<https://x/u>\r\nBcc: eve@example.com")
    with pytest.raises(UnsafeMail):
        folded("List-Unsubscribe", "<https://x/" + "a" * 1000 + ">")

    mail = notification("new_build", "carol@example.com", "Acme 1.2 is ready", url,
                        application="Acme", version="1.2", project="Acme", notes="",
                        link="http://x/install/t", uploader="Ada",
                        page="http://x/projects/p/apps/a")  # fmt: skip
    text = compose("Buildbay <builds@example.com>", mail, NOW)
    assert f"\r\nList-Unsubscribe:\r\n <{url}>\r\n" in text
    message = parsed(text)
    assert str(message["List-Unsubscribe"]).strip() == f"<{url}>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


def test_a_message_with_a_header_it_was_not_written_with_is_refused() -> None:
    good = "From: a@example.com\r\nSubject: hi\r\n there\r\n\r\nbody\r\nReply-To: x\r\n"
    assert checked_headers(good, ["From", "Subject"]) == good
    forged = "From: a@example.com\r\nSubject: hi\r\nReply-To: eve@evil.example\r\n\r\nbody"
    with pytest.raises(UnsafeMail, match="reply-to"):
        checked_headers(forged, ["From", "Subject"])
    with pytest.raises(UnsafeMail, match="no header field"):
        checked_headers("From: a@example.com\r\n<html>\r\n\r\n", ["From"])
    twice = "From: a@example.com\r\nContent-Type: a\r\nContent-Type: b\r\n\r\n"
    with pytest.raises(UnsafeMail):
        checked_headers(twice, ["From", "Content-Type"])


def test_addresses_are_mailed_in_ascii_or_refused() -> None:
    assert mailable_address("v@пример.рф") == "v@xn--e1afmkfd.xn--p1ai"
    assert mailable_address("dev@corp.local") == "dev@corp.local"
    for address in ("élève@exemple.fr", "=?utf-8?q?x?=@example.com", "not an address"):
        with pytest.raises(UnmailableAddress):
            mailable_address(address)
