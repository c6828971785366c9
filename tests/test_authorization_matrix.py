"""Who may call what, generated from the app's own routes so that no new route can escape it.

RULES gives the contract's rule for every /api route: public (no token needed), any signed-in
user, the owner of a per-user resource, or a project role. From it and the route table:

- the matrix: every route, called by each of thirteen principals (no token, a bad token, an
  expired token, a revoked token, a stranger, a tester, a developer, an admin, the owner, and four
  API tokens of the owner's: one without limits, a read token, a builds:write token, one
  restricted to another project), answers exactly the status the rule gives, with the contract's
  problem code;
- every route that takes a token answers 401 to more kinds of bad credentials;
- an unknown project, and an unknown id below a project, answer 404.

A route missing from RULES (or, with a body, from BODIES; or, taking a token, from TOKEN_SCOPE)
fails the suite until its rule is
written down here; so does a route outside /api that OUTSIDE_API does not account for. One world
of shared accounts serves the whole matrix: only the calls that destroy what they name get a
fresh target (see tests/route_table.py).
"""

from __future__ import annotations

import itertools

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from tests.conftest import Account, Api, assert_problem
from tests.route_table import (
    BODIES,
    ENDS_SESSIONS,
    LADDER,
    PUBLIC_ANSWER,
    SPOILT,
    TARGETS,
    TOKENS,
    RouteCase,
    World,
    api_routes,
    build_world,
    call,
)

pytestmark = pytest.mark.usefixtures("no_leaks")

PUBLIC = "public"  # no token needed; a token sent anyway is not looked at
ANY_USER = "any user"  # any valid token: the caller's own account
OWN = "own"  # the caller's own resource, named by id: another user's is 404

