"""ProjectService: the members' rules (the last owner, who may grant or take the owner role),
the project list's pages, and a delete whose files go only once it has committed."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import OPERATOR
from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.db.reads import Reads
from buildbay.errors import Conflict, Forbidden, NotFound, ValidationFailed
from buildbay.ids import decode_cursor
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.reads import projects_of_member
from buildbay.projects.service import ProjectService
from buildbay.storage.local import LocalStorage
from tests.services.conftest import Given, access, raises

OWNER, ADMIN = ProjectRole.OWNER, ProjectRole.ADMIN
DEVELOPER, TESTER = ProjectRole.DEVELOPER, ProjectRole.TESTER


@pytest.fixture
def projects(db: AsyncSession, clock: FrozenClock, settings: Settings) -> ProjectService:
    return ProjectService(db, clock.now(), settings.invitations_per_day)


async def roles(db: AsyncSession, project: Project) -> dict[str, ProjectRole]:
    """The roles as this unit of work would commit them."""
    await db.flush()
    rows = await db.execute(
        select(ProjectMember.user_id, ProjectMember.role).where(
            ProjectMember.project_id == project.id
        )
    )
    return dict(rows.all())


# -- the last owner -----------------------------------------------------------------------------


async def test_the_last_owner_cannot_leave(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner = await given.user()
    project = await given.project(owner)

    with raises(Conflict, "last_owner"):
        await projects.remove_member(access(project, owner, OWNER), owner.id)

    assert await roles(db, project) == {owner.id: OWNER}


async def test_the_last_owner_cannot_be_demoted(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner = await given.user()
    project = await given.project(owner)

    with raises(Conflict, "last_owner"):
        await projects.change_role(access(project, owner, OWNER), owner.id, ADMIN)

    assert await roles(db, project) == {owner.id: OWNER}


async def test_restating_the_owner_role_is_not_a_demotion(
    projects: ProjectService, given: Given
) -> None:
    owner = await given.user()
    project = await given.project(owner)

    view = await projects.change_role(access(project, owner, OWNER), owner.id, OWNER)

    assert view.role is OWNER
    assert view.user_id == owner.id


async def test_an_owner_leaves_once_there_is_another_who_then_cannot(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner, successor = await given.user(), await given.user()
    project = await given.project(owner)
    await given.member(project, successor, OWNER)

    await projects.remove_member(access(project, owner, OWNER), owner.id)
    await finish(db, ok=True)

    assert await roles(db, project) == {successor.id: OWNER}
    with raises(Conflict, "last_owner"):
        await projects.remove_member(access(project, successor, OWNER), successor.id)


async def test_an_owner_demotes_another_owner_but_not_the_last(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner, co_owner = await given.user(), await given.user()
    project = await given.project(owner)
    await given.member(project, co_owner, OWNER)

    view = await projects.change_role(access(project, owner, OWNER), co_owner.id, ADMIN)
    await finish(db, ok=True)

    assert view.role is ADMIN
    assert await roles(db, project) == {owner.id: OWNER, co_owner.id: ADMIN}
    with raises(Conflict, "last_owner"):
        await projects.change_role(access(project, owner, OWNER), owner.id, DEVELOPER)


# -- who may grant or take a role ---------------------------------------------------------------


@pytest.mark.parametrize(
    "attempt",
    ["add an owner", "promote to owner", "promote themself", "demote an owner", "remove an owner"],
)
async def test_only_an_owner_grants_or_takes_the_owner_role(
    projects: ProjectService, given: Given, db: AsyncSession, attempt: str
) -> None:
    owner, admin, tester, co_owner = [await given.user() for _ in range(4)]
    outsider = await given.user("outsider@example.com")
    project = await given.project(owner)
    await given.member(project, admin, ADMIN)
    await given.member(project, tester, TESTER)
    await given.member(project, co_owner, OWNER)
    before = await roles(db, project)
    as_admin = access(project, admin, ADMIN)

    with raises(Forbidden, "insufficient_role"):
        match attempt:
            case "add an owner":
                await projects.add_member(as_admin, outsider.email, OWNER)
            case "promote to owner":
                await projects.change_role(as_admin, tester.id, OWNER)
            case "promote themself":
                await projects.change_role(as_admin, admin.id, OWNER)
            case "demote an owner":
                await projects.change_role(as_admin, co_owner.id, TESTER)
            case "remove an owner":
                await projects.remove_member(as_admin, co_owner.id)

    assert await roles(db, project) == before


async def test_an_admin_changes_a_members_role(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner, admin, tester = [await given.user() for _ in range(3)]
    project = await given.project(owner)
    await given.member(project, admin, ADMIN)
    await given.member(project, tester, TESTER)

    view = await projects.change_role(access(project, admin, ADMIN), tester.id, DEVELOPER)

    assert (view.user_id, view.role) == (tester.id, DEVELOPER)
    assert (await roles(db, project))[tester.id] is DEVELOPER


async def test_removing_another_member_needs_the_admin_role(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner, developer, tester = [await given.user() for _ in range(3)]
    project = await given.project(owner)
    await given.member(project, developer, DEVELOPER)
    await given.member(project, tester, TESTER)

    with raises(Forbidden, "insufficient_role"):
        await projects.remove_member(access(project, developer, DEVELOPER), tester.id)
    await projects.remove_member(access(project, owner, OWNER), tester.id)

    assert await roles(db, project) == {owner.id: OWNER, developer.id: DEVELOPER}


async def test_a_tester_can_leave_the_project(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner, tester = await given.user(), await given.user()
    project = await given.project(owner)
    await given.member(project, tester, TESTER)

    await projects.remove_member(access(project, tester, TESTER), tester.id)

    assert await roles(db, project) == {owner.id: OWNER}


async def test_changing_or_removing_someone_who_is_not_a_member_is_member_not_found(
    projects: ProjectService, given: Given
) -> None:
    owner, outsider = await given.user(), await given.user()
    project = await given.project(owner)

    with raises(NotFound, "member_not_found"):
        await projects.change_role(access(project, owner, OWNER), outsider.id, ADMIN)
    with raises(NotFound, "member_not_found"):
        await projects.remove_member(access(project, owner, OWNER), outsider.id)


# -- adding members -----------------------------------------------------------------------------


async def test_a_member_is_added_by_e_mail_whatever_its_case(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner = await given.user()
    newcomer = await given.user("new.person@example.com")
    project = await given.project(owner)

    view = await projects.add_member(
        access(project, owner, OWNER), "New.Person@Example.COM", DEVELOPER
    )

    assert (view.user_id, view.role) == (newcomer.id, DEVELOPER)
    assert await roles(db, project) == {owner.id: OWNER, newcomer.id: DEVELOPER}


async def test_adding_someone_already_a_member_is_a_conflict_that_keeps_their_role(
    projects: ProjectService, given: Given, db: AsyncSession
) -> None:
    owner, tester = await given.user(), await given.user()
    project = await given.project(owner)
    await given.member(project, tester, TESTER)

    with raises(Conflict, "already_member"):
        await projects.add_member(access(project, owner, OWNER), tester.email, ADMIN)

    assert (await roles(db, project))[tester.id] is TESTER


async def test_adding_an_unregistered_e_mail_names_the_field(
    projects: ProjectService, given: Given
) -> None:
    owner = await given.user()
    project = await given.project(owner)

    with raises(ValidationFailed, "user_not_found") as caught:
        await projects.add_member(access(project, owner, OWNER), "nobody@example.com", TESTER)

    assert [e.field for e in caught.value.errors or []] == ["email"]


# -- the project list ---------------------------------------------------------------------------


async def test_the_project_list_pages_newest_first_through_the_cursor(
    given: Given, reads: Reads
) -> None:
    me, someone = await given.user(), await given.user()
    mine = [await given.project(me, f"Mine {n}") for n in range(5)]
    await given.project(someone, "Not mine")
    shared = await given.project(someone, "Shared with me")
    await given.member(shared, me, TESTER)
    await given.application(mine[0])
    await given.application(mine[0])
    newest_first = [shared.id, *(p.id for p in reversed(mine))]

    seen, cursor, pages = [], None, 0
    while True:
        after = cursor and decode_cursor(cursor)
        page, next_cursor = await projects_of_member(reads, me.id, 2, after)
        seen += page
        pages += 1
        if next_cursor is None:
            break
        cursor = next_cursor

    assert [row["id"] for row in seen] == newest_first
    assert pages == 3
    counts = {row["name"]: row["applications_count"] for row in seen}
    assert counts == {"Shared with me": 0, "Mine 0": 2, **{f"Mine {n}": 0 for n in range(1, 5)}}


async def test_a_page_as_long_as_the_list_has_no_next_cursor(given: Given, reads: Reads) -> None:
    me = await given.user()
    for n in range(3):
        await given.project(me, f"P{n}")

    page, cursor = await projects_of_member(reads, me.id, 3, None)

    assert [row["name"] for row in page] == ["P2", "P1", "P0"]
    assert cursor is None


# -- deleting -----------------------------------------------------------------------------------


async def _project_with_stored_builds(given: Given, owner: User) -> tuple[Project, list[str]]:
    project = await given.project(owner)
    application = await given.application(project)
    ready = await given.build(application, owner, status=BuildStatus.READY)
    pending = await given.build(application, owner, stored=True)
    return project, [ready.storage_key, pending.storage_key]


async def test_a_deleted_projects_files_go_only_once_the_delete_has_committed(
    projects: ProjectService, given: Given, db: AsyncSession, storage: LocalStorage
) -> None:
    owner = await given.user()
    project, keys = await _project_with_stored_builds(given, owner)

    await projects.delete(project, storage, by=OPERATOR)
    await db.flush()

    assert all([await storage.stat(key) for key in keys])  # not before the commit
    await finish(db, ok=True)
    assert [await storage.stat(key) for key in keys] == [None, None]
    assert not storage.path_of(project.id).exists()
    assert await db.get(Project, project.id) is None


async def test_a_project_delete_that_rolls_back_keeps_every_file(
    projects: ProjectService, given: Given, db: AsyncSession, storage: LocalStorage
) -> None:
    owner = await given.user()
    project, keys = await _project_with_stored_builds(given, owner)

    project_id = project.id  # a rollback expires the objects it leaves

    await projects.delete(project, storage, by=OPERATOR)
    await db.flush()
    await finish(db, ok=False)

    assert all([await storage.stat(key) for key in keys])
    assert await db.get(Project, project_id) is not None
