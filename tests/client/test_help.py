"""`--help` of every `buildbay` command (the server's, joined through its entry point, too), as a
person reads it on an 80-column terminal: nothing wider, no option name cut short, every
subcommand listed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from buildbay_client.cli import command

WIDTH = 80


def _commands(found: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, found
    if isinstance(found, TyperGroup):
        for name, sub in found.commands.items():
            yield from _commands(sub, (*path, name))


APP = command()
EVERY = dict(_commands(typer.main.get_command(APP)))


def test_every_command_is_walked() -> None:
    # The walk reaches the subcommands of groups, the server's included.
    assert {("upload",), ("builds", "list"), ("webhooks", "list"), ("db", "upgrade")} <= set(EVERY)


@pytest.mark.parametrize("path", sorted(EVERY), ids=lambda path: " ".join(path) or "buildbay")
def test_help_fits_80_columns_with_every_option_whole(path: tuple[str, ...]) -> None:
    done = CliRunner().invoke(
        APP, [*path, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)}
    )

    assert done.exit_code == 0, done.output
    text = done.stdout
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert wide == [], f"lines wider than {WIDTH} columns:\n" + "\n".join(wide)
    assert "…" not in text  # rich's mark of a cell cut short
    cut = re.findall(r"--[a-z][\w-]*-\n", text)  # an option named in a sentence, wrapped
    assert cut == [], f"option names cut at a line's end: {cut}"
    found = EVERY[path]
    for param in found.params:
        if not isinstance(param, TyperOption) or param.hidden:
            continue
        for name in [*param.opts, *param.secondary_opts]:
            whole = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
            assert whole.search(text), f"{name} is not shown whole in:\n{text}"
    for name, sub in getattr(found, "commands", {}).items():
        if not sub.hidden:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (name, text)
