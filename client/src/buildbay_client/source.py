"""Where a build came from, found by the client itself: the CI's environment (GitHub Actions,
GitLab CI, Bitrise, CircleCI, Jenkins, Azure Pipelines, Buildkite) first, then the git
checkout (`git rev-parse`), each field overridable (docs/ci.md lists the variables read).

Each value is checked here as the server checks it (so an upload is never refused at its last
step for a CI variable's odd value: a value that breaks the rules is left out, and said), and a
remote's address never leaves with a user name, password or token in it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

GIT_TIMEOUT = 10  # seconds for one git command
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")
_REF_REFUSED = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_OWNER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*){1,9}$")
# `git@github.com:acme/app.git`: git's scp-like address (user@host:path)
# (a one-letter "host" is a Windows drive, C:\repo, as git reads it too)
_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?(?P<host>[A-Za-z0-9.-]{2,}):(?P<path>(?!/)[^\s\\]+)$")
REF_MAX = 255
URL_MAX = 2048
REPOSITORY_MAX = 500
PULL_REQUEST_MAX = 2**31 - 1


@dataclass(frozen=True)
class BuildSource:
    """Verify's `source`: each field None where it is not known."""

    commit: str | None = None
    branch: str | None = None
    tag: str | None = None
    repository: str | None = None
    ci_run_url: str | None = None
    pull_request: int | str | None = None

    def to_json(self) -> dict[str, Any] | None:
        """Verify's `source` object (None when nothing is known)."""
        names = {"ci_run_url": "ciRunUrl", "pull_request": "pullRequest"}
        body = {
            names.get(f.name, f.name): getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None
        }
        return body or None

    def over(self, other: BuildSource) -> BuildSource:
        """This source's fields, and `other`'s where this one has none."""
        return BuildSource(
            **{
                f.name: getattr(self, f.name)
                if getattr(self, f.name) is not None
                else getattr(other, f.name)
                for f in fields(self)
            }
        )


# -- the rules (as the server's builds/source.py) ------------------------------------------------


def ref_name_problem(value: str) -> str | None:
    if not value:
        return "cannot be empty"
    if len(value) > REF_MAX:
        return f"is longer than {REF_MAX} characters"
    if _REF_REFUSED.search(value):
        return "cannot hold spaces, control characters or any of ~ ^ : ? * [ \\"
    if value == "@" or "@{" in value or ".." in value or value.startswith("-"):
        return "is not a name git takes for a branch or tag"
    if value.startswith("/") or value.endswith("/") or "//" in value or value.endswith("."):
        return "is not a name git takes for a branch or tag"
    for part in value.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "is not a name git takes for a branch or tag"
    return None


# An http(s) address as the server takes it (its builds/source.py WEB_URL_PATTERN): a host of
# letters, digits, dots and hyphens (no user name or password), a port, then anything but
# spaces and control characters.
_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_NOT_IN_URL = r"\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_WEB_URL = re.compile(
    rf"^[hH][tT][tT][pP][sS]?://[A-Za-z0-9.-]+(:{_PORT})?([/?#][^{_NOT_IN_URL}]*)?$"
)
_UNSHOWN = re.compile(f"[{_NOT_IN_URL}]")


def web_url_problem(value: str) -> str | None:
    if len(value) > URL_MAX:
        return f"is longer than {URL_MAX} characters"
    if _WEB_URL.fullmatch(value):
        return None
    if _UNSHOWN.search(value):
        return "cannot hold spaces or control characters"
    authority = value.split("://", 1)[-1].split("/", 1)[0]
    if "://" in value and "@" in authority:
        return "must not carry a user name or password"
    return "must be an http or https address (https://host/...)"


