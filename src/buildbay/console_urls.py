"""The addresses of the console's pages that mails and webhook events point to: a message
carries the page a person opens to see what it tells of (the console's routes, console/, serve
them at these paths; tests/webhooks/test_self_contained.py opens each)."""

from __future__ import annotations


def project_url(public_url: str, project_id: str) -> str:
    return f"{public_url}/projects/{project_id}"


def application_url(public_url: str, project_id: str, application_id: str) -> str:
    return f"{project_url(public_url, project_id)}/apps/{application_id}"


def build_url(public_url: str, project_id: str, application_id: str, build_id: str) -> str:
    return f"{application_url(public_url, project_id, application_id)}/builds/{build_id}"


def webhook_url(public_url: str, project_id: str, webhook_id: str) -> str:
    return f"{project_url(public_url, project_id)}/webhooks/{webhook_id}"


def feedback_url(public_url: str, project_id: str, feedback_id: str) -> str:
    """A feedback's page in the team's inbox (console/feedback.py)."""
    return f"{project_url(public_url, project_id)}/feedback/{feedback_id}"


# A tester's own feedback, across their projects, with the team's replies.
OWN_FEEDBACK_PATH = "/account/feedback"


def own_feedback_url(public_url: str, feedback_id: str | None = None) -> str:
    return f"{public_url}{OWN_FEEDBACK_PATH}" + (f"#{feedback_id}" if feedback_id else "")
