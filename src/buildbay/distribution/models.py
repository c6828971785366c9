"""Tester groups, builds distributed to groups and people, and install events."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString

# The built-in group of every project: all its members. It has no row: its id is this word,
# and it can be neither renamed nor deleted.
EVERYONE = "everyone"


class TesterGroup(Base):
    """A named group of a project's members (testers, mostly) to distribute builds to."""

    __tablename__ = "tester_groups"
    __table_args__ = (UniqueConstraint("project_id", "name", name="uq_tester_groups_project_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime]


class GroupTester(Base):
    __tablename__ = "group_testers"

    group_id: Mapped[str] = mapped_column(
        ForeignKey("tester_groups.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    added_at: Mapped[datetime]
    # The join link they came through, if any (a link goes only with its group: no key).
    join_link_id: Mapped[str | None] = mapped_column(String(32), index=True)


class InvitationGroup(Base):
    """A group an invited e-mail joins when it accepts its invitation."""

    __tablename__ = "invitation_groups"

    invitation_id: Mapped[str] = mapped_column(
        ForeignKey("invitations.id", ondelete="CASCADE"), primary_key=True
    )
    group_id: Mapped[str] = mapped_column(
        ForeignKey("tester_groups.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class BuildGroup(Base):
    """A build distributed to a group: its members see it, those who join later too. (No foreign
    key on the group: `everyone` has no row; deleting a group deletes its rows here.)"""

    __tablename__ = "build_groups"

    build_id: Mapped[str] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True
    )
    group_id: Mapped[str] = mapped_column(String(32), primary_key=True, index=True)


class BuildRecipient(Base):
    """A person a build reached (through a group or by e-mail): one row per build and e-mail,
    so that distributing again mails nobody twice. `user_id` is null for an e-mail invited
    into the project that has not accepted yet."""

    __tablename__ = "build_recipients"

    build_id: Mapped[str] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True
    )
    email: Mapped[str] = mapped_column(String(320), primary_key=True, index=True)
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    reached_at: Mapped[datetime]
    # To be mailed (a notified distribution, to someone who takes new-build mails).
    notify: Mapped[bool] = mapped_column(Boolean)
    notified_at: Mapped[datetime | None]
    # Given to them by name (an e-mail of a distribution), not only through a group: they see
    # the build while they are a member, whatever groups they leave (distribution/visibility.py).
    direct: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # Why their mail could not be sent (an address mail cannot reach): recorded for them
    # alone, the others are mailed; such a recipient is not claimed again.
    mail_error: Mapped[str | None] = mapped_column(String(500))
    # Their own install link, made with the mail: what they open is attributed to them.
    install_link_id: Mapped[str | None] = mapped_column(
        ForeignKey("install_links.id", ondelete="SET NULL"), index=True
    )


class DistributionKind(StrEnum):
    GROUP = "group"  # `target` is a group's id (`everyone` included)
    PERSON = "person"  # `target` is an e-mail (a member's, or an invited address)


class BuildDistribution(Base):
    """Who distributed a build to a group or a person, and when: the first time only (doing it
    again reaches nobody new). The build's page lists them; distributions made before this
    table have no row. A group deleted later leaves its row (the page says so)."""

    __tablename__ = "build_distributions"

    build_id: Mapped[str] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[DistributionKind] = mapped_column(EnumString(DistributionKind), primary_key=True)
    target: Mapped[str] = mapped_column(String(320), primary_key=True)
    distributed_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    distributed_at: Mapped[datetime]


class InstallEventKind(StrEnum):
    OPEN = "open"  # an install page was opened
    DOWNLOAD = "download"  # the file was downloaded (install page or API)


class InstallEvent(Base):
    __tablename__ = "install_events"
    __table_args__ = (
        Index("ix_install_events_build_id_at", "build_id", "at"),
        Index("ix_install_events_application_id_at", "application_id", "at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    build_id: Mapped[str] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"))
    application_id: Mapped[str] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    kind: Mapped[InstallEventKind] = mapped_column(EnumString(InstallEventKind))
    # Who: a signed-in caller, or the recipient of a personal install link; else null, and the
    # link says which one.
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    install_link_id: Mapped[str | None] = mapped_column(
        ForeignKey("install_links.id", ondelete="SET NULL")
    )
    platform: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime]


class JoinLink(Base):
    """A group's public join link (issue 40, TestFlight's public link): whoever opens it gives
    an e-mail, confirms it from the mail, and joins the group as a tester. The token is stored
    as a hash (shown once, at creation). One live link per group: a new one revokes the old.
    `joined_count` counts those who joined through this link; `max_testers` bounds it with a
    conditional UPDATE (distribution/join_links.py), so that it holds under concurrency."""

    __tablename__ = "join_links"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    group_id: Mapped[str] = mapped_column(
        ForeignKey("tester_groups.id", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    max_testers: Mapped[int | None] = mapped_column(Integer)
    # Normalised (NFKC, lower case, IDNA's ASCII form); empty: any domain.
    allowed_domains: Mapped[list[str]] = mapped_column(JSON)
    expires_at: Mapped[datetime | None]
    created_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    joined_count: Mapped[int] = mapped_column(Integer, server_default="0")


class JoinRequest(Base):
    """An e-mail given on a join link's page: its confirmation mail's token (as a hash), used
    once, within a day."""

    __tablename__ = "join_requests"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    link_id: Mapped[str] = mapped_column(
        ForeignKey("join_links.id", ondelete="CASCADE"), index=True
    )
    email: Mapped[str] = mapped_column(String(320))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
