"""Issue 40: `buildbay upload` says where a build came from by itself (each CI's environment,
or the git checkout), overridable by options, never with a remote's credentials; and writes
release notes from git (`--notes-from-git`): the commit subjects since the application's last
ready build, merges left out, at most 50 lines, or the last commit's message and why.

Against a real server, in real git repositories made here; each CI is faked by the variables
it sets, which are its real interface."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from buildbay_client.notes import TemplateError, render_template
from buildbay_client.source import (
    CI_SYSTEMS,
    BuildSource,
    from_ci,
    web_address,
    without_problems,
)
from tests.client.test_cli import PASSWORD, Cli, _login, cli, shared_server

__all__ = ["cli", "shared_server"]

pytestmark = pytest.mark.slow

SECRET = "s3cretpassw0rd"
REMOTE = f"https://ci-bot:{SECRET}@github.com/acme/app.git"
# Every variable a CI says it runs with: unset, so that the machine's own never leak in.
NO_CI = {marker: None for marker, _, _ in CI_SYSTEMS} | {"CI": None}


def run_git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True,
        env={"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo.parent), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return done.stdout.strip()


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        run_git(path, "init", "-q", "-b", "main")
        for key, value in (("user.name", "Dev"), ("user.email", "dev@example.com"),
                           ("commit.gpgsign", "false"), ("tag.gpgsign", "false")):  # fmt: skip
            run_git(path, "config", key, value)

    def commit(self, subject: str, body: str = "") -> str:
        message = f"{subject}\n\n{body}" if body else subject
        run_git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return self.head()

    def head(self) -> str:
        return run_git(self.path, "rev-parse", "HEAD")

    def __call__(self, *args: str) -> str:
        return run_git(self.path, *args)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    """A git repository, the upload's working directory."""
    made = Repo(tmp_path / "app")
    monkeypatch.chdir(made.path)
    return made


@pytest.fixture
def app(cli: Cli) -> str:
    """Logged in, with an application (platform `other`: any file); its id."""
    _login(cli)
    project = cli.json("projects", "create", f"Acme {uuid.uuid4().hex[:6]}")
    made = cli.json("apps", "create", "Acme", "--project", project["id"])
    app_id: str = made["id"]
    PROJECT_OF[app_id] = project["id"]
    return app_id


PROJECT_OF: dict[str, str] = {}


def upload(
    cli: Cli, app_id: str, *args: str, env: dict[str, Any] | None = None
) -> tuple[dict[str, Any], str]:
    """A build of bytes of its own (a file name `.bin`), with `args`; its JSON and stderr."""
    file = Path.cwd().parent / f"build-{uuid.uuid4().hex}.bin"
    file.write_bytes(uuid.uuid4().bytes * 4)
    done = cli("upload", str(file), "--app-id", app_id, "--json", *args,
               env={**NO_CI, **(env or {})})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    build: dict[str, Any] = json.loads(done.stdout)
    return build, done.stderr


