"""Secrets the console shows once (a new API token, a webhook's signing secret) on the page its
form redirects to. A form that answered its POST with the secret could be sent again by a
reload, making a second token or webhook (issue 36): every form redirects, and the page it leads
to shows the secret from here, once.

The secret is kept split between the database and the browser, for the few minutes before the
page shows it: the row (auth/models.py `SecretShownOnce`, tied to the login) holds the secret
XORed with a random pad of its length, the pad is in an HttpOnly cookie. Neither tells anything
alone (a one-time pad), nothing of the secret rests on the browser's disk, and showing it
deletes the row, so a second look, a reload or a copied cookie finds nothing."""

from __future__ import annotations

import base64
import binascii
import secrets
from datetime import datetime, timedelta
from enum import StrEnum

from fastapi import Request
from sqlalchemy import delete, or_
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import SecretShownOnce
from buildbay.console.session import ConsoleSessions, Visitor
from buildbay.ids import new_id

# Long enough to follow a redirect on a slow phone; a page opened later shows no secret.
SHOWN_WITHIN = timedelta(minutes=10)
MAX_SECRET_BYTES = 255  # the row's column holds its hex


class Shown(StrEnum):
    API_TOKEN = "api_token"
    WEBHOOK = "webhook"
    JOIN_LINK = "join_link"


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


async def keep(
    sessions: ConsoleSessions, visitor: Visitor, db: AsyncSession, now: datetime,
    kind: Shown, subject_id: str, secret: str,
) -> None:  # fmt: skip
    """Keep `secret` for the next page of this visitor's login that shows `kind` `subject_id`.
    The visitor's earlier one, if any, is dropped, as are any rows past their time."""
    assert visitor.session_id is not None
    data = secret.encode()
    assert len(data) <= MAX_SECRET_BYTES
    pad = secrets.token_bytes(len(data))
    await db.execute(
        delete(SecretShownOnce).where(
            or_(
                SecretShownOnce.session_id == visitor.session_id,
                SecretShownOnce.created_at <= now - SHOWN_WITHIN,
            )
        )
    )
    row = SecretShownOnce(
        id=new_id("sso"),
        session_id=visitor.session_id,
        kind=kind.value,
        subject_id=subject_id,
        sealed=_xor(data, pad).hex(),
        created_at=now,
    )
    db.add(row)
    await db.flush()
    pad_text = base64.urlsafe_b64encode(pad).rstrip(b"=").decode()
    seconds = int(SHOWN_WITHIN.total_seconds())
    visitor.cookies[sessions.shown_once_cookie] = (f"{row.id}.{pad_text}", seconds)


async def take(
    request: Request, sessions: ConsoleSessions, visitor: Visitor, db: AsyncSession,
    now: datetime, kind: Shown, subject_id: str | None = None,
) -> tuple[str, str] | None:  # fmt: skip
    """The secret kept for this page (`kind`, and `subject_id` unless None: any) by this
    visitor's login, with the id of what it is the secret of, once: the row goes, and the
    cookie with it. None if there is none (shown already, too old, another page's, another
    login's)."""
    cookie = request.cookies.get(sessions.shown_once_cookie)
    if not cookie or visitor.session_id is None:
        return None
    row_id, _, pad_text = cookie.partition(".")
    try:
        pad = base64.urlsafe_b64decode(pad_text + "=" * (-len(pad_text) % 4))
    except (ValueError, binascii.Error):
        visitor.cookies[sessions.shown_once_cookie] = ("", 0)
        return None
    taking = delete(SecretShownOnce).where(
        SecretShownOnce.id == row_id,
        SecretShownOnce.session_id == visitor.session_id,
        SecretShownOnce.kind == kind.value,
        SecretShownOnce.created_at > now - SHOWN_WITHIN,
    )
    if subject_id is not None:
        taking = taking.where(SecretShownOnce.subject_id == subject_id)
    row = (
        await db.execute(taking.returning(SecretShownOnce.subject_id, SecretShownOnce.sealed))
    ).first()
    if row is None:  # another page's secret waits for it; this page shows none
        return None
    visitor.cookies[sessions.shown_once_cookie] = ("", 0)
    data = bytes.fromhex(row.sealed)
    if len(pad) != len(data):
        return None
    return row.subject_id, _xor(data, pad).decode(errors="replace")
