"""Every endpoint of the API as an `Op`: what to send and which model (models.py) the answer is.
Both clients (api.py) run the same ops, one synchronously, one with asyncio."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from buildbay_client import models
from buildbay_client.models import Model

T = TypeVar("T")


@dataclass(frozen=True)
class Op(Generic[T]):
    method: str
    path: str
    model: type[Model] | None = None  # None: the answer has no body (204, 302)
    json: dict[str, Any] | None = None
    content: bytes | None = None  # a raw body (application/octet-stream) instead of JSON
    params: dict[str, str] = field(default_factory=dict)
    # Safe to send again when the connection broke after sending: GET, PUT, DELETE and verify.
    idempotent: bool = True
    authenticated: bool = True

    def parse(self, body: Any) -> T:
        if self.model is None:
            return None  # type: ignore[return-value]
        return self.model.from_json(body)  # type: ignore[return-value]


def _q(value: str) -> str:
    return quote(value, safe="")


def _page(limit: int | None, cursor: str | None, **more: str | None) -> dict[str, str]:
    params = {"limit": str(limit) if limit else None, "cursor": cursor, **more}
    return {k: v for k, v in params.items() if v is not None}


def _fields(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


# -- auth ---------------------------------------------------------------------------------------


def login(email: str, password: str) -> Op[models.TokenResponse]:
    body = {"email": email, "password": password}
    return Op("POST", "/api/auth/login", models.TokenResponse, body, authenticated=False)


def register(email: str, password: str, name: str) -> Op[models.TokenResponse]:
    body = {"email": email, "password": password, "name": name}
    return Op(
        "POST",
        "/api/auth/register",
        models.TokenResponse,
        body,
        idempotent=False,
        authenticated=False,
    )


def refresh(refresh_token: str) -> Op[models.TokenResponse]:
    body = {"refresh_token": refresh_token}
    return Op(
        "POST", "/api/auth/refresh-token", models.TokenResponse, body, idempotent=False,
        authenticated=False,
    )  # fmt: skip


def logout(refresh_token: str | None = None) -> Op[None]:
    return Op("POST", "/api/auth/logout", None, _fields(refresh_token=refresh_token))


def cli_token(code: str, code_verifier: str, redirect_uri: str) -> Op[models.CliToken]:
    """The loopback sign-in's code (and its PKCE verifier) for an API token: once only."""
    body = {"code": code, "codeVerifier": code_verifier, "redirectUri": redirect_uri}
    return Op(
        "POST", "/api/auth/cli/token", models.CliToken, body, idempotent=False,
        authenticated=False,
    )  # fmt: skip


def device_code(client_name: str | None = None) -> Op[models.DeviceCode]:
    """Start a device sign-in (RFC 8628)."""
    return Op(
        "POST", "/api/auth/device/code", models.DeviceCode, _fields(clientName=client_name),
        idempotent=False, authenticated=False,
    )  # fmt: skip


def device_token(device_code: str) -> Op[models.CliToken]:
    """One poll of a device sign-in: the token, or a ValidationError whose `code` is RFC
    8628's (`authorization_pending`, `slow_down`, ...)."""
    return Op(
        "POST", "/api/auth/device/token", models.CliToken, {"deviceCode": device_code},
        idempotent=False, authenticated=False,
    )  # fmt: skip


def me() -> Op[models.Me]:
    return Op("GET", "/api/auth/me", models.Me)


def list_api_tokens() -> Op[models.ApiTokenList]:
    return Op("GET", "/api/account/api-tokens", models.ApiTokenList)


def create_api_token(
    name: str,
    expires_in_days: int | None = None,
    scope: models.TokenScope | str | None = None,
    project_ids: Sequence[str] | None = None,
) -> Op[models.CreatedApiToken]:
    """`scope` and `project_ids` limit the token (None: no limit)."""
    body = _fields(
        name=name,
        expiresInDays=expires_in_days,
        scope=models.TokenScope(scope).value if scope is not None else None,
        projectIds=list(project_ids) if project_ids is not None else None,
    )
    return Op("POST", "/api/account/api-tokens", models.CreatedApiToken, body, idempotent=False)


def revoke_api_token(token_id: str) -> Op[None]:
    return Op("DELETE", f"/api/account/api-tokens/{_q(token_id)}")


