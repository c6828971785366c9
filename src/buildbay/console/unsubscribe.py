"""The unsubscribe links of mails (mail/unsubscribe.py): a new-build mail's names the member,
an invitation mail's names the address invited.

No sign-in and no CSRF token: the signed link is the credential, and a mail client's one-click
POST (RFC 8058) comes from the mail provider's servers, with neither cookie nor form. Opening
the link only shows buttons, so that a link checker fetching it unsubscribes no one. A member's
page stops new-build mails; both pages block every invitation from this server to the address
(whatever project sends it), and allow them again (invitations/caps.py)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request, Response

from buildbay.auth.dependencies import account_service
from buildbay.auth.models import User
from buildbay.console.pages import ConsoleRoute, posted_form, see_other
from buildbay.deps import get_context, request_session
from buildbay.errors import NotFound
from buildbay.invitations.dependencies import invitation_service
from buildbay.invitations.service import InvitationService
from buildbay.mail.unsubscribe import UNSUBSCRIBE_PATH
from buildbay.templates import NO_STORE, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

# What the page says after its invitations form (a key of the address, never free text).
_DONE = {"blocked", "allowed"}


async def _whose(request: Request, token: str) -> tuple[User | None, str]:
    """The member a link names (None for an invitation mail's) and the address it is for."""
    links = get_context(request).unsubscribe
    address = links.address_of(token)
    if address is not None:
        return None, address
    user_id = links.user_named(token)
    user = await request_session(request).get(User, user_id) if user_id is not None else None
    # Also refused: a link of a mail to an address the account has left (its mailbox may be
    # someone else's now), which must neither show the present one nor act on the account.
    if user is None or not links.holds(token, user.id, user.email):
        raise NotFound("This unsubscribe link is not valid", code="invalid_unsubscribe_link")
    return user, user.email


def _invitations(request: Request) -> InvitationService:
    return invitation_service(get_context(request), request_session(request))


async def _page(
    request: Request, token: str, user: User | None, address: str, *, done: bool = False,
    invitations_done: str | None = None,
) -> Response:  # fmt: skip
    blocked = bool(await _invitations(request).caps.blocked([address]))
    return render(
        "console/unsubscribe.html", user=user, address=address, done=done, blocked=blocked,
        invitations_done=invitations_done, here=f"{UNSUBSCRIBE_PATH}/{token}", headers=NO_STORE,
    )  # fmt: skip


@router.get(UNSUBSCRIBE_PATH + "/{token}")
async def unsubscribe_page(request: Request, token: str) -> Response:
    user, address = await _whose(request, token)
    done = request.query_params.get("done")
    return await _page(request, token, user, address,
                       invitations_done=done if done in _DONE else None)  # fmt: skip


@router.post(UNSUBSCRIBE_PATH + "/{token}")
async def unsubscribe(request: Request, token: str) -> Response:
    """The one-click POST: a new-build mail's stops new-build mails, an invitation mail's
    blocks invitations."""
    user, address = await _whose(request, token)
    if user is None:
        await _invitations(request).caps.block(address)
        return await _page(request, token, None, address, invitations_done="blocked")
    service = account_service(get_context(request), request_session(request))
    unsubscribed = await service.unsubscribe_from_new_builds(user.id)
    if unsubscribed is None:
        raise NotFound("This account no longer exists", code="invalid_unsubscribe_link")
    return await _page(request, token, unsubscribed, address, done=True)


@router.post(UNSUBSCRIBE_PATH + "/{token}/invitations")
async def invitations(request: Request, token: str) -> Response:
    """The page's form: block (`action=block`) or allow again (`action=allow`) invitations."""
    _, address = await _whose(request, token)
    action: Literal["block", "allow"] = (
        "allow" if (await posted_form(request)).get("action") == "allow" else "block"
    )
    caps = _invitations(request).caps
    await (caps.unblock(address) if action == "allow" else caps.block(address))
    done = "allowed" if action == "allow" else "blocked"
    return see_other(f"{UNSUBSCRIBE_PATH}/{token}?done={done}")
