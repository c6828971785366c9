"""What `buildbay upload` hands a CI job besides its own output: the step outputs of a GitHub
Action (`$GITHUB_OUTPUT`), its job summary (`$GITHUB_STEP_SUMMARY`), a GitLab dotenv report,
and the install link's QR code as text for the job's log.

The API token is never among them: only the build's own fields (its id, version, addresses)
are written. An install link's address carries the link's own token, which is what a tester
opens; it is shown on purpose.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from html import escape
from pathlib import Path

# Step outputs, as action.yml declares them.
OUTPUTS = ("build-id", "install-url", "build-url", "version")


def ci_name(environ: Mapping[str, str] | None = None) -> str | None:
    """`github` in a GitHub Actions job, `gitlab` in a GitLab CI job, else None (both set their
    variable to `true`)."""
    env = os.environ if environ is None else environ
    if env.get("GITHUB_ACTIONS") == "true":
        return "github"
    if env.get("GITLAB_CI") == "true":
        return "gitlab"
    return None


def step_outputs(
    build_id: str, install_url: str | None, build_url: str | None, version: str | None
) -> dict[str, str]:
    """The outputs by name; an empty string for one the build has not (no install link asked)."""
    return {
        "build-id": build_id,
        "install-url": install_url or "",
        "build-url": build_url or "",
        "version": version or "",
    }


def github_output_text(outputs: Mapping[str, str]) -> str:
    """Outputs in the multiline syntax of GitHub's environment files: `name<<DELIMITER`, the
    value, `DELIMITER`, whatever the value holds (a delimiter is random, and drawn again in the
    unlikely case a value contains it)."""
    lines = []
    for name, value in outputs.items():
        delimiter = f"ghadelimiter_{secrets.token_hex(16)}"
        while delimiter in value:  # pragma: no cover - 128 random bits
            delimiter = f"ghadelimiter_{secrets.token_hex(16)}"
        lines += [f"{name}<<{delimiter}", value, delimiter]
    return "\n".join(lines) + "\n"


def dotenv_text(outputs: Mapping[str, str]) -> str:
    """Outputs as a GitLab dotenv report: `BUILDBAY_BUILD_ID=...`, one a line (a dotenv report
    takes no multiline value; these are ids, addresses and a version, never a line break)."""
    lines = []
    for name, value in outputs.items():
        if "\n" in value or "\r" in value:  # pragma: no cover - the server's own fields
            raise ValueError(f"{name} holds a line break, which a dotenv report cannot")
        lines.append(f"BUILDBAY_{name.upper().replace('-', '_')}={value}")
    return "\n".join(lines) + "\n"


def append(path: str | Path, text: str) -> None:
    """Appended, as the runner reads these files after the step (other steps' lines stay)."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(text)


def qr_text(data: str, border: int = 2) -> str:
    """A QR code of `data` in half-block characters, two rows of modules a line: light modules
    drawn as blocks, for a log's light text on a dark background (as `qrencode -t UTF8`),
    with a quiet zone around it."""
    import segno

    rows = [list(row) for row in segno.make(data, error="m").matrix_iter(border=border)]
    if len(rows) % 2:
        rows.append([0] * len(rows[0]))
    chars = {(False, False): "█", (False, True): "▀", (True, False): "▄", (True, True): " "}
    lines = []
    for top, bottom in zip(rows[::2], rows[1::2], strict=True):
        lines.append("".join(chars[bool(a), bool(b)] for a, b in zip(top, bottom, strict=True)))
    return "\n".join(lines)


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+!|~<>@-])")


def markdown_text(text: str) -> str:
    """`text` as GitHub's Markdown shows it as written: HTML escaped, then Markdown's
    characters (links, emphasis, code, mentions) backslash-escaped. An app's name comes from
    its build file: it must not write a link or an image of its own into the job summary."""
    return _MARKDOWN.sub(r"\\\1", escape(text, quote=False))


def summary_markdown(
    app_name: str, version: str | None, build_id: str, install_url: str | None,
    build_url: str | None, reused: bool,
) -> str:  # fmt: skip
    """The job summary: a heading, the install link as a link and as a QR code image, and the
    build's page. The image is the server's `{install link}/qr.png`: GitHub's summaries drop
    `data:` URIs and inline SVG, and show an image by its https address (through GitHub's
    image proxy, so a server it cannot reach shows the link alone)."""
    title = markdown_text(app_name) + (f" {markdown_text(version)}" if version else "")
    lines = [f"### {title} uploaded to Buildbay", ""]
    if reused:
        lines += [f"Already uploaded as build `{build_id}`: nothing sent again.", ""]
    else:
        lines += [f"Build `{build_id}` is ready.", ""]
    if install_url:
        link = escape(install_url, quote=True)
        lines += [
            f'<a href="{link}"><img src="{link}/qr.png" width="164" height="164" '
            'alt="QR code of the install link"></a>',
            "",
            f"**Install:** {escape(install_url)}",
            "",
        ]
    else:
        lines += ["No install link was asked (`install-link-days`).", ""]
    if build_url:
        lines += [f"**Build page:** {escape(build_url)}", ""]
    return "\n".join(lines) + "\n"
