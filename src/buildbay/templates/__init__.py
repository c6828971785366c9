"""Jinja2 templates of the HTML the service serves: the install pages and the web console."""

from __future__ import annotations

from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from buildbay.devices.words import noun, nouns
from buildbay.text import without_bidi_controls
from buildbay.words import counted, platform_word, role_in_sentence, role_word

environment = Environment(
    loader=PackageLoader("buildbay", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
# Words for people, one place for every page: `role | role_word`, `n | counted("build")`.
environment.filters.update(
    role_word=role_word, role_in_sentence=role_in_sentence, platform_word=platform_word,
    counted=counted, device_noun=noun, device_nouns=nouns,
    # What a device or its tester says of itself, shown as it is but for bidirectional
    # controls, which would make the text after it read backwards.
    plain=without_bidi_controls,
)  # fmt: skip

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
