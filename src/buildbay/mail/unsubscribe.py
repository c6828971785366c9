"""Signed one-click unsubscribe links (RFC 8058): `PUBLIC_URL/unsubscribe/<token>`, where the
token names the user and carries an HMAC of the server's key over the user and the address the
mail went to, so that the link needs no login and cannot be made for anyone else. Opening it
(GET) shows a button; posting to it (the button, or a mail client's one-click
`List-Unsubscribe=One-Click`) turns off that user's new-build mails (`notifyNewBuilds`).

A link holds while the account has the address its mail went to: once the account moves to
another address (auth/email_change.py), the mails left in the old mailbox, which may be someone
else's now, neither show the new address nor act on the account. Links of mails sent before
links named their address (an HMAC over the user alone) still work.

Invitation mails go to addresses that may have no account: their link names the address
(`a.<the address, base64url>.<HMAC>`, under a key of its own), and its page blocks, or allows
again, every invitation from this server to that address (invitations/caps.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from buildbay.auth.tokens import derive_key
from buildbay.constant_time import same_secret
from buildbay.ids import ID_PATTERN

UNSUBSCRIBE_PATH = "/unsubscribe"


_ADDRESS = "a"


class UnsubscribeLinks:
    def __init__(self, master_key: bytes, public_url: str) -> None:
        self._key = derive_key(master_key, "unsubscribe-new-builds")
        self._address_key = derive_key(master_key, "unsubscribe-invitations")
        self._base = f"{public_url.rstrip('/')}{UNSUBSCRIBE_PATH}"

    def _mac(self, user_id: str, address: str | None) -> str:
        # A user id holds no "|": the two kinds of message never meet.
        signed = user_id if address is None else f"{user_id}|{address}"
        digest = hmac.new(self._key, signed.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:20]).rstrip(b"=").decode()

    def token(self, user_id: str, address: str) -> str:
        """The token of a mail to `address`, the user's address when it is sent."""
        return f"{user_id}.{self._mac(user_id, address)}"

    def url(self, user_id: str, address: str) -> str:
        return f"{self._base}/{self.token(user_id, address)}"

    @staticmethod
    def user_named(token: str) -> str | None:
        """The user a member's token names (not yet checked: see `holds`)."""
        user_id = token.partition(".")[0]
        return user_id if ID_PATTERN.fullmatch(user_id) else None

    def holds(self, token: str, user_id: str, address: str) -> bool:
        """Whether this server made `token` for the user at `address` (their present one), or
        made it before links named an address."""
        named, _, mac = token.partition(".")
        if named != user_id:
            return False
        return same_secret(mac, self._mac(user_id, address)) or same_secret(
            mac, self._mac(user_id, None)
        )

    def _address_mac(self, address: str) -> str:
        digest = hmac.new(self._address_key, address.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:20]).rstrip(b"=").decode()

    def address_url(self, address: str) -> str:
        """The link of an invitation mail to `address`: its page blocks invitations to it."""
        encoded = base64.urlsafe_b64encode(address.encode()).rstrip(b"=").decode()
        return f"{self._base}/{_ADDRESS}.{encoded}.{self._address_mac(address)}"

    def address_of(self, token: str) -> str | None:
        """The address an invitation mail's token was made for, if this server made it."""
        kind, _, rest = token.partition(".")
        encoded, _, mac = rest.partition(".")
        if kind != _ADDRESS or not encoded.isascii() or not mac.isascii():
            return None
        try:
            address = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except ValueError:  # not base64, or not UTF-8 (UnicodeDecodeError is a ValueError)
            return None
        if not same_secret(mac, self._address_mac(address)):
            return None
        return address
