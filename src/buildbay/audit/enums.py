"""What an audit entry says happened (`AuditAction`), and who did it (`ActorKind`): free of the
database and the web, for the schemas and the console's words."""

from __future__ import annotations

import enum


class AuditAction(enum.StrEnum):
    SIGN_IN = "auth.sign_in"
    SIGN_IN_FAILED = "auth.sign_in_failed"
    PASSWORD_CHANGED = "auth.password_changed"
    PASSWORD_RESET = "auth.password_reset"
    # An unverified account linked to the identity provider's verified address: its earlier
    # credentials ended as a reset ends them (sso/signin.py).
    ACCOUNT_TAKEN_BACK = "auth.account_taken_back"
    TOKEN_CREATED = "auth.token_created"
    TOKEN_REVOKED = "auth.token_revoked"
    MEMBER_ADDED = "member.added"
    MEMBER_REMOVED = "member.removed"
    MEMBER_ROLE_CHANGED = "member.role_changed"
    INVITATION_SENT = "invitation.sent"
    INVITATION_ACCEPTED = "invitation.accepted"
    INVITATION_REVOKED = "invitation.revoked"
    PROJECT_CREATED = "project.created"
    PROJECT_RENAMED = "project.renamed"
    PROJECT_DELETED = "project.deleted"
    APPLICATION_CREATED = "application.created"
    APPLICATION_RENAMED = "application.renamed"
    APPLICATION_DELETED = "application.deleted"
    BUILD_UPLOADED = "build.uploaded"
    BUILD_DELETED = "build.deleted"
    INSTALL_LINK_CREATED = "install_link.created"
    INSTALL_LINK_REVOKED = "install_link.revoked"
    WEBHOOK_CREATED = "webhook.created"
    WEBHOOK_CHANGED = "webhook.changed"
    WEBHOOK_DELETED = "webhook.deleted"
    PLAN_CHANGED = "plan.changed"
    TRUSTED_PUBLISHER_ADDED = "trusted_publisher.added"
    TRUSTED_PUBLISHER_REMOVED = "trusted_publisher.removed"
    TRUSTED_PUBLISHER_EXCHANGED = "trusted_publisher.exchanged"
    SSO_GROUPS_CHANGED = "sso_groups.changed"


class ActorKind(enum.StrEnum):
    USER = "user"
    OPERATOR = "operator"  # a `buildbay` command run on the server
    CI = "ci"  # a trusted publisher's short-lived token
    SYSTEM = "system"  # the server itself (retention, an expiry)