# -- projects and members -----------------------------------------------------------------------


def list_projects(limit: int | None = None, cursor: str | None = None) -> Op[models.ProjectList]:
    return Op("GET", "/api/projects", models.ProjectList, params=_page(limit, cursor))


def create_project(name: str) -> Op[models.Project]:
    return Op("POST", "/api/projects", models.Project, {"name": name}, idempotent=False)


def get_project(project_id: str) -> Op[models.Project]:
    return Op("GET", f"/api/projects/{_q(project_id)}", models.Project)


def rename_project(project_id: str, name: str) -> Op[models.Project]:
    return Op("PUT", f"/api/projects/{_q(project_id)}", models.Project, {"name": name})


def delete_project(project_id: str) -> Op[None]:
    return Op("DELETE", f"/api/projects/{_q(project_id)}")


def list_members(project_id: str) -> Op[models.MemberList]:
    return Op("GET", f"/api/projects/{_q(project_id)}/members", models.MemberList)


def add_member(project_id: str, email: str, role: str) -> Op[models.Member]:
    body = {"email": email, "role": role}
    path = f"/api/projects/{_q(project_id)}/members"
    return Op("POST", path, models.Member, body, idempotent=False)


def set_member_role(project_id: str, user_id: str, role: str) -> Op[models.Member]:
    path = f"/api/projects/{_q(project_id)}/members/{_q(user_id)}"
    return Op("PUT", path, models.Member, {"role": role})


def remove_member(project_id: str, user_id: str) -> Op[None]:
    return Op("DELETE", f"/api/projects/{_q(project_id)}/members/{_q(user_id)}")


# -- webhooks -----------------------------------------------------------------------------------


def list_webhooks(project_id: str) -> Op[models.WebhookList]:
    return Op("GET", f"/api/projects/{_q(project_id)}/webhooks", models.WebhookList)


def create_webhook(
    project_id: str,
    url: str,
    events: Sequence[str],
    description: str | None = None,
    format_: str | None = None,
) -> Op[models.WebhookCreated]:
    """`format_`: `standard` (the signed event, by default) or a chat's: `slack`, `discord`,
    `teams`, `google-chat`."""
    body = _fields(url=url, events=list(events), description=description, format=format_)
    path = f"/api/projects/{_q(project_id)}/webhooks"
    return Op("POST", path, models.WebhookCreated, body, idempotent=False)


def test_webhook(project_id: str, webhook_id: str) -> Op[models.DeliveryAccepted]:
    path = f"/api/projects/{_q(project_id)}/webhooks/{_q(webhook_id)}/test"
    return Op("POST", path, models.DeliveryAccepted, idempotent=False)


def set_webhook_enabled(project_id: str, webhook_id: str, enabled: bool) -> Op[models.Webhook]:
    """Enable a webhook (its failure count starts afresh) or disable it (its pending deliveries
    fail without being sent)."""
    path = f"/api/projects/{_q(project_id)}/webhooks/{_q(webhook_id)}"
    return Op("PUT", path, models.Webhook, {"enabled": enabled})


def delete_webhook(project_id: str, webhook_id: str) -> Op[None]:
    return Op("DELETE", f"/api/projects/{_q(project_id)}/webhooks/{_q(webhook_id)}")


def retry_delivery(project_id: str, delivery_id: str) -> Op[models.DeliveryAccepted]:
    """Send a delivery again now, with the same `webhook-id` and body."""
    path = f"/api/projects/{_q(project_id)}/webhook-deliveries/{_q(delivery_id)}/retry"
    return Op("POST", path, models.DeliveryAccepted, idempotent=False)


def list_deliveries(
    project_id: str, webhook_id: str, limit: int | None = None, cursor: str | None = None
) -> Op[models.DeliveryList]:
    path = f"/api/projects/{_q(project_id)}/webhooks/{_q(webhook_id)}/deliveries"
    return Op("GET", path, models.DeliveryList, params=_page(limit, cursor))


# -- applications -------------------------------------------------------------------------------


def _apps(project_id: str) -> str:
    return f"/api/projects/{_q(project_id)}/applications"


def list_applications(
    project_id: str, limit: int | None = None, cursor: str | None = None
) -> Op[models.ApplicationList]:
    return Op("GET", _apps(project_id), models.ApplicationList, params=_page(limit, cursor))