# The contract's rule for every /api route (Authentication; Projects, members and roles).
RULES: dict[tuple[str, str], str] = {
    ("POST", "/api/auth/register"): PUBLIC,
    ("POST", "/api/auth/login"): PUBLIC,
    ("POST", "/api/auth/refresh-token"): PUBLIC,
    ("POST", "/api/auth/password-reset"): PUBLIC,
    ("POST", "/api/auth/password-reset/confirm"): PUBLIC,
    ("POST", "/api/auth/email-verification/confirm"): PUBLIC,
    # The command line's sign-in (issue 41): a one-time code or device code the console's
    # signed-in person allowed (tests/auth/test_cli_sign_in.py).
    ("POST", "/api/auth/cli/token"): PUBLIC,
    ("POST", "/api/auth/device/code"): PUBLIC,
    ("POST", "/api/auth/device/token"): PUBLIC,
    ("POST", "/api/auth/email-verification"): ANY_USER,
    ("POST", "/api/auth/email-change/confirm"): PUBLIC,
    ("POST", "/api/auth/email-change"): ANY_USER,
    ("POST", "/api/auth/logout"): ANY_USER,
    ("POST", "/api/auth/logout-everywhere"): ANY_USER,
    ("POST", "/api/auth/change-password"): ANY_USER,
    ("GET", "/api/auth/me"): ANY_USER,
    ("PUT", "/api/auth/me"): ANY_USER,
    ("GET", "/api/account/api-tokens"): ANY_USER,
    ("POST", "/api/account/api-tokens"): ANY_USER,
    ("DELETE", "/api/account/api-tokens/{id}"): OWN,
    # A tester's enrolled devices (issue 37; tests/ios/test_enrollment_api.py).
    ("GET", "/api/account/devices"): ANY_USER,
    ("PATCH", "/api/account/devices/{id}"): OWN,
    ("DELETE", "/api/account/devices/{id}"): OWN,
    # A mail per device the project's members enroll: a developer's to ask for.
    ("GET", "/api/projects/{id}/members/me/device-mail"): "developer",
    ("PUT", "/api/projects/{id}/members/me/device-mail"): "developer",
    ("GET", "/api/projects"): ANY_USER,
    ("POST", "/api/projects"): ANY_USER,
    ("GET", "/api/project/{id}"): "tester",
    ("GET", "/api/projects/{id}"): "tester",
    ("PUT", "/api/projects/{id}"): "admin",
    ("DELETE", "/api/projects/{id}"): "owner",
    ("GET", "/api/projects/{id}/members"): "tester",
    ("POST", "/api/projects/{id}/members"): "admin",
    ("PUT", "/api/projects/{id}/members/{userId}"): "admin",
    # Removing *another* member; leaving oneself is tested in tests/projects/test_members.py.
    ("DELETE", "/api/projects/{id}/members/{userId}"): "admin",
    ("POST", "/api/projects/{id}/invitations"): "admin",
    ("GET", "/api/projects/{id}/invitations"): "admin",
    ("GET", "/api/projects/{id}/audit-log"): "admin",
    ("GET", "/api/account/audit-log"): ANY_USER,
    ("DELETE", "/api/projects/{id}/invitations/{invitationId}"): "admin",
    ("POST", "/api/invitations/accept"): ANY_USER,
    ("POST", "/api/invitations/decline"): ANY_USER,
    ("GET", "/api/account/invitations"): ANY_USER,
    ("GET", "/api/projects/{id}/groups"): "tester",
    ("POST", "/api/projects/{id}/groups"): "developer",
    ("PUT", "/api/projects/{id}/groups/{groupId}"): "developer",
    ("DELETE", "/api/projects/{id}/groups/{groupId}"): "developer",
    ("GET", "/api/projects/{id}/groups/{groupId}/testers"): "tester",
    ("POST", "/api/projects/{id}/groups/{groupId}/testers"): "developer",
    ("DELETE", "/api/projects/{id}/groups/{groupId}/testers/{userId}"): "developer",
    # A group's public join link: whoever manages the groups (tests/distribution/).
    ("POST", "/api/projects/{id}/groups/{groupId}/join-link"): "developer",
    ("GET", "/api/projects/{id}/groups/{groupId}/join-link"): "developer",
    ("DELETE", "/api/projects/{id}/groups/{groupId}/join-link"): "developer",
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/distribute"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/installs"): "developer",
    # Testers' devices: their developers' (tests/ios/test_device_lists*.py).
    ("GET", "/api/projects/{id}/devices"): "developer",
    ("GET", "/api/projects/{id}/devices/export"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/devices"): "developer",
    # Webhooks: their URLs and delivery logs are the admins' (tests/webhooks/).
    ("GET", "/api/projects/{id}/webhooks"): "admin",
    ("POST", "/api/projects/{id}/webhooks"): "admin",
    ("GET", "/api/projects/{id}/sso-groups"): "admin",
    ("PUT", "/api/projects/{id}/sso-groups"): "admin",
    ("GET", "/api/projects/{id}/webhooks/{webhookId}"): "admin",
    ("PUT", "/api/projects/{id}/webhooks/{webhookId}"): "admin",
    ("DELETE", "/api/projects/{id}/webhooks/{webhookId}"): "admin",
    ("POST", "/api/projects/{id}/webhooks/{webhookId}/rotate-secret"): "admin",
    ("POST", "/api/projects/{id}/webhooks/{webhookId}/test"): "admin",
    ("GET", "/api/projects/{id}/webhooks/{webhookId}/deliveries"): "admin",
    ("GET", "/api/projects/{id}/webhooks/{webhookId}/deliveries/{deliveryId}"): "admin",
    ("POST", "/api/projects/{id}/webhooks/{webhookId}/deliveries/{deliveryId}/retry"): "admin",
    ("POST", "/api/projects/{id}/webhook-deliveries/{deliveryId}/retry"): "admin",
    # The App Store Connect key is a secret of the project's, as webhooks are: admins put and
    # remove it; developers see which is set and register devices (tests/ios/test_apple*.py).
    ("PUT", "/api/projects/{id}/apple-api-key"): "admin",
    ("GET", "/api/projects/{id}/apple-api-key"): "developer",
    ("DELETE", "/api/projects/{id}/apple-api-key"): "admin",
    ("POST", "/api/projects/{id}/devices/{deviceId}/register-with-apple"): "developer",
    ("POST", "/api/projects/{id}/devices/register-with-apple"): "developer",
    ("GET", "/api/projects/{id}/devices/apple-registrations"): "developer",
    # Feedback is the team's; the tester who sent one sees it and its comments too (the world's
    # is the member's: tests/feedback/test_feedback_team.py tests the sender's sight).
    ("GET", "/api/projects/{id}/feedback"): "developer",
    ("GET", "/api/projects/{id}/feedback/{feedbackId}"): "developer",
    ("PATCH", "/api/projects/{id}/feedback/{feedbackId}"): "developer",
    ("GET", "/api/projects/{id}/feedback/{feedbackId}/comments"): "developer",
    ("POST", "/api/projects/{id}/feedback/{feedbackId}/comments"): "developer",
    # What the caller sent, across their projects (an API token: its own projects').
    ("GET", "/api/account/feedback"): ANY_USER,
    ("GET", "/api/projects/{id}/applications"): "tester",
    ("POST", "/api/projects/{id}/applications"): "admin",
    ("GET", "/api/projects/{id}/applications/{appId}"): "tester",
    ("PUT", "/api/projects/{id}/applications/{appId}"): "admin",
    ("DELETE", "/api/projects/{id}/applications/{appId}"): "admin",
    ("POST", "/api/projects/{id}/applications/{appId}/update-key"): "admin",
    ("POST", "/api/projects/{id}/applications/{appId}/retention/preview"): "admin",
    # Trusted publishers: an application's settings, its admins' (tests/publishers/).
    ("GET", "/api/projects/{id}/applications/{appId}/trusted-publishers"): "admin",
    ("POST", "/api/projects/{id}/applications/{appId}/trusted-publishers"): "admin",
    ("DELETE", "/api/projects/{id}/applications/{appId}/trusted-publishers/{publisherId}"): "admin",
    # The CI's ID token in the body is the credential (tests/publishers/test_exchange.py).
    ("POST", "/api/auth/oidc-exchange"): PUBLIC,
    ("GET", "/api/projects/{id}/applications/{appId}/channels"): "tester",
    # The update key is the credential (tests/updates/test_update_check.py).
    ("GET", "/api/updates/check"): PUBLIC,
    ("POST", "/api/projects/{id}/applications/{appId}/channels"): "developer",
    ("DELETE", "/api/projects/{id}/applications/{appId}/channels/{channelId}"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds"): "tester",
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/upload-link"): "developer",
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/verify"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/latest"): "tester",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): "tester",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/download"): "tester",
    ("DELETE", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): "developer",
    ("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): "developer",
    ("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/channels"): "developer",
    ("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/blockmap"): "developer",
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/parts"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/parts"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/icon"): "tester",
    # Sharing a build is a developer's (issue 34); a tester lists only their own personal links
    # (tests/distribution/test_link_access.py).
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-link"): (
        "developer"
    ),
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-links"): "tester",
    # Feedback: a tester the build is distributed to (the world's build is everyone's), or a
    # personal install link or the update key (tests/feedback/test_feedback_submit_senders.py).
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/feedback"): "tester",
    # The mails per feedback are the team's to ask for (developer+).
    ("GET", "/api/projects/{id}/members/me/feedback-mail"): "developer",
    ("PUT", "/api/projects/{id}/members/me/feedback-mail"): "developer",
    (
        "DELETE",
        "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-links/{linkId}",
    ): "developer",
}
# The account's own endpoints: a login only; any API token gets 403 (API tokens).
LOGIN_ONLY = {
    ("POST", "/api/auth/change-password"),
    ("POST", "/api/auth/email-verification"),
    ("POST", "/api/auth/email-change"),
    ("POST", "/api/auth/logout-everywhere"),
    ("GET", "/api/account/api-tokens"),
    ("POST", "/api/account/api-tokens"),
    ("DELETE", "/api/account/api-tokens/{id}"),
    # Joining a project: a person, signed in as the invited e-mail.
    ("POST", "/api/invitations/accept"),
    ("POST", "/api/invitations/decline"),
    ("GET", "/api/account/invitations"),
}
READ, UPLOAD, BUILDS_WRITE, UNSCOPED = "read", "upload", "builds:write", None
SCOPE_RANK = {READ: 0, UPLOAD: 1, BUILDS_WRITE: 2}
# What an API token's scope must include on every other route that takes a token (UNSCOPED: a
# token without a scope). A token restricted to some projects reaches no other project, and
# cannot create one.
TOKEN_SCOPE: dict[tuple[str, str], str | None] = {
    ("POST", "/api/auth/logout"): READ,
    ("GET", "/api/auth/me"): READ,
    ("PUT", "/api/auth/me"): UNSCOPED,
    ("GET", "/api/projects"): READ,
    ("POST", "/api/projects"): UNSCOPED,
    ("GET", "/api/project/{id}"): READ,
    ("GET", "/api/projects/{id}"): READ,
    ("PUT", "/api/projects/{id}"): UNSCOPED,
    ("DELETE", "/api/projects/{id}"): UNSCOPED,
    ("GET", "/api/projects/{id}/members"): READ,
    ("POST", "/api/projects/{id}/members"): UNSCOPED,
    ("PUT", "/api/projects/{id}/members/{userId}"): UNSCOPED,
    ("GET", "/api/account/devices"): UNSCOPED,
    ("PATCH", "/api/account/devices/{id}"): UNSCOPED,
    ("DELETE", "/api/account/devices/{id}"): UNSCOPED,
    ("GET", "/api/projects/{id}/members/me/device-mail"): READ,
    ("PUT", "/api/projects/{id}/members/me/device-mail"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/members/{userId}"): UNSCOPED,
    ("POST", "/api/projects/{id}/invitations"): UNSCOPED,
    ("GET", "/api/projects/{id}/invitations"): READ,
    # Read with a read token (a log collector's); the account's, by a token free of limits.
    ("GET", "/api/projects/{id}/audit-log"): READ,
    ("GET", "/api/account/audit-log"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/invitations/{invitationId}"): UNSCOPED,
    ("GET", "/api/projects/{id}/groups"): READ,
    ("POST", "/api/projects/{id}/groups"): UNSCOPED,
    ("PUT", "/api/projects/{id}/groups/{groupId}"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/groups/{groupId}"): UNSCOPED,
    ("GET", "/api/projects/{id}/groups/{groupId}/testers"): READ,
    ("POST", "/api/projects/{id}/groups/{groupId}/testers"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/groups/{groupId}/testers/{userId}"): UNSCOPED,
    ("POST", "/api/projects/{id}/groups/{groupId}/join-link"): UNSCOPED,
    ("GET", "/api/projects/{id}/groups/{groupId}/join-link"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/groups/{groupId}/join-link"): UNSCOPED,
    (
        "POST",
        "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/distribute",
    ): BUILDS_WRITE,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/installs"): READ,
    ("GET", "/api/projects/{id}/devices"): READ,
    ("GET", "/api/projects/{id}/devices/export"): READ,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/devices"): READ,
    ("GET", "/api/projects/{id}/webhooks"): READ,
    ("POST", "/api/projects/{id}/webhooks"): UNSCOPED,
    ("GET", "/api/projects/{id}/sso-groups"): READ,
    ("PUT", "/api/projects/{id}/sso-groups"): UNSCOPED,
    ("GET", "/api/projects/{id}/webhooks/{webhookId}"): READ,
    ("PUT", "/api/projects/{id}/webhooks/{webhookId}"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/webhooks/{webhookId}"): UNSCOPED,
    ("POST", "/api/projects/{id}/webhooks/{webhookId}/rotate-secret"): UNSCOPED,
    ("POST", "/api/projects/{id}/webhooks/{webhookId}/test"): UNSCOPED,
    ("GET", "/api/projects/{id}/webhooks/{webhookId}/deliveries"): READ,
    ("GET", "/api/projects/{id}/webhooks/{webhookId}/deliveries/{deliveryId}"): READ,
    ("POST", "/api/projects/{id}/webhooks/{webhookId}/deliveries/{deliveryId}/retry"): UNSCOPED,
    ("POST", "/api/projects/{id}/webhook-deliveries/{deliveryId}/retry"): UNSCOPED,
    ("PUT", "/api/projects/{id}/apple-api-key"): UNSCOPED,
    ("GET", "/api/projects/{id}/apple-api-key"): READ,
    ("DELETE", "/api/projects/{id}/apple-api-key"): UNSCOPED,
    # A CI job that makes an ad-hoc build may send the new devices to Apple first.
    ("POST", "/api/projects/{id}/devices/{deviceId}/register-with-apple"): BUILDS_WRITE,
    ("POST", "/api/projects/{id}/devices/register-with-apple"): BUILDS_WRITE,
    ("GET", "/api/projects/{id}/devices/apple-registrations"): READ,
    ("GET", "/api/projects/{id}/feedback"): READ,
    ("GET", "/api/projects/{id}/feedback/{feedbackId}"): READ,
    ("PATCH", "/api/projects/{id}/feedback/{feedbackId}"): UNSCOPED,
    ("GET", "/api/projects/{id}/feedback/{feedbackId}/comments"): READ,
    ("POST", "/api/projects/{id}/feedback/{feedbackId}/comments"): UNSCOPED,
    ("GET", "/api/account/feedback"): READ,
    ("GET", "/api/projects/{id}/applications"): READ,
    ("POST", "/api/projects/{id}/applications"): UNSCOPED,
    ("GET", "/api/projects/{id}/applications/{appId}"): READ,
    ("PUT", "/api/projects/{id}/applications/{appId}"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/applications/{appId}"): UNSCOPED,
    ("POST", "/api/projects/{id}/applications/{appId}/update-key"): UNSCOPED,
    ("POST", "/api/projects/{id}/applications/{appId}/retention/preview"): UNSCOPED,
    ("GET", "/api/projects/{id}/applications/{appId}/trusted-publishers"): UNSCOPED,
    ("POST", "/api/projects/{id}/applications/{appId}/trusted-publishers"): UNSCOPED,
    ("DELETE", "/api/projects/{id}/applications/{appId}/trusted-publishers/{publisherId}"): (
        UNSCOPED
    ),
    ("GET", "/api/projects/{id}/applications/{appId}/channels"): READ,
    ("POST", "/api/projects/{id}/applications/{appId}/channels"): BUILDS_WRITE,
    ("DELETE", "/api/projects/{id}/applications/{appId}/channels/{channelId}"): BUILDS_WRITE,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds"): READ,
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/upload-link"): UPLOAD,
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/verify"): UPLOAD,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/latest"): READ,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): READ,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/download"): READ,
    ("DELETE", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): BUILDS_WRITE,
    ("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): BUILDS_WRITE,
    ("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/channels"): BUILDS_WRITE,
    ("PUT", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/blockmap"): UPLOAD,
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/parts"): UPLOAD,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/parts"): UPLOAD,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/icon"): READ,
    (
        "POST",
        "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-link",
    ): BUILDS_WRITE,
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-links"): READ,
    # A person's, not a pipeline's: a token without a scope (docs/feedback.md).
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/feedback"): UNSCOPED,
    ("GET", "/api/projects/{id}/members/me/feedback-mail"): READ,
    ("PUT", "/api/projects/{id}/members/me/feedback-mail"): UNSCOPED,
    (
        "DELETE",
        "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-links/{linkId}",
    ): BUILDS_WRITE,
}
# Routes that name no project but need a token free to reach every project (CurrentUser).
ALL_PROJECTS = {
    ("POST", "/api/projects"),
    ("PUT", "/api/auth/me"),
    ("GET", "/api/account/devices"),
    ("PATCH", "/api/account/devices/{id}"),
    ("DELETE", "/api/account/devices/{id}"),
    ("GET", "/api/account/audit-log"),
}
# Routes outside /api, by path prefix, and what guards them instead of a bearer token.
OUTSIDE_API = {
    "/storage/": "a signed URL (tests/builds/test_upload_flow.py, test_builds_api.py)",
    "/feedback-screenshots/": "a signed address that dies with its feedback "
    "(tests/feedback/test_feedback_submit.py)",
    "/install/": "a signed install link; a personal one only while its person may open the "
    "build, and never to someone else signed in (tests/builds/test_install_links.py, "
    "tests/distribution/test_link_access.py); a device registers through a personal one only "
    "(tests/ios/test_enrollment.py)",
    "/devices/": "the profile service: the console's session cookie for the profile, its "
    "challenge for a device's answer, a signed reference for the page after it "
    "(tests/ios/test_enrollment.py)",
    "/feeds/": "the application's update key, public by design like the update check's: "
    "it opens only what the check offers under it (tests/desktop/test_feeds.py, "
    "test_feed_download.py)",
    "/healthz": "public by contract",
    "/readyz": "public by contract",
    "/favicon.ico": "public: a redirect to the icon under /static",
    "/docs": "public by contract (the OpenAPI document and its docs)",
    "/redoc": "public by contract",
    # The web console: a session cookie and CSRF tokens (tests/console/).
    "/login": "the console's sign-in form",
    "/signup": "the console's sign-up form",
    "/auth/sso/": "sign-in through the identity provider: its start is public, its callback "
    "takes the provider's answer only with the flow's sealed cookie of the same browser "
    "(tests/sso/test_sign_in.py)",
    "/logout": "the console (cookie and CSRF)",
    "/projects": "the console (cookie and CSRF)",
    "/account": "the console (cookie and CSRF)",
    "/unsubscribe/": "a signed one-click link (tests/mail/test_unsubscribe.py)",
    "/invitations/": "the console; its token is the invitation's (tests/console/)",
    "/join/": "a group's public join link: its token, rate limited per IP and address "
    "(tests/distribution/test_join_links.py)",
    "/join-confirm/": "a join link's confirmation mail: its single-use token "
    "(tests/distribution/test_join_links.py)",
    "/forgot-password": "the console's form (tests/console/)",
    "/cli/": "the console (cookie and CSRF): the command line's sign-in, allowed only by the "
    "signed-in person; redirects only to a loopback (tests/auth/test_cli_sign_in.py)",
    "/reset-password": "the console; a reset link's token (tests/console/)",
    "/verify-email": "the console; a verification link's token (tests/console/)",
    "/confirm-email": "the console; an e-mail change link's token (tests/console/)",
}
CONSOLE_HOME = "/"

# Principals that hold no valid credential, and the 401 code each gets.
UNAUTHENTICATED = {
    "no token": "not_authenticated",
    "a bad token": "invalid_token",
    "an expired token": "token_expired",
    "a revoked token": "token_revoked",
}
PRINCIPALS = [*SPOILT, *LADDER, *TOKENS]

PROJECT_PARAMS = {"id", "projectId"}
UNKNOWN = {
    "id": "prj_00000000000000000000000000",
    "projectId": "prj_00000000000000000000000000",
    "appId": "app_00000000000000000000000000",
    "buildId": "bld_00000000000000000000000000",
    "userId": "usr_00000000000000000000000000",
    "linkId": "inl_00000000000000000000000000",
    "invitationId": "inv_00000000000000000000000000",
    "channelId": "chn_00000000000000000000000000",
    "groupId": "grp_00000000000000000000000000",
    "webhookId": "whk_00000000000000000000000000",
    "deliveryId": "whd_00000000000000000000000000",
    "deviceId": "dev_00000000000000000000000000",
    "feedbackId": "fbk_00000000000000000000000000",
    "publisherId": "tpub_00000000000000000000000000",
}
UNKNOWN_CODE = {
    "appId": "application_not_found",
    "buildId": "build_not_found",
    "userId": "member_not_found",
    "linkId": "install_link_not_found",
    "invitationId": "invitation_not_found",
    "channelId": "channel_not_found",
    "groupId": "group_not_found",
    "webhookId": "webhook_not_found",
    "deliveryId": "delivery_not_found",
    "deviceId": "device_not_found",
    "feedbackId": "feedback_not_found",
    "publisherId": "publisher_not_found",
}
UNKNOWN_API_TOKEN = "tok_00000000000000000000000000"
# What an unknown (or another's) id of a per-user route answers, by what it names.
OWN_CODE = {"api_token": "api_token_not_found", "device": "device_not_found"}
UNKNOWN_OWN = {"api_token": UNKNOWN_API_TOKEN, "device": "dev_00000000000000000000000000"}


def expected(case: RouteCase, principal: str) -> tuple[int, str | None]:
    """The status (and problem code) the contract gives `principal` on this route."""
    rule = RULES[case.key]
    if rule == PUBLIC:
        return PUBLIC_ANSWER.get(case.key, (case.success, None))
    if principal in TOKENS:
        return _expected_of_token(case, principal)
    if principal in UNAUTHENTICATED:
        return 401, UNAUTHENTICATED[principal]
    if rule == ANY_USER:
        return case.success, None
    if rule == OWN:  # the API token and the device in the world are the owner's
        return (case.success, None) if principal == "owner" else (404, OWN_CODE[case.owned])
    if LADDER.index(principal) >= LADDER.index(rule):
        return case.success, None
    return 403, "not_a_member" if principal == "stranger" else "insufficient_role"


def _expected_of_token(case: RouteCase, principal: str) -> tuple[int, str | None]:
    """What an API token of the owner's gets: the owner's answer, unless its limits refuse."""
    if case.key in LOGIN_ONLY:
        return 403, "interactive_session_required"
    limits = TOKENS[principal]
    names_a_project = bool(PROJECT_PARAMS & set(case.params)) and not case.per_user
    if limits.elsewhere and (names_a_project or case.key in ALL_PROJECTS):
        return 403, "token_not_allowed"
    needed = TOKEN_SCOPE[case.key]
    if limits.scope is not None and (
        needed is None or SCOPE_RANK[limits.scope] < SCOPE_RANK[needed]
    ):
        return 403, "insufficient_scope"
    return expected(case, "owner")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The matrix makes many more requests than a minute's free-plan quota (and failed logins).
    settings.rate_limit_enabled = False
    # It also adds the same unverified accounts as members (invitations' worth) far more often
    # than a day's invitation caps allow: those are tested in tests/invitations.
    settings.invitations_per_account_per_day_unverified = 0
    settings.invitations_per_recipient_per_day = 0
    return settings


@pytest.fixture
def cases(app: FastAPI) -> list[RouteCase]:
    found = list(api_routes(app))
    assert len(found) >= len(RULES) > 0, "fewer /api routes than rules: has the routing changed?"
    return found


@pytest.fixture
def cases_with_ids(cases: list[RouteCase]) -> list[RouteCase]:
    return [c for c in cases if c.params]


@pytest.fixture
async def world(
    api: Api, client: httpx.AsyncClient, owner: Account, clock: FrozenClock, app: FastAPI
) -> World:
    return await build_world(api, client, owner, clock, app)


def describe(case: RouteCase, who: str, r: httpx.Response) -> str:
    return f"{case} as {who}: {r.status_code} {r.text[:200]}"


def check(
    failures: list[str],
    case: RouteCase,
    who: str,
    r: httpx.Response,
    status: int,
    code: str | set[str] | None,
) -> None:
    """`r` has this status; an error is a problem with this code (or one of these codes), and a
    401 carries the Bearer challenge."""
    try:
        if status < 400:
            assert r.status_code == status
            return
        problem = assert_problem(r, status)
        assert problem["code"] in ({code} if isinstance(code, str) else code or {problem["code"]})
        if status == 401:
            assert r.headers["www-authenticate"] == "Bearer"
    except (AssertionError, KeyError):
        failures.append(f"{describe(case, who, r)} (expected {status} {code or ''})")


# -- the tests ------------------------------------------------------------------------------------


def test_every_api_route_has_a_rule(cases: list[RouteCase]) -> None:
    declared = {c.key for c in cases}

    assert declared - set(RULES) == set(), "add these routes to RULES"
    assert set(RULES) - declared == set(), "these routes no longer exist"
    assert {c.key for c in cases if c.has_body} - set(BODIES) == set(), "add a body to BODIES"
    assert set(BODIES) | set(TARGETS) | ENDS_SESSIONS <= declared, "stale entries"
    assert {c.key for c in cases if c.per_user} == {k for k, r in RULES.items() if r == OWN}
    assert {p for c in cases if not c.per_user for p in c.params} <= set(UNKNOWN), (
        "teach build_world and UNKNOWN these parameters"
    )
    with_token = {k for k, rule in RULES.items() if rule != PUBLIC}
    assert with_token - LOGIN_ONLY - set(TOKEN_SCOPE) == set(), (
        "say in TOKEN_SCOPE what a token needs"
    )
    assert set(TOKEN_SCOPE) | LOGIN_ONLY <= with_token, "stale entries"
    assert not set(TOKEN_SCOPE) & LOGIN_ONLY


def test_every_route_outside_api_is_accounted_for(app: FastAPI) -> None:
    unaccounted = []
    for context in iter_route_contexts(app.routes):
        path = context.path_format or ""
        if not isinstance(context.original_route, APIRoute) or path.startswith("/api/"):
            continue
        if path != CONSOLE_HOME and not path.startswith(tuple(OUTSIDE_API)):
            unaccounted.append(path)

    assert unaccounted == [], "say in OUTSIDE_API what guards these routes, and test it"


async def test_every_principal_gets_the_contracts_answer_on_every_route(
    world: World, cases: list[RouteCase]
) -> None:
    failures: list[str] = []
    for case, principal in itertools.product(cases, PRINCIPALS):
        r = await call(world, case, principal)
        check(failures, case, principal, r, *expected(case, principal))

    assert failures == []
    # The spoilt credentials are the owner's, and the owner's own session still works.
    r = await world.client.get("/api/auth/me", headers=world.accounts.owner.headers)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == world.accounts.owner.user["id"]


async def test_every_route_that_takes_a_token_refuses_other_bad_credentials(
    world: World, cases: list[RouteCase]
) -> None:
    owner = world.accounts.owner
    failures: list[str] = []
    for case in cases:
        if RULES[case.key] == PUBLIC:
            continue
        for label, headers in (
            ("a malformed token", {"Authorization": "Bearer not-a-token"}),
            ("an unknown API token", {"Authorization": "Bearer bb_" + "A" * 40}),
            ("a refresh token", {"Authorization": f"Bearer {owner.refresh_token}"}),
            ("another scheme", {"Authorization": f"Basic {owner.access_token}"}),
            ("an empty header", {"Authorization": ""}),
        ):
            payload = await BODIES[case.key](world, owner) if case.has_body else None
            r = await world.client.request(
                case.method, case.url(world.values_for(case)), json=payload, headers=headers
            )
            check(failures, case, label, r, 401, {"not_authenticated", "invalid_token"})

    assert failures == []
    # Nothing was touched on the way.
    r = await world.client.get(f"/api/projects/{world.ids['id']}", headers=owner.headers)
    assert r.json()["name"] == "Matrix"
    r = await world.client.get("/api/account/api-tokens", headers=owner.headers)
    assert {t["id"] for t in r.json()["apiTokens"]} == world.token_ids


async def test_an_unknown_project_is_404_for_anyone_with_a_valid_token(
    world: World, cases_with_ids: list[RouteCase]
) -> None:
    failures: list[str] = []
    for case in cases_with_ids:
        if case.per_user:
            r = await call(world, case, "owner", {"id": UNKNOWN_OWN[case.owned]})
            check(failures, case, "the owner", r, 404, OWN_CODE[case.owned])
            continue
        values = world.ids | {p: UNKNOWN[p] for p in PROJECT_PARAMS}
        for who in ("stranger", "tester", "owner"):
            r = await call(world, case, who, values)
            check(failures, case, f"the {who}", r, 404, "project_not_found")

    assert failures == []


async def test_an_unknown_id_inside_a_known_project_is_404_for_a_member(
    world: World, cases_with_ids: list[RouteCase]
) -> None:
    failures: list[str] = []
    checked = 0
    for case in cases_with_ids:
        if case.per_user:
            continue
        for param in case.params:
            if param in PROJECT_PARAMS:
                continue
            values = world.ids | {param: UNKNOWN[param]}
            r = await call(world, case, "owner", values)
            check(failures, case, f"the owner, unknown {param}", r, 404, UNKNOWN_CODE[param])
            checked += 1

    assert failures == []
    assert checked >= 10
