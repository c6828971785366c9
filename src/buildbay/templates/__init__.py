"""Jinja2 templates of the HTML the service serves: the install pages and the web console."""

from __future__ import annotations

from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

environment = Environment(
    loader=PackageLoader("buildbay", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)

# Install pages carry their credential in the URL: it never leaves in a Referer.
NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
# Console pages: the console's CSRF check needs the browser to name the form's origin, which
# "no-referrer" would blank out ("Origin: null").
CONSOLE = {"Cache-Control": "no-store", "Referrer-Policy": "same-origin"}


def render(
    template: str, status_code: int = 200, /, *, headers: dict[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:  # fmt: skip
    page = environment.get_template(template).render(**context)
    return HTMLResponse(page, status_code=status_code, headers=headers or NO_STORE)
