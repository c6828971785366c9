"""Feedback as the team reads it (db/reads.py): the inbox's pages, one feedback with its
screenshots, the team's comments, a tester's own feedback, and how many new ones each build
has. Every page is a constant number of statements, whatever its size: the feedback with what
is shown beside it (its tester, assignee, application, build version and comment count) in one,
the page's screenshots in one more.

Who sees what: the team (developers and above) every feedback of the project; a tester only
what they sent, with the team's comments but not its triage (`FeedbackViewer`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, bindparam, func, or_, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.orm import aliased

from buildbay.applications.models import Application
from buildbay.auth.models import User
from buildbay.builds.models import Build
from buildbay.builds.schemas import version_label
from buildbay.db.reads import Reads, RecordOf
from buildbay.errors import Forbidden, NotFound
from buildbay.feedback import schemas as core_schemas
from buildbay.feedback import team_schemas as schemas
from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus
from buildbay.feedback.links import ScreenshotLinks
from buildbay.feedback.models import Feedback, FeedbackComment, FeedbackScreenshot
from buildbay.feedback.records import (
    FeedbackRecord,
    ScreenshotRecord,
    ShownFeedback,
    TesterRecord,
)
from buildbay.ids import split_page
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember


@dataclass(frozen=True, slots=True)
class PersonRecord:
    id: str
    email: str
    name: str


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A feedback as the team's inbox (and its tester) sees it: with its tester, assignee,
    application, build version, comment count and screenshots."""

    feedback: FeedbackRecord
    tester: PersonRecord | None  # the member who sent it (None: an app's reporter, or gone)
    assignee: PersonRecord | None
    application_name: str
    build_version: str | None
    comments_count: int
    screenshots: tuple[ScreenshotRecord, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class CommentRecord:
    id: str
    feedback_id: str
    author: PersonRecord | None  # None once their account is gone
    text: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class FeedbackViewer:
    """Who reads: a member of the team (developer+) sees every feedback of the project and its
    triage; anyone else only what they sent themselves, without its triage."""

    user_id: str
    team: bool

    @classmethod
    def of(cls, user_id: str, role: ProjectRole) -> FeedbackViewer:
        return cls(user_id, role.includes(ProjectRole.DEVELOPER))


@dataclass(frozen=True, slots=True)
class FeedbackQuery:
    """A page of a project's feedback, newest first, from a cursor's feedback on, narrowed by
    whichever filters are given. `search`: text in the feedback's text or its reporter's
    e-mail, in any case."""

    project_id: str
    limit: int
    after_id: str | None = None
    application_id: str | None = None
    build_id: str | None = None
    status: FeedbackStatus | None = None
    category: FeedbackCategory | None = None
    search: str | None = None

    @property
    def is_first_page(self) -> bool:
        return (
            self.after_id is None
            and self.application_id is None
            and self.build_id is None
            and self.status is None
            and self.category is None
            and not self.search
        )


@dataclass(frozen=True, slots=True)
class Neighbours:
    """A feedback's neighbours in the inbox's order (newest first): the one shown before it
    (`newer`) and after it (`older`), None at either end."""

    newer: str | None
    older: str | None


FEEDBACK = RecordOf(FeedbackRecord, Feedback, "f_")
SCREENSHOT = RecordOf(ScreenshotRecord, FeedbackScreenshot)

_TESTER = aliased(User, name="tester")
_ASSIGNEE = aliased(User, name="assignee")
_AUTHOR = aliased(User, name="author")
_COMMENTS_COUNT = (
    select(func.count(FeedbackComment.id))
    .where(FeedbackComment.feedback_id == Feedback.id)
    .correlate(Feedback)
    .scalar_subquery()
)

# Built once: composing a statement (and its cache key) per request costs more than the
# database takes to run it. A feedback with what is shown beside it, in one statement.
_SHOWN = (
    select(
        *FEEDBACK.columns,
        _TESTER.email.label("tester_email"),
        _TESTER.name.label("tester_name"),
        _ASSIGNEE.email.label("assignee_email"),
        _ASSIGNEE.name.label("assignee_name"),
        Application.name.label("application_name"),
        Build.metadata_.label("build_metadata"),
        _COMMENTS_COUNT.label("comments_count"),
    )
    .select_from(Feedback)
    .join(Application, Application.id == Feedback.application_id)
    .join(Build, Build.id == Feedback.build_id)
    .outerjoin(_TESTER, _TESTER.id == Feedback.tester_id)
    .outerjoin(_ASSIGNEE, _ASSIGNEE.id == Feedback.assignee_id)
)
_OF_PROJECT = _SHOWN.where(Feedback.project_id == bindparam("project_id"))
_NEWEST_FIRST = _OF_PROJECT.order_by(Feedback.id.desc()).limit(bindparam("limit"))
_ONE = _OF_PROJECT.where(Feedback.id == bindparam("feedback_id"))
# A tester's own, in the projects they are still a member of, along (tester_id, id).
_OWN = (
    _SHOWN.join(
        ProjectMember,
        and_(
            ProjectMember.project_id == Feedback.project_id,
            ProjectMember.user_id == Feedback.tester_id,
        ),
    )
    .where(Feedback.tester_id == bindparam("user_id"))
    .order_by(Feedback.id.desc())
    .limit(bindparam("limit"))
)
_SCREENSHOTS = (
    select(*SCREENSHOT.columns)
    .where(FeedbackScreenshot.feedback_id.in_(bindparam("ids", expanding=True)))
    .order_by(FeedbackScreenshot.feedback_id, FeedbackScreenshot.position)
)
_COMMENT_COLUMNS = (
    FeedbackComment.id,
    FeedbackComment.feedback_id,
    FeedbackComment.text,
    FeedbackComment.created_at,
    _AUTHOR.id.label("author_id"),
    _AUTHOR.email.label("author_email"),
    _AUTHOR.name.label("author_name"),
)
_COMMENTS = (
    select(*_COMMENT_COLUMNS)
    .outerjoin(_AUTHOR, _AUTHOR.id == FeedbackComment.author_id)
    .where(FeedbackComment.feedback_id == bindparam("feedback_id"))
    .order_by(FeedbackComment.id.desc())
    .limit(bindparam("limit"))
)
# The newest `per_feedback` comments of each of several feedback, in one statement: numbered
# newest first within each feedback by a window function (SQLite 3.25+, PostgreSQL).
_LATEST_COMMENTS_RANKED = (
    select(
        FeedbackComment.id,
        func.row_number()
        .over(partition_by=FeedbackComment.feedback_id, order_by=FeedbackComment.id.desc())
        .label("rank"),
    )
    .where(FeedbackComment.feedback_id.in_(bindparam("ids", expanding=True)))
    .subquery()
)
_LATEST_COMMENTS = (
    select(*_COMMENT_COLUMNS)
    .join(_LATEST_COMMENTS_RANKED, _LATEST_COMMENTS_RANKED.c.id == FeedbackComment.id)
    .outerjoin(_AUTHOR, _AUTHOR.id == FeedbackComment.author_id)
    .where(_LATEST_COMMENTS_RANKED.c.rank <= bindparam("per_feedback"))
    .order_by(FeedbackComment.feedback_id, FeedbackComment.id)
)
_NEW_COUNTS = (
    select(Feedback.build_id, func.count(Feedback.id).label("count"))
    .where(
        Feedback.build_id.in_(bindparam("build_ids", expanding=True)),
        Feedback.status == FeedbackStatus.NEW,
    )
    .group_by(Feedback.build_id)
)


def feedback_not_found() -> NotFound:
    return NotFound("No feedback with this id in the project", code="feedback_not_found")


def _person(row: RowMapping, prefix: str, id_key: str) -> PersonRecord | None:
    person_id = row[id_key]
    if person_id is None or row[f"{prefix}_email"] is None:  # none, or the account is gone
        return None
    return PersonRecord(person_id, row[f"{prefix}_email"], row[f"{prefix}_name"])


def _shown(row: RowMapping) -> InboxItem:
    return InboxItem(
        feedback=FEEDBACK.of(row),
        tester=_person(row, "tester", "f_tester_id"),
        assignee=_person(row, "assignee", "f_assignee_id"),
        application_name=row["application_name"],
        build_version=version_label(row["build_metadata"]),
        comments_count=int(row["comments_count"] or 0),
    )


def _search_clause(text: str | None) -> list[ColumnElement[bool]]:
    """Feedback whose text or reporter's e-mail holds `text`, in any case (`%` and `_` in it
    are themselves, not wildcards)."""
    if not text:
        return []
    return [
        or_(
            Feedback.text.icontains(text, autoescape=True),
            Feedback.reporter_email.icontains(text, autoescape=True),
        )
    ]


def _filters(query: FeedbackQuery, *, status: bool = True) -> list[ColumnElement[bool]]:
    """What `query` narrows the project's feedback to, but its cursor (and its status, unless
    `status`): on the feedback's own columns."""
    found = [Feedback.project_id == query.project_id, *_search_clause(query.search)]
    if query.application_id is not None:
        found.append(Feedback.application_id == query.application_id)
    if query.build_id is not None:
        found.append(Feedback.build_id == query.build_id)
    if status and query.status is not None:
        found.append(Feedback.status == query.status)
    if query.category is not None:
        found.append(Feedback.category == query.category)
    return found


def _composed(query: FeedbackQuery) -> Select[Any]:
    """The statement of a page other than the plain first one."""
    stmt = _OF_PROJECT.where(*_filters(query))
    if query.after_id is not None:
        stmt = stmt.where(Feedback.id < query.after_id)
    return stmt.order_by(Feedback.id.desc()).limit(bindparam("limit"))


async def new_feedback_counts(reads: Reads, build_ids: Collection[str]) -> dict[str, int]:
    """How many `new` feedback each build has (those without any are left out), in one
    statement whatever the number of builds: for a console's build rows and build page."""
    if not build_ids:
        return {}
    rows = await reads.all(_NEW_COUNTS, {"build_ids": sorted(set(build_ids))})
    return {row["build_id"]: int(row["count"]) for row in rows}


class FeedbackReads:
    """Feedback as its readers see it: on a read-only request's reads, or a unit of work's.
    `links` signs the screenshots' addresses it gives out."""

    def __init__(self, reads: Reads, now: datetime, links: ScreenshotLinks) -> None:
        self.reads = reads
        self.now = now
        self.links = links

    async def page(self, query: FeedbackQuery) -> tuple[list[InboxItem], str | None]:
        """A page of the project's feedback as `query` asks, newest first."""
        stmt = _NEWEST_FIRST if query.is_first_page else _composed(query)
        params = {"project_id": query.project_id, "limit": query.limit + 1}
        rows = await self.reads.all(stmt, params)
        found, cursor = split_page(rows, query.limit, lambda row: str(row["f_id"]))
        return await self._with_screenshots([_shown(row) for row in found]), cursor

    async def own_page(
        self, user_id: str, limit: int, after_id: str | None, only: Collection[str] | None = None
    ) -> tuple[list[InboxItem], str | None]:
        """A page of what `user_id` sent, newest first, in the projects they are still a member
        of (of those in `only`, if given: an API token's)."""
        stmt = _OWN
        if only is not None:
            stmt = stmt.where(Feedback.project_id.in_(sorted(only)))
        if after_id is not None:
            stmt = stmt.where(Feedback.id < after_id)
        rows = await self.reads.all(stmt, {"user_id": user_id, "limit": limit + 1})
        found, cursor = split_page(rows, limit, lambda row: str(row["f_id"]))
        return await self._with_screenshots([_shown(row) for row in found]), cursor

    async def one(self, project_id: str, feedback_id: str, viewer: FeedbackViewer) -> InboxItem:
        """The feedback, if `viewer` may see it: 404 `feedback_not_found` if the project has no
        such feedback, 403 `insufficient_role` to a tester who did not send it."""
        row = await self.reads.first(_ONE, {"project_id": project_id, "feedback_id": feedback_id})
        if row is None:
            raise feedback_not_found()
        shown = _shown(row)
        require_sight(shown.feedback, viewer)
        return (await self._with_screenshots([shown]))[0]

    async def comments(
        self, feedback_id: str, limit: int, after_id: str | None
    ) -> tuple[list[CommentRecord], str | None]:
        """A page of the feedback's comments, newest first (its reader's sight of the feedback
        checked by `one` beforehand)."""
        stmt = _COMMENTS
        if after_id is not None:
            stmt = stmt.where(FeedbackComment.id < after_id)
        rows = await self.reads.all(stmt, {"feedback_id": feedback_id, "limit": limit + 1})
        found, cursor = split_page(rows, limit, lambda row: str(row["id"]))
        return [comment_of(row) for row in found], cursor

    async def latest_comments(
        self, feedback_ids: Collection[str], per_feedback: int
    ) -> dict[str, list[CommentRecord]]:
        """The newest `per_feedback` comments of each feedback, oldest first as a conversation
        reads, by feedback id (none: not in the answer); one statement for them all. Its reader's
        sight of each feedback is checked beforehand."""
        if not feedback_ids:
            return {}
        rows = await self.reads.all(
            _LATEST_COMMENTS, {"ids": list(feedback_ids), "per_feedback": per_feedback}
        )
        by_feedback: dict[str, list[CommentRecord]] = {}
        for row in rows:
            by_feedback.setdefault(str(row["feedback_id"]), []).append(comment_of(row))
        return by_feedback

    async def status_counts(self, query: FeedbackQuery) -> dict[FeedbackStatus, int]:
        """How many feedback `query` finds in each state, whatever its status and cursor (the
        console's status chips), in one statement; every state is there, at 0 if need be."""
        stmt = (
            select(Feedback.status, func.count(Feedback.id).label("count"))
            .where(*_filters(query, status=False))
            .group_by(Feedback.status)
        )
        counts = dict.fromkeys(FeedbackStatus, 0)
        for row in await self.reads.all(stmt):
            counts[FeedbackStatus(row["status"])] = int(row["count"])
        return counts

    async def neighbours(self, query: FeedbackQuery, feedback_id: str) -> Neighbours:
        """The feedback just newer and just older than `feedback_id` among those `query`
        finds (its cursor aside), in the inbox's order: in one statement."""
        filters = _filters(query)
        newer = select(func.min(Feedback.id)).where(*filters, Feedback.id > feedback_id)
        older = select(func.max(Feedback.id)).where(*filters, Feedback.id < feedback_id)
        row = await self.reads.first(
            select(newer.scalar_subquery().label("newer"), older.scalar_subquery().label("older"))
        )
        assert row is not None  # a select of two values has one row
        return Neighbours(row["newer"], row["older"])

    async def _with_screenshots(self, found: Sequence[InboxItem]) -> list[InboxItem]:
        """`found`, each with its screenshots: one statement for them all."""
        if not found:
            return []
        ids = [shown.feedback.id for shown in found]
        by_feedback: dict[str, list[ScreenshotRecord]] = {}
        for row in await self.reads.all(_SCREENSHOTS, {"ids": ids}):
            shot = SCREENSHOT.of(row)
            by_feedback.setdefault(shot.feedback_id, []).append(shot)
        return [
            replace(shown, screenshots=tuple(by_feedback.get(shown.feedback.id, ())))
            for shown in found
        ]

    # -- as the API shows it -------------------------------------------------------------------

    def present(
        self, found: Sequence[InboxItem], viewer: FeedbackViewer
    ) -> list[schemas.TeamFeedback]:
        """`found` as the API shows it to `viewer`, with short-lived screenshot addresses (as
        the submission's answer has them)."""
        links, now = self.links, self.now
        return present(found, viewer, lambda shot: links.short_lived(shot.id, now))


def require_sight(feedback: FeedbackRecord, viewer: FeedbackViewer) -> None:
    """403 `insufficient_role` unless `viewer` is of the team or sent `feedback`."""
    if not viewer.team and feedback.tester_id != viewer.user_id:
        raise Forbidden(
            "Only developers and above, and the tester who sent it, see a feedback",
            code="insufficient_role",
        )


def comment_of(row: RowMapping) -> CommentRecord:
    author = None
    if row["author_id"] is not None:
        author = PersonRecord(row["author_id"], row["author_email"], row["author_name"])
    return CommentRecord(row["id"], row["feedback_id"], author, row["text"], row["created_at"])


def person_schema(
    person: PersonRecord | None, viewer: FeedbackViewer
) -> schemas.FeedbackPerson | None:
    if person is None:
        return None
    email = person.email if viewer.team or person.id == viewer.user_id else None
    return schemas.FeedbackPerson(id=person.id, name=person.name, email=email)


def comment_schema(comment: CommentRecord, viewer: FeedbackViewer) -> schemas.FeedbackComment:
    return schemas.FeedbackComment(
        id=comment.id,
        feedback_id=comment.feedback_id,
        author=person_schema(comment.author, viewer),
        text=comment.text,
        created_at=comment.created_at,
    )


def present(
    found: Sequence[InboxItem], viewer: FeedbackViewer, url: Callable[[ScreenshotRecord], str]
) -> list[schemas.TeamFeedback]:
    """`found` as the API (and a webhook event) shows it to `viewer`: the feedback as sent
    (feedback/schemas.py), `url` giving each screenshot's signed address, plus its triage."""
    shown = []
    for item in found:
        f, person = item.feedback, item.tester
        tester = None if person is None else TesterRecord(person.id, person.email)
        sent = core_schemas.feedback_schema(ShownFeedback(f, list(item.screenshots), tester), url)
        shown.append(
            schemas.TeamFeedback(
                **dict(sent),
                project_id=f.project_id,
                application_id=f.application_id,
                application_name=item.application_name,
                build_version=item.build_version,
                assignee=person_schema(item.assignee, viewer) if viewer.team else None,
                comments_count=item.comments_count,
            )
        )
    return shown
