"""Buildbay uses its libraries through their public API only. A private name (a leading
underscore) or an internal module of a library may appear in one module alone, the inline SQLite
driver, whose dependency is pinned to the range its tests run on (CI runs them on the lowest and
the highest version of that range). Any other such use fails here, with where it is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "buildbay"
CLIENT = ROOT / "client" / "src" / "buildbay_client"
# The one module allowed to reach into a library, and why: see its docstring.
ALLOWED = {SRC / "db" / "sqlite_inline.py"}
# Modules that are internal although no part of their name starts with an underscore.
INTERNAL_MODULES = (
    "sqlalchemy.connectors",
    "sqlalchemy.util",
    "sqlalchemy.sql.compiler",
    "sqlalchemy.engine.default",
    "fastapi.dependencies",
    "starlette.middleware.exceptions",
    "pydantic.v1",
)
# Modules whose documented names are few: any other name from them is internal. FastAPI
# documents APIRouter and the APIRoute subclass hook (fastapi.tiangolo.com, "Custom Request and
# APIRoute class"); the rest of fastapi.routing (request_response, get_request_handler, ...)
# is its machinery.
DOCUMENTED_ONLY = {"fastapi.routing": {"APIRoute", "APIRouter"}}
FIRST_PARTY = ("buildbay", "buildbay_client")
# Names that start with an underscore and are documented public API all the same: `os._exit`
# (docs.python.org/3/library/os.html#os._exit), what a child process calls to end at once.
DOCUMENTED_UNDERSCORED = {("os", "_exit")}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _third_party(module: str) -> bool:
    return module.split(".")[0] not in FIRST_PARTY


def private_uses(path: Path) -> list[str]:
    """Each import of a library's private or internal name, and each `x._attribute` reached on
    something other than `self` or `cls`, in the module at `path`."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not _third_party(node.module):
                continue
            names = [node.module, *(alias.name for alias in node.names)]
            documented = DOCUMENTED_ONLY.get(node.module)
            if (
                any(_private(part) for name in names for part in name.split("."))
                or node.module.startswith(INTERNAL_MODULES)
                or (documented is not None and not {a.name for a in node.names} <= documented)
            ):
                found.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name) and (
                    any(_private(part) for part in alias.name.split("."))
                    or alias.name.startswith(INTERNAL_MODULES)
                ):
                    found.append(f"{path.name}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            named = owner.id if isinstance(owner, ast.Name) else None
            if named not in ("self", "cls") and (named, node.attr) not in DOCUMENTED_UNDERSCORED:
                found.append(f"{path.name}:{node.lineno}: ._{node.attr.lstrip('_')}")
    return found


def test_no_module_of_server_or_client_but_the_inline_driver_uses_a_private_name() -> None:
    modules = sorted([*SRC.rglob("*.py"), *CLIENT.rglob("*.py")])
    assert len(modules) > 50
    offenders = [use for path in modules if path not in ALLOWED for use in private_uses(path)]
    assert offenders == []


def test_the_inline_driver_is_the_one_allowed_exception_and_still_needs_it() -> None:
    """If the driver stops needing a private name, it leaves the allow-list (and its pin)."""
    for path in ALLOWED:
        assert private_uses(path), f"{path.name} no longer needs its exception"


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from sqlalchemy.util import await_", True),
        ("from starlette._utils import is_async_callable", True),
        ("import pydantic._internal._model_construction", True),
        ("x = connection._connection", True),
        ("from fastapi.routing import get_request_handler", True),
        ("from fastapi.routing import APIRoute, request_response", True),
        ("from fastapi.routing import APIRoute", False),
        ("from sqlalchemy import select", False),
        ("from buildbay._private import thing", False),
        ("x = self._cache", False),
        ("x = Project.__table__", False),
    ],
)
def test_the_check_catches_what_it_should(tmp_path: Path, source: str, caught: bool) -> None:
    module = tmp_path / "probe.py"
    module.write_text(source + "\n")
    assert bool(private_uses(module)) is caught
