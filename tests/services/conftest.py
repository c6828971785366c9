"""The service layer's fixtures: a session inside a transaction rolled back after each test, and
small factories that write rows with the models directly (no HTTP, no app).

SQLAlchemy's "Joining a Session into an External Transaction" recipe: the test's connection
begins a transaction; the session joins it with `join_transaction_mode="create_savepoint"`, so
what a service or a test commits (`finish(db, ok=True)`, `db.commit()`) only releases a
savepoint, and the outer transaction throws everything away at the end. The database is the
migrated one the suite makes once per session (`migrated_database`): nothing is copied or
truncated per test.

The factories commit what they write, as an earlier request would have: a test can then end
the unit of work under test with `finish(db, ok=False)` (what a request that fails does)
without losing its setup.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from buildbay.applications.enums import Platform
from buildbay.applications.models import Application
from buildbay.applications.reads import APPLICATION
from buildbay.applications.records import ApplicationRecord
from buildbay.auth.authentication import Principal
from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus
from buildbay.builds.install import InstallTokens
from buildbay.builds.models import Build
from buildbay.builds.reads import BUILD
from buildbay.builds.records import BuildRecord
from buildbay.clock import FrozenClock
from buildbay.config import Plan, Settings
from buildbay.db.engine import UnitOfWork, create_engine, create_sessionmaker, finish
from buildbay.db.reads import Reads
from buildbay.errors import BuildbayError
from buildbay.ids import new_id
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.reads import PROJECT
from buildbay.projects.records import ProjectRecord
from buildbay.storage.local import LocalStorage
from buildbay.storage.signing import UrlSigner
from tests.conftest import BASE_URL, PG_URL, TEST_SECRET


@pytest.fixture(scope="session")
def service_database_url(migrated_database: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """PostgreSQL's migrated schema as it is; on SQLite a copy of the template made once, so
    that the template the HTTP tests copy is never opened by this layer."""
    if PG_URL:
        return migrated_database
    path = tmp_path_factory.mktemp("services") / "buildbay.sqlite3"
    shutil.copyfile(migrated_database, path)
    return f"sqlite+inline:///{path}"


def _sqlite_begins_for_real(sync_engine: Any) -> None:
    """SQLAlchemy's documented pysqlite fix: let SQLAlchemy emit BEGIN itself.

    The sqlite3 module begins a transaction only before an INSERT, UPDATE or DELETE; a SAVEPOINT
    issued before the first of those starts a transaction of its own, and releasing it commits:
    the test's writes would outlive the outer rollback.
    """

    @event.listens_for(sync_engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(sync_engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")


@pytest.fixture
async def connection(service_database_url: str) -> AsyncIterator[AsyncConnection]:
    """One connection whose transaction every test's writes land in, rolled back at the end."""
    engine = create_engine(service_database_url)
    if engine.dialect.name == "sqlite":
        _sqlite_begins_for_real(engine.sync_engine)
    try:
        async with engine.connect() as conn:
            outer = await conn.begin()
            try:
                yield conn
            finally:
                await outer.rollback()
    finally:
        await engine.dispose()


@pytest.fixture
async def db(connection: AsyncConnection) -> AsyncIterator[AsyncSession]:
    """A unit of work as a request gets it (the app's own sessionmaker), joined to the test's
    transaction. It can be ended with `finish` and used again, as the next request."""
    units_of_work = create_sessionmaker(connection.engine)
    session = units_of_work(bind=connection, join_transaction_mode="create_savepoint")
    assert isinstance(session.sync_session, UnitOfWork)  # what `after_commit` hangs on
    yield session
    # Lets go of what the test's last unit of work held (verify's storage guard).
    await finish(session, ok=False)


@pytest.fixture
def reads(db: AsyncSession) -> Reads:
    """Reads as a service runs them: inside the unit of work's transaction."""
    return Reads.within(db)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def settings(tmp_path: Path, service_database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=service_database_url,
        secret_key=TEST_SECRET,  # type: ignore[arg-type]
        public_url=BASE_URL,
        sweep_interval_seconds=0,
    )


@pytest.fixture
def storage(settings: Settings) -> LocalStorage:
    return LocalStorage(settings.storage_dir, BASE_URL, UrlSigner(settings.signing_key))


@pytest.fixture
def install_tokens(settings: Settings) -> InstallTokens:
    return InstallTokens(settings.signing_key)