def problems(source: BuildSource) -> dict[str, str]:
    """What the server would refuse in `source`, by field (its JSON name)."""
    found: dict[str, str] = {}
    if source.commit is not None and not _COMMIT.fullmatch(source.commit):
        found["commit"] = "must be 7 to 64 hex digits"
    for name in ("branch", "tag"):
        value = getattr(source, name)
        if value is not None and (problem := ref_name_problem(value)):
            found[name] = problem
    repo = source.repository
    if repo is not None:
        if len(repo) > REPOSITORY_MAX:
            found["repository"] = f"is longer than {REPOSITORY_MAX} characters"
        elif "://" in repo:
            if problem := web_url_problem(repo):
                found["repository"] = problem
        elif not _OWNER_NAME.fullmatch(repo) or ".." in repo:
            found["repository"] = "must be owner/name or an http(s) address"
    if source.ci_run_url is not None and (problem := web_url_problem(source.ci_run_url)):
        found["ciRunUrl"] = problem
    pr = source.pull_request
    if isinstance(pr, int):
        if not 1 <= pr <= PULL_REQUEST_MAX:
            found["pullRequest"] = f"must be a number from 1 to {PULL_REQUEST_MAX}"
    elif pr is not None and (problem := web_url_problem(pr)):
        found["pullRequest"] = f"must be a number or an http(s) address ({problem})"
    return found


_JSON_NAME = {"ciRunUrl": "ci_run_url", "pullRequest": "pull_request"}


_USER_INFO = re.compile(r"(?<=://)[^/?#\s]*@")


def shown_value(value: object) -> str:
    """A value as a CI log may show it: an address's user name, password or token (before an
    `@` of its authority) replaced by `***@`: a CI's variable may carry one, and the log must
    never (a masked one included)."""
    return repr(_USER_INFO.sub("***@", value) if isinstance(value, str) else value)


def without_problems(source: BuildSource, say: Callable[[str], None]) -> BuildSource:
    """`source` without the fields the server would refuse, each left out said by `say`."""
    found = problems(source)
    for name, problem in found.items():
        value = getattr(source, _JSON_NAME.get(name, name))
        say(f"source: {name} {shown_value(value)} {problem}; left out")
    return replace(source, **{_JSON_NAME.get(name, name): None for name in found})


# -- remotes -------------------------------------------------------------------------------------


def web_address(remote: str | None) -> str | None:
    """A git remote's address as a web address to show: https for ssh, scp-like and git://
    remotes (the hosts serve their pages there), without a user name, password or token, a
    query or fragment, a port of ssh, or `.git`. None for a local path or anything unknown."""
    if not remote:
        return None
    remote = remote.strip()
    if (scp := _SCP_LIKE.match(remote)) and "://" not in remote:
        host, path = scp["host"], scp["path"]
        scheme, port = "https", None
    else:
        try:
            parts = urlsplit(remote)
            host, path, port = parts.hostname or "", parts.path, parts.port
        except ValueError:
            return None
        scheme = parts.scheme.lower()
        if scheme in ("ssh", "git", "git+ssh", "ssh+git"):
            scheme, port = "https", None  # ssh's port is not the web's
        elif scheme not in ("http", "https"):
            return None
    path = path.strip("/").removesuffix(".git")
    if not host or not path:
        return None
    netloc = host if port is None else f"{host}:{port}"
    address = urlunsplit((scheme, netloc, "/" + path, "", ""))
    return address if web_url_problem(address) is None else None


# -- CI environments -----------------------------------------------------------------------------


