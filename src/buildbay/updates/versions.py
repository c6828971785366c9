"""App versions compared as versions: `1.10` after `1.9`, a pre-release before its release.

PEP 440 (`packaging.version`, the one well-kept parser of this kind) reads the usual spellings of
app versions, semver's among them: `1.2.3`, `v1.2`, `1.2.3-beta.1` (beta 1), `2.0.0-rc.2`,
`1.0-alpha` (alpha 0). A name it refuses but that starts with numbers (`1.2.3-SNAPSHOT`,
`2.0-hotfix`, `1.0.0-alpha.beta`) is read as semver reads a suffix: a pre-release of those numbers,
before their release (and before their alphas). A semver build suffix (`+45`) does not order.
A name that starts with no number (`latest`, `beta`) is not a version: it is not compared.

Where PEP 440 and semver differ, PEP 440 wins: `1.0.0-1` is a post-release (after `1.0.0`).
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

MAX_LENGTH = 100
_NUMBERS = re.compile(r"[vV]?(\d{1,18}(?:\.\d{1,18}){0,9})(.*)", re.ASCII | re.DOTALL)


def app_version(text: str | None) -> Version | None:
    """`text` as a comparable version; None if it is not one."""
    if text is None:
        return None
    text = text.strip()
    if not text or len(text) > MAX_LENGTH:
        return None
    public = text.split("+", 1)[0]  # semver build metadata: not part of the order
    try:
        return Version(public)
    except InvalidVersion:
        pass
    match = _NUMBERS.fullmatch(public)
    if match is None:
        return None
    numbers, rest = match.groups()
    return Version(f"{numbers}.dev0" if rest else numbers)


def os_version(text: str | None) -> Version | None:
    """An OS version (`17.4`, `34`): only its leading numbers count."""
    if text is None:
        return None
    match = _NUMBERS.match(text.strip())
    return Version(match.group(1)) if match else None
