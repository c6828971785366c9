"""A project with testers, its mails read from a real SMTP server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.config import Settings
from buildbay.context import AppContext
from tests.conftest import Account, Api
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


class Team:
    """An owner's project, application and members, and the steps the tests take."""

    def __init__(self, client: httpx.AsyncClient, api: Api, app: FastAPI, smtp: SmtpSink) -> None:
        self.client, self.api, self.app, self.smtp = client, api, app, smtp
        self.owner: Account
        self.project: dict[str, Any]
        self.application: dict[str, Any]

    @property
    def groups(self) -> str:
        return f"/api/projects/{self.project['id']}/groups"

    @property
    def builds(self) -> str:
        return f"/api/app-distribution/{self.project['id']}/{self.application['id']}/builds"

    async def member(self, email: str, role: str = "tester") -> Account:
        account = await self.api.register(email)
        await self.api.add_member(self.owner, self.project["id"], account, role)
        return account

    async def group(self, name: str, *emails: str) -> str:
        r = await self.client.post(self.groups, json={"name": name}, headers=self.owner.headers)
        assert r.status_code == 201, r.text
        group_id = str(r.json()["id"])
        if emails:
            await self.group_add(group_id, *emails)
        return group_id

    async def group_add(self, group_id: str, *emails: str) -> None:
        r = await self.client.post(
            f"{self.groups}/{group_id}/testers",
            json={"emails": list(emails)},
            headers=self.owner.headers,
        )
        assert r.status_code == 200, r.text

    async def upload(self, account: Account | None = None, **fields: Any) -> dict[str, Any]:
        return await self.api.upload(
            account or self.owner, self.project["id"], self.application["id"], **fields
        )

    async def distribute(self, build_id: str, **body: Any) -> dict[str, Any]:
        r = await self.client.post(
            f"{self.builds}/{build_id}/distribute", json=body, headers=self.owner.headers
        )
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result

    async def run_jobs(self) -> None:
        ctx: AppContext = self.app.state.ctx
        assert ctx.jobs is not None
        await ctx.jobs.run_until_idle()

    def mails_to(self, email: str) -> list[Any]:
        return [m for m in self.smtp.messages() if m.recipients == [email]]


@pytest.fixture
async def team(
    client: httpx.AsyncClient, api: Api, app: FastAPI, smtp: SmtpSink, owner: Account
) -> Team:
    team = Team(client, api, app, smtp)
    team.owner = owner
    team.project = await api.project(owner, "Acme")
    team.application = await api.application(owner, team.project["id"])
    return team
