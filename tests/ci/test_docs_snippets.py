"""docs/ci.md stays true: the Bitrise, CircleCI and Jenkins snippets' `buildbay` commands run
against a real server with each CI's own variables (the client installed as action.yml installs
it: the snippets' own pip line names the same client from a git host, which the test has not),
and the action's and the component's examples use inputs they declare."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builds.android_files import APK
from tests.ci.conftest import Team
from tests.ci.runner import ACTION, GITLAB_COMPONENT, ROOT, load

pytestmark = pytest.mark.slow

GUIDE = ROOT / "docs" / "ci.md"
INSTALL = re.compile(
    r'^\s*(python3 -m )?pip install (--user )?"buildbay-client @ git\+https://\S+@v[\d.]+'
    r'#subdirectory=client"\s*$'
)


def snippet(heading: str) -> str:
    """The first fenced block under `## heading`."""
    section = GUIDE.read_text().split(f"\n## {heading}\n", 1)[1]
    return section.split("```", 2)[1].split("\n", 1)[1]


def command(script: str) -> str:
    """The script without its install line, which must be there and install the client."""
    lines = script.splitlines()
    installs = [line for line in lines if INSTALL.match(line)]
    assert len(installs) == 1, "the snippet installs buildbay-client from a git host, at a tag"
    return "\n".join(line for line in lines if line not in installs) + "\n"


def _run(script: str, env: dict[str, str], cwd: Path, client_venv: Path) -> str:
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={"PATH": f"{client_venv.parent}:/usr/bin:/bin", "HOME": str(cwd), "CI": "true",
             "BUILDBAY_CONFIG_DIR": str(cwd / "no-profile"), **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _only_build(team: Team) -> dict[str, object]:
    found = team.get(f"/api/app-distribution/{team.project['id']}/{team.app['id']}/builds")
    [build] = found["builds"]
    return dict(build)


def _ci(team: Team) -> dict[str, str]:
    return {"BUILDBAY_URL": team.server, "BUILDBAY_TOKEN": team.token,
            "BUILDBAY_APP_ID": team.app["id"]}  # fmt: skip


def _checkout(tmp_path: Path) -> Path:
    apk = tmp_path / "app" / "build" / "outputs" / "apk" / "release" / "app-release.apk"
    apk.parent.mkdir(parents=True)
    shutil.copyfile(APK, apk)
    return tmp_path


def test_the_bitrise_step(team: Team, client_venv: Path, tmp_path: Path) -> None:
    [step] = yaml.safe_load(snippet("Bitrise"))
    script = command(step["script@1"]["inputs"][0]["content"])
    source, deploy = tmp_path / "src", tmp_path / "deploy"
    source.mkdir()
    deploy.mkdir()
    (source / "CHANGELOG.md").write_text("Faster start\n")
    env = {**_ci(team), "BITRISE_IO": "true", "BITRISE_APK_PATH": str(APK),
           "BITRISE_SOURCE_DIR": str(source), "BITRISE_DEPLOY_DIR": str(deploy)}  # fmt: skip
    log = _run(script, env, tmp_path, client_venv)
    build = _only_build(team)
    assert build["notes"] == "Faster start"
    assert str(build["buildId"]) in (deploy / "buildbay.json").read_text()
    assert team.token not in log


def test_the_circleci_job(team: Team, client_venv: Path, tmp_path: Path) -> None:
    job = yaml.safe_load(snippet("CircleCI"))["jobs"]["upload"]
    [run] = [step["run"] for step in job["steps"] if isinstance(step, dict) and "run" in step]
    env = {**_ci(team), "CIRCLECI": "true", "CIRCLE_BUILD_NUM": "311", "CIRCLE_BRANCH": "main"}
    log = _run(command(run["command"]), env, _checkout(tmp_path), client_venv)
    assert _only_build(team)["notes"] == "Build 311 of main"
    assert team.token not in log


def test_the_jenkins_stage(team: Team, client_venv: Path, tmp_path: Path) -> None:
    groovy = snippet("Jenkins")
    [script] = re.findall(r"sh '''\n(.*?)'''", groovy, flags=re.DOTALL)
    assert "withCredentials([string(credentialsId:" in groovy
    env = {**_ci(team), "JENKINS_URL": "https://jenkins.example.com/", "BUILD_NUMBER": "12"}
    log = _run(command(script), env, _checkout(tmp_path), client_venv)
    assert _only_build(team)["notes"] == "Jenkins build 12"
    assert team.token not in log


def test_the_action_and_component_examples_use_declared_inputs() -> None:
    [*_, upload, _echo] = yaml.safe_load(snippet("GitHub Actions: the Buildbay action"))
    assert set(upload["with"]) <= set(load(ACTION)["inputs"])
    [include] = yaml.safe_load(snippet("GitLab CI: the Buildbay component"))["include"]
    spec, _ = yaml.safe_load_all(GITLAB_COMPONENT.read_text())
    assert set(include["inputs"]) <= set(spec["spec"]["inputs"])
