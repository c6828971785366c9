"""The team's side of feedback (issue 38): the project's inbox in keyset pages with its
filters, at a constant number of statements per page; who sees which feedback; triage (status,
assignee) and its validation; a tester's own feedback across projects; new-feedback counts of
builds. Builds are made through the API; feedback rows with the models (tests/feedback/team.py)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.db.reads import Reads
from buildbay.feedback.reads import new_feedback_counts
from tests.conftest import BASE_URL, Account, Api, assert_problem, iso_z, statements_run
from tests.feedback.team import Team, png

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
async def team(client: httpx.AsyncClient, api: Api, app: FastAPI, owner: Account) -> Team:
    return await Team(client, api, app, owner).start()


def _ids(body: dict[str, Any]) -> list[str]:
    return [f["id"] for f in body["feedback"]]


async def _walk(team: Team, who: Account, limit: int, **params: Any) -> list[str]:
    """Every page of the inbox with these filters, followed by its cursors."""
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
        r = await team.get(who, team.inbox, **query)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["feedback"]) <= limit
        seen += _ids(body)
        cursor = body["nextCursor"]
        if cursor is None:
            return seen


async def test_the_inbox_pages_newest_first_with_every_filter(team: Team) -> None:
    tess = await team.member("tess@example.com")
    theo = await team.member("Theo.Tester@example.com")
    other_app = await team.api.application(team.owner, team.pid, "Acme iOS")
    b1, b2 = await team.build(), await team.build()
    b3 = await team.build(other_app)
    made = [
        await team.feedback(b1, tess, category="bug", text="Crash on login"),
        await team.feedback(b1, theo, category="suggestion", text="A dark mode, please"),
        await team.feedback(b2, tess, category="crash", text="100% CPU in the_list view"),
        await team.feedback(b2, None, email="ring@beta.example", category="other", text="Hello"),
        await team.feedback(b3, theo, category="bug", text="Login button hidden", status="triaged"),
        await team.feedback(b3, tess, category="bug", text="Typo in login", status="resolved"),
    ]
    newest_first = list(reversed(made))

    # Every page size gives every feedback once, newest first.
    for limit in (1, 2, 4, 100):
        assert await _walk(team, team.owner, limit) == newest_first

    def expect(*indexes: int) -> list[str]:
        return [made[i] for i in sorted(indexes, reverse=True)]

    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"application": team.application["id"]}, expect(0, 1, 2, 3)),
        ({"application": other_app["id"]}, expect(4, 5)),
        ({"build": b2["buildId"]}, expect(2, 3)),
        ({"status": "new"}, expect(0, 1, 2, 3)),
        ({"status": "resolved"}, expect(5)),
        ({"status": "wont-fix"}, []),
        ({"category": "bug"}, expect(0, 4, 5)),
        ({"category": "crash"}, expect(2)),
        ({"q": "LOGIN"}, expect(0, 4, 5)),  # in the text, in any case
        ({"q": "theo.tester"}, expect(1, 4)),  # the reporter's e-mail, in any case
        ({"q": "beta.example"}, expect(3)),  # an app's reporter
        ({"q": "100%"}, expect(2)),  # % is itself, not a wildcard
        ({"q": "%"}, expect(2)),
        ({"q": "the_list"}, expect(2)),  # and so is _
        ({"q": "o_in"}, []),  # which, as a wildcard, would match "Typo in login"
        ({"category": "bug", "application": other_app["id"], "status": "triaged"}, expect(4)),
        ({"q": "login", "build": b1["buildId"]}, expect(0)),
    ]
    for params, wanted in cases:
        for limit in (1, 2, 50):
            assert await _walk(team, team.owner, limit, **params) == wanted, (params, limit)


async def test_a_feedback_shows_its_tester_screenshots_triage_and_counts(team: Team) -> None:
    tess = await team.member("tess@example.com")
    dev = await team.member("dev@example.com", "developer")
    build = await team.build()
    fid = await team.feedback(build, tess, text="Crash", screenshots=2, context={"os": "iOS 18"})
    await team.comment_row(fid, dev)
    r = await team.patch(team.owner, fid, {"assignee": dev.user["id"]})
    assert r.status_code == 200, r.text

    r = await team.get(dev, f"{team.inbox}/{fid}")
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["id"] == fid
    assert shown["buildId"] == build["buildId"]
    assert shown["projectId"] == team.pid
    assert shown["applicationId"] == team.application["id"]
    assert shown["applicationName"] == "Acme Android"
    assert shown["tester"] == {"id": tess.user["id"], "email": "tess@example.com"}
    assert shown["reporterEmail"] == "tess@example.com"
    assert (shown["category"], shown["text"], shown["status"]) == ("bug", "Crash", "new")
    assert shown["context"] == {"os": "iOS 18"}
    assert shown["commentsCount"] == 1
    assert shown["assignee"] == {"id": dev.user["id"], "name": dev.user["name"], "email": dev.email}
    assert [(s["width"], s["height"]) for s in shown["screenshots"]] == [(4, 3), (5, 3)]
    # Each screenshot's address is the submission's: signed, short-lived, and gives the image
    # back; a signature changed by one character is refused.
    for shot, data in zip(shown["screenshots"], (png(4, 3), png(5, 3)), strict=True):
        url = shot["url"].removeprefix(BASE_URL)
        screenshot_id, expires, signature = url.removeprefix("/feedback-screenshots/").split(".")
        assert screenshot_id == shot["id"]
        assert 15 * 60 <= int(expires) - team.ctx.clock.now().timestamp() <= 20 * 60
        assert shot["bytes"] == len(data)
        r = await team.client.get(url)
        assert r.status_code == 200
        assert r.content == data
        forged = f"{url[: -len(signature)]}{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
        assert_problem(await team.client.get(forged), 403, "invalid_signature")
    # The same in the inbox.
    r = await team.get(dev, team.inbox)
    [listed] = r.json()["feedback"]
    assert {k: v for k, v in listed.items() if k != "screenshots"} == {
        k: v for k, v in shown.items() if k != "screenshots"
    }


async def test_a_page_is_a_constant_number_of_statements_whatever_its_size(
    team: Team, app: FastAPI
) -> None:
    tess = await team.member("tess@example.com")
    builds = [await team.build() for _ in range(3)]
    for n in range(12):
        fid = await team.feedback(builds[n % 3], tess, screenshots=n % 3)
        for _ in range(n % 2):
            await team.comment_row(fid, team.owner)

    async def statements(**params: Any) -> int:
        seen = statements_run(app)
        r = await team.get(team.owner, team.inbox, **params)
        assert r.status_code == 200, r.text
        count = len([s for s in seen if s.lstrip().upper().startswith("SELECT")])
        seen.clear()
        return count

    one = await statements(limit=1)
    assert one == await statements(limit=12)
    assert one == await statements(limit=12, category="bug", q="settings")
    # Who is calling, the project and the caller's role, the page, its screenshots.
    assert one <= 4
    r = await team.get(team.owner, team.inbox, limit=12)
    body = r.json()
    assert len(body["feedback"]) == 12
    assert sum(len(f["screenshots"]) for f in body["feedback"]) == 12
    assert sum(f["commentsCount"] for f in body["feedback"]) == 6


async def test_who_sees_which_feedback(team: Team, api: Api) -> None:
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")
    dev = await team.member("dev@example.com", "developer")
    stranger = await api.register("stranger@example.com")
    build = await team.build()
    mine = await team.feedback(build, tess, screenshots=1)
    toms = await team.feedback(build, tom)
    await team.comment_row(mine, dev, "Thanks, looking")
    r = await team.patch(dev, mine, {"assignee": dev.user["id"], "status": "triaged"})
    assert r.status_code == 200, r.text
    # Another project's feedback, by the same tester.
    elsewhere = await Team(team.client, api, team.app, await api.register("o2@example.com")).start(
        "Other"
    )
    await api.add_member(elsewhere.owner, elsewhere.pid, tess, "tester")
    theirs = await elsewhere.feedback(await elsewhere.build(), tess)

    # The inbox is the team's: a tester is refused, a stranger too.
    assert_problem(await team.get(tess, team.inbox), 403, "insufficient_role")
    assert_problem(await team.get(stranger, team.inbox), 403, "not_a_member")
    # A tester sees what they sent, with the team's comments, but not its triage.
    r = await team.get(tess, f"{team.inbox}/{mine}")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "triaged"
    assert r.json()["assignee"] is None
    assert r.json()["commentsCount"] == 1
    assert len(r.json()["screenshots"]) == 1
    r = await team.get(tess, f"{team.inbox}/{mine}/comments")
    assert r.status_code == 200, r.text
    [comment] = r.json()["comments"]
    assert comment["text"] == "Thanks, looking"
    assert comment["author"] == {"id": dev.user["id"], "name": dev.user["name"], "email": None}
    # Not another tester's, nor its comments.
    assert_problem(await team.get(tess, f"{team.inbox}/{toms}"), 403, "insufficient_role")
    r = await team.get(tess, f"{team.inbox}/{toms}/comments")
    assert_problem(r, 403, "insufficient_role")
    # Another project's feedback is no feedback of this one, for anyone.
    for who in (tess, dev, team.owner):
        r = await team.get(who, f"{team.inbox}/{theirs}")
        assert_problem(r, 404, "feedback_not_found")
        assert_problem(await team.get(who, f"{team.inbox}/{theirs}/comments"), 404)
    # The team sees every feedback, and the comments' authors' addresses.
    r = await team.get(dev, f"{team.inbox}/{toms}")
    assert r.status_code == 200
    r = await team.get(team.owner, f"{team.inbox}/{mine}/comments")
    assert r.json()["comments"][0]["author"]["email"] == dev.email
    # A stranger sees nothing.
    assert_problem(await team.get(stranger, f"{team.inbox}/{mine}"), 403, "not_a_member")

    # A tester's own feedback, across projects, newest first.
    r = await team.get(tess, "/api/account/feedback")
    assert r.status_code == 200, r.text
    own = r.json()["feedback"]
    assert [f["id"] for f in own] == [theirs, mine]
    assert [f["projectId"] for f in own] == [elsewhere.pid, team.pid]
    assert own[1]["commentsCount"] == 1
    assert own[1]["assignee"] is None
    r = await team.get(tess, "/api/account/feedback", limit=1)
    assert _ids(r.json()) == [theirs]
    r = await team.get(tess, "/api/account/feedback", limit=1, cursor=r.json()["nextCursor"])
    assert _ids(r.json()) == [mine]
    assert r.json()["nextCursor"] is None
    r = await team.get(team.owner, "/api/account/feedback")
    assert r.json() == {"feedback": [], "nextCursor": None}

    # A former member loses it all: the project's feedback, and it from their own list.
    r = await team.client.delete(
        f"/api/projects/{team.pid}/members/{tess.user['id']}", headers=tess.headers
    )
    assert r.status_code == 204, r.text
    assert_problem(await team.get(tess, f"{team.inbox}/{mine}"), 403, "not_a_member")
    assert_problem(await team.get(tess, f"{team.inbox}/{mine}/comments"), 403, "not_a_member")
    r = await team.get(tess, "/api/account/feedback")
    assert _ids(r.json()) == [theirs]
    # The team still has it.
    assert (await team.get(dev, f"{team.inbox}/{mine}")).status_code == 200


async def test_api_tokens_read_feedback_of_their_projects_only(team: Team, api: Api) -> None:
    tess = await team.member("tess@example.com")
    mine = await team.feedback(await team.build(), tess)
    other = await Team(team.client, api, team.app, await api.register("o2@example.com")).start()
    await api.add_member(other.owner, other.pid, tess, "tester")
    theirs = await other.feedback(await other.build(), tess)

    async def token(**limits: Any) -> dict[str, str]:
        r = await team.client.post(
            "/api/account/api-tokens", json={"name": "t", **limits}, headers=tess.headers
        )
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    r = await team.client.get("/api/account/feedback", headers=await token(scope="read"))
    assert _ids(r.json()) == [theirs, mine]
    restricted = await token(projectIds=[team.pid])
    r = await team.client.get("/api/account/feedback", headers=restricted)
    assert _ids(r.json()) == [mine]


async def test_triage_changes_status_and_assignee_and_refuses_anything_else(
    team: Team, clock: Any
) -> None:
    tess = await team.member("tess@example.com")
    dev = await team.member("dev@example.com", "developer")
    admin = await team.member("admin@example.com", "admin")
    outsider = await team.api.register("out@example.com")
    fid = await team.feedback(await team.build(), tess)
    created = (await team.get(dev, f"{team.inbox}/{fid}")).json()

    clock.advance(minutes=5)
    r = await team.patch(dev, fid, {"status": "triaged", "assignee": admin.user["id"]})
    assert r.status_code == 200, r.text
    changed = r.json()
    assert changed["status"] == "triaged"
    assert changed["assignee"]["id"] == admin.user["id"]
    assert changed["updatedAt"] == iso_z(clock.now()) != created["updatedAt"]
    assert changed["createdAt"] == created["createdAt"]
    for status in ("resolved", "wont-fix", "new"):
        r = await team.patch(dev, fid, {"status": status})
        assert r.status_code == 200
        assert r.json()["status"] == status
        assert r.json()["assignee"]["id"] == admin.user["id"]  # left as it was
    r = await team.patch(team.owner, fid, {"assignee": team.owner.user["id"]})
    assert r.json()["assignee"]["id"] == team.owner.user["id"]
    r = await team.patch(dev, fid, {"assignee": None})
    assert r.status_code == 200
    assert r.json()["assignee"] is None

    refused: list[tuple[Any, str, str]] = [
        ({}, "body", "validation_error"),
        ({"status": "done"}, "status", "validation_error"),
        ({"status": None}, "status", "validation_error"),
        ({"status": 1}, "status", "validation_error"),
        ({"assignee": tess.user["id"]}, "assignee", "invalid_assignee"),  # a tester
        ({"assignee": outsider.user["id"]}, "assignee", "invalid_assignee"),  # not a member
        ({"assignee": "usr_00000000000000000000000000"}, "assignee", "invalid_assignee"),
        ({"assignee": 42}, "assignee", "validation_error"),
        ({"assignee": "x" * 65}, "assignee", "validation_error"),
        ({"text": "rewritten"}, "text", "validation_error"),  # the tester's words are theirs
        ({"category": "crash"}, "category", "validation_error"),
        ({"status": "resolved", "id": "fbk_x"}, "id", "validation_error"),
        ({"status": "resolved", "assignee": tess.user["id"]}, "assignee", "invalid_assignee"),
    ]
    for body, field, code in refused:
        problem = assert_problem(await team.patch(dev, fid, body), 422, code)
        fields = [e["field"] for e in problem["errors"]]
        assert any(field in f for f in fields), (body, problem)
        assert problem["detail"]
    r = await team.get(dev, f"{team.inbox}/{fid}")
    assert (r.json()["status"], r.json()["assignee"]) == ("new", None)  # nothing refused landed
    assert (
        "a tester"
        in assert_problem(await team.patch(dev, fid, {"assignee": tess.user["id"]}), 422)["errors"][
            0
        ]["message"]
    )

    # Testers do not triage, not even their own feedback.
    assert_problem(await team.patch(tess, fid, {"status": "resolved"}), 403, "insufficient_role")
    assert_problem(
        await team.patch(dev, "fbk_00000000000000000000000000", {"status": "resolved"}),
        404,
        "feedback_not_found",
    )


async def test_new_feedback_counts_of_builds_take_one_statement(team: Team, app: FastAPI) -> None:
    tess = await team.member("tess@example.com")
    builds = [await team.build() for _ in range(5)]
    for n, build in enumerate(builds[:4]):
        for _ in range(n):
            await team.feedback(build, tess)
        await team.feedback(build, tess, status="triaged")
    ctx = team.ctx
    ids = [b["buildId"] for b in builds]
    reads = Reads.on(ctx.read_engine)
    try:
        seen = statements_run(app)
        counts = await new_feedback_counts(reads, ids)
        assert len(seen) == 1
        assert counts == {ids[1]: 1, ids[2]: 2, ids[3]: 3}  # none for those with none new
        seen.clear()
        assert await new_feedback_counts(reads, ids[:1]) == {}
        assert len(seen) == 1
        assert await new_feedback_counts(reads, []) == {}
        assert len(seen) == 1  # no statement at all for no build
    finally:
        await reads.close()


async def test_builds_show_their_new_feedback_count_to_the_team_in_the_same_statement(
    team: Team, app: FastAPI
) -> None:
    tess = await team.member("tess@example.com")
    builds = [await team.build() for _ in range(6)]
    for n, build in enumerate(builds):
        for _ in range(n % 3):
            await team.feedback(build, tess)
        await team.feedback(build, tess, status="resolved")
    path = f"/api/app-distribution/{team.pid}/{team.application['id']}/builds"

    r = await team.get(team.owner, path)
    counts = {b["buildId"]: b["newFeedbackCount"] for b in r.json()["builds"]}
    assert counts == {b["buildId"]: n % 3 for n, b in enumerate(builds)}
    r = await team.get(team.owner, f"{path}/{builds[2]['buildId']}")
    assert r.json()["newFeedbackCount"] == 2
    # Triage is the team's: a tester sees null.
    r = await team.get(tess, path)
    assert {b["newFeedbackCount"] for b in r.json()["builds"]} == {None}

    async def statements(limit: int) -> int:
        seen = statements_run(app)
        r = await team.get(team.owner, path, limit=limit)
        assert len(r.json()["builds"]) == limit
        # Those that read the feedback table (not the application's `feedback_mode`).
        return len([s for s in seen if re.search(r"\bfeedback\b", s.lower())])

    # In the page's own statement: no statement more per build, nor at all.
    assert await statements(1) == await statements(6) == 1


async def test_the_inbox_refuses_bad_filters_and_pages_by_name(team: Team) -> None:
    await team.feedback(await team.build(), await team.member("tess@example.com"))
    refused: list[tuple[dict[str, Any], str, str]] = [
        ({"status": "open"}, "status", "validation_error"),
        ({"category": "crashes"}, "category", "validation_error"),
        ({"q": "x" * 201}, "q", "validation_error"),
        ({"application": "a" * 65}, "application", "validation_error"),
        ({"build": "b\x00"}, "build", "validation_error"),
        ({"limit": 0}, "limit", "validation_error"),
        ({"limit": 101}, "limit", "validation_error"),
        ({"cursor": "not-a-cursor"}, "cursor", "invalid_cursor"),
    ]
    for params, field, code in refused:
        problem = assert_problem(await team.get(team.owner, team.inbox, **params), 422, code)
        assert [e["field"] for e in problem["errors"]] == [field], (params, problem)
    for path in ("/api/account/feedback", f"{team.inbox}/fbk_x/comments"):
        r = await team.get(team.owner, path, cursor="not-a-cursor")
        assert_problem(r, 422, "invalid_cursor")
    # Filters that match nothing are an empty page, not an error.
    r = await team.get(team.owner, team.inbox, application="app_x", build="bld_x", q="%_\\")
    assert r.json() == {"feedback": [], "nextCursor": None}
