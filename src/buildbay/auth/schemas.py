from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from buildbay.auth.enums import TokenScope
from buildbay.config import Plan
from buildbay.schemas import (
    NO_NUL_PATTERN,
    ApiModel,
    Email,
    JsonInteger,
    Name,
    NotNull,
    RequestModel,
    Timestamp,
    Trimmed,
)

Password = Annotated[str, Field(min_length=8, max_length=128)]


class RegisterRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "email": "ada@example.com",
        "password": "an example passphrase",
        "name": "Ada Lovelace",
    }

    email: Email
    # Passwords are taken as typed: no trimming.
    password: Annotated[Password, Field(json_schema_extra={"format": "password"})]
    # A blank name means "none given": the account is then named after the e-mail.
    name: Annotated[str, Field(max_length=100), Trimmed(blank_ok=True, shown=True)] | None = None

    model_config = ConfigDict(str_strip_whitespace=False)

    @field_validator("name")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value or None


class LoginRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "email": "ada@example.com",
        "password": "an example passphrase",
    }

    email: Annotated[str, Field(max_length=320)]
    password: Annotated[str, Field(max_length=1024)]

    model_config = ConfigDict(str_strip_whitespace=False)


class ChangePasswordRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "currentPassword": "an example passphrase",
        "newPassword": "another example passphrase",
    }

    # As long as a login takes: a password set before today's rules still works.
    current_password: Annotated[
        str, Field(min_length=1, max_length=1024, json_schema_extra={"format": "password"})
    ]
    new_password: Annotated[Password, Field(json_schema_extra={"format": "password"})]

    model_config = ConfigDict(str_strip_whitespace=False)


class PasswordResetRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"email": "ada@example.com"}

    email: Email


class EmailVerificationConfirm(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"token": "bbv_the-token-from-the-mailed-link"}

    token: Annotated[str, Field(min_length=1, max_length=4096)]


class EmailChangeRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "newEmail": "ada@example.org",
        "password": "an example passphrase",
    }

    new_email: Email
    # Your present password, as a login takes it.
    password: Annotated[
        str, Field(min_length=1, max_length=1024, json_schema_extra={"format": "password"})
    ]

    model_config = ConfigDict(str_strip_whitespace=False)


class EmailChangeConfirm(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"token": "bbc_the-token-from-the-mailed-link"}

    token: Annotated[str, Field(min_length=1, max_length=4096)]


class PasswordResetConfirm(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "token": "bbp_the-token-from-the-mailed-link",
        "password": "another example passphrase",
    }

    token: Annotated[str, Field(min_length=1, max_length=4096)]
    password: Annotated[Password, Field(json_schema_extra={"format": "password"})]

    model_config = ConfigDict(str_strip_whitespace=False)


class OAuthModel(BaseModel):
    """Token fields follow OAuth 2 (RFC 6749): snake_case, exactly as named."""

    model_config = ConfigDict(extra="forbid")


# Room for any token a client may send by mistake (an access token is ~250 characters): a wrong
# token is a 401, not a 422.
MAX_TOKEN_LENGTH = 4096


class RefreshRequest(OAuthModel):
    refresh_token: Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_LENGTH)]

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"refresh_token": "the refresh_token login gave"}]}
    )


class LogoutRequest(OAuthModel):
    refresh_token: Annotated[str | None, Field(max_length=MAX_TOKEN_LENGTH)] = None

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"refresh_token": "the refresh_token login gave"}]}
    )


EMAIL_VERIFIED_DESCRIPTION = (
    "Whether the account proved it receives mail at this address (it followed the verification "
    "mail, a password-reset link or an invitation mailed there). Anyone may sign up with any "
    "address: until then, it is only what they typed"
)


class User(ApiModel):
    id: str
    email: str
    name: str
    plan: Plan
    created_at: Timestamp
    email_verified: bool = Field(description=EMAIL_VERIFIED_DESCRIPTION)


class Usage(ApiModel):
    storage_bytes: int = Field(description="Bytes of the builds you uploaded (pending included)")
    builds: int = Field(description="Builds you uploaded that still exist")


class Limits(ApiModel):
    storage_quota_bytes: int | None = Field(description="Null: no limit")
    max_upload_bytes: int
    requests_per_minute: int | None = Field(description="Null: no limit")


