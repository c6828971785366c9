"""Secrets that arrive as text, compared and hashed whatever characters they hold.

A token in a URL, a form's CSRF field, a query's signature or a header is whatever the sender
wrote: `hmac.compare_digest` refuses (TypeError) a str with a non-ASCII character, and a JSON
string may hold a lone surrogate that UTF-8 cannot encode. Both would answer 500 where a wrong
secret must answer its 4xx. Every comparison of a secret goes through `same_secret`, every hash
of one through `secret_bytes`.
"""

from __future__ import annotations

import hmac


def secret_bytes(text: str) -> bytes:
    """`text` as UTF-8, lone surrogates included (a distinct string gives distinct bytes)."""
    return text.encode("utf-8", "surrogatepass")


def same_secret(given: str, expected: str) -> bool:
    """Whether `given` is `expected`, in time that does not depend on where they differ."""
    return hmac.compare_digest(secret_bytes(given), secret_bytes(expected))
