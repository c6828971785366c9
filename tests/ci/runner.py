"""The CI runners' part, as small as the tests need: a composite action's steps run as GitHub's
runner runs them (its `${{ }}` expressions for `inputs.*`, `github.action_path` and
`steps.<id>.outputs.*`, each step's own $GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY files, `bash
--noprofile --norc -eo pipefail`), and a GitLab CI component's job script with its
`$[[ inputs.x ]]` interpolated as GitLab does. Anything else in an expression fails the test:
the action is held to what this evaluator knows."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "action.yml"
GITLAB_COMPONENT = ROOT / "ci" / "gitlab" / "buildbay.yml"

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
_INPUT = re.compile(rf"inputs\.({_NAME})")
_STEP_OUTPUT = re.compile(rf"steps\.({_NAME})\.outputs\.({_NAME})")


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def evaluate(text: str, inputs: Mapping[str, str], action_path: Path,
             steps: Mapping[str, Mapping[str, str]]) -> str:  # fmt: skip
    """`text` with its `${{ }}` expressions replaced by their values (a missing step output is
    empty, as GitHub's)."""

    def value(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression == "github.action_path":
            return str(action_path)
        if found := _INPUT.fullmatch(expression):
            return inputs[found.group(1)]
        if found := _STEP_OUTPUT.fullmatch(expression):
            return steps.get(found.group(1), {}).get(found.group(2), "")
        raise AssertionError(f"an expression the test's runner does not know: {expression}")

    return _EXPRESSION.sub(value, text)


def parse_output_file(text: str) -> dict[str, str]:
    """GitHub's environment file syntax: `name=value`, or `name<<DELIMITER`, lines, `DELIMITER`."""
    found: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        equals, heredoc = line.find("="), line.find("<<")
        if equals >= 0 and (heredoc < 0 or equals < heredoc):
            found[line[:equals]] = line[equals + 1 :]
            continue
        assert heredoc > 0, f"not an output line: {line!r}"
        name, delimiter = line[:heredoc], line[heredoc + 2 :]
        value: list[str] = []
        while lines[i] != delimiter:  # an IndexError: the delimiter never came
            value.append(lines[i])
            i += 1
        i += 1
        found[name] = "\n".join(value)
    return found


@dataclass
class StepRun:
    id: str | None
    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    summary: str


@dataclass
class ActionRun:
    steps: list[StepRun] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(s.returncode == 0 for s in self.steps)

    @property
    def summary(self) -> str:
        return "".join(s.summary for s in self.steps)

    @property
    def log(self) -> str:
        return "".join(s.stdout + s.stderr for s in self.steps)


def github_env(work: Path) -> dict[str, str]:
    """The variables GitHub's runner gives a job, of the test's own (no network to GitHub)."""
    (work / "runner-temp").mkdir(exist_ok=True)
    (work / "workspace").mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(work / "workspace"),
        "GITHUB_REPOSITORY": "acme/acme-android",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_SERVER_URL": "https://github.com",
        "RUNNER_TEMP": str(work / "runner-temp"),
        "RUNNER_OS": "Linux",
        "BUILDBAY_CONFIG_DIR": str(work / "no-profile"),  # the token only, never a profile
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},  # the pip cache, index
    }


