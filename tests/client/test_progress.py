"""The upload's progress bar on a terminal: plain text, whatever the file is called."""

from __future__ import annotations

import io

from rich.console import Console

from buildbay_client.cli import progress_bar


def test_the_bar_shows_its_text_and_never_markup() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, markup=False, width=120)
    with progress_bar(console) as bar:
        task = bar.add_task("Uploading [bold]app[/bold].apk", total=1024)
        bar.update(task, completed=512)
        bar.refresh()
    shown = screen.getvalue()
    assert "Uploading [bold]app[/bold].apk" in shown  # the name as it is
    assert "[progress.description]" not in shown
    assert "512 bytes/1.0 KiB" in shown or "0.5/1.0 KiB" in shown, shown
