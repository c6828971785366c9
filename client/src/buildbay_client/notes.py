"""Release notes from git (`buildbay upload --notes-from-git`): the subjects of the commits
since the application's last ready build's commit, merges left out, at most MAX_LINES of
them, under an optional header; where that range cannot be known, the last commit's message,
and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from buildbay_client.models import MAX_NOTES_LENGTH
from buildbay_client.source import git

MAX_LINES = 50
TRUNCATED = "\n… (truncated)"
TEMPLATE_FIELDS = ("branch", "commit", "tag", "count", "since")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


class TemplateError(ValueError):
    """A `--notes-template` that names a field there is not, or has a lone brace."""


def render_template(template: str, values: dict[str, str]) -> str:
    """`template` with `{branch}`, `{commit}`, `{tag}`, `{count}` and `{since}` replaced
    (`{{` and `}}` for braces). Nothing else is evaluated: no attribute, index or format
    spec, unlike str.format."""

    def field(match: re.Match[str]) -> str:
        text = match.group(0)
        if text in ("{{", "}}"):
            return text[0]
        name = match.group(1)
        if name not in TEMPLATE_FIELDS:
            allowed = ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
            raise TemplateError(f"--notes-template has {{{name}}}; it takes {allowed}")
        return values.get(name, "")

    rendered = _PLACEHOLDER.sub(field, template)
    if "{" in _PLACEHOLDER.sub("", template) or "}" in _PLACEHOLDER.sub("", template):
        raise TemplateError("--notes-template has a lone { or }: write {{ or }} for a brace")
    return rendered


@dataclass(frozen=True)
class GitNotes:
    text: str | None  # None: not even the last commit's message could be read
    said: list[str]  # what to tell on stderr


def _present(commit: str, cwd: Path | None) -> bool:
    return git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd) is not None


def notes_from_git(
    since: str | None,
    why_no_since: str | None,
    head: str | None,
    template: str | None,
    values: dict[str, str],
    cwd: Path | None = None,
) -> GitNotes:
    """The notes for the commits after `since` up to `head` (the commit uploaded, if this
    clone has it; else HEAD). `why_no_since`: why there is no `since`, to say so."""
    said: list[str] = []
    end = head if head and _present(head, cwd) else "HEAD"
    lines: list[str] | None = None
    count = 0
    if since is None:
        said.append(f"notes: {why_no_since}; they are the last commit's message")
    elif not _present(since, cwd):
        said.append(
            f"notes: commit {since[:7]} (the last ready build's) is not in this clone's "
            "history (a shallow clone? fetch the whole history, e.g. fetch-depth: 0); "
            "they are the last commit's message"
        )
    else:
        listed = git(["log", "--no-merges", "--format=%s", f"{since}..{end}"], cwd)
        subjects = [s for s in (listed or "").splitlines() if s.strip()]
        count = len(subjects)
        if listed is None:
            said.append("notes: git could not list the commits; they are the last commit's message")
        elif not subjects:
            said.append(
                f"notes: no commit (merges aside) since {since[:7]}, the last ready build's; "
                "they are the last commit's message"
            )
        else:
            lines = [f"- {s}" for s in subjects]
            if len(lines) > MAX_LINES:
                lines = [*lines[: MAX_LINES - 1], f"- … and {count - MAX_LINES + 1} more commits"]
            said.append(f"notes: {count} commits since {since[:7]}, the last ready build's")
    if lines is None:
        message = git(["log", "-1", "--format=%B", end], cwd)
        if not message:
            said.append("notes: git gave no commit message either; no notes are sent")
            return GitNotes(None, said)
        body = message.strip()
    else:
        body = "\n".join(lines)
    if template:
        header = render_template(template, {**values, "count": str(count)}).strip()
        body = f"{header}\n\n{body}" if header else body
    if len(body) > MAX_NOTES_LENGTH:
        body = body[: MAX_NOTES_LENGTH - len(TRUNCATED)].rstrip() + TRUNCATED
        said.append(f"notes: cut to the server's {MAX_NOTES_LENGTH:,} characters")
    return GitNotes(body, said)
