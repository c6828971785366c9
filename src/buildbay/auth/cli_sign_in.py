"""The command line signing in through the console (`buildbay login --sso`, issue 41).

Buildbay is the authorization server the command line talks to; the console's own sign-in (a
password, or the company's identity provider) is how the person proves who they are. No
identity provider registers the command line, and no provider's secret leaves the server. Two
ways, each ending in an API token named "CLI on <computer>" (listed and revocable on the
account page like any other):

- a loopback redirect (RFC 8252 §7.3) with PKCE (RFC 7636, S256 only): the command line listens
  on 127.0.0.1, the browser opens `/cli/authorize`, the person allows it, the console redirects
  to the loopback with a one-time code, and the command line exchanges the code and its PKCE
  verifier (`POST /api/auth/cli/token`). Only loopback redirect URIs are taken (any port, as
  §7.3 asks); another is refused with a page, never redirected to.
- the device authorization grant (RFC 8628) where no browser can reach a loopback (over SSH,
  no display): `POST /api/auth/device/code`, the person enters the user code at `/cli/device`,
  the command line polls `POST /api/auth/device/token`.

Codes are single use and stored only as hashes. The refusals the RFCs name (`invalid_grant`,
`authorization_pending`, `slow_down`, `access_denied`, `expired_token`) are problem+json like
every other refusal of the API, with status 400, the RFC's code as `code`, and again as `error`
(the member RFC 6749 §5.2 names), so an OAuth library and a problem+json client read the same
answer.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode, urlsplit

from limits import RateLimitItemPerHour
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.accounts import AccountService
from buildbay.auth.models import ApiToken, CliSignIn
from buildbay.auth.reads import UserRecord, user_by_id
from buildbay.auth.tokens import hash_token
from buildbay.constant_time import same_secret
from buildbay.db.concurrency import insert_unless_present
from buildbay.db.reads import Reads
from buildbay.errors import BadRequest, NotFound, RateLimited
from buildbay.ids import new_id
from buildbay.ratelimit.limiter import RateLimiter

AUTHORIZE_PAGE = "/cli/authorize"  # the console's pages (console/cli_sign_in.py)
DEVICE_PAGE = "/cli/device"
LOOPBACK = "loopback"
DEVICE = "device"
PENDING, APPROVED, DENIED, USED = "pending", "approved", "denied", "used"

# The loopback's code goes from the console to the command line on the same computer at once.
LOOPBACK_CODE_LIFETIME = timedelta(minutes=2)
# Long enough to walk to another computer, sign in and type eight letters.
DEVICE_CODE_LIFETIME = timedelta(minutes=10)
# RFC 8628 §3.5: a client told `slow_down` adds 5 seconds to its interval; so does the server.
SLOW_DOWN_STEP = 5
# A token a person's command line holds: it ends by itself (`login --sso` makes another).
CLI_TOKEN_DAYS = 90

CODE_PREFIX = "bbc_"
DEVICE_CODE_PREFIX = "bbd_"
# RFC 8628 §6.1: base-20 consonants, no vowels (no words), no look-alikes (no 0/O, 1/I).
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
USER_CODE_LENGTH = 8  # 20^8 = 2.56e10 codes, of which a few are live at a time
# User codes tried (looked up or decided) per person and per client address: a guess of a live
# code needs billions of tries, and these allow a few hundred a day.
CODE_ENTRIES_PER_USER = RateLimitItemPerHour(30)
CODE_ENTRIES_PER_IP = RateLimitItemPerHour(60)

# The loopback IP literals only (RFC 8252 §8.3: `localhost` is NOT RECOMMENDED): a name is
# resolved by the browser, perhaps to the other address family's loopback, where another
# program of the computer may listen on the same port.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1"})
REDIRECT_URI_MAX = 300
_CHALLENGE_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # base64url of a SHA-256, unpadded
_STATE_RE = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no space
_PRINTABLE_RE = re.compile(r"^[\x21-\x7e]*$")
_CLIENT_NAME_DROP = re.compile(r"[^A-Za-z0-9._-]+")
CLIENT_NAME_MAX = 63  # a host name's label
UNNAMED_CLIENT = "a computer"


def grant_error(error: str, detail: str, *, keeps_writes: bool = False) -> BadRequest:
    """One of the OAuth refusals (RFC 6749 §5.2, RFC 8628 §3.5): 400 problem+json whose `code`
    and `error` are the RFC's code."""
    return BadRequest(detail, code=error, extensions={"error": error}, keeps_writes=keeps_writes)


