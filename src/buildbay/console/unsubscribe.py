"""The one-click unsubscribe link of notification mails (mail/unsubscribe.py).

No sign-in and no CSRF token: the signed link is the credential, and a mail client's one-click
POST (RFC 8058) comes from the mail provider's servers, with neither cookie nor form. Opening
the link only shows a button, so that a link checker fetching it unsubscribes no one."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from buildbay.auth.dependencies import make_auth_service
from buildbay.auth.models import User
from buildbay.console.pages import ConsoleRoute
from buildbay.deps import get_context, request_session
from buildbay.errors import NotFound
from buildbay.mail.unsubscribe import UNSUBSCRIBE_PATH
from buildbay.templates import NO_STORE, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def _user_id(request: Request, token: str) -> str:
    user_id = get_context(request).unsubscribe.user_of(token)
    if user_id is None:
        raise NotFound("This unsubscribe link is not valid", code="invalid_unsubscribe_link")
    return user_id


@router.get(UNSUBSCRIBE_PATH + "/{token}")
async def unsubscribe_page(request: Request, token: str) -> Response:
    user_id = _user_id(request, token)
    user = await request_session(request).get(User, user_id)
    if user is None:
        raise NotFound("This account no longer exists", code="invalid_unsubscribe_link")
    return render("console/unsubscribe.html", user=user, done=False, headers=NO_STORE)


@router.post(UNSUBSCRIBE_PATH + "/{token}")
async def unsubscribe(request: Request, token: str) -> Response:
    user_id = _user_id(request, token)
    service = make_auth_service(get_context(request), request_session(request))
    user = await service.unsubscribe_from_new_builds(user_id)
    if user is None:
        raise NotFound("This account no longer exists", code="invalid_unsubscribe_link")
    return render("console/unsubscribe.html", user=user, done=True, headers=NO_STORE)
