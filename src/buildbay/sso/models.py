from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, ForeignKeyConstraint, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString
from buildbay.projects.enums import ProjectRole


class SsoIdentity(Base):
    """A person at the identity provider (`issuer`, `subject`: what OpenID Connect promises
    never changes) and the account they sign in to. The e-mail is only how the link was first
    made: a later change of address at the provider still finds the account."""

    __tablename__ = "sso_identities"
    # One person of a provider per account (sso/signin.py; migration 0050).
    __table_args__ = (Index("uq_sso_identities_issuer_user_id", "issuer", "user_id", unique=True),)

    issuer: Mapped[str] = mapped_column(String(500), primary_key=True)
    subject: Mapped[str] = mapped_column(String(255), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    email: Mapped[str] = mapped_column(String(320))  # the provider's, when the link was made
    created_at: Mapped[datetime]
    last_sign_in_at: Mapped[datetime]


class SsoGroupMapping(Base):
    """A project's rule: members of the provider's `group` are members of the project with
    `role` (the highest role of the person's groups), applied at each of their sign-ins."""

    __tablename__ = "sso_group_mappings"

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    group: Mapped[str] = mapped_column("group_name", String(256), primary_key=True)
    role: Mapped[ProjectRole] = mapped_column(EnumString(ProjectRole))
    created_at: Mapped[datetime]


class SsoMembership(Base):
    """A membership the group mapping made: only these does the mapping change or remove. A
    member added by hand has no row here and is never touched by it; removing the membership
    (by hand or by the mapping) removes this row with it."""

    __tablename__ = "sso_memberships"
    __table_args__ = (
        ForeignKeyConstraint(
            ["project_id", "user_id"],
            ["project_members.project_id", "project_members.user_id"],
            ondelete="CASCADE",
        ),
    )

    project_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(32), primary_key=True, index=True)
    created_at: Mapped[datetime]
