"""The `buildbay` client commands against a real server over HTTP: login, each command's output,
--json, the exit code of each failure class, and an upload that survives the server being
killed and restarted in the middle of it.

The commands run in this process (Typer's test runner), each with the environment a CI job
gives it, against one server for the module (each test signs up a user of its own), served by
uvicorn in a thread of this process (conftest's `serving_in_thread`): starting a process for
it cost each xdist worker seconds of imports. Only the upload that outlives a server restart
runs as a process of its own against a `buildbay serve` process of its own, since a separate
program that keeps going while its server dies is the point there.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import json
import os
import pty
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from buildbay.updates.check import rollout_bucket
from buildbay_client.cli import command
from tests.builds.android_files import APK, APK_V1, apk
from tests.conftest import serving_a_copy
from tests.desktop import files as desktop_files
from tests.processes import free_port, running

pytestmark = pytest.mark.slow

PASSWORD = "a long password"


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


class Cli:
    """`buildbay ...` with its own config directory, as a user or a CI job runs it: in this
    process, with the environment it would have (no other BUILDBAY_* variable)."""

    def __init__(self, server: str, config: Path, email: str) -> None:
        self.env = {
            "BUILDBAY_CONFIG_DIR": str(config),
            "BUILDBAY_RETRY_ATTEMPTS": "2",
            "CI": "true",
        }
        self.server = server
        self.email = email
        self.app = command()

    def __call__(
        self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
    ) -> Done:
        # Nor a CI's own (run inside GitHub Actions, upload would write its outputs there).
        ci = ("BUILDBAY_", "GITHUB_", "GITLAB_CI")
        unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith(ci)}
        result = CliRunner().invoke(
            self.app, list(args), input=stdin, env={**unset, **self.env, **(env or {})}
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a traceback is a bug, never an answer
        return Done(result.exit_code, result.stdout, result.stderr)

    def process_env(self) -> dict[str, str]:
        """The environment of the same command run as a program of its own."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")}
        return {**env, **self.env}

    def json(self, *args: str, **kwargs: Any) -> Any:
        done = self(*args, "--json", **kwargs)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def shared_server(
    migrated_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One server for the in-process tests of this module, in a thread (as conftest's
    `threaded_server`): the commands reach it over HTTP only."""
    work = tmp_path_factory.mktemp("cli-server")
    with serving_a_copy(migrated_database, work) as base:
        yield base


def _email(who: str) -> str:
    return f"{who}-{uuid.uuid4().hex[:12]}@example.com"


@pytest.fixture
def cli(shared_server: str, tmp_path: Path) -> Cli:
    email = _email("ci")
    r = httpx.post(
        f"{shared_server}/api/auth/register",
        json={"email": email, "password": PASSWORD, "name": "CI"},
    )
    assert r.status_code == 201, r.text
    return Cli(shared_server, tmp_path / "config", email)


def _login(cli: Cli) -> None:
    done = cli("login", "--url", cli.server, "--email", cli.email, stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr


def test_login_saves_a_private_profile_and_whoami_answers(cli: Cli, tmp_path: Path) -> None:
    _login(cli)

    saved = tmp_path / "config" / "credentials.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    profile = json.loads(saved.read_text())["profiles"]["production"]
    assert profile["url"] == cli.server
    assert profile["refresh_token"]
    me = cli.json("whoami")
    assert me["email"] == cli.email
    assert me["usage"] == {"storageBytes": 0, "builds": 0}
    # A second profile is another environment: not logged in there.
    done = cli("--profile", "development", "whoami")
    assert done.returncode == 3
    assert "no server for profile 'development'" in done.stderr


@dataclass
class Uploaded:
    project: dict[str, Any]
    app: dict[str, Any]
    build: dict[str, Any]


@pytest.fixture
def uploaded(cli: Cli, tmp_path: Path) -> Uploaded:
    """Logged in, with the project Acme, its application Acme Android and one uploaded build,
    each made by a command."""
    _login(cli)
    project = cli.json("projects", "create", "Acme")
    assert project["name"] == "Acme"
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    assert (app["name"], app["platform"], app["projectId"]) == (
        "Acme Android", "android", project["id"],
    )  # fmt: skip
    notes = tmp_path / "notes.md"
    notes.write_text("Fixes the login crash\n")
    build = cli.json(
        "upload", str(APK), "-p", "Acme", "-a", "Acme Android", "--notes-file", str(notes),
        "--install-link-hours", "24",
    )  # fmt: skip
    return Uploaded(project, app, build)


def test_upload_verifies_the_build_and_prints_its_install_link(uploaded: Uploaded) -> None:
    build = uploaded.build
    assert build["status"] == "ready"
    assert build["notes"] == "Fixes the login crash"  # the server trims notes
    assert build["metadata"]["packageName"] == "dev.buildbay.demo"
    assert build["sha256"] == hashlib.sha256(APK.read_bytes()).hexdigest()
    assert "/install/" in build["installUrl"]


def test_upload_attaches_a_blockmap_that_the_feed_download_serves(cli: Cli, tmp_path: Path) -> None:
    _login(cli)
    cli.json("projects", "create", "Desk")
    app = cli.json("apps", "create", "Desk App", "--project", "Desk", "--platform", "linux")
    package = tmp_path / "example-app_1.4.2-1_amd64.deb"
    package.write_bytes(desktop_files.deb(tmp_path))
    blockmap = tmp_path / "example-app_1.4.2-1_amd64.deb.blockmap"
    blockmap.write_bytes(gzip.compress(b'{"version": "2", "files": []}', mtime=0))

    build = cli.json(
        "upload", str(package), "-p", "Desk", "-a", "Desk App", "--blockmap", str(blockmap)
    )

    assert build["status"] == "ready"
    assert build["blockmapSize"] == blockmap.stat().st_size
    key = app["updateKey"]
    r = httpx.get(
        f"{cli.server}/feeds/{key}/download/{build['buildId']}/{blockmap.name}", timeout=30
    )
    assert r.status_code == 200, r.text
    assert r.content == blockmap.read_bytes()
    shown = cli.json("builds", "show", build["buildId"], "-p", "Desk", "-a", "Desk App")
    assert shown["blockmapSize"] == blockmap.stat().st_size


def test_builds_latest_and_list_print_the_lines_a_ci_log_shows(
    cli: Cli, uploaded: Uploaded
) -> None:
    build = uploaded.build
    latest = cli("builds", "latest", "-p", uploaded.project["id"], "-a", uploaded.app["id"])
    assert latest.returncode == 0, latest.stderr
    assert f"build    {build['buildId']} (ready)" in latest.stdout
    assert "version  1.4.2 (42)" in latest.stdout
    assert f"install  {build['installUrl']}" in latest.stdout
    listed = cli("builds", "list", "-p", "Acme", "-a", "Acme Android")
    assert listed.returncode == 0, listed.stderr
    assert build["buildId"] in listed.stdout
    assert "1.4.2 (42)" in listed.stdout
    page = cli.json("builds", "list", "-p", "Acme", "-a", "Acme Android")
    assert [b["buildId"] for b in page["builds"]] == [build["buildId"]]
    assert page["nextCursor"] is None


def test_a_build_downloads_into_a_directory_byte_for_byte(
    cli: Cli, uploaded: Uploaded, tmp_path: Path
) -> None:
    target = tmp_path / "downloads"
    target.mkdir()
    done = cli(
        "builds", "download", uploaded.build["buildId"], "-p", "Acme", "-a", "Acme Android",
        "-o", str(target),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (target / APK.name).read_bytes() == APK.read_bytes()


def test_apps_update_sets_retention_and_shows_the_bundle_id_the_first_build_gave(
    cli: Cli, uploaded: Uploaded
) -> None:
    shown = cli.json("apps", "update", "Acme Android", "-p", "Acme", "--keep-last", "5")
    assert shown["retention"] == {
        "keepLast": 5,
        "keepDays": None,
        "protect": {"groups": True, "channels": True},
    }
    assert shown["bundleId"] == "dev.buildbay.demo"


KEEP_ALL = {"keepLast": None, "keepDays": None, "protect": {"groups": True, "channels": True}}
ACME_ANDROID = ["Acme Android", "-p", "Acme"]


@pytest.fixture
def three_builds(cli: Cli, tmp_path: Path) -> list[dict[str, Any]]:
    """Logged in, with Acme Android and three ready builds, oldest first: the first given to
    the tester group QA (in testers' hands, and QA's newest), the others to no one."""
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    _group(cli, "QA", _member(cli, "tess"))
    found = []
    for code in (41, 42, 43):
        path = tmp_path / f"app-{code}.apk"
        path.write_bytes(apk(version_code=code))
        given = ["--distribute", "QA"] if code == 41 else []
        found.append(cli.json("upload", str(path), "-p", "Acme", "-a", "Acme Android", *given))
    return found


def test_retention_preview_names_what_a_rule_deletes_and_changes_nothing(
    cli: Cli, three_builds: list[dict[str, Any]]
) -> None:
    first, second, _ = (b["buildId"] for b in three_builds)

    shown = cli("apps", "retention-preview", *ACME_ANDROID, "--keep-last", "1")
    unprotected = cli.json(
        "apps", "retention-preview", *ACME_ANDROID, "--keep-last", "1", "--no-protect-groups"
    )
    own = cli("apps", "retention-preview", *ACME_ANDROID)  # the application's rule: none

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(
        "Retention: keep the newest ready build, and always the newest given to each tester "
        "group and the newest of each release channel.\nThis rule deletes 1 build:\n"
    )
    assert second in shown.stdout
    assert "1.4.2 (42)" in shown.stdout
    assert first not in shown.stdout  # QA's newest build: protected
    assert unprotected == {
        "retention": {"keepLast": 1, "keepDays": None,
                      "protect": {"groups": False, "channels": True}},
        "count": 2,
        "distributedCount": 1,
        "builds": [
            {"buildId": second, "fileName": "app-42.apk", "version": "1.4.2 (42)",
             "verifiedAt": three_builds[1]["verifiedAt"], "distributed": False},
            {"buildId": first, "fileName": "app-41.apk", "version": "1.4.2 (41)",
             "verifiedAt": three_builds[0]["verifiedAt"], "distributed": True},
        ],
    }  # fmt: skip
    assert own.returncode == 0, own.stderr
    assert own.stdout == "Retention: no rule, every build is kept.\nThis rule deletes no build.\n"
    assert cli.json("apps", "show", *ACME_ANDROID)["retention"] == KEEP_ALL
    assert len(cli.json("builds", "list", "-p", "Acme", "-a", "Acme Android")["builds"]) == 3


def test_a_rule_that_deletes_builds_is_saved_without_a_terminal_only_with_yes(
    cli: Cli, three_builds: list[dict[str, Any]]
) -> None:
    first, second, _ = (b["buildId"] for b in three_builds)

    refused = cli("apps", "update", *ACME_ANDROID, "--keep-last", "1", "--name", "Acme Droid")

    assert refused.returncode == 2
    assert refused.stdout == ""
    assert "Retention: keep the newest ready build, and always" in refused.stderr
    assert "This rule deletes 1 build, on the server's next sweep (within minutes):" in (
        refused.stderr
    )
    assert second in refused.stderr
    assert "buildbay: not saved: the rule deletes 1 build; give --yes to save it" in (
        refused.stderr
    )
    unchanged = cli.json("apps", "show", *ACME_ANDROID)  # its new name is not saved either
    assert (unchanged["name"], unchanged["retention"]) == ("Acme Android", KEEP_ALL)

    saved = cli(
        "apps", "update", *ACME_ANDROID, "--keep-last", "1", "--no-protect-groups", "--yes",
        "--json",
    )  # fmt: skip

    assert saved.returncode == 0, saved.stderr
    assert "This rule deletes 2 builds, 1 of them in testers' hands, on the server's" in (
        saved.stderr
    )
    assert first in saved.stderr
    rule = {"keepLast": 1, "keepDays": None, "protect": {"groups": False, "channels": True}}
    assert json.loads(saved.stdout)["retention"] == rule
    assert cli.json("apps", "show", *ACME_ANDROID)["retention"] == rule
    # What the application's own rule deletes now: what the preview named.
    doomed = cli.json("apps", "retention-preview", *ACME_ANDROID)
    assert [b["buildId"] for b in doomed["builds"]] == [second, first]

    # The options left out keep their value; --no-protect-channels reaches the server too.
    merged = cli.json("apps", "update", *ACME_ANDROID, "--keep-days", "30",
                      "--no-protect-channels", "--yes")  # fmt: skip
    assert merged["retention"] == {
        "keepLast": 1, "keepDays": 30, "protect": {"groups": False, "channels": False},
    }  # fmt: skip
    table = cli("apps", "show", *ACME_ANDROID)
    assert "last 1, 30 days, groups and channels unprotected" in table.stdout
    # Protecting again, or no rule at all, deletes no more: saved without asking.
    protected = cli.json("apps", "update", *ACME_ANDROID, "--protect-groups", "--protect-channels",
                         "--keep-all")  # fmt: skip
    assert protected["retention"] == KEEP_ALL
    both = cli("apps", "update", *ACME_ANDROID, "--keep-all", "--keep-last", "3")
    assert both.returncode == 2
    assert "--keep-all is no rule at all: give it without --keep-last" in both.stderr


def _at_a_terminal(cli: Cli, answer: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`buildbay ARGS` run as a program whose standard input is a terminal (a pseudo-terminal)
    on which `answer` is typed."""
    keyboard, terminal = pty.openpty()
    try:
        os.write(keyboard, f"{answer}\n".encode())
        return subprocess.run(
            [sys.executable, "-m", "buildbay_client", *args],
            stdin=terminal,
            capture_output=True,
            text=True,
            env=cli.process_env(),
            timeout=120,
            check=False,
        )
    finally:
        os.close(keyboard)
        os.close(terminal)


def test_at_a_terminal_a_rule_that_deletes_builds_is_saved_only_once_confirmed(
    cli: Cli, three_builds: list[dict[str, Any]]
) -> None:
    second = three_builds[1]["buildId"]
    update = ["apps", "update", *ACME_ANDROID, "--keep-last", "1"]

    declined = _at_a_terminal(cli, "n", *update)

    assert declined.returncode == 1, declined.stderr
    assert "This rule deletes 1 build, on the server's next sweep" in declined.stderr
    assert second in declined.stderr
    assert "Save it, deleting 1 build for good? [y/N]" in declined.stderr
    assert "buildbay: not saved: nothing was changed" in declined.stderr
    assert declined.stdout == ""
    assert cli.json("apps", "show", *ACME_ANDROID)["retention"] == KEEP_ALL

    accepted = _at_a_terminal(cli, "y", *update, "--json")

    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["retention"]["keepLast"] == 1
    assert cli.json("apps", "show", *ACME_ANDROID)["retention"]["keepLast"] == 1


def test_an_api_token_acts_without_a_profile_until_it_is_revoked(
    cli: Cli, uploaded: Uploaded
) -> None:
    # An API token for CI: BUILDBAY_URL and BUILDBAY_TOKEN, no profile at all.
    token = cli.json("tokens", "create", "github-actions")
    ci = {"BUILDBAY_URL": cli.server, "BUILDBAY_TOKEN": token["token"], "BUILDBAY_PROFILE": "none"}
    assert [p["name"] for p in cli.json("projects", "list", env=ci)] == ["Acme"]
    assert [t["name"] for t in cli.json("tokens", "list")] == ["github-actions"]
    assert cli("tokens", "revoke", token["id"]).returncode == 0
    revoked = cli("projects", "list", env=ci)
    assert revoked.returncode == 3
    assert "(401 invalid_token)" in revoked.stderr or "(401 token_revoked)" in revoked.stderr


def test_deleting_a_build_asks_first_and_yes_deletes_it_and_its_project(
    cli: Cli, uploaded: Uploaded
) -> None:
    build_id = uploaded.build["buildId"]
    kept = cli("builds", "delete", build_id, "-p", "Acme", "-a", "Acme Android", stdin="n\n")
    assert kept.returncode == 1, kept.stderr  # asked, and told no
    assert "Delete build" in kept.stdout
    assert cli.json("builds", "show", build_id, "-p", "Acme", "-a", "Acme Android")
    done = cli("builds", "delete", build_id, "-p", "Acme", "-a", "Acme Android", "--yes")
    assert done.returncode == 0, done.stderr
    gone = cli("builds", "show", build_id, "-p", "Acme", "-a", "Acme Android")
    assert gone.returncode != 0
    assert "404" in gone.stderr
    assert cli("projects", "delete", "Acme", "--yes").returncode == 0
    assert cli.json("projects", "list") == []


def test_channels_and_an_upload_released_to_one_as_mandatory(cli: Cli) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    where = ["-p", "Acme", "-a", "Acme Android"]
    assert [c["name"] for c in cli.json("channels", "list", *where)] == ["default"]
    beta = cli.json("channels", "create", "beta", *where)
    assert (beta["name"], beta["buildsCount"], beta["latestBuildId"]) == ("beta", 0, None)
    refused = cli("channels", "create", "Beta Testers", *where)
    assert refused.returncode == 5, refused.stderr  # the API's 422
    assert "a channel's name is 1 to 40 characters" in refused.stderr

    build = cli.json("upload", str(APK), *where, "--channel", "beta", "--mandatory")
    assert (build["channels"], build["mandatory"]) == (["beta"], True)
    listed = {c["name"]: c for c in cli.json("channels", "list", *where)}
    assert listed["beta"]["latestBuildId"] == build["buildId"]
    assert listed["default"]["latestBuildId"] is None
    unknown = cli("upload", str(APK), *where, "--channel", "nightly")
    assert unknown.returncode == 5, unknown.stderr
    assert "no channel named nightly" in unknown.stderr
    plain = cli.json("upload", str(APK_V1), *where)  # other bytes: the same is the same build
    assert (plain["channels"], plain["mandatory"]) == (["default"], False)


def _install_in(build_id: str, percent: int, inside: bool) -> str:
    """An install id whose bucket for the build is below `percent` (inside) or not."""
    return next(
        candidate
        for candidate in (f"install-{n}" for n in range(10_000))
        if (rollout_bucket(build_id, candidate) < percent) is inside
    )


def test_channels_set_rolls_a_build_out_to_part_of_its_channels(cli: Cli) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    where = ["-p", "Acme", "-a", "Acme Android"]
    cli.json("channels", "create", "beta", *where)
    build_id = cli.json("upload", str(APK), *where)["buildId"]

    # Its channels kept (none named), at 20% of their installs.
    build = cli.json("channels", "set", build_id, *where, "--rollout", "20")
    assert (build["channels"], build["rolloutPercents"]) == (["default"], {"default": 20})
    check = {"key": app["updateKey"], "versionCode": 1}
    url = f"{cli.server}/api/updates/check"
    inside = httpx.get(url, params={**check, "installId": _install_in(build_id, 20, True)})
    assert inside.json()["build"]["buildId"] == build_id
    outside = httpx.get(url, params={**check, "installId": _install_in(build_id, 20, False)})
    assert outside.json()["updateAvailable"] is False

    # Published to beta too: default keeps its 20%, beta starts at 100; the table says so.
    table = cli("channels", "set", build_id, *where, "--channel", "default", "--channel", "beta")
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["beta", "100%"] in rows
    assert ["default", "20%"] in rows
    build = cli.json("channels", "set", build_id, *where, "--channel", "beta", "--rollout", "5")
    assert build["rolloutPercents"] == {"beta": 5}

    for wrong in ("0", "101", "ten", "2.5"):
        refused = cli("channels", "set", build_id, *where, "--rollout", wrong)
        assert refused.returncode == 2, (wrong, refused.stderr)  # a usage error, nothing sent
        assert "--rollout" in refused.stderr
    assert cli.json("builds", "show", build_id, *where)["rolloutPercents"] == {"beta": 5}
    unknown = cli("channels", "set", build_id, *where, "--channel", "nightly", "--rollout", "5")
    assert unknown.returncode == 5, unknown.stderr
    assert "no channel named nightly" in unknown.stderr


def test_upload_gives_verify_the_desktop_updaters_fields(cli: Cli, tmp_path: Path) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Acme Mac", "--project", "Acme", "--platform", "macos")
    where = ["-p", "Acme", "-a", "Acme Mac"]
    signature = base64.b64encode(hashlib.sha512(b"signed").digest()).decode()
    dmg = tmp_path / "Example-1.4.2.dmg"
    dmg.write_bytes(desktop_files.dmg())

    build = cli.json(
        "upload", str(dmg), *where, "--architecture", "universal",
        "--sparkle-ed-signature", signature, "--minimum-os-version", "11.0",
    )  # fmt: skip

    assert build["architecture"] == "universal"
    assert build["sparkleEdSignature"] == signature
    assert build["metadata"]["minOs"] == "11.0"
    assert build["sha512"] == base64.b64encode(hashlib.sha512(dmg.read_bytes()).digest()).decode()
    assert cli.json("builds", "show", build["buildId"], *where)["architecture"] == "universal"

    # What the file says wins: a zipped universal .app is not an x64 build.
    app = tmp_path / "Example-1.4.2-mac.zip"
    app.write_bytes(desktop_files.app_zip())
    mismatch = cli("upload", str(app), *where, "--architecture", "x64")
    assert mismatch.returncode == 5, mismatch.stderr
    assert "metadata_mismatch" in mismatch.stderr
    # The server's rules for each field reach the command line.
    other = tmp_path / "Other-1.0.dmg"
    other.write_bytes(desktop_files.dmg(size=70_000))
    bad = cli("upload", str(other), *where, "--sparkle-ed-signature", "not-a-signature")
    assert bad.returncode == 5, bad.stderr
    assert "sparkleEdSignature" in bad.stderr
    usage = cli("upload", str(other), *where, "--architecture", "ppc")
    assert usage.returncode == 2, usage.stderr


def test_an_upload_by_app_id_survives_renaming_the_application_and_its_project(
    cli: Cli,
) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("projects", "create", "Other")
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    ci = ["upload", str(APK), "--app-id", app["id"]]  # as the console's "Upload from CI" says

    first = cli.json(*ci)
    renamed = cli("apps", "update", "Acme Android", "-p", "Acme", "--name", "Acme Droid")
    assert cli("projects", "rename", "Acme", "Acme Mobile").returncode == 0
    second = cli.json(*ci)
    by_old_name = cli("upload", str(APK), "-p", "Acme Mobile", "-a", "Acme Android")
    recased = cli("apps", "update", app["id"], "-p", "Acme Mobile", "--name", "ACME DROID")

    assert (first["applicationId"], first["status"]) == (app["id"], "ready")
    assert renamed.returncode == 0, renamed.stderr
    assert renamed.stderr == (
        "buildbay: warning: Renamed from Acme Android to Acme Droid: CI jobs that name the "
        'application by name (buildbay upload --app "Acme Android") must change. Its id never '
        f"changes: name it by --app-id {app['id']} instead.\n"
    )
    assert (second["applicationId"], second["status"]) == (app["id"], "ready")
    assert by_old_name.returncode == 4, by_old_name.stderr  # what the warning said
    assert "no application named 'Acme Android'" in by_old_name.stderr
    assert (recased.returncode, recased.stderr) == (0, "")  # a change of case breaks nothing
    # --project still may say where, and a wrong id is not found, not guessed.
    assert cli.json(*ci, "-p", "Acme Mobile")["applicationId"] == app["id"]
    unknown = cli("upload", str(APK), "--app-id", "app_" + "0" * 26)
    assert unknown.returncode == 4, unknown.stderr
    assert f"no application app_{'0' * 26} in your projects" in unknown.stderr
    for wrong in (
        ["upload", str(APK)],
        ["upload", str(APK), "--app-id", "Acme Droid"],
        ["upload", str(APK), "--app-id", app["id"], "--app", "Acme Droid"],
        ["upload", str(APK), "--app", "Acme Droid"],
    ):
        done = cli(*wrong)
        assert done.returncode == 2, (wrong, done.stderr)
        assert done.stderr.startswith("buildbay: give --app-id") or "--app-id takes" in (
            done.stderr
        ), done.stderr


def test_a_file_the_applications_platform_refuses_is_never_sent(cli: Cli, tmp_path: Path) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Acme iOS", "--project", "Acme", "--platform", "ios")
    where = ["-p", "Acme", "-a", "Acme iOS"]
    renamed = tmp_path / "Acme.ipa"  # an .apk by its content
    renamed.write_bytes(APK.read_bytes())

    by_name = cli("upload", str(APK), *where)
    by_content = cli("upload", str(renamed), *where)

    assert by_name.returncode == 5, by_name.stderr
    assert by_name.stderr == (
        "buildbay: demo.apk is not an iOS build: this iOS application takes .ipa files\n"
    )
    assert by_content.returncode == 5, by_content.stderr
    assert "Acme.ipa is an Android app, and this is an iOS application" in by_content.stderr
    assert cli.json("builds", "list", *where)["builds"] == []  # not even a pending build


def test_names_match_in_any_case_and_a_miss_suggests_the_closest(cli: Cli) -> None:
    _login(cli)
    project = cli.json("projects", "create", "Acme Mobile")
    assert cli.json("projects", "show", "acme mobile")["id"] == project["id"]
    taken = cli("projects", "create", "ACME MOBILE")
    assert taken.returncode == 5, taken.stderr  # the API's 409: refused
    assert "You already own a project named ACME MOBILE" in taken.stderr
    missed = cli("apps", "list", "-p", "Acme Mobil")
    assert missed.returncode == 4, missed.stderr
    assert "no project named 'Acme Mobil'" in missed.stderr
    assert "did you mean 'Acme Mobile'?" in missed.stderr


def test_a_token_limited_to_a_scope_and_projects(cli: Cli) -> None:
    _login(cli)
    acme = cli.json("projects", "create", "Acme")
    cli.json("projects", "create", "Other")

    token = cli.json("tokens", "create", "uploader", "--scope", "builds:write", "--project", "Acme")

    assert token["scope"] == "builds:write"
    assert token["projectIds"] == [acme["id"]]
    listed = cli("tokens", "list")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "uploader" in line)
    assert "builds:write" in row
    assert "Acme" in row
    assert "Other" not in row
    [shown] = cli.json("tokens", "list")
    assert (shown["scope"], shown["projectIds"]) == ("builds:write", [acme["id"]])
    ci = {"BUILDBAY_URL": cli.server, "BUILDBAY_TOKEN": token["token"], "BUILDBAY_PROFILE": "none"}
    assert [p["name"] for p in cli.json("projects", "list", env=ci)] == ["Acme"]
    refused = cli("tokens", "create", "permanent", env=ci)
    assert refused.returncode == 3
    assert "interactive_session_required" in refused.stderr

    wrong = cli("tokens", "create", "x", "--scope", "write")
    assert wrong.returncode == 2
    assert "is not one of read, upload, builds:write" in wrong.stderr
    assert cli("tokens", "create", "x", "--project", "Nope").returncode == 4


