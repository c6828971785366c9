"""The migrations are the schema: they must build exactly what the models describe."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

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


async def test_links_of_recipients_become_their_own_and_rows_no_group_explains_stay_direct(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+inline:///{tmp_path / 'owners.db'}")
    await migrate.upgrade(engine, "0014")
    now = "2026-11-27 12:00:00.000000"
    rows: list[tuple[str, list[dict[str, object]]]] = [
        ("INSERT INTO projects (id, name, created_at, updated_at)"
         " VALUES ('prj_1', 'P', :now, :now)", [{}]),
        ("INSERT INTO applications (id, project_id, name, platform, auto_distribute_groups,"
         " created_at, updated_at) VALUES ('app_1', 'prj_1', 'A', 'android', '[]', :now, :now)",
         [{}]),
        ("INSERT INTO tester_groups (id, project_id, name, created_at)"
         " VALUES ('grp_qa', 'prj_1', 'QA', :now)", [{}]),
        ("INSERT INTO users (id, email, name, password_hash, plan, created_at, updated_at)"
         " VALUES (:id, :email, :id, 'x', 'free', :now, :now)",
         [{"id": f"usr_{p}", "email": f"{p}@example.com"} for p in "abc"]),
        ("INSERT INTO group_testers (group_id, user_id, added_at)"
         " VALUES ('grp_qa', 'usr_a', :now)", [{}]),
        ("INSERT INTO builds (id, project_id, application_id, file_name, file_size, status,"
         " storage_key, created_at, expires_at)"
         " VALUES (:id, 'prj_1', 'app_1', 'a.apk', 1, 'ready', :id, :now, :now)",
         [{"id": "bld_qa"}, {"id": "bld_all"}]),
        ("INSERT INTO build_groups (build_id, group_id) VALUES (:build, :group)",
         [{"build": "bld_qa", "group": "grp_qa"}, {"build": "bld_all", "group": "everyone"}]),
        ("INSERT INTO install_links (id, build_id, created_at, expires_at)"
         " VALUES (:id, :build, :now, :now)",
         [{"id": link, "build": b}
          for link, b in (("inl_a", "bld_qa"), ("inl_b", "bld_qa"), ("inl_c", "bld_all"),
                          ("inl_shared", "bld_qa"))]),
        ("INSERT INTO build_recipients (build_id, email, user_id, reached_at, notify,"
         " install_link_id) VALUES (:build, :email, :user, :now, 1, :link)",
         [{"build": b, "email": f"{p}@example.com", "user": f"usr_{p}", "link": f"inl_{p}"}
          for b, p in (("bld_qa", "a"), ("bld_qa", "b"), ("bld_all", "c"))]),
        ("INSERT INTO install_events (id, build_id, application_id, kind, install_link_id,"
         " platform, at) VALUES ('ins_1', 'bld_qa', 'app_1', 'open', 'inl_a', 'ios', :now)",
         [{}]),
    ]  # fmt: skip
    async with engine.begin() as connection:
        for statement, values in rows:
            await connection.execute(text(statement), [v | {"now": now} for v in values])

    await migrate.upgrade(engine)

    async with engine.connect() as connection:
        owners = dict(
            (await connection.execute(text("SELECT id, owner_id FROM install_links"))).all()
        )
        direct = {
            (row.build_id, row.user_id): bool(row.direct)
            for row in await connection.execute(
                text("SELECT build_id, user_id, direct FROM build_recipients")
            )
        }
    assert owners == {"inl_a": "usr_a", "inl_b": "usr_b", "inl_c": "usr_c", "inl_shared": None}
    assert await _link_pointers(engine) == POINTERS
    # Her group explains Ann's row; Bob's (in no group of the build) was an e-mail's, or the
    # trace of a group he left: kept visible, as before the upgrade.
    assert direct == {
        ("bld_qa", "usr_a"): False,
        ("bld_qa", "usr_b"): True,
        ("bld_all", "usr_c"): False,
    }

    # Down again: the links' rows copied without the column, and nothing that pointed at them
    # lost (SQLite's copy of a table drops the old one, which sets its references to NULL).
    def downgrade(connection: Connection) -> None:
        command.downgrade(migrate.alembic_config(connection), "0014")

    async with engine.begin() as connection:
        await connection.run_sync(downgrade)
    assert await _link_pointers(engine) == POINTERS
    await engine.dispose()


POINTERS = {
    ("bld_qa", "a@example.com"): "inl_a",
    ("bld_qa", "b@example.com"): "inl_b",
    ("bld_all", "c@example.com"): "inl_c",
    ("ins_1",): "inl_a",
}


async def _link_pointers(engine: AsyncEngine) -> dict[tuple[str, ...], str]:
    async with engine.connect() as connection:
        recipients = await connection.execute(
            text("SELECT build_id, email, install_link_id FROM build_recipients")
        )
        events = await connection.execute(text("SELECT id, install_link_id FROM install_events"))
        return {tuple(row[:-1]): row[-1] for row in [*recipients, *events]}


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
