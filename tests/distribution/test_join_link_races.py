"""A join link's `maxTesters` under concurrency, on PostgreSQL, against a real server over HTTP:
people who each confirmed their own mail's link press Join at the same moment
(`asyncio.gather`); the link's count never passes its limit, and exactly those past it are
refused (the 100th and the 101st at once: one joins, one is refused)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import PG_URL
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = [
    pytest.mark.skipif(not PG_URL, reason="the race needs PostgreSQL"),
    pytest.mark.postgres,
]


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {"BUILDBAY_SMTP_URL": smtp.url, "BUILDBAY_MAIL_FROM": "b@example.com"}


@pytest.fixture
async def api(threaded_server: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=threaded_server, timeout=60) as client:
        yield client


async def _csrf(browser: httpx.AsyncClient, path: str) -> str:
    page = await browser.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found[1]


class Joiner:
    """One person, in a browser of their own, holding their confirmation mail's link."""

    def __init__(self, server: str, email: str) -> None:
        self.server, self.email = server, email
        self.browser = httpx.AsyncClient(base_url=server, timeout=60)
        self.origin = {"Origin": server}
        self.confirm_path = ""

    async def ask(self, join_path: str) -> None:
        csrf = await _csrf(self.browser, join_path)
        r = await self.browser.post(
            join_path, data={"csrf": csrf, "email": self.email}, headers=self.origin
        )
        assert r.status_code == 200, r.text

    async def ready(self, smtp: SmtpSink) -> None:
        """Opened the mail's link: the page with the Join button is in front of them."""
        [mail] = [m for m in smtp.messages() if m.recipients == [self.email]]
        link = mail.link("http")
        self.confirm_path = "/join-confirm/" + link.rsplit("/join-confirm/", 1)[1]
        self.csrf = await _csrf(self.browser, self.confirm_path)

    async def join(self) -> httpx.Response:
        return await self.browser.post(
            self.confirm_path, data={"csrf": self.csrf}, headers=self.origin
        )


async def _team(api: httpx.AsyncClient, max_testers: int) -> tuple[dict[str, str], str, str]:
    owner = {"email": "owner@example.com", "password": "correct horse"}
    r = await api.post("/api/auth/register", json=owner)
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    r = await api.post("/api/projects", json={"name": "Acme"}, headers=headers)
    project = r.json()["id"]
    r = await api.post(f"/api/projects/{project}/groups", json={"name": "QA"}, headers=headers)
    group = r.json()["id"]
    link = f"/api/projects/{project}/groups/{group}/join-link"
    r = await api.post(link, json={"maxTesters": max_testers}, headers=headers)
    assert r.status_code == 201, r.text
    join_path = "/join/" + r.json()["url"].rsplit("/join/", 1)[1]
    return headers, link, join_path


async def _joiners(server: str, smtp: SmtpSink, join_path: str, n: int) -> list[Joiner]:
    people = [Joiner(server, f"person{k}@example.com") for k in range(n)]
    for person in people:
        await person.ask(join_path)
    await smtp.await_count(n)
    for person in people:
        await person.ready(smtp)
    return people


async def test_the_last_place_goes_to_one_of_two_confirming_at_once(
    threaded_server: str, api: httpx.AsyncClient, smtp: SmtpSink
) -> None:
    headers, link, join_path = await _team(api, max_testers=3)
    people = await _joiners(threaded_server, smtp, join_path, 4)
    try:
        for person in people[:2]:  # the 1st and 2nd of 3 join one after the other
            assert (await person.join()).status_code == 303

        # The 3rd and the 4th at once: one joins, one is refused.
        answers: list[Any] = await asyncio.gather(*(p.join() for p in people[2:]))

        assert sorted(r.status_code for r in answers) == [303, 409], [r.text for r in answers]
        refused = next(r for r in answers if r.status_code == 409)
        assert "as many testers as it takes" in refused.text
        r = await api.get(link, headers=headers)
        assert (r.json()["joinedCount"], r.json()["state"]) == (3, "full")
    finally:
        for person in people:
            await person.browser.aclose()


async def test_a_burst_of_confirmations_never_passes_the_limit(
    threaded_server: str, api: httpx.AsyncClient, smtp: SmtpSink
) -> None:
    headers, link, join_path = await _team(api, max_testers=3)
    people = await _joiners(threaded_server, smtp, join_path, 8)
    try:
        answers: list[Any] = await asyncio.gather(*(p.join() for p in people))

        statuses = sorted(r.status_code for r in answers)
        assert statuses == [303] * 3 + [409] * 5, [r.text[:200] for r in answers]
        r = await api.get(link, headers=headers)
        assert r.json()["joinedCount"] == 3
        testers = link.replace("/join-link", "/testers")
        r = await api.get(testers, headers=headers)
        assert len(r.json()["testers"]) == 3
    finally:
        for person in people:
            await person.browser.aclose()
