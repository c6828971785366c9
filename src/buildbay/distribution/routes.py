from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from buildbay.builds.dependencies import Builds
from buildbay.builds.dependencies import Service as BuildService
from buildbay.deps import Context, Page, ReadsDep, TransactionRoute
from buildbay.distribution import schemas
from buildbay.distribution.dependencies import JoinLinksDep, Service, distributor
from buildbay.distribution.groups import (
    GroupRecord,
    TesterRecord,
    groups_page,
    testers_of,
)
from buildbay.distribution.installs import installs_of
from buildbay.distribution.join_links import JoinLinkRecord, join_link_url
from buildbay.distribution.reach import reach_of
from buildbay.distribution.service import DistributionResult
from buildbay.invitations.caps import Admission, InvitationsLimited
from buildbay.problems import problem_responses
from buildbay.projects.access import (
    BuildsDeveloper,
    BuildsDeveloperReader,
    ProjectDeveloper,
    ProjectReader,
)
from buildbay.schemas import PAGE_QUERY

router = APIRouter(tags=["tester groups"], route_class=TransactionRoute)

_GROUPS = "/api/projects/{id}/groups"
_GROUP = f"{_GROUPS}/{{groupId}}"
BY_ID = problem_responses(401, 403, 404, 429)
WRITE = problem_responses(400, 401, 403, 404, 409, 413, 422, 429)


GroupId = Annotated[str, Path(alias="groupId", max_length=64)]
BuildId = Annotated[str, Path(alias="buildId")]


def group_schema(group: GroupRecord) -> schemas.Group:
    return schemas.Group(
        id=group.id, name=group.name, testers_count=group.testers_count, created_at=group.created_at
    )


def tester_schema(tester: TesterRecord) -> schemas.Tester:
    return schemas.Tester(
        user_id=tester.user_id,
        email=tester.email,
        name=tester.name,
        role=tester.role,
        added_at=tester.added_at,
        email_verified=tester.email_verified,
    )


@router.get(
    _GROUPS,
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="List the project's tester groups, `everyone` first (tester+)",
    openapi_extra=PAGE_QUERY,
)
async def list_groups(access: ProjectReader, reads: ReadsDep, page: Page) -> schemas.GroupList:
    groups, next_cursor = await groups_page(reads, access.project, page.limit, page.after_id)
    return schemas.GroupList(groups=[group_schema(g) for g in groups], next_cursor=next_cursor)


@router.post(
    _GROUPS,
    status_code=status.HTTP_201_CREATED,
    responses=WRITE,
    summary="Create a tester group (developer+)",
)
async def create_group(
    body: schemas.GroupCreate, access: ProjectDeveloper, service: Service
) -> schemas.Group:
    return group_schema(await service.create(access.project, body.name))


@router.put(_GROUP, responses=WRITE, summary="Rename a tester group (developer+)")
async def rename_group(
    group_id: GroupId, body: schemas.GroupCreate, access: ProjectDeveloper, service: Service
) -> schemas.Group:
    return group_schema(await service.rename(access.project, group_id, body.name))


