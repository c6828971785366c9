"""Imports every model so that Base.metadata knows all tables (for Alembic)."""

from buildbay.applications.models import Application
from buildbay.auth.models import ApiToken, BrowserSession, RefreshToken, Session, User
from buildbay.builds.models import Build, BuildIcon, InstallLink
from buildbay.db.base import Base
from buildbay.projects.models import Project, ProjectMember

__all__ = [
    "ApiToken",
    "Application",
    "Base",
    "BrowserSession",
    "Build",
    "BuildIcon",
    "InstallLink",
    "Project",
    "ProjectMember",
    "RefreshToken",
    "Session",
    "User",
]
