"""The states of a build.

Free of SQLAlchemy: the models store them, the schemas name them (tests/test_layers.py).
"""

from __future__ import annotations

from enum import StrEnum


class BuildStatus(StrEnum):
    PENDING = "pending"  # upload link issued, not verified
    READY = "ready"  # bytes stored, checked and verified
    # A multipart upload assembled at verify, whose bytes are being checked in the background
    # (a file too large to hash within a request); becomes `ready` or `failed` by itself.
    PROCESSING = "processing"
    FAILED = "failed"  # the background check refused the bytes (`failure_code`, `metadata_error`)


class RemovalReason(StrEnum):
    """Why a ready build was deleted (the `reason` of its `build.deleted` event)."""

    MEMBER = "member"  # a developer or higher deleted it
    RETENTION = "retention"  # the sweeper, by the application's retention rule


class OnDuplicate(StrEnum):
    """What upload-link answers for a file whose declared sha256 is a ready build's of the same
    application (builds/duplicates.py)."""

    REFUSE = "refuse"  # 409 `duplicate_build`, naming it
    REUSE = "reuse"  # 200 with that build: nothing to send