@router.delete(
    _GROUP,
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Delete a tester group; builds it reached stay with their testers (developer+)",
)
async def delete_group(group_id: GroupId, access: ProjectDeveloper, service: Service) -> Response:
    await service.delete(access.project, group_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(_GROUP + "/testers", responses=BY_ID, summary="The group's testers (tester+)")
async def list_testers(
    group_id: GroupId, access: ProjectReader, reads: ReadsDep
) -> schemas.TesterList:
    testers = await testers_of(reads, access.project, group_id)
    return schemas.TesterList(testers=[tester_schema(t) for t in testers])


@router.post(
    _GROUP + "/testers",
    responses=WRITE,
    summary="Add testers by e-mail: members join the group, others are invited into the "
    "project as testers and join it when they accept (developer+); past the day's invitation "
    "caps, 429 `invitation_limit` says who was invited and who not",
)
async def add_testers(
    group_id: GroupId, body: schemas.TestersAdd, access: ProjectDeveloper, service: Service
) -> schemas.TestersAdded:
    added = await service.add_testers(access, group_id, [str(e) for e in body.emails])
    answer = schemas.TestersAdded(
        testers=[tester_schema(t) for t in added.testers],
        invited=added.invited,
        not_invited=not_invited_schema(added.admission),
    )
    if added.admission.capped:
        raise InvitationsLimited(
            added.admission, added.invited, testers=[t.email for t in added.testers]
        )
    return answer


@router.delete(
    _GROUP + "/testers/{userId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Remove a tester from the group (developer+)",
)
async def remove_tester(
    group_id: GroupId,
    user_id: Annotated[str, Path(alias="userId", max_length=64)],
    access: ProjectDeveloper,
    service: Service,
) -> Response:
    await service.remove_tester(access.project, group_id, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/distribute",
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    summary="Distribute a ready build to tester groups and e-mails; each newly reached tester "
    "is mailed their own install link (developer+)",
)
async def distribute_build(
    build_id: BuildId,
    body: schemas.DistributionRequest,
    access: BuildsDeveloper,
    builds: BuildService,
    ctx: Context,
) -> schemas.Distribution:
    build = await builds.reads.get(access.application.id, build_id)
    result = await distributor(ctx, builds.db).distribute(
        access, build, body.groups, [str(e) for e in body.emails], body.notify
    )
    answer = distribution_schema(result)
    if result.admission.capped:
        raise InvitationsLimited(result.admission, result.invited, distribution=result.summary())
    return answer


def distribution_schema(result: DistributionResult) -> schemas.Distribution:
    return schemas.Distribution(
        build_id=result.build_id,
        groups=result.groups,
        testers_reached=result.testers_reached,
        notified=result.notified,
        invitations_pending=result.invitations_pending,
        unsubscribed=result.unsubscribed,
        invited=result.invited,
        not_invited=not_invited_schema(result.admission),
    )


def not_invited_schema(admission: Admission) -> list[schemas.NotInvited]:
    return [
        schemas.NotInvited(email=r.email, reason=r.reason.value, detail=r.message)
        for r in admission.refused
    ]


@router.get(
    "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/installs",
    responses=BY_ID,
    summary="Who the build reached, was mailed, opened its install page and downloaded it "
    "(developer+)",
)
async def build_installs(
    build_id: BuildId, access: BuildsDeveloperReader, builds: Builds, ctx: Context
) -> schemas.Installs:
    build = await builds.get(access.application.id, build_id)
    report = await installs_of(builds.reads, build)
    reach = await reach_of(builds.reads, build, ctx.clock.now())
    return schemas.Installs(
        build_id=report.build_id,
        testers=[
            schemas.TesterInstalls(
                user_id=t.user_id,
                email=t.email,
                name=t.name,
                reached_at=t.reached_at,
                notified_at=t.notified_at,
                mail_error=t.mail_error,
                first_opened_at=t.first_opened_at,
                last_downloaded_at=t.last_downloaded_at,
                downloads=t.downloads,
                platforms=t.platforms,
            )
            for t in report.testers
        ],
        anonymous_opens=report.anonymous_opens,
        anonymous_downloads=report.anonymous_downloads,
        downloads_count=report.downloads_count,
        distributed_to=[
            schemas.DistributedTo(
                kind=d.kind.value,
                id=d.target,
                name=d.name,
                distributed_by=d.by,
                distributed_at=d.at,
                deleted=not d.exists,
            )
            for d in reach.distributed
        ],
        testers_reached=reach.testers_reached,
        invited_not_signed_up=reach.invited,
        unsubscribed=reach.unsubscribed,
    )


# -- public join links (issue 40) -----------------------------------------------------------------

_JOIN_LINK = _GROUP + "/join-link"


def join_link_schema(link: JoinLinkRecord) -> schemas.JoinLink:
    return schemas.JoinLink(
        id=link.id,
        group_id=link.group_id,
        state=link.state.value,
        max_testers=link.max_testers,
        allowed_email_domains=link.allowed_domains,
        expires_at=link.expires_at,
        created_at=link.created_at,
        joined_count=link.joined_count,
        in_group_count=link.in_group,
        confirmation_mails_today=link.mails_today,
        confirmation_mails_per_day=link.mails_per_day,
    )


@router.post(
    _JOIN_LINK,
    status_code=status.HTTP_201_CREATED,
    responses=WRITE,
    summary="Make the group's public join link, revoking the one it had (developer+); its "
    "`url` is shown this once",
)
async def create_join_link(
    group_id: GroupId,
    body: schemas.JoinLinkCreate,
    access: ProjectDeveloper,
    links: JoinLinksDep,
    ctx: Context,
) -> schemas.JoinLinkCreated:
    link, token = await links.create(
        access, group_id, body.max_testers, body.allowed_email_domains, body.expires_at
    )
    url = join_link_url(ctx.settings.resolved_public_url, token)
    return schemas.JoinLinkCreated(**join_link_schema(link).model_dump(), url=url)


@router.get(
    _JOIN_LINK,
    responses=BY_ID,
    summary="The group's join link (without its secret URL) and how many joined (developer+)",
)
async def get_join_link(
    group_id: GroupId, access: ProjectDeveloper, links: JoinLinksDep
) -> schemas.JoinLink:
    return join_link_schema(await links.live(access.project, group_id))


@router.delete(
    _JOIN_LINK,
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Revoke the group's join link: its page says so from now on (developer+)",
)
async def revoke_join_link(
    group_id: GroupId, access: ProjectDeveloper, links: JoinLinksDep
) -> Response:
    await links.revoke(access.project, group_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
