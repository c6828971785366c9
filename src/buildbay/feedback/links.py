"""A screenshot's address: `{public_url}/feedback-screenshots/{token}`, the token being the
screenshot's id, the time it expires and an HMAC of both. Screenshots are never public: what
shows one (the API's Feedback JSON, a webhook event, the console) hands out such an address,
short-lived (SCREENSHOT_URL_SECONDS) except in a webhook event (EVENT_URL_DAYS, as the issue
asks: a chat message links to it).

The address serves the screenshot only while it exists: a feedback deleted (with its build or
application) takes its screenshots' addresses with it, however long they were signed for.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
from datetime import UTC, datetime, timedelta

from buildbay.auth.tokens import derive_key
from buildbay.constant_time import same_secret
from buildbay.errors import Forbidden
from buildbay.ids import ID_PATTERN

SCREENSHOTS_PATH = "/feedback-screenshots"
SCREENSHOT_URL_SECONDS = 15 * 60
# Addresses are signed to the end of a time slot: the same feedback read twice within one gives
# the same addresses (a browser keeps the images it has), and each lives at least the TTL.
URL_SLOT_SECONDS = 5 * 60
EVENT_URL_DAYS = 7
_SIGNATURE_BYTES = 18  # 144 bits


class ScreenshotLinks:
    def __init__(self, master_key: bytes, public_url: str) -> None:
        self._key = derive_key(master_key, "feedback-screenshot")
        self._base = f"{public_url.rstrip('/')}{SCREENSHOTS_PATH}"

    def _signature(self, screenshot_id: str, expires: int) -> str:
        message = f"{screenshot_id}\n{expires}".encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:_SIGNATURE_BYTES]).decode()

    def url(self, screenshot_id: str, expires_at: datetime) -> str:
        expires = int(expires_at.timestamp())
        return f"{self._base}/{screenshot_id}.{expires}.{self._signature(screenshot_id, expires)}"

    def short_lived(self, screenshot_id: str, now: datetime) -> str:
        """The address the API and the console show: good for SCREENSHOT_URL_SECONDS at least,
        to the end of that time's slot."""
        end = now.timestamp() + SCREENSHOT_URL_SECONDS
        slot_end = math.ceil(end / URL_SLOT_SECONDS) * URL_SLOT_SECONDS
        return self.url(screenshot_id, datetime.fromtimestamp(slot_end, UTC))

    def for_event(self, screenshot_id: str, now: datetime) -> str:
        """The address a webhook event carries: good for EVENT_URL_DAYS."""
        return self.url(screenshot_id, now + timedelta(days=EVENT_URL_DAYS))

    def screenshot_of(self, token: str, now: datetime) -> str:
        """The id of the screenshot a token this server made names, while it is valid: else
        403 (`invalid_signature`, or `url_expired` for one that was good once)."""
        screenshot_id, _, rest = token.partition(".")
        expires_text, _, signature = rest.partition(".")
        if (
            len(token) > 200
            or not ID_PATTERN.fullmatch(screenshot_id)
            or not expires_text.isascii()
            or not expires_text.isdigit()
            or len(expires_text) > 12
        ):
            raise _invalid()
        expires = int(expires_text)
        if not same_secret(signature, self._signature(screenshot_id, expires)):
            raise _invalid()
        if expires <= now.timestamp():
            raise Forbidden("This screenshot's address has expired", code="url_expired")
        return screenshot_id


def _invalid() -> Forbidden:
    return Forbidden("This screenshot's address is not valid", code="invalid_signature")
