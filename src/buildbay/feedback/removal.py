"""A feedback goes with its build, its application or its project (by hand, or by the build's
retention rule): its rows by the database's cascade, its screenshots' objects as the build's own
file goes (builds/removal.py): their keys read in the unit of work that deletes the rows, the
objects deleted once it has committed.

A crash between the commit and the objects' deletion, or a feedback sent at the very moment its
application or project is deleted (its objects written after their keys were read), leaves
objects no row names: the sweeper removes those (builds/sweeper.py `sweep_orphan_objects`).
"""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.feedback.models import Feedback, FeedbackScreenshot
from buildbay.storage.base import Storage

FEEDBACK_PREFIX = "feedback"


def screenshots_prefix(project_id: str) -> str:
    """Where a project's screenshots are stored: `feedback/<projectId>/`, beside its builds'
    files (`<projectId>/...`)."""
    return f"{FEEDBACK_PREFIX}/{project_id}/"


def screenshot_key(project_id: str, feedback_id: str, screenshot_id: str, extension: str) -> str:
    """`feedback/<projectId>/<feedbackId>/<screenshotId>.<png|jpg>`."""
    return f"{screenshots_prefix(project_id)}{feedback_id}/{screenshot_id}.{extension}"


_OF_FEEDBACK = select(FeedbackScreenshot.storage_key).join(
    Feedback, Feedback.id == FeedbackScreenshot.feedback_id
)
_OF_BUILDS = _OF_FEEDBACK.where(Feedback.build_id.in_(bindparam("ids", expanding=True)))
_OF_APPLICATION = _OF_FEEDBACK.where(Feedback.application_id == bindparam("application_id"))


async def screenshots_of_builds(db: AsyncSession, build_ids: list[str]) -> list[str]:
    """The storage keys of the screenshots of the feedback on these builds (before they go)."""
    if not build_ids:
        return []
    return list(await db.scalars(_OF_BUILDS, {"ids": build_ids}))


async def screenshots_of_application(db: AsyncSession, application_id: str) -> list[str]:
    """The storage keys of the screenshots of the feedback on the application's builds."""
    return list(await db.scalars(_OF_APPLICATION, {"application_id": application_id}))


async def remove_screenshots(storage: Storage, keys: list[str]) -> None:
    """After the commit: each screenshot's object (one already gone is no error)."""
    for key in keys:
        await storage.delete(key)
