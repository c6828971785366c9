"""Everything a request may need, built once by create_app. Each domain's dependencies.py makes
its services from it (`build_service(ctx, db)`), handing each only what it needs: no service,
read or rule takes or imports the context."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from buildbay.auth.cache import AccessTokenCache
from buildbay.auth.revocations import SharedRevocations
from buildbay.auth.tokens import AccessTokenCodec
from buildbay.builds.install import InstallTokens
from buildbay.builds.readers import MetadataReaders
from buildbay.clock import Clock
from buildbay.config import Settings
from buildbay.feeds.cache import FeedCache
from buildbay.jobs.worker import JobWorker
from buildbay.mail.outbox import MailOutbox
from buildbay.mail.unsubscribe import UnsubscribeLinks
from buildbay.publishers.keys import IssuerKeys
from buildbay.ratelimit.limiter import RateLimiter
from buildbay.sso.provider import SsoProvider
from buildbay.storage.base import Storage
from buildbay.storage.signing import UrlSigner
from buildbay.webhooks.delivery import WebhookSender


@dataclass
class AppContext:
    """Everything a request may need, built once by create_app (no import-time globals)."""

    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]  # units of work that write
    read_engine: AsyncEngine  # reads of requests that only read (db/reads.py)
    clock: Clock
    storage: Storage
    signer: UrlSigner
    install_tokens: InstallTokens
    limiter: RateLimiter
    access_tokens: AccessTokenCodec
    access_cache: AccessTokenCache
    revocations: SharedRevocations | None  # with Redis: several processes (auth/revocations.py)
    mail: MailOutbox
    unsubscribe: UnsubscribeLinks
    webhook_sender: WebhookSender  # sends the outbox's webhook deliveries (webhooks/)
    readers: MetadataReaders  # the processes that read build files' metadata (builds/readers.py)
    feeds: FeedCache  # the desktop feeds' answers, until a write changes them (feeds/cache.py)
    # The signing keys of the issuers trusted publishers name, kept per process (publishers/).
    publisher_keys: IssuerKeys | None = None
    jobs: JobWorker | None = None  # the outbox's worker (jobs/worker.py), run by the lifespan
    # With BUILDBAY_REDIS_URL, the process's one Redis client, which `limiter` and `revocations`
    # use (redis_pool.py).
    redis: redis.Redis | None = None
    # With BUILDBAY_OIDC_ISSUER: the identity provider people sign in through (sso/).
    sso: SsoProvider | None = None

    async def dispose(self) -> None:
        """Close the database pools (the engine's, and the read engine's where it has its own:
        on PostgreSQL, db/engine.py `read_engine`) and the Redis client's, and stop the reading
        processes."""
        async with contextlib.AsyncExitStack() as closing:  # each closed, whatever the others do
            if self.publisher_keys is not None:
                closing.push_async_callback(self.publisher_keys.aclose)
            closing.push_async_callback(self.readers.aclose)
            if self.sso is not None:
                closing.push_async_callback(self.sso.aclose)
            if self.redis is not None:
                closing.push_async_callback(self.redis.aclose)
            if self.read_engine is not self.engine:
                closing.push_async_callback(self.read_engine.dispose)
            closing.push_async_callback(self.engine.dispose)  # closed first: a stack, last in first
