"""The migrations are the schema: they must build exactly what the models describe."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from buildbay.db import migrate
from buildbay.db.engine import create_engine
from buildbay.db.models import Base


async def test_migrations_build_exactly_the_models(database_url: str) -> None:
    engine = create_engine(database_url)

    def diff(connection: Connection) -> list[object]:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    async with engine.connect() as connection:
        assert await connection.run_sync(diff) == []
    await engine.dispose()


async def test_downgrade_removes_everything_and_upgrade_restores_it(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+inline:///{tmp_path / 'roundtrip.db'}")
    await migrate.upgrade(engine)

    def tables(connection: Connection) -> set[str]:
        return set(inspect(connection).get_table_names()) - {"alembic_version"}

    def downgrade(connection: Connection) -> None:
        command.downgrade(migrate.alembic_config(connection), "base")

    async with engine.begin() as connection:
        assert await connection.run_sync(tables) == set(Base.metadata.tables)
        await connection.run_sync(downgrade)
        assert await connection.run_sync(tables) == set()
    await migrate.upgrade(engine)
    async with engine.connect() as connection:
        assert await connection.run_sync(tables) == set(Base.metadata.tables)
    await engine.dispose()


async def test_webhook_jobs_pending_at_the_upgrade_join_their_endpoints_lane(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+inline:///{tmp_path / 'lanes.db'}")
    await migrate.upgrade(engine, "0013")
    now = "2026-11-27 12:00:00.000000"
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO projects (id, name, created_at, updated_at)"
                " VALUES ('prj_1', 'P', :now, :now)"
            ),
            {"now": now},
        )
        await connection.execute(
            text(
                "INSERT INTO webhooks (id, project_id, url, description, events, enabled,"
                " secret, created_at) VALUES ('whk_1', 'prj_1', 'https://x.example', '',"
                " '[]', 1, 'whsec_x', :now)"
            ),
            {"now": now},
        )
        for job, status in (("job_pending", "pending"), ("job_done", "done")):
            await connection.execute(
                text(
                    "INSERT INTO jobs (id, kind, payload, status, attempts, run_after,"
                    " created_at) VALUES (:id, 'webhook', '{}', :status, 0, :now, :now)"
                ),
                {"id": job, "status": status, "now": now},
            )
            await connection.execute(
                text(
                    "INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type,"
                    " payload, status, attempts, step, job_id, created_at) VALUES"
                    " (:id, 'whk_1', 'msg_1', 'build.ready', '{}', 'pending', 0, 0, :job, :now)"
                ),
                {"id": f"whd_{job}", "job": job, "now": now},
            )
        await connection.execute(
            text(
                "INSERT INTO jobs (id, kind, payload, status, attempts, run_after, created_at)"
                " VALUES ('job_mail', 'mail', '{}', 'pending', 0, :now, :now)"
            ),
            {"now": now},
        )
    await migrate.upgrade(engine)
    async with engine.connect() as connection:
        rows = await connection.execute(text("SELECT id, lane FROM jobs"))
        lanes = {row.id: row.lane for row in rows}
    assert lanes == {"job_pending": "whk_1", "job_done": None, "job_mail": None}
    await engine.dispose()


async def test_accounts_that_followed_a_mailed_link_start_verified(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+inline:///{tmp_path / 'verified.db'}")
    await migrate.upgrade(engine, "0014")
    early, late = "2026-11-01 09:00:00.000000", "2026-11-20 09:00:00.000000"
    async with engine.begin() as connection:
        for user in ("usr_reset", "usr_invited", "usr_both", "usr_none"):
            await connection.execute(
                text(
                    "INSERT INTO users (id, email, name, password_hash, plan, created_at,"
                    " updated_at) VALUES (:id, :email, 'N', '-', 'free', :at, :at)"
                ),
                {"id": user, "email": f"{user}@example.com", "at": early},
            )
        await connection.execute(
            text(
                "INSERT INTO projects (id, name, created_at, updated_at)"
                " VALUES ('prj_1', 'P', :at, :at)"
            ),
            {"at": early},
        )
        resets = [("usr_reset", late), ("usr_both", late), ("usr_none", None)]
        for n, (user, used) in enumerate(resets):
            await connection.execute(
                text(
                    "INSERT INTO password_resets (id, user_id, token_hash, created_at, expires_at,"
                    " used_at) VALUES (:id, :user, :hash, :at, :at, :used)"
                ),
                {"id": f"prs_{n}", "user": user, "hash": f"h{n}", "at": early, "used": used},
            )
        invitations = [("usr_invited", late), ("usr_both", early), ("usr_none", None)]
        for n, (user, accepted) in enumerate(invitations):
            await connection.execute(
                text(
                    "INSERT INTO invitations (id, project_id, email, role, token_hash, created_at,"
                    " expires_at, accepted_at) VALUES (:id, 'prj_1', :email, 'tester', :hash,"
                    " :at, :at, :accepted)"
                ),
                {
                    "id": f"inv_{n}",
                    "email": f"{user}@example.com",
                    "hash": f"i{n}",
                    "at": early,
                    "accepted": accepted,
                },
            )
    await migrate.upgrade(engine)
    async with engine.connect() as connection:
        rows = await connection.execute(text("SELECT id, email_verified_at FROM users"))
        verified = {row.id: row.email_verified_at for row in rows}
    # Verified as of the first proof; an unused link or a pending invitation proves nothing.
    assert verified == {"usr_reset": late, "usr_invited": late, "usr_both": early, "usr_none": None}
    await engine.dispose()
