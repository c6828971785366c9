"""BUILDBAY_DATABASE_URL as other tools write it: a scheme without a driver runs on Buildbay's."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildbay.config import ConfigurationError, Settings
from tests.conftest import TEST_SECRET


@pytest.mark.parametrize(
    ("given", "used"),
    [
        (
            "postgres://ci@db.example.com/buildbay",
            "postgresql+asyncpg://ci@db.example.com/buildbay",
        ),
        ("postgresql://ci:pw@db:5432/buildbay", "postgresql+asyncpg://ci:pw@db:5432/buildbay"),
        ("POSTGRESQL://ci@db/buildbay", "postgresql+asyncpg://ci@db/buildbay"),
        ("postgresql+asyncpg://ci@db/buildbay", "postgresql+asyncpg://ci@db/buildbay"),
        ("sqlite:////var/lib/buildbay/b.sqlite3", "sqlite+inline:////var/lib/buildbay/b.sqlite3"),
        ("sqlite+aiosqlite:///b.sqlite3", "sqlite+aiosqlite:///b.sqlite3"),
    ],
)
def test_a_database_url_without_a_driver_runs_on_buildbays(
    tmp_path: Path, given: str, used: str
) -> None:
    settings = Settings(data_dir=tmp_path, secret_key=TEST_SECRET, database_url=given)  # type: ignore[arg-type]
    assert settings.resolved_database_url == used


@pytest.mark.parametrize(
    "given",
    ["mysql://ci@db/buildbay", "postgresql+psycopg2://ci@db/buildbay", "/var/lib/b.sqlite3"],
)
def test_a_database_buildbay_cannot_run_on_is_refused_in_one_sentence(
    tmp_path: Path, given: str
) -> None:
    with pytest.raises(ConfigurationError, match=r"must be a PostgreSQL URL, e\.g\. postgresql://"):
        Settings(data_dir=tmp_path, secret_key=TEST_SECRET, database_url=given)  # type: ignore[arg-type]


def test_an_empty_database_url_is_the_embedded_default(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, secret_key=TEST_SECRET, database_url="")
    assert settings.resolved_database_url.startswith("sqlite+inline:///")
