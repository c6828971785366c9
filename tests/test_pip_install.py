"""The server installs with pip as the README says: from a checkout (`pip install ./client .`)
and from git URLs (the client from its subdirectory, and the server). The server needs the
client's `buildbay` command, and the client is on no package index, so the two are named
together; `pip install .` alone cannot find it.

pip resolves every dependency against the package index (`--dry-run`: the two projects are
built and every requirement found, nothing installed). CI has the index; elsewhere, without
it, these skip and say so.

The index is resolved against once, for the checkout: that resolution cost pip 17 s of
processor time (it reads every release of every dependency), and the git URLs build the very
same two projects. Their test has pip clone and build both from git without resolving their
dependencies again (`--no-deps`), and checks that they are those the checkout resolved
(name, version, requirements), and that the server's requirement on the client is met by the
client named beside it, as pip's resolver would."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import venv
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
UNREACHABLE = (
    "Max retries exceeded",
    "ConnectionError",
    "Could not fetch URL",
    "NewConnectionError",
)

# One worker runs both (`--dist loadgroup`): they share the venv and the checkout's resolution.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pip-install")]


def _readme_command(pattern: str) -> list[str]:
    match = re.search(pattern, README)
    assert match, f"the README no longer shows {pattern!r}"
    return shlex.split(match.group(0))


@pytest.fixture(scope="module")
def pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("pip-venv")
    venv.create(where, with_pip=True)
    return where / "bin" / "pip"


def _resolve(pip: Path, requirements: list[str], report: Path) -> dict[str, dict[str, Any]]:
    """What `pip install requirements` would install, by name (pip's report of each), run from
    the checkout."""
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
    return {item["metadata"]["name"].lower(): item for item in installs}


@pytest.fixture(scope="module")
def from_checkout(pip: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    command = _readme_command(r"pip install \./client \.(?=`)")
    return _resolve(pip, command[2:], tmp_path_factory.mktemp("checkout") / "report.json")


def test_pip_installs_the_server_and_its_client_from_a_checkout(
    from_checkout: dict[str, dict[str, Any]],
) -> None:
    assert {"buildbay", "buildbay-client", "fastapi", "sqlalchemy", "typer"} <= set(from_checkout)


def test_pip_installs_the_server_and_its_client_from_git_urls(
    pip: Path, from_checkout: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    command = _readme_command(r'pip install "buildbay-client @ git\+[^"]+" "buildbay @ git\+[^"]+"')
    assert command[:2] == ["pip", "install"]
    # The README's URLs, pointed at this checkout's repository: pip clones it as it would the
    # team's git host.
    here = f"git+file://localhost{ROOT}"
    requirements = [re.sub(r"git\+[^#]+", here, requirement) for requirement in command[2:]]
    assert requirements == [f"buildbay-client @ {here}#subdirectory=client", f"buildbay @ {here}"]
    built = _resolve(pip, ["--no-deps", *requirements], tmp_path / "report.json")

    # Both cloned and built from git, the client from its subdirectory ...
    assert set(built) == {"buildbay", "buildbay-client"}
    for name, item in built.items():
        assert item["download_info"]["url"] == f"file://localhost{ROOT}", item["download_info"]
        assert "vcs_info" in item["download_info"]
        # ... the very projects whose dependencies the checkout's resolution found (a clone
        # is of the last commit: a pyproject.toml changed since differs here), ...
        for field in ("version", "requires_dist"):
            assert item["metadata"][field] == from_checkout[name]["metadata"][field], name
    assert built["buildbay-client"]["download_info"].get("subdirectory") == "client"
    # ... and the server's requirement on the client is met by the client named beside it.
    client = Requirement(
        next(r for r in built["buildbay"]["metadata"]["requires_dist"] if "buildbay-client" in r)
    )
    assert client.name == "buildbay-client"
    assert client.specifier.contains(built["buildbay-client"]["metadata"]["version"])
    assert client.marker is None or client.marker.evaluate()
