"""HMAC-signed storage URLs for the local backend: the URL is the credential, so it is bound to
one method, one object, one size and one expiry, and compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime

from buildbay.auth.tokens import derive_key
from buildbay.constant_time import same_secret
from buildbay.errors import Forbidden


class UrlSigner:
    def __init__(self, master_key: bytes) -> None:
        self._key = derive_key(master_key, "storage-url")

    def sign(self, method: str, key: str, expires: int, size: int | None = None) -> str:
        message = f"{method}\n{key}\n{expires}\n{'' if size is None else size}"
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def verify(
        self,
        method: str,
        key: str,
        expires: int,
        signature: str,
        now: datetime,
        size: int | None = None,
    ) -> None:
        expected = self.sign(method, key, expires, size)
        if not same_secret(signature, expected):
            raise Forbidden("The storage URL's signature is not valid", code="invalid_signature")
        if expires <= now.timestamp():
            raise Forbidden("The storage URL has expired", code="url_expired")