def plain(source: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if source is None else {k: v for k, v in source.items() if k != "links"}


def test_a_plain_git_checkout_says_commit_branch_tag_and_repository_without_credentials(
    cli: Cli, app: str, repo: Repo
) -> None:
    repo("remote", "add", "origin", REMOTE)
    repo.commit("First")
    head = repo.commit("Second")
    repo("tag", "v1.0.0")

    build, _ = upload(cli, app)

    assert plain(build["source"]) == {
        "commit": head, "branch": "main", "tag": "v1.0.0",
        "repository": "https://github.com/acme/app", "ciRunUrl": None, "pullRequest": None,
    }  # fmt: skip
    assert build["source"]["links"]["commit"] == f"https://github.com/acme/app/commit/{head}"

    # Detached (as CI checks out), on another remote spelling: no branch, an https address.
    repo("remote", "set-url", "origin", "ssh://git@gitlab.com:2222/acme/mobile/app.git")
    repo("checkout", "-q", "--detach", "HEAD")
    repo.commit("Third")
    build, _ = upload(cli, app)
    assert plain(build["source"]) == {
        "commit": repo.head(), "branch": None, "tag": None,
        "repository": "https://gitlab.com/acme/mobile/app", "ciRunUrl": None, "pullRequest": None,
    }  # fmt: skip


def test_options_override_what_was_found_and_no_source_sends_none(
    cli: Cli, app: str, repo: Repo
) -> None:
    repo.commit("First")

    build, _ = upload(
        cli, app, "--commit", "ABCDEF1", "--branch", "release/2.0", "--pull-request",
        "https://git.acme.example/app/pulls/3", "--ci-run-url", "https://ci.acme.example/9",
        "--repository", "acme/app",
    )  # fmt: skip
    assert plain(build["source"]) == {
        "commit": "abcdef1", "branch": "release/2.0", "tag": None, "repository": "acme/app",
        "ciRunUrl": "https://ci.acme.example/9",
        "pullRequest": "https://git.acme.example/app/pulls/3",
    }  # fmt: skip

    build, _ = upload(cli, app, "--no-source")
    assert build["source"] is None


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--commit", "xyz1234"], "--commit must be 7 to 64 hex digits"),
        (["--branch", "a..b"], "--branch is not a name git takes"),
        (["--repository", f"https://u:{SECRET}@github.com/a/b"], "--repository must not carry"),
        (["--ci-run-url", "javascript:alert(1)"], "--ci-run-url must be an http or https"),
        (["--pull-request", "0"], "--pull-request must be a number from 1"),
        (["--no-source", "--commit", "abcdef1"], "give --no-source or source options"),
        (["--notes-template", "x"], "--notes-template goes with --notes-from-git"),
        (["--notes-from-git", "--notes-template", "{version.__class__}"], "it takes {branch}"),
        (["--notes-from-git", "--notes", "x"], "give one of --notes, --notes-file and"),
        # A digit of another script (isdigit() takes "²", int() does not): said, no traceback.
        (["--pull-request", "²"], "--pull-request must be a number or an http(s) address"),
    ],
)
def test_a_wrong_option_is_refused_before_anything_is_sent(
    cli: Cli, app: str, repo: Repo, option: list[str], said: str
) -> None:
    repo.commit("First")
    file = repo.path.parent / "build.bin"
    file.write_bytes(b"some bytes")

    done = cli("upload", str(file), "--app-id", app, *option, env=NO_CI)

    assert done.returncode == 2, done.stdout
    assert said in done.stderr
    assert SECRET not in done.stderr
    listed = json.loads(cli("whoami", "--json").stdout)
    assert listed["usage"]["builds"] == 0  # nothing was uploaded


def test_a_notes_file_that_is_not_utf8_is_refused_before_anything_is_sent(
    cli: Cli, app: str, repo: Repo
) -> None:
    repo.commit("First")
    file = repo.path.parent / "build.bin"
    file.write_bytes(b"some bytes")
    notes = repo.path.parent / "notes.txt"
    notes.write_bytes("Caf\u00e9 au lait".encode("latin-1"))

    done = cli("upload", str(file), "--app-id", app, "--notes-file", str(notes), env=NO_CI)

    assert done.returncode == 2, done.stdout
    assert f"--notes-file {notes} is not UTF-8 text" in done.stderr
    assert "Traceback" not in done.stderr
    listed = json.loads(cli("whoami", "--json").stdout)
    assert listed["usage"]["builds"] == 0


COMMIT = "3f0a9c1e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a"
HEAD_SHA = "0b1d3f5a7c9e1b3d5f7a3f0a9c1e5b7d2f4a6c8e"


def _github_event(tmp: Path) -> str:
    event = tmp / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD_SHA}}}))
    return str(event)


