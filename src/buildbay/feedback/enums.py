"""Feedback's categories and states, and who may send it.

Free of SQLAlchemy: the models store them, the schemas name them (tests/test_layers.py).
"""

from __future__ import annotations

from enum import StrEnum


class FeedbackCategory(StrEnum):
    BUG = "bug"
    CRASH = "crash"
    SUGGESTION = "suggestion"
    OTHER = "other"


class FeedbackStatus(StrEnum):
    NEW = "new"
    TRIAGED = "triaged"
    RESOLVED = "resolved"
    WONT_FIX = "wont-fix"


class FeedbackMode(StrEnum):
    """Who may send feedback on an application's builds: its testers to whom a build is
    distributed (`testers-only`, the default), or also an app holding the application's update
    key and naming the reporter's e-mail (`anyone-with-update-key`, for public beta rings)."""

    TESTERS_ONLY = "testers-only"
    ANYONE_WITH_UPDATE_KEY = "anyone-with-update-key"
