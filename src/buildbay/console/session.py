"""Who is looking at the web console, and the CSRF token their forms must send back.

The session cookie (`bb_session`) holds a random token, stored hashed in `browser_sessions` and
tied to a login session (`sessions`): logging out revokes that session, so the cookie stops
working everywhere at once. It is HttpOnly and SameSite=Lax; Secure, and named with the
`__Host-` prefix (no Domain, Path=/: no subdomain can set or read it), exactly when the public
URL is https. A browser drops a Secure cookie sent over plain HTTP to any host but localhost, so
on a LAN address such as http://192.168.1.20:8000 nobody could sign in.

Notices: what the last answer left for the next page ("Invitation sent to ..."), in a cookie of
its own (`bb_notice`) with an HMAC bound to the visitor's CSRF token, shown once. The box that
says it is the server's voice: its text is never read from the address, which anyone can write
and send as a link.

CSRF: a signed double-submit token. A random nonce lives in its own cookie (`bb_csrf`); the
token every form carries is that nonce and an HMAC of it bound to the session cookie, so a token
from before a login (or of another visitor) is refused. Every unsafe request must also come
from our own origin when the browser says where it comes from (Origin or Referer).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from fastapi import Request, Response
from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.authentication import Principal
from buildbay.auth.models import BrowserSession, Session, User
from buildbay.auth.reads import USER, UserRecord
from buildbay.auth.tokens import derive_key, hash_token
from buildbay.builds.devices import Device, device_of
from buildbay.constant_time import same_secret, secret_bytes
from buildbay.db.reads import Reads
from buildbay.errors import Forbidden

SESSION_COOKIE = "bb_session"
CSRF_COOKIE = "bb_csrf"
NOTICE_COOKIE = "bb_notice"
# Half of a secret shown once on the page a form redirects to (console/shown_once.py).
SHOWN_ONCE_COOKIE = "bb_shown"
# A cookie holds about 4 KB: a notice is a sentence, and one that names many e-mails is cut.
MAX_NOTICE = 500
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


@dataclass
class Visitor:
    """The person behind a console request: signed in (`user`) or not."""

    user: UserRecord | None
    session_id: str | None
    csrf: str  # the token this visitor's forms carry
    cookies: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # to set: value, age
    # What the pages offer: "Install" for an .ipa on an iPhone, "Download" for an .apk elsewhere.
    device: Device = Device.OTHER
    notice: str | None = None  # what the last answer left for this page (`tell`)
    notice_taken: bool = False
    told: str | None = None  # for the next page

    def tell(self, message: str) -> None:
        """Leave `message` for the next page this visitor sees (after a redirect): the
        server's own words, shown once in the page's notice box."""
        self.told = message if len(message) <= MAX_NOTICE else message[: MAX_NOTICE - 1] + "…"

    def take_notice(self) -> str | None:
        """The notice the last answer left, for the page being made; it is not shown again."""
        self.notice_taken = True
        return self.notice

    @property
    def principal(self) -> Principal:
        assert self.user is not None
        return Principal(user=self.user, session_id=self.session_id)


# The user and login session behind a console cookie, if it is live.
_VISITOR = (
    select(*USER.columns, Session.id.label("session_id"))
    .join(Session, Session.user_id == User.id)
    .join(BrowserSession, BrowserSession.session_id == Session.id)
    .where(
        BrowserSession.token_hash == bindparam("token_hash"),
        Session.revoked_at.is_(None),
        Session.expires_at > bindparam("now"),
        # Made before a password reset took the account back: dead (auth/models.py User).
        Session.credentials_epoch >= User.credentials_epoch,
    )
)


class ConsoleSessions:
    def __init__(self, master_key: bytes, lifetime: timedelta, *, secure: bool) -> None:
        self._key = derive_key(master_key, "console-csrf")
        self._notice_key = derive_key(master_key, "console-notice")
        self.lifetime = lifetime
        self.secure = secure
        prefix = "__Host-" if secure else ""
        self.session_cookie = prefix + SESSION_COOKIE
        self.csrf_cookie = prefix + CSRF_COOKIE
        self.notice_cookie = prefix + NOTICE_COOKIE
        self.shown_once_cookie = prefix + SHOWN_ONCE_COOKIE

    def _csrf_for(self, nonce: str, session_token: str | None) -> str:
        bound = f"{nonce}|{hash_token(session_token) if session_token else ''}"
        mac = hmac.new(self._key, bound.encode(), hashlib.sha256).hexdigest()[:32]
        return f"{nonce}.{mac}"

    async def visitor(self, request: Request, db: AsyncSession, now: datetime) -> Visitor:
        token = request.cookies.get(self.session_cookie)
        user, session_id = None, None
        if token:
            row = await Reads.within(db).first(
                _VISITOR, {"token_hash": hash_token(token), "now": now}
            )
            if row is not None:
                user, session_id = USER.of(row), row["session_id"]
        nonce = request.cookies.get(self.csrf_cookie) or ""
        visitor = Visitor(user, session_id, "", device=device_of(request.headers.get("user-agent")))
        if len(nonce) != 32 or not nonce.isalnum():
            nonce = secrets.token_hex(16)
            visitor.cookies[self.csrf_cookie] = (nonce, None)
        visitor.csrf = self._csrf_for(nonce, token if user is not None else None)
        sealed = request.cookies.get(self.notice_cookie)
        if sealed is not None:
            visitor.notice = self._unseal_notice(sealed, visitor.csrf)
            if visitor.notice is None:  # another visitor's, or not ours: gone
                visitor.cookies[self.notice_cookie] = ("", 0)
        return visitor

    def _notice_mac(self, text: bytes, csrf: str) -> str:
        bound = secret_bytes(csrf) + b"\n" + text
        return hmac.new(self._notice_key, bound, hashlib.sha256).hexdigest()[:32]

    def _seal_notice(self, notice: str, csrf: str) -> str:
        text = notice.encode(errors="replace")
        encoded = base64.urlsafe_b64encode(text).rstrip(b"=").decode()
        return f"{encoded}.{self._notice_mac(text, csrf)}"

    def _unseal_notice(self, sealed: str, csrf: str) -> str | None:
        encoded, _, mac = sealed.partition(".")
        try:
            text = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            notice = text.decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return notice if same_secret(mac, self._notice_mac(text, csrf)) else None

    async def signed_in(self, request: Request, reads: Reads, now: datetime) -> str | None:
        """The id of the user signed in on this browser, if anyone (without a cookie, nothing is
        read): for pages outside the console that must know who is there (install pages)."""
        token = request.cookies.get(self.session_cookie)
        if not token:
            return None
        row = await reads.first(_VISITOR, {"token_hash": hash_token(token), "now": now})
        return None if row is None else str(row["id"])

    async def sign_in(
        self, visitor: Visitor, db: AsyncSession, session_id: str, now: datetime
    ) -> None:
        """Tie a new cookie to the login session `session_id` (and a new CSRF token to it)."""
        token = secrets.token_urlsafe(32)
        db.add(BrowserSession(token_hash=hash_token(token), session_id=session_id, created_at=now))
        await db.flush()
        visitor.cookies[self.session_cookie] = (token, int(self.lifetime.total_seconds()))
        nonce = secrets.token_hex(16)
        visitor.cookies[self.csrf_cookie] = (nonce, None)
        # What the next page's forms carry, and what a notice left for it is sealed with.
        visitor.csrf = self._csrf_for(nonce, token)

    def sign_out(self, visitor: Visitor) -> None:
        visitor.cookies[self.session_cookie] = ("", 0)

    def check_origin(self, request: Request, public_url: str) -> None:
        """Refuses an unsafe request from another origin (when the browser names it)."""
        source = request.headers.get("origin") or request.headers.get("referer")
        if source:
            here = {_origin(public_url), f"{request.url.scheme}://{request.url.netloc}"}
            if _origin(source) not in here:
                raise Forbidden("This form was sent from another site", code="csrf_failed")

    def check_csrf(self, visitor: Visitor, sent: str | None) -> None:
        """Refuses an unsafe request whose token is not the one this visitor's pages carry
        (bound to their session cookie, or for a visitor who is not signed in, to none)."""
        if not (sent and same_secret(sent, visitor.csrf)):
            raise Forbidden(
                "The form's security token is missing or out of date; reload the page and try "
                "again",
                code="csrf_failed",
            )

    def apply(self, visitor: Visitor, response: Response) -> None:
        if visitor.told is not None:
            visitor.cookies[self.notice_cookie] = (
                self._seal_notice(visitor.told, visitor.csrf),
                None,
            )
        elif visitor.notice_taken and visitor.notice is not None:
            visitor.cookies[self.notice_cookie] = ("", 0)
        for name, (value, age) in visitor.cookies.items():
            if age == 0:
                response.delete_cookie(
                    name, path="/", secure=self.secure, httponly=True, samesite="lax"
                )
                continue
            response.set_cookie(
                name, value, max_age=age, path="/", secure=self.secure, httponly=True,
                samesite="lax",
            )  # fmt: skip


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
