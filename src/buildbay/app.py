"""create_app(settings) builds the whole service; nothing is built at import time."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from buildbay import __version__, redis_pool
from buildbay.api_docs import add_redoc
from buildbay.applications.routes import router as applications_router
from buildbay.audit.routes import router as audit_router
from buildbay.auth.cache import AccessTokenCache
from buildbay.auth.password_reset import PASSWORD_RESET_JOB, password_reset_handler
from buildbay.auth.revocations import SharedRevocations
from buildbay.auth.routes import account_router
from buildbay.auth.routes import router as auth_router
from buildbay.auth.tokens import AccessTokenCodec
from buildbay.builds.background import VERIFY_JOB, verify_handler
from buildbay.builds.dependencies import build_service
from buildbay.builds.install import InstallTokens
from buildbay.builds.install_page import router as install_page_router
from buildbay.builds.readers import MetadataReaders
from buildbay.builds.routes import router as builds_router
from buildbay.builds.sweeper import sweep
from buildbay.channels.routes import router as channels_router
from buildbay.clock import Clock, SystemClock
from buildbay.config import Environment, Settings
from buildbay.console.pages import browser_error
from buildbay.console.routes import console_sessions
from buildbay.console.routes import routers as console_routers
from buildbay.context import AppContext
from buildbay.db import migrate
from buildbay.db.engine import COMMIT_WATCHERS, create_engines, create_sessionmaker
from buildbay.db.reads import Reads
from buildbay.devices.apple.routes import router as apple_router
from buildbay.devices.project_routes import router as project_devices_router
from buildbay.devices.routes import pages as device_pages_router
from buildbay.devices.routes import router as devices_router
from buildbay.distribution.membership import DISTRIBUTION_JOB
from buildbay.distribution.routes import router as distribution_router
from buildbay.distribution.service import distribution_mail_handler
from buildbay.feedback.dependencies import FEEDBACK_SPOOL
from buildbay.feedback.routes import router as feedback_router
from buildbay.feedback.team_routes import router as feedback_team_router
from buildbay.feeds.cache import FeedCache
from buildbay.feeds.download_routes import router as feed_download_router
from buildbay.feeds.routes import router as feeds_router
from buildbay.files.routes import router as storage_router
from buildbay.health import router as health_router
from buildbay.invitations.routes import router as invitations_router
from buildbay.jobs.queue import JOB_SIGNAL, JobSignal
from buildbay.jobs.worker import Handler, JobWorker
from buildbay.mail.outbox import MAIL_JOB, MailOutbox
from buildbay.mail.transports import mail_handler, transport_for
from buildbay.mail.unsubscribe import UnsubscribeLinks
from buildbay.middleware import ApiMiddleware
from buildbay.problems import PROBLEM_CONTENT_TYPE, Problem, install_error_handlers
from buildbay.projects.routes import router as projects_router
from buildbay.publishers.keys import IssuerKeys
from buildbay.publishers.routes import exchange_router
from buildbay.publishers.routes import router as publishers_router
from buildbay.ratelimit.limiter import RateLimiter
from buildbay.security_headers import SecurityHeaders
from buildbay.sso.provider import SsoConfig, SsoProvider
from buildbay.sso.routes import router as sso_groups_router
from buildbay.storage.base import Storage
from buildbay.storage.factory import create_storage
from buildbay.storage.signing import UrlSigner
from buildbay.updates.routes import router as updates_router
from buildbay.webhooks.delivery import WebhookSender, webhook_handler
from buildbay.webhooks.events import ADDRESSES, WEBHOOK_JOB
from buildbay.webhooks.events import Addresses as EventAddresses
from buildbay.webhooks.routes import deliveries_router as webhook_deliveries_router
from buildbay.webhooks.routes import router as webhooks_router
from buildbay.webhooks.transport import ssl_context as webhook_ssl_context

log = logging.getLogger("buildbay")

DESCRIPTION = """\
Upload app builds (APK, AAB, IPA, installers) from CI and hand them to testers.