CI_CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    (
        "GitHub Actions (a push to a branch)",
        {"GITHUB_ACTIONS": "true", "GITHUB_SHA": COMMIT, "GITHUB_REF": "refs/heads/main",
         "GITHUB_REF_NAME": "main", "GITHUB_REF_TYPE": "branch",
         "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/app",
         "GITHUB_RUN_ID": "812"},
        {"commit": COMMIT, "branch": "main", "tag": None,
         "repository": "https://github.com/acme/app",
         "ciRunUrl": "https://github.com/acme/app/actions/runs/812", "pullRequest": None},
    ),
    (
        "GitHub Actions (a tag)",
        {"GITHUB_ACTIONS": "true", "GITHUB_SHA": COMMIT, "GITHUB_REF": "refs/tags/v1.4.2",
         "GITHUB_REF_NAME": "v1.4.2", "GITHUB_REF_TYPE": "tag",
         "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/app",
         "GITHUB_RUN_ID": "813"},
        {"commit": COMMIT, "branch": None, "tag": "v1.4.2",
         "repository": "https://github.com/acme/app",
         "ciRunUrl": "https://github.com/acme/app/actions/runs/813", "pullRequest": None},
    ),
    (
        "GitHub Actions (a pull request: its head, not the merge commit)",
        {"GITHUB_ACTIONS": "true", "GITHUB_SHA": COMMIT, "GITHUB_REF": "refs/pull/7/merge",
         "GITHUB_REF_NAME": "7/merge", "GITHUB_REF_TYPE": "branch",
         "GITHUB_HEAD_REF": "feature/login", "GITHUB_EVENT_PATH": "<event>",
         "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/app",
         "GITHUB_RUN_ID": "814"},
        {"commit": HEAD_SHA, "branch": "feature/login", "tag": None,
         "repository": "https://github.com/acme/app",
         "ciRunUrl": "https://github.com/acme/app/actions/runs/814", "pullRequest": 7},
    ),
    (
        "GitLab CI (a merge request pipeline)",
        {"GITLAB_CI": "true", "CI_COMMIT_SHA": COMMIT,
         "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "feature/login", "CI_COMMIT_REF_NAME": "x",
         "CI_PROJECT_URL": "https://gitlab.com/acme/app",
         "CI_PIPELINE_URL": "https://gitlab.com/acme/app/-/pipelines/55",
         "CI_MERGE_REQUEST_IID": "12"},
        {"commit": COMMIT, "branch": "feature/login", "tag": None,
         "repository": "https://gitlab.com/acme/app",
         "ciRunUrl": "https://gitlab.com/acme/app/-/pipelines/55", "pullRequest": 12},
    ),
    (
        "Bitrise",
        {"BITRISE_IO": "true", "BITRISE_GIT_COMMIT": COMMIT, "BITRISE_GIT_BRANCH": "develop",
         "GIT_REPOSITORY_URL": "git@github.com:acme/app.git",
         "BITRISE_BUILD_URL": "https://app.bitrise.io/build/abc", "BITRISE_PULL_REQUEST": "4"},
        {"commit": COMMIT, "branch": "develop", "tag": None,
         "repository": "https://github.com/acme/app",
         "ciRunUrl": "https://app.bitrise.io/build/abc", "pullRequest": 4},
    ),
    (
        "CircleCI",
        {"CIRCLECI": "true", "CIRCLE_SHA1": COMMIT, "CIRCLE_BRANCH": "main",
         "CIRCLE_REPOSITORY_URL": "git@bitbucket.org:acme/app.git",
         "CIRCLE_BUILD_URL": "https://circleci.com/gh/acme/app/77",
         "CIRCLE_PULL_REQUEST": "https://bitbucket.org/acme/app/pull-requests/5"},
        {"commit": COMMIT, "branch": "main", "tag": None,
         "repository": "https://bitbucket.org/acme/app",
         "ciRunUrl": "https://circleci.com/gh/acme/app/77",
         "pullRequest": "https://bitbucket.org/acme/app/pull-requests/5"},
    ),
    (
        "Jenkins (a multibranch pull request)",
        {"JENKINS_URL": "https://jenkins.acme.example/", "GIT_COMMIT": COMMIT,
         "BRANCH_NAME": "PR-9", "CHANGE_BRANCH": "feature/x", "CHANGE_ID": "9",
         "GIT_URL": f"https://jenkins:{SECRET}@github.com/acme/app.git",
         "BUILD_URL": "https://jenkins.acme.example/job/app/9/"},
        {"commit": COMMIT, "branch": "feature/x", "tag": None,
         "repository": "https://github.com/acme/app",
         "ciRunUrl": "https://jenkins.acme.example/job/app/9/", "pullRequest": 9},
    ),
    (
        "Jenkins (a freestyle job)",
        {"JENKINS_URL": "https://jenkins.acme.example/", "GIT_COMMIT": COMMIT,
         "GIT_BRANCH": "origin/release/2.0", "BUILD_URL": "https://jenkins.acme.example/job/2/"},
        {"commit": COMMIT, "branch": "release/2.0", "tag": None, "repository": None,
         "ciRunUrl": "https://jenkins.acme.example/job/2/", "pullRequest": None},
    ),
    (
        "Azure Pipelines",
        {"TF_BUILD": "True", "BUILD_SOURCEVERSION": COMMIT,
         "BUILD_SOURCEBRANCH": "refs/heads/main",
         "BUILD_REPOSITORY_URI": f"https://acme:{SECRET}@dev.azure.com/acme/app/_git/app",
         "SYSTEM_COLLECTIONURI": "https://dev.azure.com/acme/", "SYSTEM_TEAMPROJECT": "app",
         "BUILD_BUILDID": "31"},
        {"commit": COMMIT, "branch": "main", "tag": None,
         "repository": "https://dev.azure.com/acme/app/_git/app",
         "ciRunUrl": "https://dev.azure.com/acme/app/_build/results?buildId=31",
         "pullRequest": None},
    ),
    (
        "Buildkite (a commit that is not a hash is left out)",
        {"BUILDKITE": "true", "BUILDKITE_COMMIT": "HEAD", "BUILDKITE_BRANCH": "main",
         "BUILDKITE_TAG": "v2.0.0", "BUILDKITE_REPO": "git@github.com:acme/app.git",
         "BUILDKITE_BUILD_URL": "https://buildkite.com/acme/app/builds/3",
         "BUILDKITE_PULL_REQUEST": "false"},
        {"commit": None, "branch": "main", "tag": "v2.0.0",
         "repository": "https://github.com/acme/app",
         "ciRunUrl": "https://buildkite.com/acme/app/builds/3", "pullRequest": None},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("ci", "env", "expected"), CI_CASES, ids=[c[0] for c in CI_CASES])
