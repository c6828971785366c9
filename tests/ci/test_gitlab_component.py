"""ci/gitlab/buildbay.yml, the Buildbay GitLab CI/CD component: its spec, and its job run as a
GitLab runner runs it (tests/ci/runner.py: inputs interpolated, the job's variables, the
script with `sh -e`) against a real server, with the client installed by the job itself from
this checkout."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.builds.android_files import APK
from tests.ci.conftest import Team
from tests.ci.runner import GITLAB_COMPONENT, ROOT, run_gitlab_job
from tests.ci.test_github_action import INPUTS
from tests.oidc_provider import oidc_provider_process
from tests.publishers.id_tokens import id_token

pytestmark = pytest.mark.slow


def test_the_component_declares_the_actions_inputs() -> None:
    import yaml

    spec, jobs = yaml.safe_load_all(GITLAB_COMPONENT.read_text(encoding="utf-8"))
    inputs = spec["spec"]["inputs"]
    assert set(inputs) >= INPUTS
    assert all(declared.get("description") for declared in inputs.values())
    [job] = jobs.values()
    assert all("$[[" not in line for line in job["script"]), "inputs reach the shell as variables"


def test_the_job_uploads_and_leaves_a_dotenv_report_with_no_token_in_its_log(
    team: Team, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    run = run_gitlab_job(
        {
            "client": str(ROOT / "client"), "project": team.project["name"],
            "application": "Acme Android", "file": str(APK),
            "notes": f"Fixes $HOME and $(touch {marker})", "groups": "QA", "channel": " beta ,",
            "mandatory": "true", "install-link-days": "2",
        },
        tmp_path,
        # The project's CI/CD variables: the token masked there, the url as a plain variable.
        {"BUILDBAY_TOKEN": team.token, "BUILDBAY_URL": team.server},
    )  # fmt: skip
    assert run.returncode == 0, run.log
    build = team.build(run.dotenv["BUILDBAY_BUILD_ID"])
    assert build["notes"] == f"Fixes $HOME and $(touch {marker})"
    assert not marker.exists()
    assert build["channels"] == ["beta"]
    assert build["mandatory"] is True
    assert run.dotenv == {
        "BUILDBAY_BUILD_ID": build["buildId"],
        "BUILDBAY_INSTALL_URL": build["installUrl"],
        "BUILDBAY_BUILD_URL": build["consoleUrl"],
        "BUILDBAY_VERSION": "1.4.2 (42)",
    }
    assert f"QR code of the install link {build['installUrl']}:" in run.log
    assert "▀" in run.log
    assert team.token not in run.log
    assert team.token[-12:] not in run.log


def test_the_job_fails_on_a_wrong_token_without_showing_it(team: Team, tmp_path: Path) -> None:
    wrong = "bb_" + "Z" * 40
    run = run_gitlab_job(
        {"client": str(ROOT / "client"), "application": team.app["id"], "file": str(APK),
         "token": "$UPLOADER_TOKEN"},
        tmp_path,
        {"UPLOADER_TOKEN": wrong, "BUILDBAY_URL": team.server},
    )  # fmt: skip
    assert run.returncode == 3, run.log
    assert "Z" * 12 not in run.log
    assert run.dotenv == {}


@pytest.mark.parametrize("target", [{}, {"project": "Acme", "application": "Acme Android"}])
def test_a_job_without_a_token_needs_the_application_s_id_before_anything_is_installed(
    tmp_path: Path, target: dict[str, str]
) -> None:
    # Trusted publishing: a publisher grants only its own application, so the upload names it,
    # by id (the exchanged token cannot read projects to look a name up).
    run = run_gitlab_job(
        {"client": str(ROOT / "client"), "file": str(APK), **target}, tmp_path,
        {"BUILDBAY_URL": "http://127.0.0.1:9", "BUILDBAY_ID_TOKEN": "eyJ.the.token"},
    )  # fmt: skip

    assert run.returncode == 2, run.log
    assert "trusted publishing (no token): set the application input to the application's id" in (
        run.log
    )
    assert not (tmp_path / "project" / ".buildbay-client").exists()


def test_a_job_without_a_token_uploads_with_its_id_token_to_the_application_it_names(
    team: Team, tmp_path: Path
) -> None:
    # Trusted publishing (docs/ci.md): the job's BUILDBAY_ID_TOKEN (`id_tokens`, aud `buildbay`,
    # the component's default), exchanged for the application the `application` input names.
    subject = "project_path:acme/shop:ref_type:branch:ref:main"
    (tmp_path / "oidc").mkdir()
    with oidc_provider_process(tmp_path / "oidc") as provider:
        r = httpx.post(
            f"{team.server}/api/projects/{team.project['id']}/applications/{team.app['id']}"
            "/trusted-publishers",
            json={"issuer": provider.issuer, "subjectPattern": subject, "audience": "buildbay"},
            headers=team.headers,
        )
        assert r.status_code == 201, r.text
        run = run_gitlab_job(
            {"client": str(ROOT / "client"), "application": team.app["id"], "file": str(APK)},
            tmp_path,
            {"BUILDBAY_URL": team.server, "BUILDBAY_ID_TOKEN": id_token(provider, subject)},
        )

    assert run.returncode == 0, run.log
    assert "trusted publishing" in run.log
    assert team.build(run.dotenv["BUILDBAY_BUILD_ID"])["status"] == "ready"
