"""The access log (buildbay.access) is not a list of credentials: an address whose path holds a
secret (an install link's, an invitation's, an unsubscribe link's) is written with `{token}` in
its place, and no query string is written (a signed storage URL's signature, a reset link's
token). tests/test_server_process.py reads a real server's log for the same."""

from __future__ import annotations

import logging
import re
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import BaseRoute, Mount, Route

from buildbay.middleware import loggable_path
from tests.security.test_token_text import FORM, Secrets, secrets_, settings

__all__ = ["secrets_", "settings"]

_PARAM = re.compile(r"{(\w+)(?::\w+)?}")


def _paths(routes: list[BaseRoute], prefix: str = "") -> list[str]:
    found = []
    for route in routes:
        if isinstance(route, Mount):
            found += _paths(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            found.append(prefix + route.path)
    return found


def test_every_address_with_a_token_in_its_path_is_logged_as_its_template(app: FastAPI) -> None:
    with_token = [path for path in _paths(app.routes) if "{token}" in path]
    assert len(with_token) >= 7, with_token  # install (4), invitation (2), unsubscribe

    for template in with_token:
        path = _PARAM.sub(lambda m: "bbi_SECRET.é" if m[1] == "token" else "x", template)
        logged = loggable_path(path)
        assert "SECRET" not in logged, (template, logged)
        assert logged == _PARAM.sub(lambda m: "{token}" if m[1] == "token" else "x", template)


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/projects/prj_1/invitations/inv_1/resend", "/projects/prj_1/invitations/inv_1/resend"),
        ("/install/", "/install/{token}"),
        (
            "/feeds/bbu_KEY/download/bld_1/App-1.0.0.exe",
            "/feeds/{token}/download/bld_1/App-1.0.0.exe",
        ),
        ("/installer/a", "/installer/a"),
        ("/a b\r\nGET /forged 200", "/a%20b%0D%0AGET%20/forged%20200"),
        ("/é", "/%C3%A9"),
    ],
)
def test_other_paths_are_logged_as_they_came_without_a_line_break(path: str, logged: str) -> None:
    assert loggable_path(path) == logged


async def test_no_secret_reaches_the_log(
    secrets_: Secrets, caplog: pytest.LogCaptureFixture
) -> None:
    s = secrets_
    install, invitation = s.made["install"], s.made["invitation"]
    unsubscribe, reset = s.made["unsubscribe"], s.made["reset"]
    with caplog.at_level(logging.INFO):
        answers = [
            await s.client.get(f"/install/{install}"),
            await s.client.get(f"/install/{install}/download"),
            await s.client.get(f"/install/{install}/manifest.plist"),  # an .apk: 404
            await s.client.get(f"/install/{install}/icon.png"),  # no icon: 404
            await s.client.get(f"/install/{install}/qr.png"),
            await s.client.get(f"/invitations/{invitation}"),
            await s.client.post(
                f"/invitations/{invitation}/accept", data={"csrf": s.csrf}, headers=FORM
            ),
            await s.client.get(f"/unsubscribe/{unsubscribe}"),
            await s.client.post(
                f"/unsubscribe/{unsubscribe}", content=b"List-Unsubscribe=One-Click", headers=FORM
            ),
            await s.client.get(f"/reset-password?token={reset}"),
            await s.client.get(s.urls["file"]),
            await s.client.put(s.urls["upload"], content=b"bytes"),
        ]
    assert [r.status_code for r in answers] == [200, 302, 404, 404, 200, 200, 403, 200, 200,
                                                200, 200, 200]  # fmt: skip

    # The server's log, not the test client's (httpx logs the URLs it requests).
    logged = "\n".join(
        f"{r.name} {r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if not r.name.startswith(("httpx", "httpcore"))
    )
    for name, secret in s.made.items():
        assert secret not in logged, name
        assert quote(secret, safe="") not in logged, name
    access = [r.getMessage() for r in caplog.records if r.name == "buildbay.access"]
    for line in (
        '"GET /install/{token}" 200',
        '"GET /install/{token}/download" 302',
        '"GET /install/{token}/manifest.plist" 404',
        '"GET /install/{token}/icon.png" 404',
        '"GET /install/{token}/qr.png" 200',
        '"GET /invitations/{token}" 200',
        '"POST /invitations/{token}/accept" 403',
        '"GET /unsubscribe/{token}" 200',
        '"POST /unsubscribe/{token}" 200',
        '"GET /reset-password" 200',
        f'"GET {httpx.URL(s.urls["file"]).path}" 200',
        f'"PUT {httpx.URL(s.urls["upload"]).path}" 200',
    ):
        assert any(line in message for message in access), (line, access)
