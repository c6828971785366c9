"""How pages and notices say things to people: a role or a platform in words ("Developer",
"iOS", never the API's `developer` or `ios`) and a count with its noun ("1 build", "3 builds").
The console's templates use these as filters (buildbay/templates/__init__.py); the console's
notices call them. Nothing here imports the web or the database."""

from __future__ import annotations

from enum import Enum

ROLE_WORDS = {"owner": "Owner", "admin": "Admin", "developer": "Developer", "tester": "Tester"}
PLATFORM_WORDS = {
    "android": "Android",
    "ios": "iOS",
    "ipados": "iPadOS",  # an enrolled device's (devices/enums.py)
    "macos": "macOS",
    "windows": "Windows",
    "linux": "Linux",
    "other": "Other",
}


def _value(value: object) -> str:
    return str(value.value) if isinstance(value, Enum) else str(value)


def role_word(role: object) -> str:
    """A project role as a person reads it: "Developer"."""
    value = _value(role)
    return ROLE_WORDS.get(value, value)


def role_in_sentence(role: object) -> str:
    """A role inside a sentence, with its article: "as a tester", "as an admin"."""
    word = role_word(role).lower()
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def platform_word(platform: object) -> str:
    """An application's platform as its makers write it: "iOS", "Android"."""
    value = _value(platform)
    return PLATFORM_WORDS.get(value, value)


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """A count with its noun in the number it takes: "1 tester", "0 testers", "2 people"."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