def test_each_ci_s_environment_fills_the_source(
    cli: Cli, app: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    ci: str, env: dict[str, str], expected: dict[str, Any],
) -> None:  # fmt: skip
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    monkeypatch.chdir(outside)  # no git: only what the CI says
    env = {k: _github_event(tmp_path) if v == "<event>" else v for k, v in env.items()}

    build, said = upload(cli, app, env=env)

    assert plain(build["source"]) == expected
    assert f"source: from {ci.split(' (')[0]}'s environment" in said
    if ci.startswith("Buildkite"):
        assert "source: commit 'HEAD' must be 7 to 64 hex digits; left out" in said


def test_a_ci_variable_s_credentials_never_reach_the_log() -> None:
    """A value left out is said in the job's log: never with the password or token a CI's
    variable carried in it."""
    said: list[str] = []
    source = BuildSource(
        ci_run_url=f"https://bot:{SECRET}@jenkins.example/job/app/1/",
        pull_request=f"http://{SECRET}@git.example/pr/1 ",
    )

    kept = without_problems(source, said.append)

    assert kept == BuildSource()
    assert len(said) == 2
    assert not any(SECRET in line for line in said), said
    assert "'https://***@jenkins.example/job/app/1/' must not carry a user name" in said[0]


def test_odd_digits_in_a_ci_variable_are_left_out_not_a_traceback() -> None:
    env = {"GITLAB_CI": "true", "CI_MERGE_REQUEST_IID": "²", "CI_COMMIT_BRANCH": "main"}
    assert from_ci(env) == ("GitLab CI", BuildSource(branch="main"))
    env = {"JENKINS_URL": "https://ci.example/", "CHANGE_ID": "١٢", "BRANCH_NAME": "main"}
    assert from_ci(env)[1].pull_request is None


