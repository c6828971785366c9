from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from buildbay.devices.apple.enums import Outcome
from buildbay.devices.enums import DevicePlatform
from buildbay.schemas import ApiModel, RequestModel, Timestamp

KEY_ID_PATTERN = r"^[A-Za-z0-9]{10}$"
ISSUER_ID_PATTERN = r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
PRIVATE_KEY_MAX = 10_000  # a .p8 file is about 260 characters


class AppleKeyPut(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "keyId": "2X9R4HXF34",
        "issuerId": "57246542-96fe-1a63-e053-0824d011072a",
        "privateKey": "-----BEGIN PRIVATE KEY-----\n"
        "MIGTAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBHkwdwIBAQQg...\n"
        "-----END PRIVATE KEY-----\n",
    }

    key_id: Annotated[
        str,
        Field(
            json_schema_extra={"pattern": KEY_ID_PATTERN},
            description="The key's ID, as App Store Connect shows it (Users and Access, "
            "Integrations, App Store Connect API): 10 letters and digits",
            examples=["2X9R4HXF34"],
        ),
    ]
    issuer_id: Annotated[
        str,
        Field(
            json_schema_extra={"pattern": ISSUER_ID_PATTERN},
            description="The team's issuer ID, shown above the keys: a UUID",
            examples=["57246542-96fe-1a63-e053-0824d011072a"],
        ),
    ]
    private_key: Annotated[
        str,
        Field(
            min_length=1,
            max_length=PRIVATE_KEY_MAX,
            description="The whole text of the key's `AuthKey_<keyId>.p8` file (an EC P-256 "
            "private key in PEM). Stored encrypted; never shown again",
        ),
    ]

    @field_validator("key_id")
    @classmethod
    def _key_id(cls, value: str) -> str:
        if not re.fullmatch(KEY_ID_PATTERN, value):
            raise ValueError(
                "must be the key's ID as App Store Connect shows it: 10 letters and digits, "
                "such as 2X9R4HXF34"
            )
        return value

    @field_validator("issuer_id")
    @classmethod
    def _issuer_id(cls, value: str) -> str:
        if not re.fullmatch(ISSUER_ID_PATTERN, value):
            raise ValueError(
                "must be the issuer ID App Store Connect shows above the keys, a UUID such as "
                "57246542-96fe-1a63-e053-0824d011072a"
            )
        return value.lower()


class AppleActor(ApiModel):
    """A member who did something (their account may be gone since: then null)."""

    id: str
    email: str


class AppleKeyInfo(ApiModel):
    key_id: str
    issuer_id: str
    created_at: Timestamp
    created_by: AppleActor | None = Field(description="The admin who put the key")


class RegisteredWithApple(ApiModel):
    at: Timestamp
    by: AppleActor | None = Field(description="The member who sent the device to Apple")


class AppleRegistration(ApiModel):
    device_id: str
    udid: str
    name: str = Field(description="The device's name as Apple was sent it (50 characters at most)")
    platform: str = Field(description="As Apple names it: `IOS` (iPadOS too) or `MAC_OS`")
    apple_device_id: str | None = Field(description="Apple's id of the device, when it said")
    outcome: Outcome = Field(
        description="`created`: Apple registered it now; `existing`: Apple had it already; "
        "`unchanged`: registered through this project before (Apple was not asked)"
    )
    registered_with_apple: RegisteredWithApple


class AppleRefusal(ApiModel):
    device_id: str
    udid: str
    name: str
    platform: str
    code: str = Field(examples=["apple_device_refused"])
    detail: str = Field(description="Why, in Apple's words")


class AppleRegistrationBatch(ApiModel):
    registrations: list[AppleRegistration]
    refused: list[AppleRefusal] = Field(description="Devices Apple refused (an invalid UDID)")
    remaining: int = Field(
        description="Devices of the project's members still not registered through it (those "
        "Apple refused included)"
    )
    last_sent: str | None = Field(
        description="The last device this call sent to Apple: call again with it as `?after=` "
        "(past the devices Apple refused) until a call sends none (null)"
    )


class AppleRegisteredDevice(ApiModel):
    device_id: str
    udid: str
    name: str
    platform: DevicePlatform
    tester_id: str = Field(description="The device's owner")
    apple_device_id: str | None
    registered_with_apple: RegisteredWithApple


class AppleRegistrationList(ApiModel):
    registrations: list[AppleRegisteredDevice]
    next_cursor: str | None
