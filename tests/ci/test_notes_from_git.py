"""The action's and the component's `notes-from-git` input reach `buildbay upload
--notes-from-git`: the notes are the subjects of the workspace's commits since the last build's
(the first build: the last commit's message), in a real git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.builds.android_files import APK, apk
from tests.ci.conftest import Team
from tests.ci.runner import ROOT, run_action, run_gitlab_job

pytestmark = pytest.mark.slow


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=CI", "-c", "user.email=ci@example.com", *args],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip


def _commit(repo: Path, subject: str) -> None:
    _git(repo, "commit", "--allow-empty", "-q", "-m", subject)


def test_the_action_writes_notes_from_the_commits_since_the_last_build(
    team: Team, client_venv: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _git(workspace, "init", "-q", "-b", "main")
    _commit(workspace, "Start the app")
    inputs = {"url": team.server, "token": team.token, "project": team.project["name"],
              "application": "Acme Android", "notes-from-git": "true"}  # fmt: skip
    before = {"install": {"buildbay": str(client_venv)}}
    first = run_action({**inputs, "file": str(APK)}, tmp_path, only={"upload"},
                       steps_before=before)  # fmt: skip
    assert first.ok, first.log
    assert team.build(first.outputs["build-id"])["notes"] == "Start the app"

    _commit(workspace, "Fix the login crash")
    _commit(workspace, "Faster start")
    second_file = tmp_path / "second.apk"
    second_file.write_bytes(apk(version_code=43))
    again = tmp_path / "again"
    again.mkdir()
    (again / "workspace").symlink_to(workspace)
    second = run_action({**inputs, "file": str(second_file)}, again, only={"upload"},
                        steps_before=before)  # fmt: skip
    assert second.ok, second.log
    notes = team.build(second.outputs["build-id"])["notes"]
    assert "Fix the login crash" in notes
    assert "Faster start" in notes
    assert "Start the app" not in notes


def test_the_component_passes_notes_from_git(team: Team, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q", "-b", "main")
    _commit(project, "Ship the settings screen")
    run = run_gitlab_job(
        {"client": str(ROOT / "client"), "application": team.app["id"], "file": str(APK),
         "notes-from-git": "true"},
        tmp_path,
        {"BUILDBAY_TOKEN": team.token, "BUILDBAY_URL": team.server,
         "CI_COMMIT_SHA": "", "CI_COMMIT_REF_NAME": ""},
    )  # fmt: skip
    assert run.returncode == 0, run.log
    assert team.build(run.dotenv["BUILDBAY_BUILD_ID"])["notes"] == "Ship the settings screen"