def test_web_addresses_of_remotes_never_carry_credentials() -> None:
    assert web_address(REMOTE) == "https://github.com/acme/app"
    assert web_address("https://oauth2:glpat-x@gitlab.com/a/b.git?private_token=y#z") == (
        "https://gitlab.com/a/b"
    )
    assert web_address("git@github.com:acme/app.git") == "https://github.com/acme/app"
    assert web_address("ssh://git@host.example:2222/a/b") == "https://host.example/a/b"
    assert web_address("git://host.example/a/b.git") == "https://host.example/a/b"
    assert web_address("http://git.local:8080/a/b") == "http://git.local:8080/a/b"
    for local in ("/srv/git/app.git", "file:///srv/git/app.git", "../app", "C:\\repo", ""):
        assert web_address(local) is None


def test_the_template_replaces_its_fields_and_evaluates_nothing() -> None:
    values = {"branch": "main", "commit": "3f0a9c1", "tag": "", "count": "3", "since": "0b1d3f5"}
    assert render_template("{branch} @ {commit}: {count} since {since} {{x}}", values) == (
        "main @ 3f0a9c1: 3 since 0b1d3f5 {x}"
    )
    for wrong in ("{version}", "{branch.__class__}", "{branch[0]}", "{branch!r}", "{", "a}"):
        with pytest.raises(TemplateError):
            render_template(wrong, values)


def test_notes_from_git_list_the_commits_since_the_last_ready_build(
    cli: Cli, app: str, repo: Repo
) -> None:
    first = repo.commit("Start the app", "The body of the first commit.")

    # No earlier build: the last commit's message, and said.
    build, said = upload(cli, app, "--notes-from-git")
    assert build["notes"] == "Start the app\n\nThe body of the first commit."
    assert "no earlier ready build of the application has a commit" in said
    assert "the last commit's message" in said

    repo.commit("Fix the login crash")
    repo("checkout", "-q", "-b", "feature/share")
    repo.commit("Share a build")
    repo("checkout", "-q", "main")
    repo.commit("Faster start")
    repo("merge", "-q", "--no-ff", "-m", "Merge branch 'feature/share'", "feature/share")
    head = repo.head()

    build, said = upload(
        cli, app, "--notes-from-git", "--notes-template", "What's new on {branch} ({commit}), "
        "{count} changes since {since}:",
    )  # fmt: skip
    assert build["source"]["commit"] == head
    lines = build["notes"].splitlines()
    assert lines[0] == f"What's new on main ({head[:7]}), 3 changes since {first[:7]}:"
    assert lines[1] == ""
    assert sorted(lines[2:]) == ["- Faster start", "- Fix the login crash", "- Share a build"]
    assert not any("Merge" in line for line in lines)
    assert "notes: since build " in said
    assert "3 commits since" in said

    # The same commit again: no commit since, the last commit's message (the merge's).
    build, said = upload(cli, app, "--notes-from-git")
    assert build["notes"] == "Merge branch 'feature/share'"
    assert "no commit (merges aside) since" in said