def client_name_of(raw: str | None) -> str:
    """The computer's name as the command line sent it, kept to a host name's characters: it
    is shown on the console's page and names the token."""
    name = _CLIENT_NAME_DROP.sub("-", (raw or "").strip()).strip("-.")[:CLIENT_NAME_MAX]
    return name or UNNAMED_CLIENT


def is_loopback_redirect(uri: str) -> bool:
    """RFC 8252 §7.3: `http` to a loopback IP literal, any port; no user, no fragment; only
    printable ASCII (urlsplit drops tabs and line breaks before it parses, so the address
    checked would not be the one kept and redirected to; a NUL cannot be stored)."""
    if len(uri) > REDIRECT_URI_MAX or not _PRINTABLE_RE.match(uri):
        return False
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 (raises for a port that is not a number)
    except ValueError:
        return False
    return (
        parts.scheme == "http"
        and parts.hostname in LOOPBACK_HOSTS
        and "@" not in parts.netloc
        and not parts.fragment
    )


def pkce_challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def normalise_user_code(entered: str) -> str | None:
    """The code as stored, from what a person typed: any case, hyphens and spaces ignored
    (RFC 8628 §6.1); None if it cannot be one."""
    letters = re.sub(r"[\s-]", "", entered.upper())[: USER_CODE_LENGTH + 1]
    if len(letters) != USER_CODE_LENGTH or any(c not in USER_CODE_ALPHABET for c in letters):
        return None
    return letters


def shown_user_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"


@dataclass(frozen=True, slots=True)
class LoopbackRequest:
    """What `/cli/authorize` was asked, checked."""

    redirect_uri: str
    code_challenge: str
    state: str
    client_name: str

    @classmethod
    def of(cls, params: dict[str, str]) -> LoopbackRequest:
        """The request, or BadRequest with a sentence saying what is wrong (never a redirect:
        a redirect URI that is not a loopback is exactly what must not be followed)."""
        redirect_uri = params.get("redirect_uri", "")
        if not is_loopback_redirect(redirect_uri):
            raise BadRequest(
                "This sign-in link does not come from the Buildbay command line: it may only "
                "send you back to this computer (http://127.0.0.1 or http://[::1]). Run "
                "`buildbay login --sso` again",
                code="invalid_redirect_uri",
            )
        if params.get("code_challenge_method") != "S256" or not _CHALLENGE_RE.match(
            params.get("code_challenge", "")
        ):
            raise BadRequest(
                "This sign-in link lacks its proof key (PKCE with S256). Run `buildbay login "
                "--sso` again with an up-to-date command line",
                code="invalid_code_challenge",
            )
        state = params.get("state", "")
        if not _STATE_RE.match(state):
            raise BadRequest(
                "This sign-in link lacks its state. Run `buildbay login --sso` again",
                code="invalid_state",
            )
        return cls(
            redirect_uri, params["code_challenge"], state, client_name_of(params.get("client_name"))
        )

    def redirect(self, **answer: str) -> str:
        """The redirect URI with `answer` (a code, or an error) and the state added."""
        separator = "&" if urlsplit(self.redirect_uri).query else "?"
        return self.redirect_uri + separator + urlencode({**answer, "state": self.state})


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    device_code: str
    user_code: str  # as shown: XXXX-XXXX
    expires_in: int
    interval: int


@dataclass(frozen=True, slots=True)
class WaitingDevice:
    """A device grant a person is asked to allow: what the page shows."""

    user_code: str  # as shown
    client_name: str


@dataclass(frozen=True, slots=True)
class IssuedCliToken:
    api_token: ApiToken
    secret: str
    user: UserRecord


