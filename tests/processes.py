"""Real processes for the tests: a free port, a `buildbay` command run to its end, a process that
is stopped whatever happens, and a user with a project and an application on such a server
(`Uploader`)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def buildbay(
    *args: str, env: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`buildbay ARGS` in a process of its own, run to its end (a server that starts serving
    runs into the timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "buildbay", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


@contextlib.contextmanager
def running(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    log_path: Path,
    ready_url: str,
    timeout: float = 90.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `argv`, wait until `ready_url` answers 200, and stop it (SIGTERM, then SIGKILL).

    The timeout is generous: with the suite spread over several workers on 2 cores, a server's
    imports alone took over 30 s under load (its log still empty)."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(list(argv), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        # One client for every poll: `httpx.get` makes a client, and with it an SSL context
        # that loads the CA bundle, each call (27 ms of processor time, measured; 0.2 ms with
        # the client kept), for a server that only ever speaks plain HTTP here.
        with httpx.Client(timeout=1) as http:
            while True:
                try:
                    if http.get(ready_url).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None, f"{argv[0]} exited:\n{log_path.read_text()}"
                assert time.monotonic() < deadline, (
                    f"no answer at {ready_url}:\n{log_path.read_text()}"
                )
                time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Uploader:
    """One user with one project and application on a server, and the upload steps."""

    http: httpx.Client
    headers: dict[str, str]
    project_id: str
    app_id: str

    @classmethod
    def sign_up(cls, http: httpx.Client, email: str = "ci@example.com") -> Uploader:
        r = http.post("/api/auth/register", json={"email": email, "password": "a long password"})
        assert r.status_code == 201, r.text
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        r = http.post("/api/projects", json={"name": "Acme"}, headers=headers)
        assert r.status_code == 201, r.text
        project_id = r.json()["id"]
        r = http.post(
            f"/api/projects/{project_id}/applications", json={"name": "Acme"}, headers=headers
        )
        assert r.status_code == 201, r.text
        return cls(http, headers, project_id, r.json()["id"])

    @property
    def base(self) -> str:
        return f"/api/app-distribution/{self.project_id}/{self.app_id}/builds"

    def link(self, size: int, file_name: str = "build.bin", **fields: Any) -> dict[str, Any]:
        r = self.http.post(
            f"{self.base}/upload-link",
            json={"fileName": file_name, "fileSize": size, **fields},
            headers=self.headers,
        )
        assert r.status_code == 201, r.text
        link: dict[str, Any] = r.json()
        return link

    def upload_small(self, http: httpx.Client) -> httpx.Response:
        """The three steps for a 5-byte build over `http`: the first answer that is not a
        success, or verify's."""
        link = http.post(
            f"{self.base}/upload-link",
            json={"fileName": "a.bin", "fileSize": 5},
            headers=self.headers,
        )
        if link.status_code != 201:
            return link
        # Bytes of its own: the same file again would be the build it already is (409).
        put = http.put(link.json()["uploadUrl"], content=os.urandom(5))
        if put.status_code != 200:
            return put
        body = {"buildId": link.json()["buildId"]}
        return http.post(f"{self.base}/verify", json=body, headers=self.headers)

    def verify(self, build_id: str, **kwargs: Any) -> httpx.Response:
        return self.http.post(
            f"{self.base}/verify", json={"buildId": build_id}, headers=self.headers, **kwargs
        )

    def build(self, build_id: str) -> dict[str, Any]:
        r = self.http.get(f"{self.base}/{build_id}", headers=self.headers)
        assert r.status_code == 200, r.text
        build: dict[str, Any] = r.json()
        return build

    def builds(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": 100, **({"cursor": cursor} if cursor else {})}
            r = self.http.get(self.base, params=params, headers=self.headers)
            assert r.status_code == 200, r.text
            found += r.json()["builds"]
            cursor = r.json()["nextCursor"]
            if cursor is None:
                return found

    def download(self, build_id: str) -> bytes:
        r = self.http.get(f"{self.base}/{build_id}/download", headers=self.headers)
        assert r.status_code == 302, r.text
        r = self.http.get(r.headers["location"])
        assert r.status_code == 200, r.text
        return r.content
