"""What an API token may do.

Free of SQLAlchemy: the models store them, the schemas name them (tests/test_layers.py).
"""

from __future__ import annotations

from enum import StrEnum


class TokenScope(StrEnum):
    """What an API token may do, each including the ones before it. A token without a scope
    may do whatever its user may, the account's own endpoints excepted."""

    READ = "read"  # read projects, applications and builds; download
    # and upload builds (upload link, parts, verify, blockmap): a trusted publisher's exchanged
    # token has it, limited to its one application (publishers/)
    UPLOAD = "upload"
    BUILDS_WRITE = "builds:write"  # and delete builds, share install links, change channels

    def includes(self, needed: TokenScope) -> bool:
        return _SCOPE_RANK[self] >= _SCOPE_RANK[needed]


_SCOPE_RANK = {TokenScope.READ: 0, TokenScope.UPLOAD: 1, TokenScope.BUILDS_WRITE: 2}
