"""Where a build came from: the commit, branch, tag, repository, CI run and pull request that
verify was told of (CI clients fill them from their environment), and the links to the
repository's host that the console, mails and webhooks show of them.

Every value is checked as git and the web would take it, so that what is shown is what it
says: a commit is hex, a branch or tag a valid git ref name, every address http(s) without a
user name or password in it. Links are made only for a repository at an http(s) address on a
host whose pages are known (GitHub, GitLab, Bitbucket); nothing else becomes a link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

COMMIT_PATTERN = r"^[0-9a-fA-F]{7,64}$"
COMMIT_PREFIX_MIN = 7  # `?commit=` takes at least this many hex digits (git's short hash)
REF_MAX = 255
REPOSITORY_MAX = 500
URL_MAX = 2048
PULL_REQUEST_MAX = 2**31 - 1
SHORT_COMMIT = 7

# Each rule is a regular expression that the OpenAPI document states as it is (JSON Schema's
# `pattern` and `not`), so that what the document allows the API takes, and only that.
#
# `owner/name`, or a GitLab group path (`group/subgroup/name`): the characters the hosts allow
# in names, each part starting with a letter, digit or `_`; never `..`.
OWNER_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*){1,9}$"
_OWNER_NAME = re.compile(OWNER_NAME_PATTERN)
# What git's check-ref-format refuses in a name (beside the rules on `.`, `/` and `@{`).
REF_CHARACTERS_PATTERN = r"^[^\x00-\x20\x7f~^:?*\[\\]+$"
_REF_REFUSED = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
# The rest of git's rules, each a pattern a name must not match.
REF_NOT_PATTERNS = (
    r"^@$", r"@\{", r"\.\.", r"^/", r"/$", r"//", r"\.$", r"(^|/)\.", r"\.lock(/|$)", r"^-",
)  # fmt: skip
# An http(s) address: a host of letters, digits, dots and hyphens (no user name or password:
# no `@` before the path), an optional port (0-65535), then anything but spaces and control
# characters (those of Unicode too).
_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_NOT_IN_URL = r"\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
WEB_URL_PATTERN = rf"^[hH][tT][tT][pP][sS]?://[A-Za-z0-9.-]+(:{_PORT})?([/?#][^{_NOT_IN_URL}]*)?$"
_WEB_URL = re.compile(WEB_URL_PATTERN)
_UNSHOWN = re.compile(f"[{_NOT_IN_URL}]")


def ref_name_problem(value: str) -> str | None:
    """Why `value` is not a branch or tag name git takes (`git check-ref-format --branch`),
    or None."""
    if not value:
        return "cannot be empty"
    if len(value) > REF_MAX:
        return f"is longer than {REF_MAX} characters"
    if _REF_REFUSED.search(value):
        return "cannot hold spaces, control characters or any of ~ ^ : ? * [ \\"
    if value == "@" or "@{" in value:
        return "cannot be @ or hold @{"
    if ".." in value:
        return "cannot hold .."
    if value.startswith("/") or value.endswith("/") or "//" in value:
        return "cannot start or end with / or hold //"
    if value.endswith("."):
        return "cannot end with ."
    for part in value.split("/"):
        if part.startswith("."):
            return "cannot have a part that starts with ."
        if part.endswith(".lock"):
            return "cannot have a part that ends with .lock"
    if value.startswith("-"):
        return "cannot start with -"
    return None


def web_url_problem(value: str) -> str | None:
    """Why `value` is not an http(s) address to show and link to (WEB_URL_PATTERN), or None."""
    if len(value) > URL_MAX:
        return f"is longer than {URL_MAX} characters"
    if _WEB_URL.fullmatch(value):  # (fullmatch: a `$` of Python also matches before a "\n")
        return None
    if _UNSHOWN.search(value):
        return "cannot hold spaces or control characters"
    authority = value.split("://", 1)[-1].split("/", 1)[0]
    if "://" in value and "@" in authority:
        return "must not carry a user name or password"
    return "must be an http or https address (https://host/...)"


def repository_problem(value: str) -> str | None:
    """Why `value` is neither `owner/name` nor an http(s) address of a repository, or None."""
    if len(value) > REPOSITORY_MAX:
        return f"is longer than {REPOSITORY_MAX} characters"
    if "://" in value:
        return web_url_problem(value)
    if _OWNER_NAME.fullmatch(value) and ".." not in value:  # (the document's `not`)
        return None
    return "must be owner/name or an http(s) address of the repository"


@dataclass(frozen=True, slots=True)
class BuildSource:
    """What verify was told of the build's origin (each None where it was not)."""

    commit: str | None = None  # lower-case hex, 7 to 64 digits
    branch: str | None = None
    tag: str | None = None
    repository: str | None = None  # `owner/name` or an http(s) address
    ci_run_url: str | None = None
    pull_request: int | str | None = None  # a number, or the pull request's http(s) address

    @property
    def is_empty(self) -> bool:
        return self == BuildSource()

    @property
    def short_commit(self) -> str | None:
        return self.commit[:SHORT_COMMIT] if self.commit else None

    @classmethod
    def of_columns(
        cls,
        commit: str | None,
        branch: str | None,
        tag: str | None,
        repository: str | None,
        ci_run_url: str | None,
        pull_request: str | None,
    ) -> BuildSource:
        """From the build's columns (a pull request's number is stored as its digits)."""
        number: int | str | None = pull_request
        if pull_request is not None and pull_request.isdigit():
            number = int(pull_request)
        return cls(commit, branch, tag, repository, ci_run_url, number)

    def columns(self) -> dict[str, str | None]:
        """The build's columns for it."""
        pr = self.pull_request
        return {
            "source_commit": self.commit,
            "source_branch": self.branch,
            "source_tag": self.tag,
            "source_repository": self.repository,
            "source_ci_run_url": self.ci_run_url,
            "source_pull_request": str(pr) if pr is not None else None,
        }

    def to_json(self) -> dict[str, object]:
        """For the payload of a verify finished by a job."""
        return {k: v for k, v in self.columns().items() if v is not None}

    @classmethod
    def of_json(cls, value: object) -> BuildSource | None:
        if not isinstance(value, dict):
            return None
        return cls.of_columns(*(value.get(k) for k in cls().columns()))