Uploading is three steps: `POST .../builds/upload-link` gives an `uploadUrl`; `PUT` the raw bytes
there (no token: the URL is signed); `POST .../builds/verify` makes the build `ready`.
Every error is `application/problem+json` (RFC 9457) with a stable `code`. Query parameters that
an operation does not define are ignored.
"""
# The API document's sections, in the order a newcomer reads them.
API_SECTIONS = (
    "auth",
    "account",
    "projects",
    "invitations",
    "tester groups",
    "applications",
    "trusted publishers",
    "channels",
    "webhooks",
    "audit log",
    "builds",
    "devices",
    "feedback",
    "updates",
    "desktop feeds",
    "storage",
    "install pages",
    "health",
)


def create_worker_app() -> FastAPI:
    """The app of each process of `buildbay serve --workers N`: settings from the environment,
    the schema already migrated by the parent process."""
    return served(create_app(migrate_on_start=False))


def served(app: FastAPI) -> FastAPI:
    """`app`, about to be served for the life of this process (`buildbay serve`).

    What exists by now (the modules, the app with its routes, schemas and models) lives as
    long as the process. It is moved out of the cyclic garbage collector's reach
    (`gc.freeze`): the collector's full collections, which stop every request while they
    run, otherwise walked all of it each time, and now walk only what requests leave behind
    (docs/performance.md). What the first webhook delivery would otherwise make in the middle
    of serving is made here too."""
    webhook_ssl_context()
    gc.collect()
    gc.freeze()
    return app


def create_app(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    storage: Storage | None = None,
    migrate_on_start: bool | None = None,
) -> FastAPI:
    settings = settings or Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    clock = clock or SystemClock()
    engine, read_engine = create_engines(
        settings.resolved_database_url, pool_size=settings.database_pool_size
    )
    signer = UrlSigner(settings.signing_key)
    if storage is None:
        storage = create_storage(settings, signer, clock)
    # Redis means several processes: they share request counts and tell each other of revoked
    # sessions through it.
    shared_redis = redis_pool.connect(settings.redis_url) if settings.redis_url else None
    revocations = SharedRevocations(shared_redis, clock) if shared_redis is not None else None
    job_signal = JobSignal()
    feeds = FeedCache(clock, shared_redis)
    install_tokens = InstallTokens(settings.signing_key)
    addresses = EventAddresses(settings.resolved_public_url, install_tokens)
    session_info = {
        JOB_SIGNAL: job_signal, ADDRESSES: addresses, COMMIT_WATCHERS: [feeds.committed]
    }  # fmt: skip
    ctx = AppContext(
        settings=settings,
        engine=engine,
        # Units of work carry the signal that wakes this process's job worker when they
        # commit a job (jobs/queue.py), and the addresses their webhook events name; what they
        # commit tells the feeds' cache whether its answers went stale (feeds/cache.py).
        sessions=create_sessionmaker(engine, info=session_info),
        read_engine=read_engine,
        clock=clock,
        storage=storage,
        signer=signer,
        install_tokens=install_tokens,
        limiter=RateLimiter(settings, clock, shared_redis),
        access_tokens=AccessTokenCodec(
            settings.signing_key, timedelta(seconds=settings.access_token_ttl_seconds)
        ),
        access_cache=AccessTokenCache(),
        revocations=revocations,
        mail=MailOutbox(settings.resolved_mail_from),
        unsubscribe=UnsubscribeLinks(settings.signing_key, settings.resolved_public_url),
        webhook_sender=WebhookSender(
            allow_private=settings.webhook_allow_private, allow_http=settings.webhook_allow_http
        ),
        readers=MetadataReaders.of(settings),
        feeds=feeds,
        redis=shared_redis,
    )
    sso_config = SsoConfig.of(settings)
    ctx.sso = SsoProvider(sso_config, clock) if sso_config is not None else None
    ctx.publisher_keys = IssuerKeys(
        clock,
        development=settings.env is Environment.DEVELOPMENT,
        ttl=settings.trusted_publisher_keys_ttl_seconds,
    )
    ctx.jobs = JobWorker(
        ctx.sessions,
        job_handlers(ctx),
        clock,
        job_signal,
        poll_seconds=settings.job_poll_seconds,
        lease_seconds=settings.job_lease_seconds,
        retry_base_seconds=settings.job_retry_base_seconds,
    )
    if migrate_on_start is None:
        migrate_on_start = settings.migrates_itself

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if migrate_on_start:
            await migrate.upgrade(engine)
        sweeper = None
        if settings.sweep_interval_seconds > 0:
            sweeper = asyncio.create_task(_sweep_forever(ctx))
        assert ctx.jobs is not None
        ctx.jobs.start()
        feeds.start()
        try:
            yield
        finally:
            await feeds.stop()
            await ctx.jobs.stop()
            await ctx.webhook_sender.aclose()
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
            await ctx.dispose()

    # Interactive docs (/docs, /redoc) served from the package itself: no CDN, works offline.
    app = FastAPIOffline(
        redoc_url=None,  # api_docs.py: ReDoc's logo from here too
        title="Buildbay",
        version=__version__,
        description=DESCRIPTION,
        openapi_tags=[{"name": section} for section in API_SECTIONS],
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.console = console_sessions(
        settings.signing_key, settings.refresh_token_ttl_days, settings.resolved_public_url
    )
    security_headers = SecurityHeaders(settings)
    install_error_handlers(app, security_headers, browser_error)
    app.add_middleware(
        ApiMiddleware,
        body_read_timeout=settings.body_read_timeout_seconds,
        security_headers=security_headers,
    )
    # Starlette tries the routes in turn until one matches, and each try costs FastAPI some
    # work: the routes that clients and apps poll most come first (the update check, builds,
    # projects, applications; docs/performance.md). No path of one router matches a path of
    # another (tests/test_openapi.py), so the order changes no answer; the API document keeps
    # its reading order (API_SECTIONS).
    for router in (
        updates_router,
        feed_download_router,
        feeds_router,
        builds_router,
        feedback_router,
        projects_router,
        sso_groups_router,
        applications_router,
        publishers_router,
        auth_router,
        exchange_router,
        account_router,
        invitations_router,
        distribution_router,
        project_devices_router,
        channels_router,
        webhooks_router,
        webhook_deliveries_router,
        audit_router,
        apple_router,
        feedback_team_router,
        storage_router,
        install_page_router,
        devices_router,
        device_pages_router,
        health_router,
        *console_routers,
    ):
        # The routes themselves, not the router: each APIRoute already has its full path, its
        # route class and its router's dependencies. FastAPI's include_router keeps the router
        # as a level of its own, and matching through those levels cost every request more
        # than a bare endpoint's whole work (docs/performance.md).
        app.router.routes.extend(router.routes)
    # The console's stylesheet and script, from the package: no CDN, no build step.
    app.mount("/static", StaticFiles(packages=[("buildbay", "static")]), name="static")
    add_redoc(app, app.title)
    app.add_api_route(
        "/favicon.ico",
        lambda: RedirectResponse("/static/favicon.svg", status_code=301),
        include_in_schema=False,
    )  # where a browser looks on pages that name no icon (the API docs, JSON)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def job_handlers(ctx: AppContext) -> dict[str, Handler]:
    """What runs each kind of job of the outbox (jobs/), each given what it needs."""
    public_url = ctx.settings.resolved_public_url
    return {
        MAIL_JOB: mail_handler(transport_for(ctx.settings)),
        PASSWORD_RESET_JOB: password_reset_handler(ctx.clock, public_url, ctx.mail),
        DISTRIBUTION_JOB: distribution_mail_handler(
            ctx.clock, public_url, ctx.install_tokens, ctx.unsubscribe, ctx.mail
        ),
        VERIFY_JOB: verify_handler(functools.partial(build_service, ctx)),
        WEBHOOK_JOB: webhook_handler(
            lambda: Reads.on(ctx.read_engine), ctx.webhook_sender, ctx.clock, ctx.mail, public_url
        ),
    }


async def _sweep_forever(ctx: AppContext) -> None:
    while True:
        await asyncio.sleep(ctx.settings.sweep_interval_seconds)
        try:
            await sweep(
                ctx.sessions, ctx.storage, ctx.clock.now(), ctx.settings.resolved_public_url,
                audit_retention_days=ctx.settings.audit_retention_days,
                feedback_spool=ctx.settings.data_dir / FEEDBACK_SPOOL,
            )  # fmt: skip
        except Exception:
            log.exception("sweeping failed; trying again next round")


def _show_the_example(operation: dict[str, Any], components: dict[str, Any]) -> None:
    """The request body's example (its model's EXAMPLE, schemas.RequestModel) on the body
    itself, where Swagger's "Try it out" and ReDoc take it from: else they make one up from
    the schema (random strings, and a retention rule of one build)."""
    media = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if media is None:
        return
    schema = media.get("schema", {})
    # An optional body is "anyOf": [the model, null].
    refs = [s["$ref"] for s in [schema, *schema.get("anyOf", [])] if "$ref" in s]
    body = components.get(refs[0].rsplit("/", 1)[-1], {}) if refs else {}
    if body.get("examples"):
        media["example"] = body["examples"][0]


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with every error described as the problem+json it really is."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(
        by_alias=True, ref_template="#/components/schemas/{model}", mode="serialization"
    )
    components.update(problem.pop("$defs", {}))
    components["Problem"] = problem
    problem_content = {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, path_item in schema.get("paths", {}).items():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            if path.startswith(("/api/", "/storage/")):
                responses.setdefault(
                    "500", {"description": "Unexpected error (a bug); quote requestId"}
                )
                responses.setdefault(
                    "503", {"description": "Database or storage unreachable (see Retry-After)"}
                )
                if "requestBody" in operation:
                    responses.setdefault(
                        "408", {"description": "The body did not arrive in time (body_timeout)"}
                    )
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    response["content"] = problem_content
            _show_the_example(operation, components)
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    app.openapi_schema = schema
    return schema
