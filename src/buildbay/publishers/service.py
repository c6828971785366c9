"""Trusted publishers: adding, removing (admin+), and the exchange of a CI's ID token for an
upload-only token of the application that trusts it (publishers/exchange.py checks the token).

The exchanged token is an API token (auth/) with the `upload` scope, the application's project
as its only project and the application as its only application, living 15 minutes. It acts for
the account that added the publisher (an admin), within those limits: builds it uploads are
that account's (their quota, their `uploadedBy`), while the audit log names the CI identity
(`Principal.ci_identity`, audit/record.py `actor_of`). So a publisher works while that account is a
developer or more in the project; once it is not, the exchange is refused and an admin adds the
publisher again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.audit.record import Actor, ActorKind, AuditAction, Origin, Target, actor_of, record
from buildbay.auth.enums import TokenScope
from buildbay.auth.models import ApiToken, User
from buildbay.auth.tokens import API_TOKEN_DISPLAY_LENGTH, hash_token, new_api_token
from buildbay.db.concurrency import lock_row
from buildbay.errors import Conflict, Forbidden, NotAuthenticated, NotFound, ValidationFailed
from buildbay.ids import new_id
from buildbay.projects.authorization import ApplicationAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember
from buildbay.publishers.actors import ci_identity
from buildbay.publishers.exchange import unverified_issuer, verified
from buildbay.publishers.keys import IssuerKeys, IssuerRefused, check_issuer
from buildbay.publishers.models import TrustedPublisher, UsedIdToken
from buildbay.publishers.reads import PUBLISHER
from buildbay.publishers.records import PublisherRecord
from buildbay.publishers.subjects import PatternRefused, check_pattern, subject_matches

TOKEN_LIFETIME = timedelta(minutes=15)
MAX_PUBLISHERS = 20  # per application


@dataclass(frozen=True, slots=True)
class Exchanged:
    token: str
    expires_at: datetime
    application_id: str
    project_id: str


class TrustedPublishers:
    def __init__(
        self, db: AsyncSession, now: datetime, keys: IssuerKeys, *, development: bool
    ) -> None:
        self.db = db
        self.now = now
        self.keys = keys
        self.development = development

    async def add(
        self, access: ApplicationAccess, issuer: str, pattern: str, audience: str, origin: Origin
    ) -> PublisherRecord:
        try:
            check_issuer(issuer, development=self.development)
        except IssuerRefused as refused:
            raise ValidationFailed.for_field(
                "issuer", f"The URL {refused}", code="issuer_refused"
            ) from None
        try:
            check_pattern(pattern)
        except PatternRefused as refused:
            raise ValidationFailed.for_field(
                "subjectPattern", str(refused), code="subject_pattern_refused"
            ) from None
        app_id = access.application.id
        # "Not the same one twice" and "at most MAX_PUBLISHERS" are a read followed by an
        # insert: two adds at once would each read the other's absence. The application's row
        # is locked first, so adds take turns and each reads what the one before committed (no
        # unique key can say "20").
        if not await lock_row(self.db, Application.id, app_id):
            raise NotFound("No application with this id", code="application_not_found")
        existing = list(
            await self.db.scalars(
                select(TrustedPublisher).where(TrustedPublisher.application_id == app_id)
            )
        )
        if any(
            (p.issuer, p.subject_pattern, p.audience) == (issuer, pattern, audience)
            for p in existing
        ):
            raise Conflict(
                "The application already trusts this issuer, subject pattern and audience",
                code="publisher_exists",
            )
        if len(existing) >= MAX_PUBLISHERS:
            raise Conflict(
                f"An application trusts at most {MAX_PUBLISHERS} publishers: remove one first",
                code="too_many_publishers",
            )
        publisher = TrustedPublisher(
            id=new_id("tpub"),
            application_id=app_id,
            issuer=issuer,
            subject_pattern=pattern,
            audience=audience,
            created_by=access.caller.user.id,
            created_at=self.now,
        )
        self.db.add(publisher)
        record(
            self.db, at=self.now, actor=actor_of(access),
            action=AuditAction.TRUSTED_PUBLISHER_ADDED, origin=origin,
            target=Target("application", app_id, access.application.name),
            project_id=access.project.id,
            details={"publisherId": publisher.id, "issuer": issuer, "subjectPattern": pattern,
                     "audience": audience},
        )  # fmt: skip
        await self.db.flush()
        return PUBLISHER.of_entity(publisher)

    async def remove(self, access: ApplicationAccess, publisher_id: str, origin: Origin) -> None:
        publisher = await self.db.scalar(
            select(TrustedPublisher).where(
                TrustedPublisher.id == publisher_id,
                TrustedPublisher.application_id == access.application.id,
            )
        )
        if publisher is None:
            raise NotFound("No trusted publisher with this id", code="publisher_not_found")
        # Its exchanged tokens die with it (they would expire within 15 minutes anyway).
        await self.db.execute(delete(ApiToken).where(ApiToken.publisher_id == publisher.id))
        await self.db.delete(publisher)
        record(
            self.db, at=self.now, actor=actor_of(access),
            action=AuditAction.TRUSTED_PUBLISHER_REMOVED, origin=origin,
            target=Target("application", access.application.id, access.application.name),
            project_id=access.project.id,
            details={"publisherId": publisher.id, "issuer": publisher.issuer,
                     "subjectPattern": publisher.subject_pattern,
                     "audience": publisher.audience},
        )  # fmt: skip

    async def exchange(self, token: str, application_id: str, origin: Origin) -> Exchanged:
        """An upload-only token for `application_id`, once one of its own publishers trusts
        `token`. The uploader names the application and a publisher grants only its own: a
        publisher anyone adds to an application of theirs, trusting someone else's CI, never
        draws that CI's uploads (nor makes them ambiguous), and no refusal tells of another
        application's publishers."""
        issuer, kid, alg = unverified_issuer(token)
        trusted_anywhere = await self.db.scalar(
            select(TrustedPublisher.id).where(TrustedPublisher.issuer == issuer).limit(1)
        )
        if trusted_anywhere is None:
            # Before any fetch: the server reads the keys only of issuers a publisher names.
            # (Server-wide, as this is before the signature: an unsigned token must not learn
            # which issuers one application trusts.)
            raise _no_publisher(f"No application here trusts tokens of the issuer {issuer[:255]}")
        id_token = await verified(token, issuer, kid, alg, self.keys, self.now)
        candidates = await self.db.scalars(
            select(TrustedPublisher)
            .where(
                TrustedPublisher.application_id == application_id,
                TrustedPublisher.issuer == issuer,
            )
            .order_by(TrustedPublisher.id)
        )
        matching = [
            p
            for p in candidates
            if id_token.audiences == (p.audience,)
            and subject_matches(p.subject_pattern, id_token.subject)
        ]
        if not matching:
            raise _no_publisher(
                f"No trusted publisher of the application {application_id} takes subject "
                f"{id_token.subject!r} with audience {' '.join(id_token.audiences)!r} from "
                f"{issuer}: check that application's trusted publishers (issuer, subject "
                "pattern, audience)"
            )
        publisher = matching[0]  # the oldest of the application's that match
        project_id, user = await self._acting_user(publisher)
        identity = ci_identity(issuer, id_token.subject)
        self.db.add(
            UsedIdToken(
                id=new_id("idt"), issuer=issuer, jti=id_token.replay_key,
                expires_at=id_token.expires_at,
            )
        )  # fmt: skip
        try:
            await self.db.flush()
        except IntegrityError:
            raise NotAuthenticated(
                "This ID token was already exchanged: each is taken once (ask the CI for a "
                "new one)",
                code="id_token_replayed",
            ) from None
        secret = new_api_token()
        expires_at = self.now + TOKEN_LIFETIME
        api_token = ApiToken(
            id=new_id("tok"), user_id=user.id, name=f"trusted publisher {publisher.id}",
            prefix=secret[:API_TOKEN_DISPLAY_LENGTH], token_hash=hash_token(secret),
            created_at=self.now, expires_at=expires_at, last_used_at=None,
            scope=TokenScope.UPLOAD, project_ids=[project_id],
            credentials_epoch=user.credentials_epoch,
            application_id=publisher.application_id, publisher_id=publisher.id,
            ci_identity=identity,
        )  # fmt: skip
        self.db.add(api_token)
        record(
            self.db, at=self.now, actor=Actor(ActorKind.CI, user.id, identity),
            action=AuditAction.TRUSTED_PUBLISHER_EXCHANGED, origin=origin,
            target=Target("application", publisher.application_id), project_id=project_id,
            details={"publisherId": publisher.id, "tokenId": api_token.id,
                     "expiresAt": expires_at.isoformat()},
        )  # fmt: skip
        await self.db.flush()
        return Exchanged(secret, expires_at, publisher.application_id, project_id)

    async def _acting_user(self, publisher: TrustedPublisher) -> tuple[str, User]:
        """The application's project, and the account the token acts for (the publisher's
        creator), once it is a developer or more there."""
        row = (
            await self.db.execute(
                select(Application.project_id, ProjectMember.role)
                .outerjoin(
                    ProjectMember,
                    and_(
                        ProjectMember.project_id == Application.project_id,
                        ProjectMember.user_id == publisher.created_by,
                    ),
                )
                .where(Application.id == publisher.application_id)
            )
        ).first()
        user = await self.db.get(User, publisher.created_by) if publisher.created_by else None
        if (
            row is None
            or user is None
            or row.role is None
            or not row.role.includes(ProjectRole.DEVELOPER)
        ):
            raise Forbidden(
                "The account that added this trusted publisher is no longer a developer or "
                "more in the project: an admin must add the publisher again",
                code="publisher_inactive",
            )
        return row.project_id, user


def _no_publisher(detail: str) -> Forbidden:
    return Forbidden(detail, code="no_matching_publisher")


async def sweep_used_id_tokens(db: AsyncSession, now: datetime) -> int:
    """Forgets the exchanged ID tokens that have expired (no replay of them can pass the
    expiry check), and the exchanged API tokens that have expired."""
    gone = await db.execute(delete(UsedIdToken).where(UsedIdToken.expires_at < now))
    await db.execute(
        delete(ApiToken).where(ApiToken.publisher_id.is_not(None), ApiToken.expires_at < now)
    )
    return int(getattr(gone, "rowcount", 0) or 0)
