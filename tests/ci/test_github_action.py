"""action.yml, the Buildbay GitHub Action: its metadata against the action metadata schema's
rules, and its steps run as GitHub's runner runs them (tests/ci/runner.py) against a real
server: the client installed from this checkout, the upload with each input, the outputs, the
job summary with the install link's QR code, and the token nowhere."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import jsonschema
import pytest
import zxingcpp
from PIL import Image

from tests.builds.android_files import APK
from tests.ci.conftest import Team
from tests.ci.runner import ACTION, ActionRun, load, run_action
from tests.oidc_provider import oidc_provider_process
from tests.publishers.github_tokens import REQUEST_TOKEN, github_token_service

pytestmark = pytest.mark.slow

_ID = {"type": "object", "patternProperties": {"^[_a-zA-Z][a-zA-Z0-9_-]*$": {}},
       "additionalProperties": False}  # fmt: skip
# The rules of the action metadata syntax (docs.github.com "Metadata syntax for GitHub
# Actions"; SchemaStore's github-action.json) that a composite action is held to: written here,
# as the test runs without a network.
ACTION_SCHEMA = {
    "type": "object",
    "required": ["name", "description", "runs"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "author": {"type": "string"},
        "description": {"type": "string"},
        "branding": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "icon": {"type": "string"},
                "color": {
                    "enum": [
                        "white",
                        "black",
                        "yellow",
                        "blue",
                        "green",
                        "orange",
                        "red",
                        "purple",
                        "gray-dark",
                    ]
                },
            },
        },
        "inputs": {
            **_ID,
            "patternProperties": {
                "^[_a-zA-Z][a-zA-Z0-9_-]*$": {
                    "type": "object",
                    "required": ["description"],
                    "additionalProperties": False,
                    "properties": {
                        "description": {"type": "string"},
                        "required": {"type": "boolean"},
                        "default": {"type": "string"},
                        "deprecationMessage": {"type": "string"},
                    },
                }
            },
        },
        "outputs": {
            **_ID,
            "patternProperties": {
                "^[_a-zA-Z][a-zA-Z0-9_-]*$": {
                    "type": "object",
                    "required": ["description", "value"],
                    "additionalProperties": False,
                    "properties": {"description": {"type": "string"}, "value": {"type": "string"}},
                }
            },
        },
        "runs": {
            "type": "object",
            "required": ["using", "steps"],
            "additionalProperties": False,
            "properties": {
                "using": {"const": "composite"},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "oneOf": [{"required": ["run", "shell"]}, {"required": ["uses"]}],
                        "additionalProperties": False,
                        "properties": {
                            "run": {"type": "string"},
                            "shell": {"type": "string"},
                            "uses": {"type": "string"},
                            "with": {"type": "object"},
                            "name": {"type": "string"},
                            "id": {"type": "string"},
                            "if": {"type": ["string", "boolean"]},
                            "env": {"type": "object", "additionalProperties": {"type": "string"}},
                            "continue-on-error": {"type": ["string", "boolean"]},
                            "working-directory": {"type": "string"},
                        },
                    },
                },
            },
        },
    },
}
INPUTS = {"url", "token", "project", "application", "file", "notes", "notes-from-git", "groups",
          "testers", "channel", "mandatory", "install-link-days", "audience"}  # fmt: skip
OUTPUTS = {"build-id", "install-url", "build-url", "version"}


def test_action_yml_is_a_composite_action_with_the_inputs_and_outputs_documented() -> None:
    action = load(ACTION)
    jsonschema.validate(action, ACTION_SCHEMA)
    assert set(action["inputs"]) == INPUTS
    assert set(action["outputs"]) == OUTPUTS
    # A wrong action is refused: the schema is not one that takes anything.
    broken = {**action, "runs": {"using": "composite", "steps": [{"run": "true"}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, ACTION_SCHEMA)
    for step in action["runs"]["steps"]:
        assert "${{" not in step["run"], "inputs reach the shell through env: only"


def _upload(team: Team, client_venv: Path, work: Path, **inputs: str) -> ActionRun:
    given = {"url": team.server, "token": team.token, "file": str(APK), **inputs}
    given.setdefault("project", team.project["name"])
    given.setdefault("application", "Acme Android")
    return run_action(given, work, only={"upload"},
                      steps_before={"install": {"buildbay": str(client_venv)}})  # fmt: skip


def _decoded(image: Image.Image) -> str:
    [found] = zxingcpp.read_barcodes(image)
    return found.text


def _log_qr(log: str) -> Image.Image:
    """The QR code the log shows (half blocks, light modules drawn), as an image to decode."""
    lines = [line for line in log.splitlines() if line and set(line) <= set("█▀▄ ")]
    width = max(len(line) for line in lines)
    image = Image.new("L", (width, 2 * len(lines)), 0)
    for y, line in enumerate(lines):
        for x, char in enumerate(line):
            image.putpixel((x, 2 * y), 255 if char in "█▀" else 0)
            image.putpixel((x, 2 * y + 1), 255 if char in "█▄" else 0)
    return image.resize((width * 8, len(lines) * 16), Image.Resampling.NEAREST)


def test_the_action_uploads_distributes_and_says_where_the_build_is(
    team: Team, client_venv: Path, tmp_path: Path
) -> None:
    run = _upload(
        team, client_venv, tmp_path, notes="Fixes the login crash\nand the $(date) screen",
        groups="QA, ", testers="lee@example.com", channel="beta", mandatory="true",
        **{"install-link-days": "3"},
    )  # fmt: skip
    assert run.ok, run.log
    out = run.outputs
    build = team.build(out["build-id"])
    assert build["status"] == "ready"
    assert build["notes"] == "Fixes the login crash\nand the $(date) screen"  # not run by a shell
    assert build["channels"] == ["beta"]
    assert build["mandatory"] is True
    assert out["version"] == "1.4.2 (42)"
    assert out["install-url"] == build["installUrl"]
    assert "/install/" in out["install-url"]
    assert out["build-url"] == build["consoleUrl"]
    # QA beside `everyone` (the application's auto-distribution), and the e-mail invited.
    [reached] = [line for line in run.log.splitlines() if line.startswith("reached  ")]
    assert "QA" in reached.split(":")[0]
    assert reached.endswith("invited lee@example.com")

    summary = run.summary
    assert f"**Install:** {out['install-url']}" in summary
    assert f'<img src="{out["install-url"]}/qr.png"' in summary
    assert f"**Build page:** {out['build-url']}" in summary
    qr = httpx.get(f"{out['install-url']}/qr.png")
    assert qr.status_code == 200
    assert qr.headers["content-type"] == "image/png"
    assert _decoded(Image.open(io.BytesIO(qr.content))) == out["install-url"]
    builds = f"/api/app-distribution/{team.project['id']}/{team.app['id']}/builds"
    links = f"{builds}/{build['buildId']}/install-links"
    [link] = team.get(links)["installLinks"]
    lasts = datetime.fromisoformat(link["expiresAt"]) - datetime.fromisoformat(link["createdAt"])
    assert lasts == timedelta(days=3)  # install-link-days
    # The log's QR code as text reads as the same link.
    assert f"QR code of the install link {out['install-url']}:" in run.log
    assert _decoded(_log_qr(run.steps[0].stderr)) == out["install-url"]

    # A revoked link's QR code is not served any more.
    revoked = httpx.delete(f"{team.server}{links}/{link['linkId']}", headers=team.headers)
    assert revoked.status_code == 204, revoked.text
    assert httpx.get(f"{out['install-url']}/qr.png").status_code == 410

    everything = run.log + summary + "".join(f"{k}={v}" for k, v in out.items())
    everything += (tmp_path / "step-1" / "output").read_text()
    assert team.token not in everything
    assert team.token[3:] not in everything
    assert team.token[-12:] not in everything


def test_the_action_takes_the_application_id_alone_and_no_install_link(
    team: Team, client_venv: Path, tmp_path: Path
) -> None:
    run = _upload(team, client_venv, tmp_path, project="", application=team.app["id"])
    assert run.ok, run.log
    assert run.outputs["install-url"] == ""
    assert run.outputs["build-id"].startswith("bld_")
    assert "No install link was asked" in run.summary
    assert "<img" not in run.summary
    assert f"QR code of the build page {run.outputs['build-url']}:" in run.log


def test_inputs_are_data_for_the_shell_never_code(
    team: Team, client_venv: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    run = _upload(team, client_venv, tmp_path, notes=f'"; touch {marker}; echo "',
                  channel=f"$(touch {marker})")  # fmt: skip
    assert not run.ok  # no channel of that name
    assert not marker.exists()
    assert "channel" in run.log


def test_a_boolean_input_other_than_true_or_false_is_refused_before_anything_is_sent(
    team: Team, client_venv: Path, tmp_path: Path
) -> None:
    run = _upload(team, client_venv, tmp_path, mandatory="yes")
    assert run.steps[0].returncode == 2
    assert "::error::mandatory takes true or false" in run.log
    assert (
        team.get(f"/api/app-distribution/{team.project['id']}/{team.app['id']}/builds")["builds"]
        == []
    )


def test_a_wrong_token_fails_the_step_and_is_not_shown(
    team: Team, client_venv: Path, tmp_path: Path
) -> None:
    wrong = "bb_" + "Q" * 40
    run = _upload(team, client_venv, tmp_path, token=wrong)
    assert run.steps[0].returncode == 3, run.log
    assert wrong not in run.log
    assert "Q" * 12 not in run.log
    assert run.steps[0].outputs == {}


def test_outputs_are_written_in_the_multiline_syntax_whatever_they_hold() -> None:
    from buildbay_client.ci import github_output_text
    from tests.ci.runner import parse_output_file

    held = {"version": "1.0\nname=evil\nEOF", "build-id": "bld_1", "install-url": ""}
    text = github_output_text(held)
    assert parse_output_file(text) == held
    assert "\nname=evil\n" in text  # on a line of its own, inside the value's delimiters


def test_the_action_without_a_token_uploads_with_the_jobs_id_token(
    team: Team, client_venv: Path, tmp_path: Path
) -> None:
    # Trusted publishing (docs/ci.md): the application trusts acme/shop's jobs, for the audience
    # the client asks by default (the server's host name); the job has `id-token: write`.
    with oidc_provider_process(tmp_path) as provider, github_token_service(provider) as url:
        r = httpx.post(
            f"{team.server}/api/projects/{team.project['id']}/applications/{team.app['id']}"
            "/trusted-publishers",
            json={"issuer": provider.issuer, "subjectPattern": "repo:acme/shop:ref:refs/heads/*",
                  "audience": "127.0.0.1"},
            headers=team.headers,
        )  # fmt: skip
        assert r.status_code == 201, r.text
        run = run_action(
            {"url": team.server, "file": str(APK), "application": team.app["id"]}, tmp_path,
            only={"upload"},
            steps_before={"install": {"buildbay": str(client_venv)}},
            extra_env={"ACTIONS_ID_TOKEN_REQUEST_URL": url,
                       "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN},
        )  # fmt: skip

    assert run.ok, run.log
    assert team.build(run.outputs["build-id"])["status"] == "ready"
    assert "trusted publishing" in run.log


@pytest.mark.parametrize(
    "target", [{}, {"application": "Acme Android", "project": "Acme"},
               {"application": "Acme Android"}],
)  # fmt: skip
def test_the_action_without_a_token_needs_the_application_s_id_before_anything_is_sent(
    client_venv: Path, tmp_path: Path, target: dict[str, str]
) -> None:
    # A trusted publisher grants only its own application: the upload names it, by id (the
    # exchanged token cannot read projects to look a name up). Nothing listens at the url.
    run = run_action(
        {"url": "http://127.0.0.1:9", "file": str(APK), **target}, tmp_path, only={"upload"},
        steps_before={"install": {"buildbay": str(client_venv)}},
        extra_env={"ACTIONS_ID_TOKEN_REQUEST_URL": "http://127.0.0.1:9/token",
                   "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN},
    )  # fmt: skip

    assert [s.returncode for s in run.steps] == [2], run.log
    assert "::error::trusted publishing (no token): set application to the application's id" in (
        run.log
    )


def test_an_app_s_name_writes_no_link_or_image_into_the_job_summary() -> None:
    """The name comes from the build file: shown as written in the summary's Markdown."""
    from buildbay_client.ci import summary_markdown

    name = "[Pay here](https://evil.example) ![x](https://evil.example/i.png) *Acme* <b>@team"
    summary = summary_markdown(name, "1.4.2 (42)", "bld_1", None, None, reused=False)
    heading = summary.splitlines()[0]

    assert heading == (
        "### \\[Pay here\\]\\(https://evil.example\\) \\!\\[x\\]\\(https://evil.example/i.png\\) "
        "\\*Acme\\* &lt;b&gt;\\@team 1.4.2 \\(42\\) uploaded to Buildbay"
    )
