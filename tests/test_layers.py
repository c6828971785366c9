"""The layers read one way: the domain (models, reads, services, rules, storage, schemas) never
imports the web (FastAPI, the route dependencies, the routes, the console), domain errors import
neither FastAPI nor SQLAlchemy, storage and the schemas reach neither the web nor the database
(SQLAlchemy, the ORM's models), only the web side takes the app's context (the domain is handed
what it needs), the console makes services as the API does rather than through its routes, and
no module imports itself back through others.

Imports are read from the source (module level, those under `if TYPE_CHECKING:` included: a type
one module names is a dependency on the module that defines it, even if only the type checker
follows it), so a violation is named with its file and line before anything runs."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "buildbay"

WEB_LIBRARIES = ("fastapi", "starlette")
# The web side of the server: what turns HTTP into calls of the domain and back.
WEB_MODULES = (
    "buildbay.app",
    "buildbay.deps",
    "buildbay.problems",
    "buildbay.middleware",
    "buildbay.openapi",
    "buildbay.api_docs",
    "buildbay.health",
    "buildbay.security_headers",
    "buildbay.console",
    "buildbay.templates",
    "buildbay.projects.access",
)
# A domain with more than one set of routes names the others `<what>_routes`
# (devices/project_routes.py).
WEB_SUFFIXES = (".routes", "_routes", ".dependencies", ".install_page")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_web(module: str) -> bool:
    if module.split(".")[0] in WEB_LIBRARIES:
        return True
    if any(module == web or module.startswith(web + ".") for web in WEB_MODULES):
        return True
    return module.endswith(WEB_SUFFIXES)


def imports(module: str) -> Iterator[tuple[int, str]]:
    """(line, module) of each module-level import of `module`: those that run when it is imported,
    and those only the type checker reads (`if TYPE_CHECKING:`)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_in(path.read_text(encoding="utf-8"), package)


def _imports_in(source: str, package: str) -> Iterator[tuple[int, str]]:
    def walk(nodes: list[ast.stmt]) -> Iterator[tuple[int, str]]:
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield node.lineno, alias.name
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                yield node.lineno, base
                for alias in node.names:  # `from buildbay.x import y`, y a module
                    if f"{base}.{alias.name}" in MODULES:
                        yield node.lineno, f"{base}.{alias.name}"
            elif isinstance(node, ast.If):  # `if TYPE_CHECKING:` included
                yield from walk(node.body)
                yield from walk(node.orelse)
            elif isinstance(node, ast.Try):
                yield from walk(node.body)

    yield from walk(ast.parse(source).body)


def _first_party(module: str) -> str | None:
    """The module of ours that `module` names (a module, or a package's __init__)."""
    while module:
        if module in MODULES:
            return module
        module = module.rpartition(".")[0]
    return None


DOMAIN = sorted(
    m for m in MODULES if not _is_web(m) and m not in ("buildbay.cli", "buildbay.__main__")
)


@pytest.mark.parametrize("module", DOMAIN)
def test_the_domain_never_imports_the_web(module: str) -> None:
    web = [
        f"{MODULES[module].name}:{line}: {name}" for line, name in imports(module) if _is_web(name)
    ]
    assert web == [], f"{module} imports the web side"


def test_only_the_web_side_takes_the_app_context() -> None:
    """Services, reads, rules and jobs take what they need (a session, the clock, a setting, the
    storage); each domain's dependencies.py makes them from the app's context."""
    takers = [
        f"{m}:{line}" for m in DOMAIN for line, name in imports(m) if name == "buildbay.context"
    ]
    assert takers == [], "the context is taken by: " + ", ".join(takers)


def test_the_console_calls_the_services_not_the_routes() -> None:
    """The console makes its services as the API does (the domains' dependencies.py), and takes
    nothing of the API's routes."""
    console = [m for m in MODULES if m.startswith("buildbay.console")]
    routes = [
        f"{m}:{line}: {name}"
        for m in console
        for line, name in imports(m)
        if name.endswith(".routes") and not name.startswith("buildbay.console")
    ]
    assert routes == [], "the console imports routes: " + ", ".join(routes)


def test_domain_errors_import_neither_fastapi_nor_sqlalchemy() -> None:
    libraries = {name.split(".")[0] for _, name in imports("buildbay.errors")}
    assert not libraries & {"fastapi", "starlette", "sqlalchemy"}


# What must stand without the web and the database: the storage backends, and the API's schemas
# with the plain values they name (the areas' enums).
PLAIN = sorted(
    m
    for m in MODULES
    if m.startswith("buildbay.storage")
    or m == "buildbay.schemas"
    or m.endswith((".schemas", "_schemas", ".enums"))
)
DATABASE_LIBRARIES = ("sqlalchemy", "alembic", "asyncpg", "aiosqlite")


def _reaches(module: str) -> dict[str, list[str]]:
    """Every module `module` imports when it is imported, ours followed through, each with the
    chain of imports that reaches it."""
    chains: dict[str, list[str]] = {module: [module]}
    todo = [module]
    while todo:
        current = todo.pop()
        for _, name in imports(current):
            found = _first_party(name) or name
            if found not in chains:
                chains[found] = [*chains[current], found]
                if found in MODULES:
                    todo.append(found)
    return chains


def _web_or_database(module: str) -> bool:
    return (
        _is_web(module)
        or module.split(".")[0] in DATABASE_LIBRARIES
        or module.endswith((".models", ".reads"))
        or module.startswith("buildbay.db")
    )


@pytest.mark.parametrize("module", PLAIN)
def test_storage_and_schemas_reach_neither_the_web_nor_the_database(module: str) -> None:
    reached = [
        " -> ".join(chain) for name, chain in _reaches(module).items() if _web_or_database(name)
    ]
    assert reached == [], f"{module} reaches: " + "; ".join(reached)


def test_no_module_imports_itself_back() -> None:
    graph = {
        module: {found for _, name in imports(module) if (found := _first_party(name))} - {module}
        for module in MODULES
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    # A package's __init__ importing its own modules is how packages work, not a cycle.
    real = [c for c in cycles if not all(m.startswith(c[0]) or c[0].startswith(m) for m in c)]
    assert real == [], " ; ".join(" -> ".join(cycle) for cycle in real)


def test_the_checks_see_a_violation() -> None:
    """The rules above would notice: a module of the web side is recognised as such, and this
    reader finds a module's imports (here, routes importing FastAPI), those under
    `if TYPE_CHECKING:` too."""
    assert _is_web("buildbay.builds.routes")
    assert _is_web("fastapi.routing")
    assert not _is_web("buildbay.builds.service")
    assert any(name == "fastapi" for _, name in imports("buildbay.builds.routes"))
    typed_only = "if TYPE_CHECKING:\n    from ..context import AppContext\n"
    assert (2, "buildbay.context") in _imports_in(typed_only, "buildbay.builds")
    assert "buildbay.builds.schemas" in PLAIN
    assert "buildbay.storage.local" in PLAIN
    assert _web_or_database("sqlalchemy.orm")
    assert _web_or_database("buildbay.builds.models")
    assert "sqlalchemy" in _reaches("buildbay.builds.models")