def test_members_by_email(cli: Cli) -> None:
    _login(cli)
    tester = _email("tester")
    r = httpx.post(
        f"{cli.server}/api/auth/register",
        json={"email": tester, "password": PASSWORD, "name": "Tess"},
    )
    assert r.status_code == 201, r.text
    cli.json("projects", "create", "Acme")
    added = cli.json("members", "add", tester, "-p", "Acme")
    assert added["role"] == "tester"
    changed = cli.json("members", "set-role", tester, "developer", "-p", "Acme")
    assert changed["role"] == "developer"
    assert cli("members", "remove", tester, "-p", "Acme").returncode == 0
    assert [m["email"] for m in cli.json("members", "list", "-p", "Acme")] == [cli.email]


def test_upload_distributes_to_a_group_by_name_and_to_an_email(cli: Cli) -> None:
    _login(cli)
    project = cli.json("projects", "create", "Acme")
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme")
    login = httpx.post(
        f"{cli.server}/api/auth/login", json={"email": cli.email, "password": PASSWORD}
    )
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    apps = f"{cli.server}/api/projects/{project['id']}/applications/{app['id']}"
    r = httpx.put(apps, json={"autoDistributeGroups": []}, headers=headers)
    assert r.status_code == 200, r.text
    r = httpx.post(f"{cli.server}/api/projects/{project['id']}/groups", json={"name": "QA"},
                   headers=headers)  # fmt: skip
    assert r.status_code == 201, r.text
    newcomer = _email("newcomer")

    build = cli.json(
        "upload", str(APK), "-p", "Acme", "-a", "Acme Android",
        "--distribute", "QA", "--distribute-email", newcomer,
    )  # fmt: skip

    installs = httpx.get(
        f"{cli.server}/api/app-distribution/{project['id']}/{app['id']}/builds/"
        f"{build['buildId']}/installs",
        headers=headers,
    ).json()
    assert [t["email"] for t in installs["testers"]] == [newcomer]  # invited as tester
    missing = cli("upload", str(APK), "-p", "Acme", "-a", "Acme Android", "--distribute", "Nope")
    assert missing.returncode == 4, missing.stderr
    assert "no tester group named 'Nope'" in missing.stderr