def list_groups(
    project_id: str, limit: int | None = None, cursor: str | None = None
) -> Op[models.GroupList]:
    path = f"/api/projects/{_q(project_id)}/groups"
    return Op("GET", path, models.GroupList, params=_page(limit, cursor))


# -- testers' devices ---------------------------------------------------------------------------


def list_project_devices(
    project_id: str, limit: int | None = None, cursor: str | None = None, q: str | None = None
) -> Op[models.ProjectDeviceList]:
    """A page of the devices the project's members enrolled (developer+); `q` searches their
    names, models, UDIDs and testers."""
    path = f"/api/projects/{_q(project_id)}/devices"
    return Op("GET", path, models.ProjectDeviceList, params=_page(limit, cursor, q=q))


def export_devices(project_id: str, format: str = "apple") -> Op[None]:  # noqa: A002
    """The project's devices as a file (the client reads its bytes: `export_devices`):
    `apple`, the file Apple's Register Multiple Devices upload takes, or `csv`."""
    path = f"/api/projects/{_q(project_id)}/devices/export"
    return Op("GET", path, None, params={"format": format})


def create_application(
    project_id: str, name: str, platform: str | None = None, bundle_id: str | None = None
) -> Op[models.Application]:
    body = _fields(name=name, platform=platform, bundleId=bundle_id)
    return Op("POST", _apps(project_id), models.Application, body, idempotent=False)


def get_application(project_id: str, app_id: str) -> Op[models.Application]:
    return Op("GET", f"{_apps(project_id)}/{_q(app_id)}", models.Application)


def update_application(
    project_id: str, app_id: str, changes: dict[str, Any]
) -> Op[models.ApplicationUpdated]:
    """`changes` in the API's field names (name, platform, bundleId, retention). The answer's
    `warnings` say what the change may break (a rename: CI jobs naming the old name)."""
    path = f"{_apps(project_id)}/{_q(app_id)}"
    return Op("PUT", path, models.ApplicationUpdated, changes)


def preview_retention(
    project_id: str, app_id: str, rule: dict[str, Any] | None
) -> Op[models.RetentionPreview]:
    """Which ready builds `rule` (`{keepLast?, keepDays?, protect?}`, as update_application's
    `retention`; None: no rule) would delete now, were it the application's. Saves nothing, so
    it is safe to send again."""
    path = f"{_apps(project_id)}/{_q(app_id)}/retention/preview"
    return Op("POST", path, models.RetentionPreview, rule or {})


def delete_application(project_id: str, app_id: str) -> Op[None]:
    return Op("DELETE", f"{_apps(project_id)}/{_q(app_id)}")


# -- builds -------------------------------------------------------------------------------------


def _channels(project_id: str, app_id: str) -> str:
    return f"{_apps(project_id)}/{_q(app_id)}/channels"


def list_channels(project_id: str, app_id: str) -> Op[models.ChannelList]:
    return Op("GET", _channels(project_id, app_id), models.ChannelList)


def create_channel(project_id: str, app_id: str, name: str) -> Op[models.Channel]:
    return Op("POST", _channels(project_id, app_id), models.Channel, {"name": name},
              idempotent=False)  # fmt: skip


def _builds(project_id: str, app_id: str) -> str:
    return f"/api/app-distribution/{_q(project_id)}/{_q(app_id)}/builds"


def list_builds(
    project_id: str,
    app_id: str,
    limit: int | None = None,
    cursor: str | None = None,
    *,
    status: str | None = None,
    version_name: str | None = None,
    version_code: str | None = None,
    sort: str | None = None,
    branch: str | None = None,
    commit: str | None = None,
) -> Op[models.BuildList]:
    """`branch`, `commit` (or its first 7+ hex digits): the builds of that source only."""
    params = _page(
        limit, cursor, status=status, versionName=version_name, versionCode=version_code,
        sort=sort, branch=branch, commit=commit,
    )  # fmt: skip
    return Op("GET", _builds(project_id, app_id), models.BuildList, params=params)


def get_build(project_id: str, app_id: str, build_id: str) -> Op[models.Build]:
    return Op("GET", f"{_builds(project_id, app_id)}/{_q(build_id)}", models.Build)


