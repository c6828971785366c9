"""Migration 0032 widens `applications.feedback_mode` (0031 made it VARCHAR(20), too short for
`anyone-with-update-key`, which PostgreSQL refused) in place: every application keeps its mode,
and its builds (which a rebuilt table's drop would have cascaded to) stay."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from buildbay.db import migrate
from buildbay.db.engine import create_engine

NOW = "2026-11-27 12:00:00.000000"


async def test_the_upgrade_keeps_each_application_s_mode_and_its_builds(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+inline:///{tmp_path / 'modes.db'}")
    await migrate.upgrade(engine, "0031")
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO projects (id, name, created_at, updated_at)"
                " VALUES ('prj_1', 'P', :now, :now)"
            ),
            {"now": NOW},
        )
        for app, mode in (("app_open", "anyone-with-update-key"), ("app_closed", None)):
            await connection.execute(
                text(
                    "INSERT INTO applications (id, project_id, name, platform,"
                    " auto_distribute_groups, created_at, updated_at)"
                    " VALUES (:id, 'prj_1', :id, 'other', '[]', :now, :now)"
                ),
                {"id": app, "now": NOW},
            )
            if mode is not None:  # SQLite took the long value 0031 could not hold elsewhere
                await connection.execute(
                    text("UPDATE applications SET feedback_mode = :mode WHERE id = :id"),
                    {"mode": mode, "id": app},
                )
        await connection.execute(
            text(
                "INSERT INTO builds (id, project_id, application_id, file_name, file_size,"
                " status, storage_key, created_at, expires_at)"
                " VALUES ('bld_1', 'prj_1', 'app_open', 'a.apk', 1, 'ready', 'k', :now, :now)"
            ),
            {"now": NOW},
        )

    await migrate.upgrade(engine)

    async with engine.connect() as connection:
        modes = dict(
            (await connection.execute(text("SELECT id, feedback_mode FROM applications"))).all()
        )
        builds = (await connection.execute(text("SELECT id FROM builds"))).scalars().all()
    assert modes == {"app_open": "anyone-with-update-key", "app_closed": "testers-only"}
    assert builds == ["bld_1"]
    await engine.dispose()