def _get(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _number(value: str | None) -> int | None:
    """A positive number written in ASCII digits (`isdigit` alone takes `²`, which int()
    refuses: a CI variable must not end the upload with a traceback)."""
    return int(value) if value and value.isascii() and value.isdigit() and int(value) > 0 else None


def _strip_ref(value: str | None, prefix: str) -> str | None:
    if value and value.startswith(prefix):
        return value[len(prefix) :] or None
    return None


def _github(env: Mapping[str, str]) -> BuildSource:
    server = _get(env, "GITHUB_SERVER_URL") or "https://github.com"
    repo = _get(env, "GITHUB_REPOSITORY")
    base = f"{server.rstrip('/')}/{repo}" if repo else None
    run = _get(env, "GITHUB_RUN_ID")
    ref_type, ref_name = _get(env, "GITHUB_REF_TYPE"), _get(env, "GITHUB_REF_NAME")
    ref = _get(env, "GITHUB_REF") or ""
    commit, pull = _get(env, "GITHUB_SHA"), None
    if head := _get(env, "GITHUB_HEAD_REF"):  # a pull request's run: its branch and head
        pull = _number(ref.split("/")[2]) if ref.startswith("refs/pull/") else None
        commit = _event_head(env) or commit
    branch = head or (ref_name if ref_type == "branch" else _strip_ref(ref, "refs/heads/"))
    tag = ref_name if ref_type == "tag" else _strip_ref(ref, "refs/tags/")
    return BuildSource(
        commit, branch, tag, base,
        f"{base}/actions/runs/{run}" if base and run else None, pull,
    )  # fmt: skip


def _event_head(env: Mapping[str, str]) -> str | None:
    """A pull request's head commit, from the event's payload (GITHUB_SHA is the merge
    commit GitHub made for the run)."""
    path = _get(env, "GITHUB_EVENT_PATH")
    if not path:
        return None
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
        sha = event["pull_request"]["head"]["sha"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sha if isinstance(sha, str) else None


def _gitlab(env: Mapping[str, str]) -> BuildSource:
    tag = _get(env, "CI_COMMIT_TAG")
    branch = _get(env, "CI_COMMIT_BRANCH", "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME")
    if branch is None and tag is None:
        branch = _get(env, "CI_COMMIT_REF_NAME")
    return BuildSource(
        _get(env, "CI_COMMIT_SHA"), branch, tag, _get(env, "CI_PROJECT_URL"),
        _get(env, "CI_PIPELINE_URL", "CI_JOB_URL"), _number(_get(env, "CI_MERGE_REQUEST_IID")),
    )  # fmt: skip


def _bitrise(env: Mapping[str, str]) -> BuildSource:
    return BuildSource(
        _get(env, "BITRISE_GIT_COMMIT", "GIT_CLONE_COMMIT_HASH"), _get(env, "BITRISE_GIT_BRANCH"),
        _get(env, "BITRISE_GIT_TAG"), web_address(_get(env, "GIT_REPOSITORY_URL")),
        _get(env, "BITRISE_BUILD_URL"), _number(_get(env, "BITRISE_PULL_REQUEST")),
    )  # fmt: skip


def _circleci(env: Mapping[str, str]) -> BuildSource:
    pull: int | str | None = _get(env, "CIRCLE_PULL_REQUEST")  # its address
    if pull is None:
        pull = _number(_get(env, "CIRCLE_PR_NUMBER"))
    return BuildSource(
        _get(env, "CIRCLE_SHA1"), _get(env, "CIRCLE_BRANCH"), _get(env, "CIRCLE_TAG"),
        web_address(_get(env, "CIRCLE_REPOSITORY_URL")), _get(env, "CIRCLE_BUILD_URL"), pull,
    )  # fmt: skip


def _jenkins(env: Mapping[str, str]) -> BuildSource:
    # A multibranch pipeline's pull request: BRANCH_NAME is `PR-12`, CHANGE_BRANCH its branch.
    branch = _get(env, "CHANGE_BRANCH", "BRANCH_NAME")
    if branch is None and (git_branch := _get(env, "GIT_BRANCH")):
        branch = git_branch.split("/", 1)[1] if git_branch.startswith("origin/") else git_branch
    tag = _get(env, "TAG_NAME")
    if tag is not None and branch == tag:
        branch = None
    return BuildSource(
        _get(env, "GIT_COMMIT"), branch, tag, web_address(_get(env, "GIT_URL")),
        _get(env, "BUILD_URL"), _number(_get(env, "CHANGE_ID")),
    )  # fmt: skip


def _azure(env: Mapping[str, str]) -> BuildSource:
    ref = _get(env, "BUILD_SOURCEBRANCH")
    branch = _strip_ref(_get(env, "SYSTEM_PULLREQUEST_SOURCEBRANCH"), "refs/heads/")
    branch = branch or _strip_ref(ref, "refs/heads/")
    collection, project = _get(env, "SYSTEM_COLLECTIONURI"), _get(env, "SYSTEM_TEAMPROJECT")
    build_id = _get(env, "BUILD_BUILDID")
    run = None
    if collection and project and build_id:
        run = f"{collection.rstrip('/')}/{project}/_build/results?buildId={build_id}"
    pull = _number(_get(env, "SYSTEM_PULLREQUEST_PULLREQUESTNUMBER")) or _number(
        _get(env, "SYSTEM_PULLREQUEST_PULLREQUESTID")
    )
    return BuildSource(
        _get(env, "BUILD_SOURCEVERSION"), branch, _strip_ref(ref, "refs/tags/"),
        web_address(_get(env, "BUILD_REPOSITORY_URI")), run, pull,
    )  # fmt: skip


def _buildkite(env: Mapping[str, str]) -> BuildSource:
    return BuildSource(
        _get(env, "BUILDKITE_COMMIT"), _get(env, "BUILDKITE_BRANCH"), _get(env, "BUILDKITE_TAG"),
        web_address(_get(env, "BUILDKITE_REPO")), _get(env, "BUILDKITE_BUILD_URL"),
        _number(_get(env, "BUILDKITE_PULL_REQUEST")),  # "false" outside a pull request
    )  # fmt: skip


# Each CI: the variable that says a job runs on it, its name, and what it reads.
CI_SYSTEMS: tuple[tuple[str, str, Callable[[Mapping[str, str]], BuildSource]], ...] = (
    ("GITHUB_ACTIONS", "GitHub Actions", _github),
    ("GITLAB_CI", "GitLab CI", _gitlab),
    ("BITRISE_IO", "Bitrise", _bitrise),
    ("CIRCLECI", "CircleCI", _circleci),
    ("TF_BUILD", "Azure Pipelines", _azure),
    ("BUILDKITE", "Buildkite", _buildkite),
    ("JENKINS_URL", "Jenkins", _jenkins),
)


def from_ci(env: Mapping[str, str]) -> tuple[str | None, BuildSource]:
    """The CI the environment says it is (its name), and what its variables say."""
    for marker, name, read in CI_SYSTEMS:
        if env.get(marker):
            found = read(env)
            # A CI's repository as an address, whatever form its variable has.
            repo = found.repository
            if repo and "://" in repo:
                found = replace(found, repository=web_address(repo))
            return name, found
    return None, BuildSource()


# -- git -----------------------------------------------------------------------------------------


def git(args: list[str], cwd: Path | None = None) -> str | None:
    """A git command's output, stripped; None if git is missing or the command fails."""
    try:
        done = subprocess.run(  # noqa: S603 - git with fixed arguments, no shell
            ["git", *args],  # noqa: S607 - git from PATH, as a user's shell finds it
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()


def from_git(cwd: Path | None = None) -> BuildSource:
    """What the git checkout at `cwd` says: HEAD's commit, its branch (none when detached), the
    tag on HEAD, and the remote's web address (origin, or the only remote)."""
    commit = git(["rev-parse", "--verify", "HEAD"], cwd)
    if commit is None:
        return BuildSource()
    branch = git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    tag = git(["describe", "--exact-match", "--tags", "HEAD"], cwd)
    remotes = (git(["remote"], cwd) or "").split()
    remote = "origin" if "origin" in remotes else (remotes[0] if len(remotes) == 1 else None)
    url = git(["remote", "get-url", remote], cwd) if remote else None
    return BuildSource(
        commit=commit,
        branch=branch if branch and branch != "HEAD" else None,
        tag=tag or None,
        repository=web_address(url),
    )


def detect(
    env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> tuple[str | None, BuildSource]:
    """The CI's name (None: none known) and the source its environment and the git checkout
    at `cwd` say, the CI's first."""
    env = os.environ if env is None else env
    ci, found = from_ci(env)
    return ci, found.over(from_git(cwd))


def detect_json() -> dict[str, Any] | None:
    """The SDK's default: verify's `source` as found here, without what the server would
    refuse."""
    _, found = detect()
    return without_problems(found, lambda _: None).to_json()
