"""Signed one-click unsubscribe links (RFC 8058): `PUBLIC_URL/unsubscribe/<token>`, where the
token names the user and carries an HMAC of the server's key, so that the link needs no login
and cannot be made for anyone else. Opening it (GET) shows a button; posting to it (the button,
or a mail client's one-click `List-Unsubscribe=One-Click`) turns off that user's new-build
mails (`notifyNewBuilds`)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from buildbay.auth.tokens import derive_key
from buildbay.constant_time import same_secret
from buildbay.ids import ID_PATTERN

UNSUBSCRIBE_PATH = "/unsubscribe"


class UnsubscribeLinks:
    def __init__(self, master_key: bytes, public_url: str) -> None:
        self._key = derive_key(master_key, "unsubscribe-new-builds")
        self._base = f"{public_url.rstrip('/')}{UNSUBSCRIBE_PATH}"

    def _mac(self, user_id: str) -> str:
        digest = hmac.new(self._key, user_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:20]).rstrip(b"=").decode()

    def token(self, user_id: str) -> str:
        return f"{user_id}.{self._mac(user_id)}"

    def url(self, user_id: str) -> str:
        return f"{self._base}/{self.token(user_id)}"

    def user_of(self, token: str) -> str | None:
        """The user a token was made for, if this server made it."""
        user_id, _, mac = token.partition(".")
        if not ID_PATTERN.fullmatch(user_id) or not same_secret(mac, self._mac(user_id)):
            return None
        return user_id
