"""`buildbay upload` in a CI job without a stored token: the job's ID token (from the real
OpenID Connect provider process) is exchanged for an upload-only token of the application
--app-id names, once one of its trusted publishers takes it; a real server, the CLI as a
program."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from buildbay_client.cli.common import EXIT_AUTH
from tests.oidc_provider import OidcProvider
from tests.publishers.github_tokens import REQUEST_TOKEN, github_token_service
from tests.publishers.id_tokens import id_token

PASSWORD = "correct horse battery"


def _setup(server: str, issuer: str, audience: str) -> tuple[dict[str, str], str, str]:
    r = httpx.post(f"{server}/api/auth/register", json={"email": "admin@example.com",
                                                        "password": PASSWORD})  # fmt: skip
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    project = httpx.post(f"{server}/api/projects", json={"name": "Acme"}, headers=headers).json()
    app = httpx.post(
        f"{server}/api/projects/{project['id']}/applications", json={"name": "Shop"},
        headers=headers,
    ).json()  # fmt: skip
    r = httpx.post(
        f"{server}/api/projects/{project['id']}/applications/{app['id']}/trusted-publishers",
        json={"issuer": issuer, "subjectPattern": "repo:acme/shop:**", "audience": audience},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    return headers, project["id"], app["id"]


def _upload(server: str, file: Path, tmp_path: Path, env: dict[str, str], *args: str) -> Any:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("BUILDBAY_", "GITHUB_", "ACTIONS_", "GITLAB_CI"))}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "buildbay_client", "upload", str(file), "--json", *args],
        env={**clean, "BUILDBAY_URL": server, "BUILDBAY_CONFIG_DIR": str(tmp_path / "config"),
             "BUILDBAY_RETRY_ATTEMPTS": "1", **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_upload_exchanges_buildbay_id_token_and_uploads(
    threaded_server: str, provider: OidcProvider, tmp_path: Path
) -> None:
    # The default audience is the server's host name.
    headers, project_id, app_id = _setup(threaded_server, provider.issuer, "127.0.0.1")
    build = tmp_path / "shop.zip"
    build.write_bytes(b"PK\x03\x04 the shop, built by CI")

    done = _upload(threaded_server, build, tmp_path,
                   {"BUILDBAY_ID_TOKEN": id_token(provider, audience="127.0.0.1")},
                   "--app-id", app_id)  # fmt: skip

    assert done.returncode == 0, done.stderr
    uploaded = json.loads(done.stdout)
    assert uploaded["applicationId"] == app_id
    assert uploaded["status"] == "ready"
    assert "trusted publishing" in done.stderr
    listed = httpx.get(f"{threaded_server}/api/app-distribution/{project_id}/{app_id}/builds",
                       headers=headers).json()["builds"]  # fmt: skip
    assert [b["buildId"] for b in listed] == [uploaded["buildId"]]


def test_upload_with_an_id_token_for_another_audience_fails_with_the_servers_reason(
    threaded_server: str, provider: OidcProvider, tmp_path: Path
) -> None:
    _, _, app_id = _setup(threaded_server, provider.issuer, "buildbay.example.com")
    build = tmp_path / "shop.zip"
    build.write_bytes(b"PK\x03\x04 the shop")

    done = _upload(threaded_server, build, tmp_path,
                   {"BUILDBAY_ID_TOKEN": id_token(provider, audience="127.0.0.1")},
                   "--app-id", app_id)  # fmt: skip

    assert done.returncode == 3, done.stderr
    assert "no_matching_publisher" in done.stderr


def test_upload_without_app_id_is_a_usage_error_before_anything_is_asked(
    threaded_server: str, provider: OidcProvider, tmp_path: Path
) -> None:
    # A publisher grants only its own application: the upload must name it. Nothing is sent
    # (the ID token is not even spent), whatever publishers trust this job.
    _, _, app_id = _setup(threaded_server, provider.issuer, "127.0.0.1")
    build = tmp_path / "shop.zip"
    build.write_bytes(b"PK\x03\x04 the shop")
    token = id_token(provider, audience="127.0.0.1")

    for args in ((), ("--project", "Acme", "--app", "Shop")):
        done = _upload(threaded_server, build, tmp_path, {"BUILDBAY_ID_TOKEN": token}, *args)
        assert done.returncode == 2, done.stderr
        assert "--app-id" in done.stderr
        assert "only grants its own" in done.stderr

    done = _upload(threaded_server, build, tmp_path, {"BUILDBAY_ID_TOKEN": token},
                   "--app-id", app_id)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_upload_asks_github_actions_for_an_id_token_with_the_audience_given(
    threaded_server: str, provider: OidcProvider, tmp_path: Path
) -> None:
    _, _, app_id = _setup(threaded_server, provider.issuer, "buildbay.example.com")
    build = tmp_path / "shop.zip"
    build.write_bytes(b"PK\x03\x04 the shop, from GitHub Actions")
    github = {"ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN}

    with github_token_service(provider) as url:
        github["ACTIONS_ID_TOKEN_REQUEST_URL"] = url
        done = _upload(threaded_server, build, tmp_path, github,
                       "--audience", "buildbay.example.com", "--app-id", app_id)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applicationId"] == app_id


class _BrokenProxy(http.server.BaseHTTPRequestHandler):
    """A proxy in front of the server (or GitHub's token service) that answers its own error
    page while saying it is JSON, as misconfigured ones do."""

    def _answer(self) -> None:
        body = b"<html><body>502 Bad Gateway</body></html>"
        self.send_response(502)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, *args: Any) -> None:
        pass


def test_an_answer_that_is_not_the_json_it_claims_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BrokenProxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_address[1]}"
    build = tmp_path / "shop.zip"
    build.write_bytes(b"PK\x03\x04 the shop, built by CI")
    try:
        for env in (
            {"BUILDBAY_ID_TOKEN": "eyJ.the.token"},  # the exchange's answer is broken
            {"ACTIONS_ID_TOKEN_REQUEST_URL": f"{url}/token?api-version=2.0",  # GitHub's is
             "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN},
        ):  # fmt: skip
            done = _upload(url, build, tmp_path, env, "--app-id", "app_" + "0" * 26)

            assert done.returncode == EXIT_AUTH, done.stderr
            assert "Traceback" not in done.stderr
            assert "trusted publishing:" in done.stderr, done.stderr
            assert "502" in done.stderr, done.stderr
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_upload_distributes_at_verify_to_groups_given_by_id(
    threaded_server: str, provider: OidcProvider, tmp_path: Path
) -> None:
    # The upload token may distribute at verify (docs/api.md); it reads no group names.
    headers, project_id, app_id = _setup(threaded_server, provider.issuer, "127.0.0.1")
    r = httpx.post(f"{threaded_server}/api/projects/{project_id}/groups", json={"name": "QA"},
                   headers=headers)  # fmt: skip
    assert r.status_code == 201, r.text
    qa = r.json()["id"]
    build = tmp_path / "shop.zip"
    build.write_bytes(b"PK\x03\x04 the shop, for QA")

    by_name = _upload(threaded_server, build, tmp_path,
                      {"BUILDBAY_ID_TOKEN": id_token(provider, audience="127.0.0.1")},
                      "--app-id", app_id, "--distribute", "QA")  # fmt: skip
    assert by_name.returncode == 2, by_name.stderr
    assert "give the tester group's id (grp_..." in by_name.stderr
    assert "not the project's group names" in by_name.stderr

    done = _upload(threaded_server, build, tmp_path,
                   {"BUILDBAY_ID_TOKEN": id_token(provider, audience="127.0.0.1")},
                   "--app-id", app_id, "--distribute", qa, "--distribute", "everyone")  # fmt: skip

    assert done.returncode == 0, done.stderr
    build_id = json.loads(done.stdout)["buildId"]
    installs = httpx.get(
        f"{threaded_server}/api/app-distribution/{project_id}/{app_id}/builds/{build_id}/installs",
        headers=headers,
    ).json()  # fmt: skip
    assert sorted(d["id"] for d in installs["distributedTo"]) == sorted(["everyone", qa])
