"""A trusted publisher's subject pattern: which `sub` claims of its issuer's ID tokens it trusts.

The glob, exactly:
- any character but `*` stands for itself (case matters: `sub` is compared as sent);
- `*` stands for one or more characters, none of them `:` or `/` (one segment: a branch name
  without slashes, a repository name, an environment);
- `**`, only at the very end, stands for one or more characters of any kind (the rest of the
  subject: `repo:acme/shop:**` trusts every branch, tag, environment and pull request of
  acme/shop);
- a pattern with a wildcard writes its first two `:`-separated parts literally (the claim's
  kind and the repository: `repo:acme/shop:`), so that no pattern can trust every repository
  of an issuer, or every repository whose name begins the same way. A pattern without a
  wildcard is compared whole.

GitHub Actions' subjects look like `repo:acme/shop:ref:refs/heads/main` or
`repo:acme/shop:environment:production`; GitLab's like
`project_path:acme/shop:ref_type:branch:ref:main`.
"""

from __future__ import annotations

import re
from functools import lru_cache

MAX_PATTERN = 500
_WILDCARD_FREE_PARTS = 2


class PatternRefused(ValueError):
    """Why a subject pattern cannot be saved: a sentence."""


def check_pattern(pattern: str) -> str:
    """`pattern` if it is a subject pattern as the module says, else PatternRefused."""
    if not pattern or not pattern.strip():
        raise PatternRefused("subjectPattern must not be empty")
    if len(pattern) > MAX_PATTERN:
        raise PatternRefused(f"subjectPattern has at most {MAX_PATTERN} characters")
    if any(c.isspace() or not c.isprintable() for c in pattern):
        raise PatternRefused("subjectPattern cannot hold spaces or control characters")
    if "***" in pattern:
        raise PatternRefused("subjectPattern: `*` is one segment, `**` (at the end) the rest")
    if "**" in pattern[:-2] or (pattern.endswith("**") and pattern.count("**") > 1):
        raise PatternRefused("subjectPattern: `**` may only end the pattern")
    first = pattern.find("*")
    if first >= 0 and pattern[:first].count(":") < _WILDCARD_FREE_PARTS:
        raise PatternRefused(
            "subjectPattern: the parts before the second `:` must be written out (e.g. "
            "`repo:acme/shop:`) before any `*`, so that it cannot trust other repositories"
        )
    return pattern


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    rest = pattern.endswith("**")
    body = pattern[:-2] if rest else pattern
    regex = "[^:/]+".join(re.escape(part) for part in body.split("*"))
    return re.compile(regex + (".+" if rest else ""), re.DOTALL)


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether `subject` (an ID token's `sub`) is one the pattern trusts."""
    return _compiled(pattern).fullmatch(subject) is not None