def run_action(
    inputs: Mapping[str, str], work: Path, *, only: set[str] | None = None,
    steps_before: Mapping[str, Mapping[str, str]] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> ActionRun:  # fmt: skip
    """action.yml's steps (those whose id is in `only`, or all), with `inputs` over its
    defaults; `steps_before`: outputs of steps not run again (the install, run once)."""
    action = load(ACTION)
    given = {}
    for name, spec in action["inputs"].items():
        if name in inputs:
            given[name] = inputs[name]
        else:
            assert not spec.get("required"), f"the input {name} is required"
            given[name] = str(spec.get("default", ""))
    unknown = set(inputs) - set(given)
    assert not unknown, f"inputs action.yml does not declare: {unknown}"
    run = ActionRun()
    steps: dict[str, dict[str, str]] = {k: dict(v) for k, v in (steps_before or {}).items()}
    base = {**github_env(work), **(extra_env or {})}
    for number, step in enumerate(action["runs"]["steps"]):
        if only is not None and step.get("id") not in only:
            continue
        assert step["shell"] == "bash"
        assert "${{" not in step["run"], "an expression inside run: is script injection"
        files = work / f"step-{number}"
        files.mkdir(exist_ok=True)
        output, summary = files / "output", files / "summary"
        output.write_text("")
        summary.write_text("")
        script = files / "script.sh"
        script.write_text(step["run"])
        env = {
            **base,
            "GITHUB_ACTION_PATH": str(ROOT),
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            **{k: evaluate(str(v), given, ROOT, steps) for k, v in (step.get("env") or {}).items()},
        }
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            env=env, cwd=base["GITHUB_WORKSPACE"], capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        outputs = parse_output_file(output.read_text())
        if step.get("id"):
            steps[step["id"]] = outputs
        run.steps.append(
            StepRun(
                step.get("id"),
                done.returncode,
                done.stdout,
                done.stderr,
                outputs,
                summary.read_text(),
            )
        )
        if done.returncode != 0:
            return run
    run.outputs = {
        name: evaluate(spec["value"], given, ROOT, steps)
        for name, spec in action["outputs"].items()
    }
    return run


_GITLAB_INPUT = re.compile(r"\$\[\[\s*inputs\.([A-Za-z0-9_-]+)\s*\]\]")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def gitlab_interpolate(value: Any, inputs: Mapping[str, Any]) -> Any:
    """GitLab's `$[[ inputs.x ]]` in the loaded configuration's values, as GitLab interpolates
    them when it creates the pipeline: a value that is the block alone takes the input as it is
    (an array stays one), else it is written into the text (no `| function`: none used)."""
    if isinstance(value, dict):
        return {k: gitlab_interpolate(v, inputs) for k, v in value.items()}
    if isinstance(value, list):
        return [gitlab_interpolate(v, inputs) for v in value]
    if not isinstance(value, str):
        return value
    if whole := _GITLAB_INPUT.fullmatch(value.strip()):
        return inputs[whole.group(1)]
    return _GITLAB_INPUT.sub(lambda m: str(inputs[m.group(1)]), value)


def gitlab_env(work: Path) -> dict[str, str]:
    """The predefined variables of a GitLab CI job, of the test's own."""
    (work / "project").mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "CI": "true",
        "GITLAB_CI": "true",
        "CI_PROJECT_DIR": str(work / "project"),
        "CI_PROJECT_URL": "https://gitlab.example.com/acme/acme-android",
        "CI_COMMIT_SHA": "0" * 40,
        "CI_COMMIT_REF_NAME": "main",
        "CI_PIPELINE_URL": "https://gitlab.example.com/acme/acme-android/-/pipelines/42",
        "CI_JOB_URL": "https://gitlab.example.com/acme/acme-android/-/jobs/4242",
        "BUILDBAY_CONFIG_DIR": str(work / "no-profile"),
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
    }


@dataclass
class JobRun:
    returncode: int
    log: str
    dotenv: dict[str, str]


def run_gitlab_job(
    inputs: Mapping[str, Any], work: Path, ci_variables: Mapping[str, str]
) -> JobRun:
    """The component's job as a GitLab runner runs it: inputs over their defaults interpolated,
    the job's variables (expanded against the project's CI/CD variables `ci_variables`, but
    those marked `expand: false`), its script with `sh -e` (the image's shell may be dash)."""
    spec, jobs = yaml.safe_load_all(GITLAB_COMPONENT.read_text(encoding="utf-8"))
    given: dict[str, Any] = {}
    for name, declared in spec["spec"]["inputs"].items():
        if name in inputs:
            given[name] = inputs[name]
        else:
            assert "default" in declared, f"the input {name} is mandatory"
            given[name] = declared["default"]
        if "options" in declared:
            assert given[name] in declared["options"], f"{name}: not one of its options"
    assert not set(inputs) - set(given), "inputs the component does not declare"
    [job] = gitlab_interpolate(jobs, given).values()
    env = {**gitlab_env(work), **ci_variables}
    for name, value in job["variables"].items():
        if isinstance(value, dict):
            env[name] = str(value["value"])
            assert value.get("expand") is False
        else:
            env[name] = _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), str(value))
    script = work / "job.sh"
    script.write_text("\n".join(job["script"]))
    done = subprocess.run(
        ["sh", "-e", str(script)], env=env, cwd=env["CI_PROJECT_DIR"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
    )  # fmt: skip
    report = Path(env["CI_PROJECT_DIR"]) / job["artifacts"]["reports"]["dotenv"]
    dotenv = {}
    if report.exists():
        for line in report.read_text().splitlines():
            name, _, value = line.partition("=")
            dotenv[name] = value
    return JobRun(done.returncode, done.stdout, dotenv)