def latest_build(project_id: str, app_id: str, version_name: str | None = None) -> Op[models.Build]:
    params = _fields(versionName=version_name)
    return Op("GET", f"{_builds(project_id, app_id)}/latest", models.Build, params=params)


def download(project_id: str, app_id: str, build_id: str) -> Op[None]:
    """Answers 302: the file's short-lived signed address is in its Location header."""
    return Op("GET", f"{_builds(project_id, app_id)}/{_q(build_id)}/download")


def set_build_channels(
    project_id: str,
    app_id: str,
    build_id: str,
    channels: Sequence[str],
    rollout_percent: int | None = None,
) -> Op[models.Build]:
    """Publish the build to these release channels only; `rollout_percent`: offer it to this
    share (1-100) of each one's installs (None: each keeps its own, a new one starts at 100)."""
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}/channels"
    body: dict[str, Any] = {"channels": list(channels)}
    if rollout_percent is not None:
        body["rolloutPercent"] = rollout_percent
    return Op("PUT", path, models.Build, body)


def attach_blockmap(
    project_id: str, app_id: str, build_id: str, blockmap: bytes
) -> Op[models.Build]:
    """Attach electron-builder's `.blockmap` of the build's file (its bytes, as written), for
    electron-updater's differential download; replaces the one before."""
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}/blockmap"
    return Op("PUT", path, models.Build, content=blockmap)


def mark_mandatory(project_id: str, app_id: str, build_id: str) -> Op[models.Build]:
    """Update checks that find the build say the update is mandatory."""
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}"
    return Op("PUT", path, models.Build, {"mandatory": True})


def delete_build(project_id: str, app_id: str, build_id: str) -> Op[None]:
    return Op("DELETE", f"{_builds(project_id, app_id)}/{_q(build_id)}")


def upload_link(
    project_id: str,
    app_id: str,
    file_name: str,
    file_size: int,
    sha256: str | None = None,
    multipart: bool = False,
    on_duplicate: str | None = None,
) -> Op[models.UploadLink]:
    """An upload link; with `on_duplicate` "reuse", a `sha256` that a ready build of the
    application has answers 200 with that build (read it as a `Build`) instead."""
    body = _fields(fileName=file_name, fileSize=file_size, sha256=sha256, onDuplicate=on_duplicate)
    if multipart:
        body["multipart"] = True
    path = f"{_builds(project_id, app_id)}/upload-link"
    return Op("POST", path, models.UploadLink, body, idempotent=False)


def part_targets(
    project_id: str, app_id: str, build_id: str, part_numbers: list[int]
) -> Op[models.PartTargets]:
    """Signed PUT addresses for up to 100 parts of an upload in parts (safe to repeat)."""
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}/parts"
    return Op("POST", path, models.PartTargets, {"partNumbers": part_numbers})


def received_parts(project_id: str, app_id: str, build_id: str) -> Op[models.ReceivedParts]:
    """The parts of an upload in parts that have fully arrived."""
    return Op("GET", f"{_builds(project_id, app_id)}/{_q(build_id)}/parts", models.ReceivedParts)


def verify(
    project_id: str,
    app_id: str,
    build_id: str,
    notes: str | None = None,
    install_link_hours: int | None = None,
    channels: Sequence[str] | None = None,
    mandatory: bool = False,
    distribute: dict[str, Any] | None = None,
    *,
    architecture: str | None = None,
    sparkle_ed_signature: str | None = None,
    minimum_os_version: str | None = None,
    version: str | None = None,
    build_number: str | None = None,
    source: dict[str, Any] | None = None,
) -> Op[models.Build]:
    """`channels`: the release channels to publish the build to (None: the server's default,
    `default`); `mandatory`: update checks that find it say so; `distribute`: `{groups?,
    emails?, notify?}`, to distribute the build too. The keyword fields are what the desktop
    updaters need that only CI knows (docs/api.md, desktop builds)."""
    body: dict[str, Any] = _fields(
        buildId=build_id,
        notes=notes,
        architecture=architecture,
        sparkleEdSignature=sparkle_ed_signature,
        minimumOsVersion=minimum_os_version,
        version=version,
        buildNumber=build_number,
    )
    if install_link_hours is not None:
        body["installLink"] = {"expiresInHours": install_link_hours}
    if channels is not None:
        body["channels"] = list(channels)
    if mandatory:
        body["mandatory"] = True
    if distribute is not None:
        body["distribute"] = distribute
    if source:
        body["source"] = source  # where the build came from (buildbay_client.source)
    # Verify is safe to repeat: a ready build answers itself.
    return Op("POST", f"{_builds(project_id, app_id)}/verify", models.Build, body)


