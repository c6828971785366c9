from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, false
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString
from buildbay.projects.enums import ProjectRole


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ProjectMember(Base):
    __tablename__ = "project_members"
    # Serves "the projects I am a member of, newest first": the memberships of a user read in
    # project order from the index, a page at a time, rather than all of them found and sorted.
    __table_args__ = (Index("ix_project_members_user_id_project_id", "user_id", "project_id"),)

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[ProjectRole] = mapped_column(EnumString(ProjectRole))
    created_at: Mapped[datetime]
    # A developer (or above) asked for a mail per device one of the project's testers enrolls.
    device_mail: Mapped[bool] = mapped_column(default=False, server_default=false())
    # A developer (or above) asked for a mail per feedback a tester sends.
    feedback_mail: Mapped[bool] = mapped_column(default=False, server_default=false())
