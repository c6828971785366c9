"""The rules for text Buildbay takes in and shows: names, file names, bundle ids, versions and
e-mail addresses. One set, used by the request schemas (buildbay/schemas.py and each domain's
schemas.py) and by the build-file parsers (builds/metadata.py) alike: what a file says about
itself meets the same rules as what a client sends.

Each check answers None for good text, or why not as the end of a sentence ("is longer than 255
characters"), which the schemas turn into a field error and verify into a 422 detail. Nothing
here imports the web framework or the database.
"""

from __future__ import annotations

import re
import unicodedata

import email_validator

# A self-hosted service serves internal domains too: `dev@corp.local`, `qa@team.test`. The
# e-mail validator refuses such special-use names by default (its documented switch); the
# request schemas and the mail's addresses (buildbay/mail/headers.py) check with it.
email_validator.SPECIAL_USE_DOMAIN_NAMES.clear()


def _ranges(*ranges: tuple[int, int]) -> str:
    return "".join(chr(c) for first, last in ranges for c in range(first, last + 1))


def _class_body(*ranges: tuple[int, int]) -> str:
    """A regular expression character class's body for the ranges, as `\\uXXXX` escapes that
    Python's `re` and ECMA-262 (the OpenAPI document's patterns) read alike."""
    return "".join(
        f"\\u{first:04x}" + (f"-\\u{last:04x}" if last > first else "") for first, last in ranges
    )


# Control characters (Unicode's Cc: C0, DEL, C1) and the line and paragraph separators.
_CONTROL_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0x2028, 0x2029))
# The bidirectional embeddings, overrides and isolates: with them "setup\u202ekpa.exe" shows
# as "setupexe.apk", and a name can make the text after it read backwards.
_BIDI_RANGES = ((0x202A, 0x202E), (0x2066, 0x2069))
# Characters that show nothing and have no business in a file name: the zero-width space, the
# left-to-right and right-to-left marks, the Arabic letter mark, the word joiner and invisible
# operators, the byte order mark, the soft hyphen and the Mongolian vowel separator.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x061C, 0x061C),
    (0x180E, 0x180E),
    (0x200B, 0x200B),
    (0x200E, 0x200F),
    (0x2060, 0x2064),
    (0xFEFF, 0xFEFF),
)
# The zero-width non-joiner and joiner show nothing either, but words need them (Persian writes
# a ZWNJ inside words, emoji sequences join with a ZWJ): allowed, though never as all there is.
_JOINER_RANGES = ((0x200C, 0x200D),)
# What trimming removes: Unicode's White_Space characters (not quite Python's str.isspace()).
_WHITESPACE_RANGES = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0x85, 0x85),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
)

CONTROL = _ranges(*_CONTROL_RANGES)
BIDI_CONTROLS = _ranges(*_BIDI_RANGES)
INVISIBLE = _ranges(*_INVISIBLE_RANGES)
WHITESPACE = _ranges(*_WHITESPACE_RANGES)
CONTROL_CLASS = _class_body(*_CONTROL_RANGES)
BIDI_CLASS = _class_body(*_BIDI_RANGES)
INVISIBLE_CLASS = _class_body(*_INVISIBLE_RANGES)
JOINER_CLASS = _class_body(*_JOINER_RANGES)
WHITESPACE_CLASS = _class_body(*_WHITESPACE_RANGES)

_CONTROL_RE = re.compile(f"[{CONTROL_CLASS}]")
_BIDI_RE = re.compile(f"[{BIDI_CLASS}]")
_INVISIBLE_RE = re.compile(f"[{INVISIBLE_CLASS}]")
# Not shown: whitespace, controls and every character above.
NOT_SHOWN_CLASS = f"{CONTROL_CLASS}{BIDI_CLASS}{INVISIBLE_CLASS}{JOINER_CLASS}{WHITESPACE_CLASS}"
_SHOWN_RE = re.compile(f"[^{NOT_SHOWN_CLASS}]")

# What starts an RFC 2047 encoded word. A mail program decodes `=?utf-8?q?...?=` in a header
# into any text, line breaks included, and Python's e-mail package before its fix for
# CVE-2024-6923 writes such a decoded line break into the header it folds: a name that holds one
# could add headers and a body to a mail. Names refuse it (`encoded_word_problem`), and mail
# headers neutralise it whatever its source (buildbay/mail/headers.py).
ENCODED_WORD_START = "=?"

# A name as sent (for the OpenAPI document): whitespace around it (trimmed away), and within
# it no control character, no bidirectional control, no `=?`, and at least one character that
# shows.
_NAME_ALLOWED = f"[^{CONTROL_CLASS}{BIDI_CLASS}]"
NO_ENCODED_WORD_LOOKAHEAD = r"(?![\s\S]*=\?)"
NAME_PATTERN = (
    f"^{NO_ENCODED_WORD_LOOKAHEAD}[{WHITESPACE_CLASS}]*{_NAME_ALLOWED}*"
    f"[^{NOT_SHOWN_CLASS}]"
    f"{_NAME_ALLOWED}*[{WHITESPACE_CLASS}]*$"
)