def test_an_upload_run_twice_sends_nothing_and_applies_what_it_asks_to_the_build(
    cli: Cli,
) -> None:
    """A CI job run again over the same file: no second build, no byte sent; its channels,
    distribution and install link apply to the build the file already is."""
    _login(cli)
    project = cli.json("projects", "create", "Acme")
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    where = ["-p", "Acme", "-a", "Acme Android"]
    cli.json("channels", "create", "beta", *where)
    first = cli("upload", str(APK), *where, "--notes", "The first")
    assert first.returncode == 0, first.stderr
    assert "Uploading: 100%" in first.stderr
    assert "already uploaded" not in first.stderr
    build_id = first.stdout.split()[1]
    newcomer = _email("newcomer")

    again = cli(
        "upload", str(APK), *where, "--notes", "Ignored", "--channel", "beta", "--mandatory",
        "--distribute-email", newcomer, "--install-link-hours", "24", "--json",
    )  # fmt: skip

    assert again.returncode == 0, again.stderr
    assert f"already uploaded as build {build_id}, nothing sent" in again.stderr
    assert "Uploading" not in again.stderr  # not a byte
    build = json.loads(again.stdout)
    assert (build["buildId"], build["reused"], build["sent"]) == (build_id, True, False)
    assert (build["channels"], build["mandatory"]) == (["beta", "default"], True)
    assert build["notes"] == "The first"
    assert "/install/" in build["installUrl"]
    assert [b["buildId"] for b in cli.json("builds", "list", *where)["builds"]] == [build_id]
    login = httpx.post(
        f"{cli.server}/api/auth/login", json={"email": cli.email, "password": PASSWORD}
    )
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    base = f"{cli.server}/api/app-distribution/{project['id']}/{app['id']}/builds"
    installs = httpx.get(f"{base}/{build_id}/installs", headers=headers).json()
    assert newcomer in [t["email"] for t in installs["testers"]]
    pending = httpx.get(f"{base}?status=pending", headers=headers).json()
    assert pending["builds"] == []  # no upload link was made

    refused = cli("upload", str(APK), *where, "--on-duplicate", "refuse")
    assert refused.returncode == 5, refused.stderr
    assert f"already uploaded as build {build_id}" in refused.stderr
    assert "(409 duplicate_build)" in refused.stderr


