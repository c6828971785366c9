"""A mail's header values, built so that nothing a user typed, nor a build file said, can
become another header or a body.

Python's e-mail package before its fix for CVE-2024-6923 (3.11.7 here, the lowest CI runs)
decodes an RFC 2047 encoded word (`=?utf-8?q?...=0D=0A...?=`) when it folds a header and writes
the decoded line break as it is: a name holding one adds a Reply-To, a content type and a body.
The request schemas refuse `=?` in names (buildbay.text), but a header is built here from what
is stored, old rows and build metadata included, so each value is made safe here whatever its
source, and `checked_headers` verifies the message as it will leave (docs/operations.md, "Mail
safety").
"""

from __future__ import annotations

import re

import email_validator

from buildbay.errors import FieldError, ValidationFailed
from buildbay.text import CONTROL, ENCODED_WORD_START, email_mailable_problem

# RFC 5322: a line SHOULD be at most 78 characters, MUST be at most 998 (CRLF excluded).
LINE_SHOULD = 78
LINE_MUST = 998


class UnsafeMail(ValueError):
    """A mail that cannot leave as built: headers that are not the ones Buildbay wrote. Nothing
    is sent; the message says why, never with the user's text."""


class UnmailableAddress(ValidationFailed):
    """An address mail cannot reach (one stored before today's rules): a 422 in a request,
    and, in a job that mails many, that recipient's failure alone."""

    code = "unmailable_address"

    def __init__(self, problem: str) -> None:
        super().__init__(f"email: {problem}", errors=[FieldError("email", problem)])


_NO_CONTROLS = str.maketrans(dict.fromkeys(map(ord, CONTROL), " "))


def header_text(value: str) -> str:
    """User text (a name, a build's version) for an unstructured header such as Subject:
    control characters and line separators become spaces, and `=?` becomes `= ?`, so that no
    part of it is an encoded word that a folder or a reader would decode into other text."""
    # `= ?` holds no `=?`, and no neighbour can make one with it (`=?=?` gives `= ?= ?`).
    return value.translate(_NO_CONTROLS).replace(ENCODED_WORD_START, "= ?")


def mailable_address(address: str) -> str:
    """`address` as mail carries it (the SMTP envelope and the To header): its domain in ASCII
    (IDNA, `xn--` labels), its part before `@` ASCII and free of `=?`. UnmailableAddress when
    it cannot be mailed (an address stored before the rules of buildbay.text)."""
    if problem := email_mailable_problem(address):
        raise UnmailableAddress(f"the address {problem}")
    try:
        checked = email_validator.validate_email(
            address, check_deliverability=False, allow_smtputf8=False
        )
    except email_validator.EmailNotValidError as exc:
        raise UnmailableAddress(f"the address is not one mail can reach: {exc}") from None
    return str(checked.ascii_email)


_FIELD_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]+")  # RFC 5322 ftext
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+(?: [\x21-\x7e]+)*")


def folded(name: str, value: str) -> str:
    """`name: value` as header lines (each ending in CRLF), folded at its spaces as RFC 5322
    allows, and never encoded: for values Buildbay builds itself, such as List-Unsubscribe's
    `<url>` (RFC 2369, RFC 8058), which a mail provider must read as it is. Python's folder
    would encode a long URL as an RFC 2047 word. The value must be printable ASCII words."""
    if not _PRINTABLE_ASCII.fullmatch(value):
        raise UnsafeMail(f"the {name} header is not printable ASCII")
    lines = [f"{name}:"]
    for word in value.split(" "):
        if len(lines[-1]) + 1 + len(word) <= LINE_SHOULD:
            lines[-1] += f" {word}"
        else:  # a word too long for the line (a URL) starts the next one, whole
            lines.append(f" {word}")
    if any(len(line) > LINE_MUST for line in lines):
        raise UnsafeMail(f"the {name} header is longer than a mail's line can be")
    return "".join(f"{line}\r\n" for line in lines)


def checked_headers(message: str, names: list[str]) -> str:
    """`message` (RFC 5322 text, CRLF) if its header section holds exactly the fields `names`
    (in any order, each once), every line a field or its continuation; else UnsafeMail. What
    a forged header would add (a Reply-To, a second Content-Type, a body line) fails here, on
    every Python, whatever the package's folder does."""
    head, _, _ = message.partition("\r\n\r\n")
    found: list[str] = []
    for line in head.split("\r\n"):
        if line.startswith((" ", "\t")):
            continue
        field, colon, _ = line.partition(":")
        if not colon or not field or not _FIELD_NAME.fullmatch(field):
            raise UnsafeMail("the message holds a header line that is no header field")
        found.append(field.lower())
    if sorted(found) != sorted(n.lower() for n in names):
        raise UnsafeMail(
            "the message's headers are not the ones written: "
            + ", ".join(sorted(set(found) ^ {n.lower() for n in names}) or ["a repeated one"])
        )
    return message
