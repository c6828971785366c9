"""Trusted publishing from CI: the job's OpenID Connect ID token, exchanged for a short-lived
upload-only token of the application the upload names, once one of its trusted publishers
takes it (`POST /api/auth/oidc-exchange`). No secret is stored in the CI.

Where the ID token comes from, in this order:
- `BUILDBAY_ID_TOKEN`: the token itself (GitLab: `id_tokens: BUILDBAY_ID_TOKEN: aud: ...`);
- GitHub Actions (`permissions: id-token: write`): `ACTIONS_ID_TOKEN_REQUEST_URL` with
  `&audience=<audience>`, asked with `ACTIONS_ID_TOKEN_REQUEST_TOKEN` as a bearer token; the
  answer's `value` is the ID token.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

ID_TOKEN_VARIABLE = "BUILDBAY_ID_TOKEN"
GITHUB_REQUEST_URL = "ACTIONS_ID_TOKEN_REQUEST_URL"
GITHUB_REQUEST_TOKEN = "ACTIONS_ID_TOKEN_REQUEST_TOKEN"
_TIMEOUT = httpx.Timeout(30.0)


class TrustedPublishingError(Exception):
    """Why no upload token could be had: a sentence for the CI's log."""


@dataclass(frozen=True)
class UploadToken:
    token: str
    expires_at: str
    application_id: str
    project_id: str


def available() -> bool:
    """Whether this job can get an ID token (BUILDBAY_ID_TOKEN, or GitHub's variables)."""
    return bool(os.environ.get(ID_TOKEN_VARIABLE) or os.environ.get(GITHUB_REQUEST_URL))


def default_audience(server_url: str) -> str:
    """The audience asked when none is given: the server's host name (`buildbay.example.com`
    for `https://buildbay.example.com:8443`)."""
    return urlsplit(server_url).hostname or server_url


def ci_id_token(audience: str) -> str:
    given = os.environ.get(ID_TOKEN_VARIABLE)
    if given:
        return given.strip()
    url, bearer = os.environ.get(GITHUB_REQUEST_URL), os.environ.get(GITHUB_REQUEST_TOKEN)
    if not url or not bearer:
        raise TrustedPublishingError(
            f"no ID token: set {ID_TOKEN_VARIABLE}, or in GitHub Actions give the job "
            "`permissions: id-token: write`"
        )
    joiner = "&" if "?" in url else "?"
    try:
        r = httpx.get(
            f"{url}{joiner}audience={quote(audience, safe='')}",
            headers={"Authorization": f"Bearer {bearer}"},
            timeout=_TIMEOUT,
        )
    except httpx.HTTPError as exc:
        raise TrustedPublishingError(
            f"GitHub's ID token service could not be reached: {exc}"
        ) from None
    value = _json_object(r).get("value") if r.status_code == 200 else None
    if not isinstance(value, str) or not value:
        raise TrustedPublishingError(
            f"GitHub's ID token service answered {r.status_code} without a token"
        )
    return value


def exchange(server_url: str, id_token: str, application_id: str) -> UploadToken:
    """The upload token of `application_id` (the upload names its application: a trusted
    publisher only grants its own)."""
    body = {"token": id_token, "applicationId": application_id}
    try:
        r = httpx.post(
            f"{server_url.rstrip('/')}/api/auth/oidc-exchange", json=body, timeout=_TIMEOUT
        )
    except httpx.HTTPError as exc:
        raise TrustedPublishingError(f"{server_url} could not be reached: {exc}") from None
    answer = _json_object(r)
    if r.status_code != 200:
        detail = answer.get("detail") or r.text[:200]
        code = answer.get("code", "")
        raise TrustedPublishingError(
            f"the server refused the CI's ID token: {detail} ({r.status_code} {code})"
        )
    fields = [answer.get(k) for k in ("token", "expiresAt", "applicationId", "projectId")]
    if not all(isinstance(f, str) for f in fields):
        raise TrustedPublishingError(f"{server_url} answered 200 without an upload token")
    return UploadToken(*(str(f) for f in fields))


def _json_object(r: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object, or {} for anything else: a proxy's error page may say it is
    JSON and not be, and the CI's log gets a sentence, not a traceback."""
    if "json" not in r.headers.get("content-type", ""):
        return {}
    try:
        found = r.json()
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
