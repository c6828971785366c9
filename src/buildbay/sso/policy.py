"""Who may still use a password (BUILDBAY_OIDC_ONLY): with it on, password sign-in, sign-up
and password reset are off for everyone but the operator accounts of BUILDBAY_OIDC_BREAK_GLASS,
which must get in when the provider is down. API tokens and the sessions already open keep
working; the operator's `buildbay users` commands are not sign-ins and are not stopped."""

from __future__ import annotations

from dataclasses import dataclass, field

from buildbay.config import Settings
from buildbay.errors import Forbidden
from buildbay.text import normal_email_text


class SsoOnly(Forbidden):
    """403 `sso_only`: this server signs people in through its identity provider only."""

    code = "sso_only"


@dataclass(frozen=True, slots=True)
class PasswordPolicy:
    sso_only: bool = False
    break_glass: frozenset[str] = field(default_factory=frozenset)
    provider_name: str = ""

    def may_use_password(self, email: str) -> bool:
        return not self.sso_only or normal_email_text(email.strip()) in self.break_glass

    def check_sign_up(self) -> None:
        """Sign-up with a password is off for every address when only the provider signs people
        in, the break-glass ones too: those are operators' accounts, which the operator makes
        (`buildbay users create`); letting a break-glass address sign up where no other may
        would also tell anyone which addresses are break-glass."""
        if self.sso_only:
            raise self.refusal("Sign-up with a password")

    def refusal(self, doing: str, *, note: str = "", keeps_writes: bool = False) -> SsoOnly:
        """403 `sso_only` for `doing` ("Password sign-in", "Password reset", ...). Answered to
        every address alike (auth/logins.py, auth/password_reset.py), so that it never tells a
        break-glass address from another; `note`: a sentence that holds for every address."""
        return SsoOnly(
            f"{doing} is off on this server: sign in with {self.provider_name} "
            f"(single sign-on only). API tokens keep working{note}",
            keeps_writes=keeps_writes,
        )


PASSWORDS_ALLOWED = PasswordPolicy()


def password_policy(settings: Settings) -> PasswordPolicy:
    if not settings.oidc_only:
        return PASSWORDS_ALLOWED
    return PasswordPolicy(
        sso_only=True,
        break_glass=frozenset(normal_email_text(e) for e in settings.oidc_break_glass_list),
        provider_name=settings.oidc_button_name,
    )