class CliSignIns:
    """The command line's sign-ins, in the request's unit of work."""

    def __init__(self, db: AsyncSession, now: datetime, accounts: AccountService) -> None:
        """`accounts`: makes the API token, and records it in the audit log (with the unit of
        work's origin, audit/record.py `attach_origin`)."""
        self.db = db
        self.now = now
        self.accounts = accounts

    # -- loopback redirect ------------------------------------------------------------------

    async def approve_loopback(self, user: UserRecord, request: LoopbackRequest) -> str:
        """The person allowed it: a one-time code for the command line (its hash stored)."""
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        self.db.add(
            CliSignIn(
                id=new_id("cli"),
                kind=LOOPBACK,
                secret_hash=hash_token(code),
                user_code_hash=None,
                client_name=request.client_name,
                redirect_uri=request.redirect_uri,
                code_challenge=request.code_challenge,
                status=APPROVED,
                user_id=user.id,
                credentials_epoch=user.credentials_epoch,
                created_at=self.now,
                expires_at=self.now + LOOPBACK_CODE_LIFETIME,
                polled_at=None,
                interval_seconds=0,
            )
        )
        await self.db.flush()
        return code

    async def exchange_code(
        self, code: str, code_verifier: str, redirect_uri: str
    ) -> IssuedCliToken:
        """The API token for a loopback's code. The code is spent by the first try, right or
        wrong (RFC 6749 §4.1.2): a code replayed, or sent with another verifier or redirect
        URI, gets nothing."""
        sign_in = await self.db.scalar(
            update(CliSignIn)
            .where(
                CliSignIn.secret_hash == hash_token(code),
                CliSignIn.kind == LOOPBACK,
                CliSignIn.status == APPROVED,
                CliSignIn.expires_at > self.now,
            )
            .values(status=USED)
            .returning(CliSignIn)
            .execution_options(synchronize_session=False)
        )
        if sign_in is None:
            raise grant_error(
                "invalid_grant", "This code is unknown, was used already or has expired"
            )
        wrong = None
        if sign_in.redirect_uri != redirect_uri:
            wrong = "This code was given for another redirect URI"
        elif sign_in.code_challenge is None or not same_secret(
            pkce_challenge(code_verifier), sign_in.code_challenge
        ):
            wrong = "The code verifier does not match the code's challenge"
        if wrong is not None:
            raise grant_error("invalid_grant", wrong, keeps_writes=True)  # the code stays spent
        return await self._issue(sign_in)

    # -- device authorization grant ---------------------------------------------------------

    async def start_device(self, client_name: str | None, interval: int) -> DeviceGrant:
        fields = {
            "kind": DEVICE, "client_name": client_name_of(client_name), "redirect_uri": None,
            "code_challenge": None, "status": PENDING, "user_id": None,
            "credentials_epoch": None, "created_at": self.now,
            "expires_at": self.now + DEVICE_CODE_LIFETIME, "polled_at": None,
            "interval_seconds": interval,
        }  # fmt: skip
        # A user code is unique among the kept grants (one Allow reaches one command line):
        # one already drawn (a day's grants are kept) is drawn again, not a 500.
        while True:
            device_code = DEVICE_CODE_PREFIX + secrets.token_urlsafe(32)
            user_code = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))
            values = fields | {
                "id": new_id("cli"), "secret_hash": hash_token(device_code),
                "user_code_hash": hash_token(user_code),
            }  # fmt: skip
            if await insert_unless_present(self.db, CliSignIn, values):
                break
        return DeviceGrant(
            device_code,
            shown_user_code(user_code),
            int(DEVICE_CODE_LIFETIME.total_seconds()),
            interval,
        )

    async def waiting_device(
        self, entered: str, user: UserRecord, client_ip: str, limiter: RateLimiter
    ) -> WaitingDevice | None:
        """The device grant waiting for this user code (counted against the entry limits), or
        None if no live one has it."""
        await _count_entry(limiter, user.id, client_ip)
        code = normalise_user_code(entered)
        if code is None:
            return None
        sign_in = await self.db.scalar(
            select(CliSignIn).where(
                CliSignIn.user_code_hash == hash_token(code),
                CliSignIn.kind == DEVICE,
                CliSignIn.status == PENDING,
                CliSignIn.expires_at > self.now,
            )
        )
        return (
            None if sign_in is None else WaitingDevice(shown_user_code(code), sign_in.client_name)
        )

    async def decide_device(
        self, entered: str, user: UserRecord, allow: bool, client_ip: str, limiter: RateLimiter
    ) -> WaitingDevice:
        """The person allows (or refuses) the device grant of this user code; 404 if no live
        one waits for it."""
        await _count_entry(limiter, user.id, client_ip)
        code = normalise_user_code(entered)
        sign_in = None
        if code is not None:
            sign_in = await self.db.scalar(
                update(CliSignIn)
                .where(
                    CliSignIn.user_code_hash == hash_token(code),
                    CliSignIn.kind == DEVICE,
                    CliSignIn.status == PENDING,
                    CliSignIn.expires_at > self.now,
                )
                .values(
                    status=APPROVED if allow else DENIED,
                    user_id=user.id,
                    credentials_epoch=user.credentials_epoch,
                )
                .returning(CliSignIn)
                .execution_options(synchronize_session=False)
            )
        if sign_in is None or code is None:
            raise NotFound(
                "No command line waits for this code: it may be mistyped, used already or "
                "more than ten minutes old. Check the code the terminal shows, or run "
                "`buildbay login --sso` again",
                code="user_code_not_found",
            )
        return WaitingDevice(shown_user_code(code), sign_in.client_name)

    async def poll_device(self, device_code: str) -> IssuedCliToken:
        """The command line's poll: the API token once the person allowed it, else the RFC's
        refusal for where the grant is."""
        sign_in = await self.db.scalar(
            select(CliSignIn).where(
                CliSignIn.secret_hash == hash_token(device_code), CliSignIn.kind == DEVICE
            )
        )
        if sign_in is None or sign_in.status == USED:
            raise grant_error("invalid_grant", "This device code is unknown or was used already")
        if sign_in.expires_at <= self.now:
            raise grant_error(
                "expired_token", "This device code has expired: run `buildbay login --sso` again"
            )
        if sign_in.status == DENIED:
            raise grant_error("access_denied", "The sign-in was refused in the console")
        last, sign_in.polled_at = sign_in.polled_at, self.now
        if last is not None and self.now < last + timedelta(seconds=sign_in.interval_seconds):
            sign_in.interval_seconds += SLOW_DOWN_STEP
            raise grant_error(
                "slow_down",
                f"Polled too soon: wait {sign_in.interval_seconds} seconds between polls",
                keeps_writes=True,
            )
        if sign_in.status == PENDING:
            raise grant_error(
                "authorization_pending",
                "Waiting for the code to be entered and allowed in the console",
                keeps_writes=True,
            )
        claimed = await self.db.scalar(  # of two polls at once, one gets the token
            update(CliSignIn)
            .where(CliSignIn.id == sign_in.id, CliSignIn.status == APPROVED)
            .values(status=USED)
            .returning(CliSignIn.id)
            .execution_options(synchronize_session=False)
        )
        if claimed is None:
            raise grant_error("invalid_grant", "This device code was used already")
        return await self._issue(sign_in)

    # -- the token --------------------------------------------------------------------------

    async def _issue(self, sign_in: CliSignIn) -> IssuedCliToken:
        assert sign_in.user_id is not None
        assert sign_in.credentials_epoch is not None
        user = await user_by_id(Reads.within(self.db), sign_in.user_id)
        if user is None:  # deleted since it allowed the sign-in
            raise grant_error(
                "invalid_grant", "The account that allowed this sign-in is gone", keeps_writes=True
            )
        if user.credentials_epoch > sign_in.credentials_epoch:
            raise grant_error(
                "invalid_grant",
                "The account's password was reset since this sign-in was allowed",
                keeps_writes=True,
            )
        # The epoch as it was when the person allowed it: a password reset committed since
        # leaves this token dead (auth/models.py User).
        user = dataclasses.replace(user, credentials_epoch=sign_in.credentials_epoch)
        api_token, secret = await self.accounts.create_api_token(
            user,
            f"CLI on {sign_in.client_name}",
            CLI_TOKEN_DAYS,
            via={"via": "cli_sso", "grant": sign_in.kind},
        )
        return IssuedCliToken(api_token, secret, user)


async def _count_entry(limiter: RateLimiter, user_id: str, client_ip: str) -> None:
    for namespace, key, item in (
        ("cli-user-code-user", user_id, CODE_ENTRIES_PER_USER),
        ("cli-user-code-ip", client_ip, CODE_ENTRIES_PER_IP),
    ):
        if (wait := await limiter.throttle(namespace, key, item)) is not None:
            raise RateLimited(
                "Too many codes tried; wait before trying another",
                code="user_code_throttled",
                headers={"Retry-After": str(wait)},
            )


async def sweep_cli_sign_ins(db: AsyncSession, now: datetime) -> None:
    """Forget sign-ins a day after they expired (the sweeper's)."""
    await db.execute(delete(CliSignIn).where(CliSignIn.expires_at < now - timedelta(days=1)))