@contextlib.contextmanager
def raises(error: type[BuildbayError], code: str) -> Iterator[pytest.ExceptionInfo[BuildbayError]]:
    """The block raises exactly this domain error (not a subclass) with this `code`."""
    with pytest.raises(error) as caught:
        yield caught
    assert type(caught.value) is error, caught.value
    assert caught.value.code == code, caught.value


def access(project: ProjectRecord, user: User, role: ProjectRole) -> ProjectAccess:
    """What the route's authorization hands a service: the project and the caller's role."""
    return ProjectAccess(project, role, Principal(user))


@dataclass
class Given:
    """Rows as earlier requests left them: written with the models and committed (to the
    test's transaction), and handed back as the records a service is given."""

    db: AsyncSession
    clock: FrozenClock
    storage: LocalStorage
    _n: int = field(default=0)

    async def _saved(self, *rows: Any) -> None:
        self.db.add_all(rows)
        await self.db.commit()  # releases the savepoint only

    async def user(self, email: str | None = None, plan: Plan = Plan.FREE) -> User:
        self._n += 1
        now = self.clock.now()
        user = User(
            id=new_id("usr"),
            email=email or f"user{self._n}@example.com",
            name=f"User {self._n}",
            password_hash="not-a-hash",  # nobody logs in here
            plan=plan,
            created_at=now,
            updated_at=now,
        )
        await self._saved(user)
        return user

    async def project(self, owner: User, name: str = "Acme") -> ProjectRecord:
        now = self.clock.now()
        project = Project(id=new_id("prj"), name=name, created_at=now, updated_at=now)
        self.db.add(project)
        await self.db.flush()  # the project before the membership that points at it
        await self._saved(self._membership(project, owner, ProjectRole.OWNER))
        return PROJECT.of_entity(project)

    async def member(self, project: ProjectRecord, user: User, role: ProjectRole) -> ProjectMember:
        member = self._membership(project, user, role)
        await self._saved(member)
        return member

    def _membership(
        self, project: ProjectRecord | Project, user: User, role: ProjectRole
    ) -> ProjectMember:
        return ProjectMember(
            project_id=project.id, user_id=user.id, role=role, created_at=self.clock.now()
        )

    async def application(
        self, project: ProjectRecord, name: str = "Acme Android", bundle_id: str | None = None
    ) -> ApplicationRecord:
        now = self.clock.now()
        application = Application(
            id=new_id("app"),
            project_id=project.id,
            name=name,
            bundle_id=bundle_id,
            platform=Platform.OTHER,
            retention_keep_last=None,
            retention_keep_days=None,
            created_at=now,
            updated_at=now,
        )
        await self._saved(application)
        return APPLICATION.of_entity(application)

    async def build(
        self,
        application: ApplicationRecord,
        uploader: User,
        data: bytes = b"PK\x03\x04 a build",
        *,
        status: BuildStatus = BuildStatus.PENDING,
        file_name: str = "app-release.apk",
        expected_sha256: str | None = None,
        stored: bool = False,
    ) -> BuildRecord:
        """A build row (pending: its link given, not verified; ready: verified), and its bytes
        in the storage if `stored` (a ready build always has them)."""
        now = self.clock.now()
        build_id = new_id("bld")
        ready = status is BuildStatus.READY
        build = Build(
            id=build_id,
            project_id=application.project_id,
            application_id=application.id,
            file_name=file_name,
            file_size=len(data),
            expected_sha256=expected_sha256,
            sha256=hashlib.sha256(data).hexdigest() if ready else None,
            status=status,
            notes=None,
            storage_key=f"{application.project_id}/{application.id}/{build_id}",
            storage_version=None,
            uploaded_by=uploader.id,
            metadata_=None,
            metadata_error=None,
            has_icon=False,
            created_at=now,
            expires_at=now + timedelta(hours=1),
            verified_at=now if ready else None,
        )
        await self._saved(build)
        if stored or ready:
            await self.bytes(build.storage_key, data)
        return BUILD.of_entity(build)

    async def bytes(self, key: str, data: bytes) -> None:
        """`data` stored under `key`, as a finished upload leaves it."""

        async def body() -> AsyncIterator[bytes]:
            yield data

        await self.storage.receive(key, len(data), body())


@pytest.fixture
def given(db: AsyncSession, clock: FrozenClock, storage: LocalStorage) -> Given:
    return Given(db, clock, storage)
