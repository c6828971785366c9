"""The web console: server-rendered pages under `/` for people (the API stays under `/api`).

Every page calls the same services as the API, never its HTTP endpoints, through the same
authorization rules (projects/access.py): a tester sees no delete button, and the server
refuses the action anyway. Forms post back with a CSRF token (console/session.py); errors are
shown next to the field that caused them. One module per area; what they share is pages.py.
"""

from __future__ import annotations

from fastapi import APIRouter

from buildbay.console import (
    account,
    account_devices,
    application_settings,
    audit_log,
    auth,
    build_page,
    builds,
    cli_sign_in,
    distribution,
    feedback,
    groups,
    install,
    invitations,
    join,
    project_devices,
    projects,
    releases,
    sso,
    tester_feedback,
    trusted_publishers,
    unsubscribe,
    uploads,
    webhooks,
)
from buildbay.console.pages import console_sessions

__all__ = ["console_sessions", "routers"]

routers: tuple[APIRouter, ...] = (
    auth.router,
    sso.router,
    projects.router,
    application_settings.router,
    trusted_publishers.router,
    invitations.router,
    groups.router,
    join.router,
    build_page.router,
    tester_feedback.router,
    distribution.router,
    webhooks.router,
    audit_log.router,
    feedback.router,
    builds.router,
    uploads.router,
    install.router,
    releases.router,
    account.router,
    account_devices.router,
    project_devices.router,
    unsubscribe.router,
    cli_sign_in.router,
)
