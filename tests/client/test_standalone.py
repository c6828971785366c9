"""The client stands alone: its import graph never reaches the server, its distribution does not
depend on it, and `buildbay --help` with the server installed loads nothing heavy of it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from typer.testing import CliRunner

from buildbay_client import cli
from buildbay_client.cli import COMMANDS_GROUP

ROOT = Path(__file__).resolve().parent.parent.parent
SERVER_MODULES = {"buildbay", "sqlalchemy", "fastapi", "starlette", "pydantic_settings", "alembic"}


def _loaded_after(code: str) -> dict[str, object]:
    """Runs `code` in a fresh interpreter; what it leaves in `result`, and the modules loaded."""
    probe = (
        "import json, sys\nresult = {}\n" + code + "\n"
        "print(json.dumps({'modules': sorted(sys.modules), **result}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return answer


def _server_modules(modules: object) -> list[str]:
    assert isinstance(modules, list)
    return [m for m in modules if m.split(".")[0] in SERVER_MODULES]


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    answer = _loaded_after(
        "import email_validator\n"
        "special = list(email_validator.SPECIAL_USE_DOMAIN_NAMES)\n"
        "import buildbay_client, buildbay_client.cli\n"
        "from buildbay_client import AsyncBuildbay, Buildbay, ops, models\n"
        "result['special_use_kept'] = email_validator.SPECIAL_USE_DOMAIN_NAMES == special != []"
    )
    modules = answer["modules"]
    assert isinstance(modules, list)
    assert {"buildbay_client.cli", "buildbay_client.api", "httpx"} <= set(modules)  # it ran
    assert _server_modules(modules) == []
    # The host program's e-mail validator keeps its own settings.
    assert answer["special_use_kept"] is True


def test_buildbay_help_with_the_server_installed_loads_none_of_its_stack() -> None:
    answer = _loaded_after(
        "from typer.testing import CliRunner\n"
        "from buildbay_client.cli import command\n"
        "done = CliRunner().invoke(command(), ['--help'])\n"
        "result['code'] = done.exit_code\n"
        "result['help'] = done.stdout"
    )
    assert answer["code"] == 0
    help_text = str(answer["help"])
    assert "upload" in help_text
    assert "Run the API" in help_text  # `serve`: the server joined through its entry point
    modules = answer["modules"]
    assert isinstance(modules, list)
    assert "buildbay.cli" in modules
    heavy = [m for m in _server_modules(modules) if m.split(".")[0] != "buildbay"]
    assert heavy == []
    assert [m for m in modules if m.startswith("buildbay.") and m != "buildbay.cli"] == []
    assert [m for m in modules if m.split(".")[0] in {"httpx", "pydantic"}] == []


def test_the_client_distribution_depends_on_nothing_of_the_server() -> None:
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert names == {"httpx", "typer", "rich", "segno"}
    assert "optional-dependencies" not in project


def test_commands_that_fail_to_load_are_left_out_with_a_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = EntryPoint(name="broken", value="no_such_module:register", group=COMMANDS_GROUP)
    monkeypatch.setattr(cli, "entry_points", lambda group: [broken])

    app = cli.command()

    assert capsys.readouterr().err == (
        "buildbay: the commands of no_such_module:register are left out: they failed to load "
        "(ModuleNotFoundError: No module named 'no_such_module')\n"
    )
    done = CliRunner().invoke(app, ["--help"])
    assert done.exit_code == 0
    assert "upload" in done.stdout
    assert "Run the API" not in done.stdout  # `serve`: its entry point was the broken one
