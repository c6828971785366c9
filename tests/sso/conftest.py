"""Sign-in through a real OpenID provider process (tests/oidc_provider.py): the app under test
is configured with its issuer, and a person's sign-in is what a browser does, step by step:
the console's start, the provider's form answered as a subject, the console's callback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.audit.models import AuditEntry
from buildbay.config import Settings
from tests.conftest import BASE_URL
from tests.oidc_provider import OidcProvider, oidc_provider_process

CLIENT_ID = "buildbay-console"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with oidc_provider_process(tmp_path_factory.mktemp("oidc")) as running:
        yield running


def sso_settings(base: Settings, provider: OidcProvider, **more: Any) -> Settings:
    fields = {
        "oidc_issuer": provider.issuer,
        "oidc_client_id": CLIENT_ID,
        "oidc_client_secret": "a-client-secret",
        "oidc_groups_claim": "groups",
        "oidc_provider_name": "Acme ID",
        **more,
    }
    return Settings(**(base.model_dump() | fields))


@pytest.fixture
def settings(settings: Settings, provider: OidcProvider) -> Settings:
    return sso_settings(settings, provider)


@dataclass
class Browser:
    """One browser: its own cookies (the flow's, the console's session)."""

    client: httpx.AsyncClient
    provider: OidcProvider

    async def start(self, next_page: str | None = None) -> str:
        """Press "Sign in with ...": the provider's authorization URL."""
        r = await self.client.get(
            "/auth/sso/start", params={"next": next_page} if next_page else None
        )
        assert r.status_code == 303, r.text
        location = r.headers["location"]
        assert location.startswith(self.provider.issuer), location
        return location

    async def at_provider(self, authorization_url: str, sub: str) -> str:
        """Sign in at the provider's form: the callback path it sends the browser back to."""
        back = await asyncio.to_thread(self.provider.authorize, authorization_url, sub)
        parts = urlsplit(back)
        assert f"{parts.scheme}://{parts.netloc}" == BASE_URL, back
        return f"{parts.path}?{parts.query}"

    async def callback(self, path: str) -> httpx.Response:
        r = await self.client.get(path)
        assert r.status_code == 303, r.text
        return r

    async def sign_in(self, sub: str, next_page: str | None = None) -> httpx.Response:
        """The whole sign-in: where the console sends the browser at its end."""
        url = await self.start(next_page)
        return await self.callback(await self.at_provider(url, sub))

    async def page(self, path: str) -> httpx.Response:
        return await self.client.get(path, headers={"accept": "text/html"})

    async def notice(self) -> str:
        """The sentence the login page shows after a refused sign-in."""
        r = await self.page("/login")
        assert r.status_code == 200
        return r.text


@contextlib.asynccontextmanager
async def open_browser(app: FastAPI, provider: OidcProvider) -> AsyncIterator[Browser]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield Browser(client, provider)


@pytest.fixture
async def browser(app: FastAPI, provider: OidcProvider) -> AsyncIterator[Browser]:
    async with open_browser(app, provider) as opened:
        yield opened


async def audit_entries(app: FastAPI, action: str) -> list[AuditEntry]:
    async with app.state.ctx.sessions() as db:
        found = await db.scalars(
            select(AuditEntry).where(AuditEntry.action == action).order_by(AuditEntry.id)
        )
        return list(found)
