# Everything runs from a project-local virtual environment built from uv.lock; the only
# prerequisites are Python 3.11+, git and make. The installed packages are compiled to bytecode
# once, at install: with PYTHONDONTWRITEBYTECODE set, every process (each `buildbay` command,
# each server a test starts) would otherwise compile every module it imports, each time.
PYTHON ?= python3
VENV := .venv
UV_VERSION := 0.13.9
UV := .uv/bin/uv
SYNCED := $(VENV)/.synced-$(shell cat uv.lock pyproject.toml client/pyproject.toml 2>/dev/null | cksum | cut -d' ' -f1)
export UV_PROJECT_ENVIRONMENT := $(VENV)
export UV_PYTHON_DOWNLOADS := never

.PHONY: run test lint format bench load clean

run: $(SYNCED) ## Run Buildbay on the embedded default (SQLite + files under ./data)
	$(VENV)/bin/buildbay serve

# The suite runs in WORKERS processes (pytest-xdist; each has its own databases, see
# tests/conftest.py). Most of its time is spent waiting on server processes, browsers and
# sockets, so more workers than cores pays; WORKERS=0 runs it in this one process.
WORKERS ?= 4

test: $(SYNCED) ## Run the whole test suite in parallel (WORKERS=N; extra pytest arguments: ARGS=...)
	$(VENV)/bin/pytest -n $(WORKERS) --dist loadgroup $(ARGS)

lint: $(SYNCED) ## ruff (lint + format check) and mypy --strict
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(SYNCED)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(SYNCED) ## Benchmarks (print ratios against a baseline measured in the same run)
	$(VENV)/bin/python bench/upload.py
	$(VENV)/bin/python bench/api.py
	$(VENV)/bin/python bench/cli_upload.py

load: $(SYNCED) ## Load tests (docs/performance.md): reads and uploads, SQLite then PostgreSQL + Redis; then with feedback beside them
	$(VENV)/bin/python bench/load.py
	$(VENV)/bin/python bench/feedback.py

$(UV):
	$(PYTHON) -m venv .uv
	.uv/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(SYNCED): uv.lock pyproject.toml client/pyproject.toml | $(UV)
	$(UV) sync --locked --compile-bytecode --python $(PYTHON)
	rm -f $(VENV)/.synced-*
	touch $@

clean:
	rm -rf .uv $(VENV) .venv-lowest .pytest_cache .mypy_cache .ruff_cache