def distribute_build(
    project_id: str,
    app_id: str,
    build_id: str,
    groups: Sequence[str] = (),
    emails: Sequence[str] = (),
    notify: bool = True,
) -> Op[models.Distribution]:
    """Distribute a ready build to tester groups (ids, `everyone` too) and e-mails; each newly
    reached tester is mailed their own install link unless not `notify`. Reaching someone
    again reaches no one new, so sending it twice is harmless."""
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}/distribute"
    body = {"groups": list(groups), "emails": list(emails), "notify": notify}
    return Op("POST", path, models.Distribution, body)


def create_install_link(
    project_id: str, app_id: str, build_id: str, expires_in_hours: int | None = None
) -> Op[models.InstallLink]:
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}/install-link"
    body = _fields(expiresInHours=expires_in_hours)
    return Op("POST", path, models.InstallLink, body, idempotent=False)


def list_install_links(project_id: str, app_id: str, build_id: str) -> Op[models.InstallLinkList]:
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}/install-links"
    return Op("GET", path, models.InstallLinkList)


def revoke_install_link(project_id: str, app_id: str, build_id: str, link_id: str) -> Op[None]:
    path = f"{_builds(project_id, app_id)}/{_q(build_id)}/install-links/{_q(link_id)}"
    return Op("DELETE", path)


# -- feedback (the team's side) -----------------------------------------------------------------


def _feedback(project_id: str, feedback_id: str | None = None) -> str:
    path = f"/api/projects/{_q(project_id)}/feedback"
    return path if feedback_id is None else f"{path}/{_q(feedback_id)}"


def list_feedback(
    project_id: str,
    limit: int | None = None,
    cursor: str | None = None,
    *,
    application: str | None = None,
    build: str | None = None,
    status: models.FeedbackStatus | str | None = None,
    category: models.FeedbackCategory | str | None = None,
    q: str | None = None,
) -> Op[models.FeedbackList]:
    """A page of the project's feedback, newest first (developer+), narrowed by an application
    or a build (ids), a status, a category, or text in it or its reporter's e-mail (`q`)."""
    params = _page(
        limit, cursor, application=application, build=build,
        status=models.FeedbackStatus(status).value if status is not None else None,
        category=models.FeedbackCategory(category).value if category is not None else None, q=q,
    )  # fmt: skip
    return Op("GET", _feedback(project_id), models.FeedbackList, params=params)


def get_feedback(project_id: str, feedback_id: str) -> Op[models.TeamFeedback]:
    return Op("GET", _feedback(project_id, feedback_id), models.TeamFeedback)


def update_feedback(
    project_id: str, feedback_id: str, changes: dict[str, Any]
) -> Op[models.TeamFeedback]:
    """Triage: `changes` holds `status` and/or `assignee` (a developer's user id, or None:
    nobody). The same values again change nothing, so sending it twice is harmless."""
    return Op("PATCH", _feedback(project_id, feedback_id), models.TeamFeedback, dict(changes))


def list_feedback_comments(
    project_id: str, feedback_id: str, limit: int | None = None, cursor: str | None = None
) -> Op[models.FeedbackCommentList]:
    path = f"{_feedback(project_id, feedback_id)}/comments"
    return Op("GET", path, models.FeedbackCommentList, params=_page(limit, cursor))


def comment_on_feedback(project_id: str, feedback_id: str, text: str) -> Op[models.FeedbackComment]:
    """A comment of the team's; the tester who sent the feedback gets it by mail."""
    path = f"{_feedback(project_id, feedback_id)}/comments"
    return Op("POST", path, models.FeedbackComment, {"text": text}, idempotent=False)


def own_feedback(limit: int | None = None, cursor: str | None = None) -> Op[models.FeedbackList]:
    """What you sent, across your projects, newest first."""
    return Op("GET", "/api/account/feedback", models.FeedbackList, params=_page(limit, cursor))