NAME_MAX = 100  # a project's, an application's, an API token's, a person's, an app's own
VERSION_MAX = 100  # an APK's versionName, an .ipa's CFBundleShortVersionString and CFBundleVersion
BUNDLE_ID_MAX = 255
BUNDLE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_BUNDLE_ID_RE = re.compile(BUNDLE_ID_PATTERN)
VERSION_CODE_MAX = 2**31 - 1  # Android's versionCode and SDK levels are 32-bit integers


def _codepoint(char: str) -> str:
    return f"U+{ord(char):04X}"


def shown_text_problem(value: str, max_length: int | None = None) -> str | None:
    """Why `value` cannot be a name or a version shown on a page (and in a tester's install
    prompt), or None: at most `max_length` characters, no control character, no bidirectional
    control, and at least one character that shows."""
    if max_length is not None and len(value) > max_length:
        return f"is longer than {max_length} characters"
    if found := _CONTROL_RE.search(value):
        return f"contains a control character ({_codepoint(found.group())})"
    if found := _BIDI_RE.search(value):
        return f"contains a bidirectional control character ({_codepoint(found.group())})"
    if not _SHOWN_RE.search(value):
        return "has no visible character"
    return None


def encoded_word_problem(value: str) -> str | None:
    """Why a name that may reach a mail's header cannot be taken, or None: it holds `=?`, the
    start of an RFC 2047 encoded word, which mail programs decode into other text."""
    if ENCODED_WORD_START in value:
        return "contains '=?', which mail programs read as encoded text (RFC 2047)"
    return None


_NO_BIDI_CONTROLS = str.maketrans(dict.fromkeys(map(ord, BIDI_CONTROLS)))


def without_bidi_controls(value: str) -> str:
    """`value` as a page may show it: without bidirectional controls, which the rules above keep
    out of new text; this is for text stored before them."""
    return value.translate(_NO_BIDI_CONTROLS)


def file_name_problem(value: str) -> str | None:
    """A name shown, and offered as the download's file name; never a path. Stricter than a
    name: no invisible character either (a right-to-left mark or a byte order mark hides in a
    file name as well as an override does)."""
    if "/" in value or "\\" in value:
        return "contains / or \\"
    if found := _INVISIBLE_RE.search(value):
        return f"contains an invisible character ({_codepoint(found.group())})"
    return shown_text_problem(value, 255)


def bundle_id_problem(value: str) -> str | None:
    """An app's identity: an .ipa's bundle id, an .apk's or .aab's package name."""
    if len(value) > BUNDLE_ID_MAX:
        return f"is longer than {BUNDLE_ID_MAX} characters"
    if not _BUNDLE_ID_RE.match(value):
        return (
            "is not a bundle id: letters, digits, '.', '_' and '-', starting with a letter "
            "or a digit"
        )
    return None


def version_code_problem(value: int) -> str | None:
    if not 0 <= value <= VERSION_CODE_MAX:
        return f"is not a whole number from 0 to {VERSION_CODE_MAX}"
    return None


# -- e-mail addresses ---------------------------------------------------------------------------

# Scripts whose letters pass for Latin ones: Cyrillic a (U+0430) for `a`, Greek omicron for `o`.
_LOOK_ALIKE_SCRIPTS = frozenset({"CYRILLIC", "GREEK"})


def normal_email_text(value: str) -> str:
    """An address as compared and stored: compatibility-normalised (NFKC: a fullwidth a, U+FF41,
    is an `a`), then lower-cased."""
    return unicodedata.normalize("NFKC", value).lower()


def _scripts(text: str) -> set[str]:
    # A letter's script is the first word of its Unicode name (LATIN, CYRILLIC, GREEK, ...):
    # near enough to the Script property for the scripts that matter here.
    return {unicodedata.name(char, "?").split(" ", 1)[0] for char in text if char.isalpha()}


def email_look_alike_problem(address: str) -> str | None:
    """Why an address can pass for another, or None: a part of it (the name before `@`, a label
    of the domain) that mixes Latin letters with Cyrillic or Greek ones. A part entirely in one
    script, an IDN domain in Cyrillic say, is fine."""
    local, _, domain = address.rpartition("@")
    for part in [local, *domain.split(".")]:
        scripts = _scripts(part)
        if "LATIN" in scripts and scripts & _LOOK_ALIKE_SCRIPTS:
            others = " and ".join(sorted(s.title() for s in scripts & _LOOK_ALIKE_SCRIPTS))
            return (
                f"mixes Latin letters with {others} look-alikes in '{part}'; write it in one script"
            )
    return None


def email_mailable_problem(address: str) -> str | None:
    """Why an address cannot be mailed from here, or None. Its domain may be internationalised
    (mail goes to its ASCII form, IDNA's `xn--` labels); the part before `@` must be ASCII,
    since that needs SMTPUTF8 of every server on the way, which Buildbay does not count on
    (docs/api.md); and it must not hold `=?`, which mail programs decode (RFC 2047)."""
    local = address.rpartition("@")[0]
    if not local.isascii():
        return (
            "has characters outside ASCII before the @, which not every mail server takes; "
            "use an ASCII address"
        )
    if ENCODED_WORD_START in local:
        return "contains '=?', which mail programs read as encoded text (RFC 2047)"
    return None
