"""An audit entry as a sentence a person reads in the console ("alice@acme.test changed
bob@acme.test's role from developer to admin"): plain text, escaped by the page like any other
text, made only of what the entry holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from buildbay.audit.enums import AuditAction

A = AuditAction
ACTION_WORDS: dict[str, str] = {
    A.SIGN_IN: "Signed in",
    A.SIGN_IN_FAILED: "Failed sign-in",
    A.PASSWORD_CHANGED: "Password changed",
    A.PASSWORD_RESET: "Password reset",
    A.ACCOUNT_TAKEN_BACK: "Account taken back",
    A.TOKEN_CREATED: "API token created",
    A.TOKEN_REVOKED: "API token revoked",
    A.MEMBER_ADDED: "Member added",
    A.MEMBER_REMOVED: "Member removed",
    A.MEMBER_ROLE_CHANGED: "Role changed",
    A.INVITATION_SENT: "Invitation sent",
    A.INVITATION_ACCEPTED: "Invitation accepted",
    A.INVITATION_REVOKED: "Invitation revoked",
    A.PROJECT_CREATED: "Project created",
    A.PROJECT_RENAMED: "Project renamed",
    A.PROJECT_DELETED: "Project deleted",
    A.APPLICATION_CREATED: "Application created",
    A.APPLICATION_RENAMED: "Application renamed",
    A.APPLICATION_DELETED: "Application deleted",
    A.BUILD_UPLOADED: "Build uploaded",
    A.BUILD_DELETED: "Build deleted",
    A.INSTALL_LINK_CREATED: "Install link created",
    A.INSTALL_LINK_REVOKED: "Install link revoked",
    A.WEBHOOK_CREATED: "Webhook added",
    A.WEBHOOK_CHANGED: "Webhook changed",
    A.WEBHOOK_DELETED: "Webhook deleted",
    A.PLAN_CHANGED: "Plan changed",
    A.TRUSTED_PUBLISHER_ADDED: "Trusted publisher added",
    A.TRUSTED_PUBLISHER_REMOVED: "Trusted publisher removed",
    A.TRUSTED_PUBLISHER_EXCHANGED: "CI token issued to a trusted publisher",
    A.SSO_GROUPS_CHANGED: "SSO group mapping changed",
}


def actor_words(row: dict[str, Any]) -> str:
    kind, email = row["actor_kind"], row["actor_email"]
    if kind == "operator":
        return "The server's operator"
    if kind == "system":
        return "Buildbay"
    if kind == "ci":
        return f"CI ({email})" if email else "A CI job"
    return email or "Someone"


def _name(row: dict[str, Any]) -> str:
    return row["target_name"] or row["target_id"] or "something"


def _detail(row: dict[str, Any], key: str) -> str:
    return str(row["details"].get(key) or "?")


# What follows the actor, per action: "changed bob's role from developer to admin".
_PREDICATES: dict[str, Callable[[dict[str, Any]], str]] = {
    A.SIGN_IN: lambda r: "signed in",
    A.SIGN_IN_FAILED: lambda r: "failed to sign in (wrong e-mail or password)",
    A.PASSWORD_CHANGED: lambda r: "changed their password",
    A.PASSWORD_RESET: lambda r: "reset their password with a mailed link",
    A.ACCOUNT_TAKEN_BACK: lambda r: (
        f"proved the address through {_detail(r, 'provider')}: the account's earlier "
        "sign-ins, password and API tokens were ended"
    ),
    A.TOKEN_CREATED: lambda r: f"created the API token {_name(r)}",
    A.TOKEN_REVOKED: lambda r: f"revoked the API token {_name(r)}",
    A.MEMBER_ADDED: lambda r: f"added {_name(r)} as {_detail(r, 'role')}",
    A.MEMBER_REMOVED: lambda r: (
        "left the project" if r["target_id"] == r["actor_id"] else f"removed {_name(r)}"
    ),
    A.MEMBER_ROLE_CHANGED: lambda r: (
        f"changed {_name(r)}'s role from {_detail(r, 'from')} to {_detail(r, 'to')}"
    ),
    A.INVITATION_SENT: lambda r: f"invited {_name(r)} as {_detail(r, 'role')}",
    A.INVITATION_ACCEPTED: lambda r: f"accepted the invitation, as {_detail(r, 'role')}",
    A.INVITATION_REVOKED: lambda r: f"revoked the invitation of {_name(r)}",
    A.PROJECT_CREATED: lambda r: f"created the project {_name(r)}",
    A.PROJECT_RENAMED: lambda r: f"renamed the project from {_detail(r, 'from')} to {_name(r)}",
    A.PROJECT_DELETED: lambda r: f"deleted the project {_name(r)}",
    A.APPLICATION_CREATED: lambda r: f"created the application {_name(r)}",
    A.APPLICATION_RENAMED: lambda r: f"renamed the application {_detail(r, 'from')} to {_name(r)}",
    A.APPLICATION_DELETED: lambda r: f"deleted the application {_name(r)} and its builds",
    A.BUILD_UPLOADED: lambda r: f"uploaded the build {_name(r)}",
    A.BUILD_DELETED: lambda r: (
        f"deleted the build {_name(r)}"
        + (" under its application's retention rule" if r["details"].get("reason") else "")
    ),
    A.INSTALL_LINK_CREATED: lambda r: f"created an install link for {_name(r)}",
    A.INSTALL_LINK_REVOKED: lambda r: f"revoked an install link of {_name(r)}",
    A.WEBHOOK_CREATED: lambda r: f"added a webhook sending to {_name(r)}",
    A.WEBHOOK_CHANGED: lambda r: (
        f"changed the webhook sending to {_name(r)} "
        f"({', '.join(r['details'].get('changed') or []) or 'settings'})"
    ),
    A.WEBHOOK_DELETED: lambda r: f"deleted the webhook sending to {_name(r)}",
    A.PLAN_CHANGED: lambda r: (
        f"moved {_name(r)} from the {_detail(r, 'from')} plan to {_detail(r, 'to')}"
    ),
}


def sentence(row: dict[str, Any]) -> str:
    """The entry `row` (a row of audit_entries, as audit/reads.py gives it) as a sentence."""
    predicate = _PREDICATES.get(row["action"])
    if predicate is None:  # an action recorded by a newer part (SSO, trusted publishing)
        said = ACTION_WORDS.get(row["action"], row["action"]).lower()
        return f"{actor_words(row)}: {said}" + (f" ({_name(row)})" if row["target_type"] else "")
    return f"{actor_words(row)} {predicate(row)}"