class Me(User):
    notify_new_builds: bool = Field(
        description="Whether you get an e-mail when a build is distributed to you"
    )
    usage: Usage
    limits: Limits = Field(description="Your plan's limits")
    pending_email: str | None = Field(
        default=None,
        description="The address you asked to move to (POST /api/auth/email-change), until "
        "the link mailed there is followed; null: none",
    )


class MeUpdate(RequestModel):
    """Only the fields sent change."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"name": "Ada Lovelace", "notifyNewBuilds": True}

    name: Name | None = NotNull
    notify_new_builds: Annotated[bool, Field(strict=True)] | None = NotNull

    @field_validator("name", "notify_new_builds")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("cannot be null; leave the field out to keep its value")
        return value


class TokenResponse(BaseModel):
    access_token: str
    refresh_token: str
    token_type: Literal["Bearer"] = "Bearer"
    expires_in: int = Field(description="Seconds until the access token expires", examples=[86400])
    user: User


MAX_TOKEN_PROJECTS = 50
ProjectId = Annotated[str, Field(min_length=1, max_length=32, pattern=NO_NUL_PATTERN)]
SCOPE_DESCRIPTION = (
    "`read`: read projects, applications and builds, and download; `upload`: that, and upload "
    "and verify builds; `builds:write`: that, and delete builds and share install links. "
    "Null: all you may do, but manage the account"
)
PROJECTS_DESCRIPTION = "Only these projects (of which you are a member). Null: all of yours"


class CreateApiTokenRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "name": "github-actions",
        "expiresInDays": 90,
        "scope": "builds:write",
    }

    name: Name
    expires_in_days: Annotated[int, Field(ge=1, le=365, strict=True), JsonInteger] | None = None
    scope: TokenScope | None = Field(default=None, description=SCOPE_DESCRIPTION)
    project_ids: (
        Annotated[
            list[ProjectId],
            Field(min_length=1, max_length=MAX_TOKEN_PROJECTS, description=PROJECTS_DESCRIPTION),
        ]
        | None
    ) = None


class ApiToken(ApiModel):
    id: str
    name: str
    prefix: str = Field(description="The first characters of the token, to recognise it")
    created_at: Timestamp
    expires_at: Timestamp | None
    last_used_at: Timestamp | None
    scope: TokenScope | None = Field(description=SCOPE_DESCRIPTION)
    project_ids: list[str] | None = Field(description=PROJECTS_DESCRIPTION)


class CreatedApiToken(ApiToken):
    token: str = Field(description="The secret, shown this once; send it as `Bearer <token>`")


class ApiTokenList(ApiModel):
    api_tokens: list[ApiToken]


# -- the command line's sign-in through the console (auth/cli_sign_in.py) ----------------------


class CliTokenRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "code": "bbc_the-code-the-console-redirected-with",
        "codeVerifier": "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
        "redirectUri": "http://127.0.0.1:53682/callback",
    }

    code: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL_PATTERN)]
    # RFC 7636 §4.1: 43 to 128 unreserved characters.
    code_verifier: Annotated[str, Field(pattern=r"^[A-Za-z0-9._~-]{43,128}$")]
    redirect_uri: Annotated[str, Field(min_length=1, max_length=300, pattern=NO_NUL_PATTERN)]


class CliToken(CreatedApiToken):
    user: User = Field(description="Whose token it is: who signed in")


class DeviceCodeRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"clientName": "ada-laptop"}

    client_name: Annotated[
        str | None,
        Field(
            max_length=100,
            pattern=NO_NUL_PATTERN,
            description="The computer's name, shown on the console's page and naming the token "
            "(kept to letters, digits, dots, dashes and underscores)",
        ),
    ] = None


class DeviceCode(ApiModel):
    device_code: str = Field(description="What the command line polls with; never shown")
    user_code: str = Field(
        description="What the person enters in the console: 8 letters, shown XXXX-XXXX",
        examples=["BDFG-HJKL"],
    )
    verification_uri: str = Field(description="The console's page where the code is entered")
    verification_uri_complete: str = Field(description="The same page with the code filled in")
    expires_in: int = Field(description="Seconds until the codes expire", examples=[600])
    interval: int = Field(description="The least seconds between polls", examples=[5])


class DeviceTokenRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"deviceCode": "bbd_the-device-code"}

    device_code: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL_PATTERN)]