@dataclass(frozen=True, slots=True)
class SourceLinks:
    """Pages of the repository's host for a build's source (None where none can be made)."""

    repository: str | None = None
    commit: str | None = None
    branch: str | None = None
    tag: str | None = None
    pull_request: str | None = None


# Each host's page paths, after the repository's address.
_PATHS = {
    "github": {"commit": "/commit/", "tree": "/tree/", "tag": "/releases/tag/", "pr": "/pull/"},
    "gitlab": {
        "commit": "/-/commit/",
        "tree": "/-/tree/",
        "tag": "/-/tags/",
        "pr": "/-/merge_requests/",
    },
    "bitbucket": {
        "commit": "/commits/",
        "tree": "/branch/",
        "tag": "/src/",
        "pr": "/pull-requests/",
    },
}


def host_kind(host: str) -> str | None:
    """`github`, `gitlab` or `bitbucket` for their hosts (github.com, gitlab.com,
    bitbucket.org, and a self-hosted instance named so: `gitlab.example.com`,
    `github.example.com`), else None."""
    host = host.lower().rstrip(".")
    if host in ("github.com", "www.github.com"):
        return "github"
    if host in ("gitlab.com", "www.gitlab.com"):
        return "gitlab"
    if host in ("bitbucket.org", "www.bitbucket.org"):
        return "bitbucket"
    first = host.split(".", 1)[0]
    if first in ("github", "gitlab") and "." in host:
        return first
    return None


def web_link(value: str | None) -> str | None:
    """`value` as an href: only an http(s) address without credentials, else None (a page
    never links to `javascript:` or any other scheme, whatever was stored)."""
    if value is None or web_url_problem(value) is not None:
        return None
    return value


def source_links(source: BuildSource) -> SourceLinks:
    """The host's pages of `source`'s repository, commit, branch, tag and pull request. A pull
    request given as an address is its own link; the rest need the repository's http(s)
    address on a known host."""
    given_pr = source.pull_request if isinstance(source.pull_request, str) else None
    pr_link = web_link(given_pr)
    repository = web_link(source.repository)
    if repository is None:
        return SourceLinks(pull_request=pr_link)
    parts = urlsplit(repository)
    kind = host_kind(parts.hostname or "")
    if kind is None:
        return SourceLinks(repository=repository, pull_request=pr_link)
    base = f"{parts.scheme.lower()}://{parts.netloc}{parts.path.rstrip('/')}".removesuffix(".git")
    paths = _PATHS[kind]

    def ref(value: str | None, path: str) -> str | None:
        # `/` stays: the hosts take a branch `feature/login` as a path.
        return base + path + quote(value, safe="/") if value else None

    if isinstance(source.pull_request, int):
        pr_link = f"{base}{paths['pr']}{source.pull_request}"
    return SourceLinks(
        repository=base,
        commit=ref(source.commit, paths["commit"]),
        branch=ref(source.branch, paths["tree"]),
        tag=ref(source.tag, paths["tag"]),
        pull_request=pr_link,
    )


def source_sentence(source: BuildSource) -> str | None:
    """The source in words, for a mail or a chat line: `Built from main at 3f0a9c1 (tag
    v1.4.2, pull request #42).` None when nothing is known."""
    if source.branch is None and source.commit is None and source.tag is None:
        return None
    text = "Built"
    if source.branch:
        text += f" from {source.branch}"
    if source.commit:
        text += f" at {source.short_commit}"
    extra = []
    if source.tag:
        extra.append(f"tag {source.tag}")
    if isinstance(source.pull_request, int):
        extra.append(f"pull request #{source.pull_request}")
    if source.branch is None and source.commit is None and extra:
        return f"Built from {', '.join(extra)}."
    return text + (f" ({', '.join(extra)})" if extra else "") + "."
