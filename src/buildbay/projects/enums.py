"""The roles of a project's members.

Free of SQLAlchemy: the models store them, the schemas name them (tests/test_layers.py).
"""

from __future__ import annotations

from enum import StrEnum


class ProjectRole(StrEnum):
    """Each role includes the rights of the ones below it."""

    TESTER = "tester"
    DEVELOPER = "developer"
    ADMIN = "admin"
    OWNER = "owner"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def includes(self, other: ProjectRole) -> bool:
        return self.rank >= other.rank


_RANKS = {
    ProjectRole.TESTER: 1,
    ProjectRole.DEVELOPER: 2,
    ProjectRole.ADMIN: 3,
    ProjectRole.OWNER: 4,
}