def test_notes_from_git_follow_the_branch_and_cap_the_lines(cli: Cli, app: str, repo: Repo) -> None:
    repo.commit("Base")
    upload(cli, app, "--notes-from-git")  # main's build
    repo("checkout", "-q", "-b", "feature/big")
    for n in range(60):
        repo.commit(f"Step {n}")
    feature_build, _ = upload(cli, app, "--notes-from-git")
    lines = feature_build["notes"].splitlines()
    # No build of the branch yet: since main's; 60 commits in 50 lines.
    assert len(lines) == 50
    assert lines[0] == "- Step 59"
    assert lines[-1] == "- … and 11 more commits"

    repo("checkout", "-q", "main")
    repo.commit("Main moves on")
    main_build, said = upload(cli, app, "--notes-from-git")
    assert main_build["notes"] == "- Main moves on"  # since main's own last build
    assert "on main" in said

    repo("checkout", "-q", "feature/big")
    repo.commit("One more step")
    again, said = upload(cli, app, "--notes-from-git")
    assert again["notes"] == "- One more step"  # since the branch's last build
    assert f"since build {feature_build['buildId']} on feature/big" in said


def test_notes_from_git_fall_back_when_the_last_build_s_commit_is_not_in_this_clone(
    cli: Cli, app: str, repo: Repo
) -> None:
    repo.commit("Only commit here", "Its body.")
    upload(cli, app, "--commit", COMMIT, "--branch", "main")  # a commit this clone lacks

    build, said = upload(cli, app, "--notes-from-git")

    assert build["notes"] == "Only commit here\n\nIts body."
    assert f"commit {COMMIT[:7]} (the last ready build's) is not in this clone's history" in said


def test_notes_from_git_are_cut_to_the_server_s_limit_and_say_so(
    cli: Cli, app: str, repo: Repo
) -> None:
    repo.commit("Base")
    upload(cli, app)
    for n in range(45):
        repo.commit(f"Change {n} " + "x" * 280)

    build, said = upload(cli, app, "--notes-from-git")

    assert len(build["notes"]) == 10_000
    assert build["notes"].endswith("\n… (truncated)")
    assert "cut to the server's 10,000 characters" in said


def test_builds_list_filters_by_branch_and_commit_and_shows_the_source(
    cli: Cli, app: str, repo: Repo
) -> None:
    repo.commit("On main")
    on_main, _ = upload(cli, app)
    repo("checkout", "-q", "-b", "feature/x")
    head = repo.commit("On the branch")
    on_branch, _ = upload(cli, app)

    where = ("-p", PROJECT_OF[app], "-a", app)
    listed = cli.json("builds", "list", *where, "--branch", "feature/x")
    assert [b["buildId"] for b in listed["builds"]] == [on_branch["buildId"]]
    listed = cli.json("builds", "list", *where, "--commit", head[:9])
    assert [b["buildId"] for b in listed["builds"]] == [on_branch["buildId"]]
    done = cli("builds", "list", *where, env={**NO_CI, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert f"feature/x {head[:7]}" in done.stdout
    assert on_main["buildId"] in done.stdout


def test_the_sdk_finds_the_source_unless_told(cli: Cli, app: str, repo: Repo) -> None:
    from buildbay_client import Buildbay
    from buildbay_client.cli.common import project_of_application
    from buildbay_client.source import BuildSource

    head = repo.commit("For the SDK")
    r = httpx.post(f"{cli.server}/api/auth/login",
                   json={"email": cli.email, "password": PASSWORD})  # fmt: skip
    token = r.json()["access_token"]
    file = repo.path.parent / "sdk.bin"
    with Buildbay(cli.server, token=token) as bb:
        project_id = project_of_application(bb, app)
        file.write_bytes(b"sdk one")
        found = bb.upload_build(project_id, app, file)
        file.write_bytes(b"sdk two")
        given = bb.upload_build(project_id, app, file, source=BuildSource(branch="given"))
        file.write_bytes(b"sdk three")
        none = bb.upload_build(project_id, app, file, source=None)
    assert found.source is not None
    assert (found.source.commit, found.source.branch) == (head, "main")
    assert given.source is not None
    assert (given.source.commit, given.source.branch) == (None, "given")
    assert none.source is None
