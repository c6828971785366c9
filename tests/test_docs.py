"""The guides stay true: the operations guide documents every setting the server reads, and the
API guide every operation of the OpenAPI document (in its table and a section of its own) and
every problem `code` the server answers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from buildbay.app import create_app
from buildbay.config import Settings

OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def test_every_setting_is_in_the_operations_guide() -> None:
    guide = OPERATIONS.read_text()
    missing = [name.upper() for name in Settings.model_fields if f"`{name.upper()}`" not in guide]
    assert missing == []


API_GUIDE = Path(__file__).resolve().parent.parent / "docs" / "api.md"
SRC = Path(__file__).resolve().parent.parent / "src" / "buildbay"
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")


@pytest.fixture(scope="module")
def operations(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str]]:
    """(method, path) of every operation of the OpenAPI document under /api."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), secret_key="k" * 40)  # type: ignore[arg-type]
    app = create_app(settings)
    return {
        (method.upper(), path)
        for path, item in app.openapi()["paths"].items()
        if path.startswith("/api/")
        for method in item
    }


def _documented(pattern: str) -> set[tuple[str, str]]:
    """(method, /api path) named by the lines of docs/api.md that `pattern` finds: each match's
    first group is the method, its second the text that names the paths."""
    found = set()
    for method, text in re.findall(pattern, API_GUIDE.read_text(), flags=re.MULTILINE):
        for path in re.findall(r"(/api/[^\s`|,]+)", text):
            found.add((method, path))
    return found


def test_every_api_operation_is_in_the_endpoint_table_and_nothing_else_is(
    operations: set[tuple[str, str]],
) -> None:
    table = _documented(rf"^\| ({'|'.join(METHODS)}) \| (.*?) \|")
    assert sorted(operations - table) == [], "in the API, missing from docs/api.md's table"
    assert sorted(table - operations) == [], "in docs/api.md's table, not in the API"


def test_every_api_operation_has_a_section_of_its_own_and_nothing_else_does(
    operations: set[tuple[str, str]],
) -> None:
    # `#### GET /api/project/{id} and GET /api/projects/{id}`: one section for two operations.
    sections = set()
    for heading in re.findall(r"^#{4,5} (.+)$", API_GUIDE.read_text(), flags=re.MULTILINE):
        for method, path in re.findall(rf"\b({'|'.join(METHODS)}) (/api/\S+)", heading):
            sections.add((method, path))
    assert sorted(operations - sections) == [], "in the API, without a section in docs/api.md"
    assert sorted(sections - operations) == [], "a section of docs/api.md, not in the API"


def test_every_problem_code_the_server_answers_is_in_the_guide() -> None:
    guide = API_GUIDE.read_text()
    listed = guide[guide.index("### Every `code`") : guide.index("## Endpoints")]
    codes = set()
    for source in SRC.rglob("*.py"):
        codes.update(re.findall(r"\bcode(?:: str)? ?= ?\"([a-z_]+)\"", source.read_text()))
    assert len(codes) > 50, "the pattern no longer finds the codes"
    missing = sorted(code for code in codes if f"`{code}`" not in listed)
    assert missing == [], "codes the server answers, not in docs/api.md's `Every code` table"