def test_an_upload_says_what_the_server_warns(cli: Cli) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Acme Android", "--project", "Acme", "--platform", "android")
    where = ["-p", "Acme", "-a", "Acme Android"]
    first = cli.json("upload", str(APK), *where)

    other = cli("upload", str(APK_V1), *where)  # the same version code, other bytes

    assert other.returncode == 0, other.stderr
    assert (
        f"warning: Build {first['buildId']} has the same version code (42) with other bytes"
        in other.stderr
    )


def _group(cli: Cli, name: str, *testers: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A tester group of Acme made through the API, with these e-mails in it, and Acme's
    applications distributing to no group by themselves; and the owner's API headers."""
    login = httpx.post(
        f"{cli.server}/api/auth/login", json={"email": cli.email, "password": PASSWORD}
    )
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    [project] = cli.json("projects", "list")
    for app in cli.json("apps", "list", "-p", "Acme"):  # no build reaches anyone by itself
        r = httpx.put(f"{cli.server}/api/projects/{project['id']}/applications/{app['id']}",
                      json={"autoDistributeGroups": []}, headers=headers)  # fmt: skip
        assert r.status_code == 200, r.text
    groups = f"{cli.server}/api/projects/{project['id']}/groups"
    r = httpx.post(groups, json={"name": name}, headers=headers)
    assert r.status_code == 201, r.text
    group = r.json()
    if testers:
        r = httpx.post(f"{groups}/{group['id']}/testers", json={"emails": list(testers)},
                       headers=headers)  # fmt: skip
        assert r.status_code == 200, r.text
    return group, headers


def _member(cli: Cli, who: str) -> str:
    email = _email(who)
    r = httpx.post(f"{cli.server}/api/auth/register",
                   json={"email": email, "password": PASSWORD, "name": who})  # fmt: skip
    assert r.status_code == 201, r.text
    cli.json("members", "add", email, "-p", "Acme")
    return email


def test_upload_json_says_what_the_distribution_did_and_where_the_build_is(
    cli: Cli, tmp_path: Path
) -> None:
    _login(cli)
    project = cli.json("projects", "create", "Acme")
    app = cli.json("apps", "create", "Acme Android", "--project", "Acme")
    tester = _member(cli, "tess")
    qa, _ = _group(cli, "QA", tester)
    newcomer = _email("newcomer")
    where = ["-p", "Acme", "-a", "Acme Android"]

    answer = cli.json("upload", str(APK), *where, "--distribute", "QA",
                      "--distribute-email", newcomer, "--install-link-hours", "24")  # fmt: skip
    # Other files: the same one again would be the build it already is (one build per binary).
    second, third = tmp_path / "second.apk", tmp_path / "third.apk"
    second.write_bytes(apk(version_code=43))
    third.write_bytes(apk(version_code=44))
    plain = cli.json("upload", str(second), *where)
    lines = cli("upload", str(third), *where, "--distribute", "QA")

    build_id = answer["buildId"]
    assert answer["status"] == "ready"
    assert answer["distribution"] == {
        "buildId": build_id, "groups": [qa["id"]], "testersReached": 1, "notified": 1,
        "invited": [newcomer], "notInvited": [], "invitationsPending": 1, "unsubscribed": 0,
    }  # fmt: skip
    assert answer["consoleUrl"] == (
        f"{cli.server}/projects/{project['id']}/apps/{app['id']}/builds/{build_id}"
    )
    assert answer["installUrl"].startswith(f"{cli.server}/install/")  # for testers
    assert plain["distribution"] is None
    assert plain["installUrl"] is None  # no shared install link asked
    assert lines.returncode == 0, lines.stderr
    assert "reached  to QA: 1 tester reached, 1 mailed\n" in lines.stdout
    assert f"console  {cli.server}/projects/{project['id']}/apps/" in lines.stdout


def test_builds_distribute_to_a_group_and_an_email(cli: Cli) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Acme Android", "--project", "Acme")
    where = ["-p", "Acme", "-a", "Acme Android"]
    tester, member = _member(cli, "tess"), _member(cli, "max")
    qa, headers = _group(cli, "QA", tester)
    build = cli.json("upload", str(APK), *where)

    nothing = cli("builds", "distribute", build["buildId"], *where)
    done = cli("builds", "distribute", build["buildId"], *where, "--group", "QA",
               "--email", member)  # fmt: skip
    again = cli.json("builds", "distribute", build["buildId"], *where, "-g", "QA", "--no-notify")

    assert nothing.returncode == 2
    assert "give --group or --email" in nothing.stderr
    assert done.returncode == 0, done.stderr
    assert done.stdout == "distributed to QA: 2 testers reached, 2 mailed\n"
    assert (again["groups"], again["testersReached"]) == ([qa["id"]], 0)  # no one new
    installs = httpx.get(
        f"{cli.server}/api/app-distribution/{build['projectId']}/{build['applicationId']}/"
        f"builds/{build['buildId']}/installs",
        headers=headers,
    ).json()
    reached = {t["email"] for t in installs["testers"] if t["reachedAt"]}
    assert {tester, member} <= reached
    missing = cli("builds", "distribute", build["buildId"], *where, "--group", "Nope")
    assert missing.returncode == 4, missing.stderr
    assert "no tester group named 'Nope'" in missing.stderr


def test_webhooks_create_list_test_and_deliveries(cli: Cli) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    # localhost: resolved from the hosts file, then refused at connect (a loopback address),
    # so the delivery goes nowhere.
    url = "https://localhost/hooks"
    done = cli("webhooks", "create", url, "-p", "Acme", "-e", "build.ready", "-e", "member.added")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("whsec_")
    [webhook] = cli.json("webhooks", "list", "-p", "Acme")
    assert webhook["url"] == url
    assert webhook["events"] == ["build.ready", "member.added"]
    assert "secret" not in webhook
    done = cli("webhooks", "test", webhook["id"], "-p", "Acme")
    assert done.returncode == 0, done.stderr
    assert "Test event queued as delivery whd_" in done.stderr
    [delivery] = cli.json("webhooks", "deliveries", webhook["id"], "-p", "Acme")
    assert delivery["eventType"] == "webhook.test"
    assert delivery["status"] == "pending"
    done = cli("webhooks", "deliveries", webhook["id"], "-p", "Acme")
    assert "webhook.test" in done.stdout
    done = cli("webhooks", "create", "http://localhost/x", "-p", "Acme", "-e", "build.ready")
    assert done.returncode == 5, done.stderr  # refused: https:// only here
    assert "https://" in done.stderr
    # A chat's incoming webhook: its format, and the hint the URL gives.
    slack = cli.json("webhooks", "create", "https://hooks.slack.com/services/T/B/x", "-p",
                     "Acme", "-e", "build.ready", "--format", "slack")  # fmt: skip
    assert (slack["format"], slack["suggestedFormat"]) == ("slack", "slack")
    done = cli("webhooks", "create", url, "-p", "Acme", "-e", "build.ready", "--format", "irc")
    assert done.returncode != 0
    assert "format" in done.stderr


def test_webhooks_disable_enable_retry_and_delete(cli: Cli) -> None:
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("projects", "create", "Other")
    created = cli.json("webhooks", "create", "https://localhost/hooks", "-p", "Acme",
                       "-e", "build.ready")  # fmt: skip
    webhook = created["id"]
    queued = cli.json("webhooks", "test", webhook, "-p", "Acme")
    delivery = queued["deliveryId"]

    disabled = cli.json("webhooks", "disable", webhook, "-p", "Acme")
    refused = cli("webhooks", "retry", delivery, "-p", "Acme")
    enabled = cli("webhooks", "enable", webhook, "-p", "Acme")
    retried = cli("webhooks", "retry", delivery, "-p", "Acme")
    elsewhere = cli("webhooks", "retry", delivery, "-p", "Other")

    assert (disabled["id"], disabled["enabled"]) == (webhook, False)
    assert disabled["disabledReason"] == "disabled by a project admin"
    assert refused.returncode == 5, refused.stderr  # the API's 409
    assert "webhook_disabled" in refused.stderr
    assert enabled.returncode == 0, enabled.stderr
    assert enabled.stderr == f"Enabled webhook {webhook} (https://localhost/hooks)\n"
    [listed] = cli.json("webhooks", "list", "-p", "Acme")
    assert listed["enabled"] is True
    assert retried.returncode == 0, retried.stderr
    assert retried.stderr == f"Delivery {delivery} queued to be sent again\n"
    assert elsewhere.returncode == 4, elsewhere.stderr  # another project's: not found
    assert "delivery_not_found" in elsewhere.stderr
    kept = cli("webhooks", "delete", webhook, "-p", "Acme", stdin="n\n")
    assert kept.returncode == 1
    assert len(cli.json("webhooks", "list", "-p", "Acme")) == 1
    deleted = cli("webhooks", "delete", webhook, "-p", "Acme", "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert cli.json("webhooks", "list", "-p", "Acme") == []


def test_each_failure_class_has_its_exit_code(cli: Cli, tmp_path: Path) -> None:
    _login(cli)
    project = cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Android", "-p", "Acme")

    def code(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        done = cli(*args, env=env)
        assert done.stderr.count("\n") == 1, done.stderr  # one line, not a traceback
        return done.returncode, done.stderr

    assert code("projects", "show", "prj_00000000000000000000000000")[0] == 4
    assert code("builds", "show", "bld_nope", "-p", "Acme", "-a", "Android")[0] == 4
    assert code("projects", "show", "No such project")[0] == 4
    assert code("projects", "create", " ")[0] == 5  # a name of only spaces: 422
    assert code("projects", "list", env={"BUILDBAY_TOKEN": "bb_" + "A" * 40})[0] == 3
    empty = tmp_path / "empty.apk"
    empty.write_bytes(b"")
    assert code("upload", str(empty), "-p", "Acme", "-a", "Android")[0] == 5  # fileSize 0: 422
    too_big = tmp_path / "big.apk"
    with too_big.open("wb") as file:  # sparse: above the free plan's 1 GiB, nothing written
        file.truncate(1024**3 + 1)
    returncode, message = code("upload", str(too_big), "-p", project["id"], "-a", "Android")
    assert returncode == 6
    assert "file_too_large" in message
    # A server that is down: each wait is said, naming the address; then exit 7.
    down = f"http://127.0.0.1:{free_port()}"
    done = cli("projects", "list", env={"BUILDBAY_URL": down})
    assert done.returncode == 7
    retrying, failed = done.stderr.splitlines()
    assert retrying.startswith(f"buildbay: cannot reach {down}: ")
    assert "; trying again in " in retrying
    assert retrying.endswith(" s (try 2 of 2)")
    assert failed.startswith(f"buildbay: cannot reach {down}: ")
    # A name that does not resolve is not retried: at once, and it says so.
    started = time.monotonic()
    done = cli("projects", "list", env={"BUILDBAY_URL": "http://no-such-host.invalid:8000",
                                        "BUILDBAY_RETRY_ATTEMPTS": "8"})  # fmt: skip
    assert time.monotonic() - started < 10  # eight tries would take 23-45 s
    assert done.returncode == 7
    assert done.stderr.splitlines() == [
        line for line in done.stderr.splitlines() if "host name does not resolve" in line
    ]
    assert "cannot find http://no-such-host.invalid:8000" in done.stderr
    assert cli("projects", "frobnicate").returncode == 2  # usage: typer's own message


def test_an_upload_survives_the_server_being_killed_and_restarted(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    """400 MiB through the CLI (in parts); the server gets SIGKILL once part of it has arrived,
    and comes back on the same port and data: the CLI's retry finishes the upload, and exits
    0."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "buildbay", "serve", "--port", str(port)]

    def serve(log: str) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
        return running(argv, env=server_env, log_path=tmp_path / log, ready_url=f"{base}/readyz")

    big = tmp_path / "big.apk"
    block = os.urandom(1024 * 1024)
    with big.open("wb") as file:
        for i in range(400):
            file.write(i.to_bytes(4, "big") + block[4:])
    with big.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    data = Path(server_env["BUILDBAY_DATA_DIR"])

    with serve("server-1.log") as first:
        cli = Cli(base, tmp_path / "config", "ci@example.com")
        del cli.env["BUILDBAY_RETRY_ATTEMPTS"]  # the default budget must ride out a restart
        r = httpx.post(
            f"{base}/api/auth/register", json={"email": "ci@example.com", "password": PASSWORD}
        )
        assert r.status_code == 201, r.text
        _login(cli)
        cli.json("projects", "create", "Acme")
        cli.json("apps", "create", "Android", "-p", "Acme")
        upload = subprocess.Popen(
            [sys.executable, "-m", "buildbay_client", "upload", str(big), "-p", "Acme", "-a",
             "Android", "--json"],
            env=cli.process_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        # The server dies once 5 parts (40 MiB) are on its disk: in the middle of the upload.
        deadline = time.monotonic() + 60
        while len(list(_existing(data.glob("**/multipart/**/parts/[0-9]*")))) < 5:
            assert upload.poll() is None, upload.communicate()
            assert time.monotonic() < deadline, "no upload arrived at the server"
            time.sleep(0.005)
        first.send_signal(signal.SIGKILL)
        first.wait()
    with serve("server-2.log"):
        out, errors = upload.communicate(timeout=300)
    assert upload.returncode == 0, errors
    build = json.loads(out)
    assert build["status"] == "ready"
    assert build["sha256"] == digest
    assert build["fileSize"] == big.stat().st_size
    assert "Uploading: starting again after a failure" in errors  # the kill was felt


def test_a_killed_upload_resumes_and_sends_only_the_missing_parts(
    server: str, server_env: dict[str, str], tmp_path: Path
) -> None:
    """200 MiB (25 parts): the CLI gets SIGKILL once 8 parts have arrived; the same command run
    again asks what arrived, sends only the rest, and the build verifies with the right sha256.
    --json and the exit code are as for any upload."""
    big = tmp_path / "big.bin"
    block = os.urandom(1024 * 1024)
    with big.open("wb") as file:
        for i in range(200):
            file.write(i.to_bytes(4, "big") + block[4:])
    with big.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    data = Path(server_env["BUILDBAY_DATA_DIR"])
    cli = Cli(server, tmp_path / "config", _email("resume"))
    r = httpx.post(f"{server}/api/auth/register", json={"email": cli.email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    _login(cli)
    cli.json("projects", "create", "Acme")
    cli.json("apps", "create", "Desktop", "-p", "Acme")
    argv = [sys.executable, "-m", "buildbay_client", "upload", str(big), "-p", "Acme", "-a",
            "Desktop", "--json", "--parts-in-flight", "2"]  # fmt: skip

    with subprocess.Popen(argv, env=cli.process_env(), stderr=subprocess.PIPE, text=True) as first:
        deadline = time.monotonic() + 60
        while len(list(_existing(data.glob("**/multipart/**/parts/[0-9]*")))) < 8:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "no part arrived at the server"
            time.sleep(0.005)
        first.send_signal(signal.SIGKILL)
        first.communicate()
    kept = list((tmp_path / "config" / "uploads").glob("*.json"))
    assert len(kept) == 1  # the upload's state, for the next run
    build_id = json.loads(kept[0].read_text())["build_id"]
    arrived = len(list(_existing(data.glob("**/multipart/**/parts/[0-9]*"))))

    second = subprocess.run(
        argv, env=cli.process_env(), capture_output=True, text=True, check=False
    )

    assert second.returncode == 0, second.stderr
    build = json.loads(second.stdout)
    assert build["status"] == "ready"
    assert build["sha256"] == digest
    assert build["fileSize"] == big.stat().st_size
    assert build["buildId"] == build_id  # the same upload, resumed
    # Its first progress line starts from what had arrived: at least the 8 parts seen.
    first_line = next(line for line in second.stderr.splitlines() if "Uploading:" in line)
    resumed_mib = float(first_line.split("%")[1].split()[0])
    assert resumed_mib >= arrived * 8, first_line
    assert not kept[0].exists()  # done: nothing left to resume


def _existing(paths: Iterator[Path]) -> Iterator[Path]:
    """The files that still exist (the server renames or deletes them as it goes)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.stat()
            yield path


def test_login_with_a_token_logout_and_user_text_that_looks_like_markup(
    cli: Cli, tmp_path: Path
) -> None:
    _login(cli)
    token = cli.json("tokens", "create", "laptop")["token"]
    other = Cli(cli.server, tmp_path / "other-config", cli.email)
    done = other("login", "--url", cli.server, "--token", token)
    assert done.returncode == 0, done.stderr
    assert other.json("whoami")["email"] == cli.email
    cli.json("projects", "create", "Weird [/] [bold]name")
    listed = cli("projects", "list")
    assert listed.returncode == 0, listed.stderr
    assert "Weird [/] [bold]name" in listed.stdout

    assert cli("logout").returncode == 0
    saved = json.loads((tmp_path / "config" / "credentials.json").read_text())
    assert saved["profiles"]["production"]["token"] is None
    assert cli("whoami").returncode == 3
    assert stat.S_IMODE((tmp_path / "config").stat().st_mode) == 0o700


def test_a_profile_never_sends_its_credentials_to_another_server(cli: Cli) -> None:
    _login(cli)
    # The same server under another address: the saved token is not sent there.
    elsewhere = cli.server.replace("127.0.0.1", "localhost")
    done = cli("whoami", env={"BUILDBAY_URL": elsewhere})
    assert done.returncode == 3
    assert "not_authenticated" in done.stderr
