"""What the sign-in and the mapping routes take from a request."""

from __future__ import annotations

from fastapi import Request

from buildbay.audit.record import Origin
from buildbay.auth.dependencies import client_ip


def request_origin(request: Request) -> Origin:
    """Where a change came from, for the audit log: the client's address and user agent."""
    return Origin(client_ip(request), request.headers.get("user-agent"))
