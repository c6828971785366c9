"""What a mail says: plain text and the same in HTML (escaped, no remote images), English,
short, the action link on a line of its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

_templates = Environment(
    loader=PackageLoader("buildbay", "templates/mail"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)

ONE_CLICK = "List-Unsubscribe=One-Click"


@dataclass(frozen=True, slots=True)
class Mail:
    to: str
    subject: str
    text: str
    html: str
    headers: dict[str, str] = field(default_factory=dict)  # besides From, To, Subject, ...


def render(template: str, to: str, subject: str, **context: Any) -> Mail:
    """`templates/mail/<template>.txt` and `.html` for one recipient."""
    values = {"subject": subject, **context}
    return Mail(
        to=to,
        subject=subject,
        text=_templates.get_template(f"{template}.txt").render(values),
        html=_templates.get_template(f"{template}.html").render(values),
    )


def notification(
    template: str, to: str, subject: str, unsubscribe_url: str, **context: Any
) -> Mail:
    """A mail the recipient did not ask for (a new build): it carries a one-click unsubscribe
    link (RFC 8058), in its headers for the mail client and at its foot for the reader."""
    mail = render(template, to, subject, unsubscribe_url=unsubscribe_url, **context)
    mail.headers.update(
        {"List-Unsubscribe": f"<{unsubscribe_url}>", "List-Unsubscribe-Post": ONE_CLICK}
    )
    return mail
