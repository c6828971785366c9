"""A server for the CI integrations' tests (one a module, in a thread of the test process: the
runners' scripts reach it over HTTP only), and a project on it to upload to with an API token,
as a CI job has one.

The action's install step and the GitLab job install the client with pip, as they do in CI:
that needs the package index for its dependencies (httpx, typer, rich, segno, hatchling), or
a pip cache that holds them (PIP_* variables are passed on)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ci.runner import ROOT
from tests.conftest import WORKER, serving_a_copy

PASSWORD = "a long password"


@pytest.fixture(scope="module")
def ci_server(migrated_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("ci-server")
    with serving_a_copy(migrated_database, work) as base:
        yield base


@dataclass
class Team:
    """A developer's project `Acme-<n>` with the application `Acme Android`, a tester group QA,
    a release channel beta, and an API token for CI."""

    server: str
    headers: dict[str, str]
    project: dict[str, Any]
    app: dict[str, Any]
    token: str

    def get(self, path: str) -> Any:
        r = httpx.get(f"{self.server}{path}", headers=self.headers)
        assert r.status_code == 200, r.text
        return r.json()

    def build(self, build_id: str) -> Any:
        return self.get(
            f"/api/app-distribution/{self.project['id']}/{self.app['id']}/builds/{build_id}"
        )


def _post(server: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    r = httpx.post(f"{server}{path}", json=body, headers=headers)
    assert r.status_code in (200, 201), r.text
    return r.json()


@pytest.fixture
def team(ci_server: str) -> Team:
    email = f"ci-{uuid.uuid4().hex[:12]}@example.com"
    _post(ci_server, "/api/auth/register", {"email": email, "password": PASSWORD, "name": "CI"}, {})
    login = _post(ci_server, "/api/auth/login", {"email": email, "password": PASSWORD}, {})
    headers = {"Authorization": f"Bearer {login['access_token']}"}
    name = f"Acme-{uuid.uuid4().hex[:8]}"
    project = _post(ci_server, "/api/projects", {"name": name}, headers)
    apps = f"/api/projects/{project['id']}/applications"
    app = _post(ci_server, apps, {"name": "Acme Android", "platform": "android"}, headers)
    _post(ci_server, f"/api/projects/{project['id']}/groups", {"name": "QA"}, headers)
    _post(ci_server, f"{apps}/{app['id']}/channels", {"name": "beta"}, headers)
    token = _post(ci_server, "/api/account/api-tokens", {"name": "ci"}, headers)
    return Team(ci_server, headers, project, app, token["token"])


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client installed as action.yml's install step installs it (its own venv, from this
    checkout's client/), once a run: the runs of the upload step use it. The xdist workers of a
    run share the one install (a folder of their common temporary root, under a lock): each had
    installed it again, a venv with pip and the client resolved and built from the package
    index (measured: tests/ci over 2 workers took 122.6 s of processor time with an install
    each, 113.3 s with one shared)."""
    from tests.ci.runner import run_action

    root = tmp_path_factory.getbasetemp()
    if WORKER:  # .../pytest-N/popen-gw0: the run's root holds every worker's folder
        root = root.parent
    work, made = root / "ci-install", root / "ci-install.buildbay"
    with (root / "ci-install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not made.exists():
            shutil.rmtree(work, ignore_errors=True)  # a worker's failed attempt
            work.mkdir()
            run = run_action({"url": "-", "token": "-", "application": "-", "file": "-"}, work,
                             only={"install"})  # fmt: skip
            assert run.ok, run.log
            made.write_text(run.steps[0].outputs["buildbay"])
    buildbay = Path(made.read_text())
    assert buildbay.is_file()
    python = str(buildbay.parent / "python")
    imported = subprocess.run(
        [python, "-c", "import buildbay_client.ci"], capture_output=True, text=True
    )
    assert imported.returncode == 0, imported.stderr
    assert (ROOT / "client").is_dir()
    return buildbay
