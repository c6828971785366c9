"""A project's team, its builds (made through the API) and feedback on them, for the tests of
the team's side of feedback (tests/feedback/test_feedback_team*.py).

The feedback rows are written with the models, as the submission path (POST .../feedback)
stores them, with real PNG screenshots in the build storage under their keys."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI
from PIL import Image

from buildbay.context import AppContext
from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus
from buildbay.feedback.models import Feedback, FeedbackComment, FeedbackScreenshot
from buildbay.ids import new_id
from buildbay.storage.local import LocalStorage
from tests.conftest import Account, Api


def png(width: int = 4, height: int = 3, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


@dataclass
class Team:
    client: httpx.AsyncClient
    api: Api
    app: FastAPI
    owner: Account
    project: dict[str, Any] = field(default_factory=dict)
    application: dict[str, Any] = field(default_factory=dict)

    @property
    def ctx(self) -> AppContext:
        ctx: AppContext = self.app.state.ctx
        return ctx

    @property
    def pid(self) -> str:
        return str(self.project["id"])

    @property
    def inbox(self) -> str:
        return f"/api/projects/{self.pid}/feedback"

    async def start(self, name: str = "Acme") -> Team:
        self.project = await self.api.project(self.owner, name)
        self.application = await self.api.application(self.owner, self.pid)
        return self

    async def member(self, email: str, role: str = "tester") -> Account:
        account = await self.api.register(email)
        await self.api.add_member(self.owner, self.pid, account, role)
        return account

    async def build(self, application: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ready build, uploaded through the API."""
        app_id = (application or self.application)["id"]
        return await self.api.upload(self.owner, self.pid, app_id)

    async def feedback(
        self,
        build: dict[str, Any],
        tester: Account | None = None,
        *,
        email: str | None = None,
        category: str = "bug",
        text: str = "The app closes when I open settings",
        status: str = "new",
        screenshots: int = 0,
        context: dict[str, Any] | None = None,
    ) -> str:
        """A feedback on `build` by `tester` (or, without one, an app's reporter `email`)."""
        ctx = self.ctx
        now = ctx.clock.now()
        feedback_id = new_id("fbk")
        async with ctx.sessions() as db, db.begin():
            db.add(
                Feedback(
                    id=feedback_id,
                    project_id=build["projectId"],
                    application_id=build["applicationId"],
                    build_id=build["buildId"],
                    tester_id=tester.user["id"] if tester else None,
                    reporter_email=tester.email if tester else (email or "anon@example.com"),
                    category=FeedbackCategory(category),
                    text=text,
                    context=context if context is not None else {"model": "Pixel 8", "os": "15"},
                    status=FeedbackStatus(status),
                    assignee_id=None,
                    created_at=now,
                    updated_at=now,
                )
            )
            await db.flush()
            for position in range(screenshots):
                shot_id = new_id("fbs")
                key = f"feedback/{build['projectId']}/{feedback_id}/{shot_id}.png"
                data = png(4 + position, 3)
                self.store(key, data)
                db.add(
                    FeedbackScreenshot(
                        id=shot_id,
                        feedback_id=feedback_id,
                        position=position,
                        storage_key=key,
                        content_type="image/png",
                        width=4 + position,
                        height=3,
                        bytes=len(data),
                    )
                )
        return feedback_id

    async def comment_row(self, feedback_id: str, author: Account, text: str = "Seen") -> None:
        """A comment written with the models (the API's own is tested through the API)."""
        async with self.ctx.sessions() as db, db.begin():
            db.add(
                FeedbackComment(
                    id=new_id("fbc"),
                    feedback_id=feedback_id,
                    author_id=author.user["id"],
                    text=text,
                    created_at=self.ctx.clock.now(),
                )
            )

    def store(self, key: str, data: bytes) -> None:
        storage = self.ctx.storage
        assert isinstance(storage, LocalStorage)
        path = storage.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    async def get(self, who: Account, path: str, **params: Any) -> httpx.Response:
        return await self.client.get(path, params=params, headers=who.headers)

    async def patch(self, who: Account, feedback_id: str, body: Any) -> httpx.Response:
        return await self.client.patch(
            f"{self.inbox}/{feedback_id}", json=body, headers=who.headers
        )

    async def post_comment(self, who: Account, feedback_id: str, text: Any) -> httpx.Response:
        return await self.client.post(
            f"{self.inbox}/{feedback_id}/comments", json={"text": text}, headers=who.headers
        )

    async def run_jobs(self) -> int:
        assert self.ctx.jobs is not None
        return await self.ctx.jobs.run_until_idle()
