from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from buildbay.schemas import ApiModel, RequestModel, Trimmed
from buildbay.sso.limits import MAX_GROUP_NAME, MAX_MAPPINGS

GroupName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_GROUP_NAME,
        examples=["buildbay-developers"],
        description="A group as the identity provider names it in the groups claim "
        "(BUILDBAY_OIDC_GROUPS_CLAIM), compared exactly",
    ),
    Trimmed(shown=True),
]
MappedRole = Literal["tester", "developer", "admin"]


class SsoGroupMapping(ApiModel):
    group: str
    role: MappedRole


class SsoGroupMappingIn(RequestModel):
    group: GroupName
    role: Annotated[
        MappedRole,
        Field(description="The role the group's members get; owner is given by hand only"),
    ]


class SsoGroupsUpdate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "mappings": [
            {"group": "mobile-team", "role": "developer"},
            {"group": "qa", "role": "tester"},
        ]
    }

    mappings: Annotated[
        list[SsoGroupMappingIn],
        Field(
            max_length=MAX_MAPPINGS,
            description="The whole mapping (replaces the last); each group once; empty: none",
        ),
    ]

    @field_validator("mappings")
    @classmethod
    def _each_group_once(cls, value: list[SsoGroupMappingIn]) -> list[SsoGroupMappingIn]:
        seen: set[str] = set()
        for mapping in value:
            if mapping.group in seen:
                raise ValueError(f"names the group {mapping.group!r} twice")
            seen.add(mapping.group)
        return value


class SsoGroups(ApiModel):
    mappings: list[SsoGroupMapping]
    groups_claim: str | None = Field(
        description="The ID token claim the server reads groups from "
        "(BUILDBAY_OIDC_GROUPS_CLAIM); null: no mapping is applied at sign-in"
    )
