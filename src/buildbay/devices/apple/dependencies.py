"""How the Apple services are made from the app's context, and the same as route dependencies
on the request's unit of work. The routes take `KeyService` and `RegistrationService`; the
console and anything else call `apple_key_service` and `apple_registration_service`."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.devices.apple.keys import AppleKeyService, KeySeal
from buildbay.devices.apple.registrations import AppleApi, AppleRegistrationService


def key_seal(ctx: AppContext) -> KeySeal:
    return KeySeal(ctx.settings.signing_key)


def apple_key_service(ctx: AppContext, db: AsyncSession) -> AppleKeyService:
    return AppleKeyService(db, ctx.clock.now(), key_seal(ctx))


def apple_registration_service(ctx: AppContext, db: AsyncSession) -> AppleRegistrationService:
    settings = ctx.settings
    apple = AppleApi(settings.apple_api_url, settings.apple_api_timeout_seconds)
    return AppleRegistrationService(db, ctx.clock, key_seal(ctx), apple, ctx.limiter)


KeyService = Annotated[AppleKeyService, in_unit_of_work(apple_key_service)]
RegistrationService = Annotated[
    AppleRegistrationService, in_unit_of_work(apple_registration_service)
]
