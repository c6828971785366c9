"""Small charts drawn on the server as SVG: no script, no CDN, and the numbers stay readable
without the picture (each bar has a title, the chart a label)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from markupsafe import Markup, escape

WIDTH, HEIGHT, AXIS = 600, 120, 18
TOP = 16  # room for the label above the tallest bar


def downloads_chart(days: Sequence[tuple[date, int]]) -> Markup:
    """Bars of downloads per day, oldest on the left (for days with at least one download:
    the page says "No downloads yet" without a chart)."""
    total = sum(count for _, count in days)
    top = max((count for _, count in days), default=0) or 1
    step = WIDTH / max(len(days), 1)
    bar = max(step - 2, 1)
    label = f"Downloads per day from {days[0][0]:%d %b} to {days[-1][0]:%d %b}: {total} in all"
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT + AXIS}" '
        f'width="100%" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="0" y1="{HEIGHT}" x2="{WIDTH}" y2="{HEIGHT}" stroke="#8c959f" />',
    ]
    for n, (day, count) in enumerate(days):
        height = round((HEIGHT - TOP) * count / top, 1)
        x = round(n * step + 1, 1)
        parts.append(
            f'<rect x="{x}" y="{HEIGHT - height}" width="{round(bar, 1)}" height="{height}" '
            f'fill="#0969da"><title>{day:%d %b %Y}: {count} download'
            f"{'' if count == 1 else 's'}</title></rect>"
        )
    parts.append(
        f'<text x="0" y="{HEIGHT + AXIS - 4}" font-size="11" fill="#59636e">'
        f"{days[0][0]:%d %b}</text>"
        f'<text x="{WIDTH}" y="{HEIGHT + AXIS - 4}" font-size="11" fill="#59636e" '
        f'text-anchor="end">{days[-1][0]:%d %b}</text>'
        f'<text x="0" y="11" font-size="11" fill="#59636e">'
        f"{top} on the busiest day</text>"
    )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - built from numbers and dates only
