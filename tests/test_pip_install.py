"""The server installs with pip as the README says: from a checkout (`pip install ./client .`)
and from git URLs (the client from its subdirectory, and the server). The server needs the
client's `buildbay` command, and the client is on no package index, so the two are named
together; `pip install .` alone cannot find it.

pip resolves every dependency against the package index (`--dry-run`: the two projects are
built and every requirement found, nothing installed). CI has the index; elsewhere, without
it, these skip and say so."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
UNREACHABLE = (
    "Max retries exceeded",
    "ConnectionError",
    "Could not fetch URL",
    "NewConnectionError",
)

pytestmark = pytest.mark.slow


def _readme_command(pattern: str) -> list[str]:
    match = re.search(pattern, README)
    assert match, f"the README no longer shows {pattern!r}"
    return shlex.split(match.group(0))


@pytest.fixture(scope="module")
def pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("pip-venv")
    venv.create(where, with_pip=True)
    return where / "bin" / "pip"


def _resolve(pip: Path, requirements: list[str], report: Path) -> set[str]:
    """The names of what `pip install requirements` would install, run from the checkout."""
    done = subprocess.run(
        [str(pip), "install", "--quiet", "--dry-run", "--report", str(report), *requirements],
        cwd=ROOT,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        capture_output=True,
        text=True,
        timeout=540,
    )
    unreachable = any(sign in done.stderr for sign in UNREACHABLE)
    if done.returncode != 0 and unreachable and not os.environ.get("BUILDBAY_REQUIRE_SERVICES"):
        pytest.skip("pip cannot reach the package index from here")
    assert done.returncode == 0, done.stderr[-2000:]
    installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower() for item in installs}


def test_pip_installs_the_server_and_its_client_from_a_checkout(pip: Path, tmp_path: Path) -> None:
    command = _readme_command(r"pip install \./client \.(?=`)")
    resolved = _resolve(pip, command[2:], tmp_path / "report.json")
    assert {"buildbay", "buildbay-client", "fastapi", "sqlalchemy", "typer"} <= resolved


def test_pip_installs_the_server_and_its_client_from_git_urls(pip: Path, tmp_path: Path) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    command = _readme_command(r'pip install "buildbay-client @ git\+[^"]+" "buildbay @ git\+[^"]+"')
    assert command[:2] == ["pip", "install"]
    # The README's URLs, pointed at this checkout's repository: pip clones it as it would the
    # team's git host.
    here = f"git+file://localhost{ROOT}"
    requirements = [re.sub(r"git\+[^#]+", here, requirement) for requirement in command[2:]]
    assert requirements == [f"buildbay-client @ {here}#subdirectory=client", f"buildbay @ {here}"]
    resolved = _resolve(pip, requirements, tmp_path / "report.json")
    assert {"buildbay", "buildbay-client", "fastapi", "typer"} <= resolved
