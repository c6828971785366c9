"""The public install page of a build, its iOS manifest, its download and its icon.

No token: the signed link is the credential (builds/install.py). A browser that asks for HTML
gets an HTML page for whatever is refused (an unknown (404), expired or revoked (410) link, too
many requests (429)); other clients get the usual problem+json. The pages and their downloads
have a per-IP budget of their own (INSTALL_PAGES_PER_MINUTE_PER_IP), well above the API's for
anonymous callers: a team of testers behind one office NAT opens them at once.

A personal link (a tester's own) counts what is done through it as its person's, and is refused
(403) to anyone else signed in on the browser: its person's report stays theirs alone.
"""

from __future__ import annotations

import io
import logging
import plistlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import segno
from fastapi import APIRouter, Depends, Path, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.dependencies import client_ip, count_budget
from buildbay.builds.dependencies import (
    LinkReads,
    RecordingLinkReads,
    build_reads,
    build_service,
    install_link_reads,
)
from buildbay.builds.devices import apple_model_of, device_of, is_android_build, is_ios_build
from buildbay.builds.enums import BuildStatus
from buildbay.builds.install import InstallLinkReads, InstallTarget
from buildbay.builds.removed import linked_build, newest_for
from buildbay.builds.schemas import version_label
from buildbay.builds.service import human_size
from buildbay.console.feedback_form import (
    SENT,
    FeedbackForm,
    FeedbackRefused,
    receive_feedback,
)
from buildbay.console.session import ConsoleSessions
from buildbay.console_urls import OWN_FEEDBACK_PATH, build_url
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import Context, SessionDep, TransactionRoute, request_session
from buildbay.devices.links import register_device_path
from buildbay.devices.profiles import known_scope
from buildbay.devices.records import ProfileScope
from buildbay.devices.viewer import ViewerDevices, viewer_devices
from buildbay.distribution.installs import record as record_install
from buildbay.distribution.models import InstallEventKind
from buildbay.errors import BuildbayError, Gone, NotFound
from buildbay.feedback.dependencies import count_reporter
from buildbay.feedback.records import Sender
from buildbay.feedback.service import Senders
from buildbay.problems import problem_responses
from buildbay.templates import NO_STORE, render
from buildbay.text import without_bidi_controls

log = logging.getLogger("buildbay.install")


class InstallPageRoute(TransactionRoute):
    """What a route of the install pages refuses a browser is a page of its own."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except BuildbayError as exc:
                if "text/html" not in request.headers.get("accept", "") or exc.status >= 500:
                    raise
                return _refusal_page(exc)

        return route


def _refusal_page(exc: BuildbayError) -> Response:
    if exc.status == status.HTTP_429_TOO_MANY_REQUESTS:
        wait = exc.headers.get("Retry-After", "60")
        return render(
            "install_error.html", exc.status, headers={**NO_STORE, **exc.headers},
            title="Too many requests right now",
            detail="Many people on your network opened install pages in the last minute.",
            hint=f"Try again in {wait} seconds.",
        )  # fmt: skip
    if exc.status == status.HTTP_403_FORBIDDEN:
        return render(
            "install_error.html", exc.status, headers=NO_STORE,
            title="This install link is someone else's", detail=exc.detail,
            hint="Your own install link is in your mail, and the build on your console page.",
        )  # fmt: skip
    title = "Install link not found" if exc.status == 404 else "Install link no longer works"
    return render("install_error.html", exc.status, title=title, detail=exc.detail)


async def limit_install_pages(ctx: Context, request: Request) -> None:
    """Per client IP, a budget of the install pages' own (not the API's anonymous one)."""
    await count_budget(
        ctx, request, f"install-ip:{client_ip(request)}",
        ctx.settings.install_pages_per_minute_per_ip, "install-pages",
        "More than {limit} install page requests in a minute from this address",
    )  # fmt: skip


router = APIRouter(
    prefix="/install/{token}",
    tags=["install pages"],
    route_class=InstallPageRoute,
    dependencies=[Depends(limit_install_pages)],
)

# No length rule here: a token that is too long is just not one of ours (404, as HTML for a
# browser), not a validation error.
Token = Annotated[str, Path(description="The signed token of the install link")]


async def _open(token: str, request: Request, links: InstallLinkReads) -> InstallTarget:
    """The link's target, for whoever is signed in on this browser (if anyone)."""
    console: ConsoleSessions = request.app.state.console
    return await links.open(token, lambda: console.signed_in(request, links.reads, links.now))


def _when(moment: datetime) -> str:
    return moment.strftime("%d %b %Y, %H:%M UTC")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# The system a desktop application's minimum OS version (`minOs`) is of.
_DESKTOP_SYSTEMS = {"macos": "macOS", "windows": "Windows", "linux": "Linux"}


def _is_ios(target: InstallTarget) -> bool:
    return is_ios_build(target.build.file_name)


@router.get(
    "",
    response_class=HTMLResponse,
    responses={
        200: {"content": {"text/html": {}}, "description": "The install page"},
        **problem_responses(403, 404, 410, 429),
    },
    summary="A build's public install page (a signed link; no token)",
)
async def install_page(
    token: Token, request: Request, links: RecordingLinkReads, db: SessionDep, ctx: Context
) -> Response:
    try:
        target = await _open(token, request, links)
    except Gone as exc:  # refused: a page for a browser (InstallPageRoute), or the newer build
        offer = await _newer_build_page(ctx, token, request, links, exc)
        if offer is None:
            raise
        return offer
    sent = request.query_params.get("sent") == "1"
    if not sent:  # the page again after its feedback form went through is no new open
        await _record(db, request, links, target, InstallEventKind.OPEN)
    notice = SENT if sent and target.link.owner_id is not None else None
    return await _page(request, token, links, target, _feedback_form(token, target), notice)


def _feedback_form(token: str, target: InstallTarget) -> FeedbackForm | None:
    """A personal link's page takes feedback from its person (its token says who); a shared
    link's names nobody."""
    if target.link.owner_id is None or target.build.status is not BuildStatus.READY:
        return None
    return FeedbackForm(action=f"/install/{token}/feedback")


async def _page(
    request: Request,
    token: str,
    links: InstallLinkReads,
    target: InstallTarget,
    feedback: FeedbackForm | None,
    notice: str | None = None,
    status_code: int = 200,
) -> Response:
    build, application = target.build, target.application
    metadata = build.metadata_ or {}
    page_url = links.url(target.link)
    ios = _is_ios(target)
    min_os = None
    if metadata.get("minOs"):
        system = _DESKTOP_SYSTEMS.get(application.platform, "iOS" if ios else "OS")
        min_os = f"{system} {metadata['minOs']}"
    elif metadata.get("minSdk"):
        min_os = f"Android API {metadata['minSdk']}"
    provisioning = metadata.get("provisioning") or {}
    profile = None
    if provisioning.get("type"):
        profile = provisioning["type"]
        if provisioning.get("expiresAt"):
            profile += f", expires {provisioning['expiresAt'][:10]}"
    https = page_url.startswith("https://")
    if ios and not https:
        log.warning(
            "install page of iOS build %s shown with Install turned off: the public URL %s is "
            "not https://, and iOS installs over the air only from https (set "
            "BUILDBAY_PUBLIC_URL to the https:// address of a TLS proxy; docs/operations.md)",
            build.id, links.public_url,  # never the page's address: it holds the link's token
        )  # fmt: skip
    qr = segno.make(page_url, error="m")
    shown = await _viewer_devices(token, request, links, target) if ios else _NO_DEVICES
    return render(
        "install.html",
        status_code,
        # The buttons depend on the device: a cache must not hand an iPhone's page to Android.
        headers={**NO_STORE, "Vary": "User-Agent"},
        feedback=feedback,
        notice=notice,
        own_feedback=OWN_FEEDBACK_PATH,
        team_build_page=build_url("", application.project_id, application.id, build.id)
        + "#feedback",
        device=device_of(request.headers.get("user-agent")).value,
        name=_shown(metadata.get("appName") or application.name),
        version=_shown(version_label(metadata)),
        icon_url=f"{page_url}/icon.png" if build.has_icon else None,
        ios=ios,
        android=is_android_build(build.file_name),
        apk=build.file_name.lower().endswith(".apk"),
        bundle=build.file_name.lower().endswith(".aab"),
        https=https,
        itms_url="itms-services://?action=download-manifest&url="
        + quote(f"{page_url}/manifest.plist", safe=""),
        download_url=f"{page_url}/download",
        file_name=_shown(build.file_name),
        size=human_size(build.file_size),
        uploaded=_when(build.verified_at or build.created_at),
        uploaded_iso=_iso(build.verified_at or build.created_at),
        identifier=_shown(metadata.get("bundleId") or metadata.get("packageName")),
        min_os=_shown(min_os),
        profile=_shown(profile),
        expires=_when(target.link.expires_at),
        expires_iso=_iso(target.link.expires_at),
        notes=_shown(build.notes),
        qr_svg=Markup(qr.svg_inline(scale=5, border=2, title=f"QR code of {page_url}")),  # noqa: S704
        devices=shown.devices,
        register_url=shown.register_url,
        sign_in_url=shown.sign_in_url,
    )


@dataclass(frozen=True, slots=True)
class _DevicesShown:
    """What the page of an ad-hoc or development .ipa says of its viewer's devices (before the
    Install button), and where it offers to register the device in hand, or to sign in first."""

    devices: ViewerDevices | None = None
    register_url: str | None = None
    sign_in_url: str | None = None


_NO_DEVICES = _DevicesShown()


async def _viewer_devices(
    token: str, request: Request, links: InstallLinkReads, target: InstallTarget
) -> _DevicesShown:
    """The viewer is a personal link's person, else whoever is signed in on this browser;
    nobody for a shared link opened signed out (offered to sign in and come back)."""
    build = target.build
    scope = await known_scope(links.reads, build.id, build.file_name, build.metadata_)
    if scope is not ProfileScope.LISTED:
        return _NO_DEVICES
    if target.link.owner_id is not None:
        viewer_id: str | None = target.link.owner_id
        register_url = register_device_path(install_token=token)
    else:
        console: ConsoleSessions = request.app.state.console
        viewer_id = await console.signed_in(request, links.reads, links.now)
        register_url = register_device_path(build_id=build.id)
    if viewer_id is None:
        return _DevicesShown(sign_in_url=f"/login?{urlencode({'next': f'/install/{token}'})}")
    opened_on = apple_model_of(request.headers.get("user-agent"))
    devices = await viewer_devices(links.reads, viewer_id, build.id, scope, opened_on)
    return _DevicesShown(devices, register_url)


async def _newer_build_page(
    ctx: AppContext, token: str, request: Request, links: InstallLinkReads, gone: Gone
) -> Response | None:
    """For a browser, the page of a link whose build was deleted or whose time is up: it offers
    whoever is signed in the newest build of the application they may open (removed.py), or
    asks them to sign in to find it. None: the plain refusal."""
    if gone.code not in _DEAD_ENDS or "text/html" not in request.headers.get("accept", ""):
        return None
    link_id = links.tokens.link_id(token)
    linked = await linked_build(links.reads, link_id) if link_id is not None else None
    if linked is None:
        return None
    console: ConsoleSessions = request.app.state.console
    visitor_id = await console.signed_in(request, links.reads, links.now)
    if visitor_id is None:
        return render(
            "install_error.html", gone.status, headers=NO_STORE,
            title="Install link no longer works", detail=gone.detail,
            hint="If this build was meant for you, sign in: the newest build for you is offered "
            "there.",
            sign_in_url=f"/login?{urlencode({'next': f'/install/{token}'})}",
        )  # fmt: skip
    newest = await newest_for(build_reads(ctx, links.reads), linked, visitor_id)
    if newest is None:
        return None
    label = _shown(version_label(newest.metadata_) or newest.file_name)
    title = f"{_shown(linked.label)} was removed" if linked.removed else _DEAD_ENDS[gone.code]
    if newest.id == linked.build_id:
        detail = f"{label} is still yours: open it from your builds for a new install link."
    else:
        detail = f"The newest build for you is {label}."
    return render(
        "install_error.html", gone.status, headers=NO_STORE, title=title, detail=detail,
        hint="", offer_label=f"Open {label}",
        offer_url=f"/projects/{linked.project_id}/apps/{linked.application_id}#build-{newest.id}",
    )  # fmt: skip


# The refusals whose page offers a newer build: the link's build was deleted, or it expired.
_DEAD_ENDS = {
    "install_link_gone": "This build was removed",
    "install_link_expired": "This install link has expired",
}


async def _record(
    db: AsyncSession,
    request: Request,
    links: InstallLinkReads,
    target: InstallTarget,
    kind: InstallEventKind,
) -> None:
    # Through a personal link: its person's (a shared link's opens are nobody's).
    await record_install(db, target.build, kind, links.now, request.headers.get("user-agent"),
                         user_id=target.link.owner_id, link_id=target.link.id)  # fmt: skip


def _shown(value: object) -> str | None:
    """Text for the page: a tester must read what is there, so no bidirectional control (which
    new names, file names and metadata cannot hold; this covers rows stored before that)."""
    return without_bidi_controls(str(value)) if value else None


async def _download(
    ctx: AppContext, db: AsyncSession, request: Request, target: InstallTarget
) -> str:
    """The file's address, and the download recorded and told as every download is."""
    service = build_service(ctx, db)
    user_agent = request.headers.get("user-agent")
    return await service.download_through_link(target.build, target.link, user_agent)


@router.get(
    "/download",
    status_code=status.HTTP_302_FOUND,
    response_class=RedirectResponse,
    responses={
        302: {"description": "Redirect to a short-lived signed address of the file"},
        **problem_responses(403, 404, 410, 429),
    },
    summary="Download the build of an install link: 302 to a short-lived signed URL",
)
async def install_download(
    token: Token, links: RecordingLinkReads, ctx: Context, db: SessionDep, request: Request
) -> RedirectResponse:
    target = await _open(token, request, links)
    url = await _download(ctx, db, request, target)
    return RedirectResponse(url, status_code=status.HTTP_302_FOUND)


@router.get(
    "/manifest.plist",
    response_class=Response,
    responses={
        200: {"content": {"application/xml": {}}, "description": "The itms-services manifest"},
        **problem_responses(403, 404, 410, 429),
    },
    summary="The iOS over-the-air install manifest of an .ipa's install link",
)
async def install_manifest(
    token: Token, links: RecordingLinkReads, ctx: Context, db: SessionDep, request: Request
) -> Response:
    target = await _open(token, request, links)
    if not _is_ios(target):
        raise NotFound("Only an .ipa build has an iOS manifest", code="manifest_not_found")
    # The device fetches the file itself from the manifest's address: this is the download.
    file_url = await _download(ctx, db, request, target)
    metadata = target.build.metadata_ or {}
    assets = [{"kind": "software-package", "url": file_url}]
    if target.build.has_icon:
        assets.append({"kind": "display-image", "url": f"{links.url(target.link)}/icon.png"})
    manifest = {
        "items": [
            {
                "assets": assets,
                "metadata": {
                    "bundle-identifier": metadata.get("bundleId") or target.application.bundle_id,
                    "bundle-version": metadata.get("shortVersion") or "",
                    "kind": "software",
                    "title": metadata.get("appName") or target.application.name,
                },
            }
        ]
    }
    return Response(plistlib.dumps(manifest), media_type="application/xml", headers=NO_STORE)


@router.get(
    "/icon.png",
    response_class=Response,
    responses={
        200: {"content": {"image/png": {}}, "description": "The app icon"},
        **problem_responses(403, 404, 410, 429),
    },
    summary="The app icon of an install link's build",
)
async def install_icon(token: Token, links: LinkReads, ctx: Context, request: Request) -> Response:
    target = await _open(token, request, links)
    png = await build_reads(ctx, links.reads).icon(target.build)
    return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})


@router.get(
    "/qr.png",
    response_class=Response,
    responses={
        200: {"content": {"image/png": {}}, "description": "The QR code of the install page"},
        **problem_responses(403, 404, 410, 429),
    },
    summary="The QR code of an install link's page, as a PNG (a CI job's summary shows it)",
)
async def install_qr(token: Token, links: LinkReads, request: Request) -> Response:
    """An image by its address, as GitHub's job summaries show one (they drop `data:` URIs and
    inline SVG): only for a link that opens, the same code as the page shows."""
    target = await _open(token, request, links)
    out = io.BytesIO()
    segno.make(links.url(target.link), error="m").save(out, kind="png", scale=4, border=2)
    return Response(
        out.getvalue(), media_type="image/png", headers={"Cache-Control": "private, max-age=3600"}
    )


@router.post(
    "/feedback",
    response_class=HTMLResponse,
    responses={
        303: {"description": "Sent: back to the install page, which says so"},
        **problem_responses(400, 403, 404, 410, 413, 422, 429),
    },
    summary="Send feedback from a personal install link's page (its form, multipart/form-data)",
)
async def install_feedback(token: Token, request: Request, ctx: Context) -> Response:
    """The install page's "Send feedback" form: its person, as the API's `Authorization:
    InstallLink` (feedback/service.py `Senders.install_link`), decided before the body is read
    on reads of its own; then the form, stored in the request's unit of work."""
    # No check of the Origin: the page's referrer policy has the browser send `Origin: null`,
    # and the token in the address is the credential, which another site's form cannot know.
    form = FeedbackForm(action=f"/install/{token}/feedback")
    try:
        await receive_feedback(request, ctx, form, lambda: _link_sender(ctx, request, token))
    except FeedbackRefused as refused:
        links = install_link_reads(ctx, Reads.within(request_session(request)))
        target = await _open(token, request, links)
        return await _page(request, token, links, target, refused.form, None, refused.status)
    return RedirectResponse(f"/install/{token}?sent=1#feedback", status_code=303)


async def _link_sender(ctx: AppContext, request: Request, token: str) -> Sender:
    settings = ctx.settings
    await count_budget(
        ctx, request, f"feedback-ip:{client_ip(request)}", settings.feedback_per_minute_per_ip,
        "feedback-ip", "More than {limit} feedback in a minute from this address (feedback-ip)",
    )  # fmt: skip
    console: ConsoleSessions = request.app.state.console
    reads = Reads.on(ctx.read_engine)
    try:
        links = install_link_reads(ctx, reads)

        async def visitor() -> str | None:
            return await console.signed_in(request, reads, links.now)

        target = await links.open(token, visitor)
        application = target.application
        senders = Senders(reads, links.now, build_reads(ctx, reads), links)
        sender = await senders.install_link(
            token, application.project_id, application.id, target.build.id, visitor
        )
    finally:
        await reads.close()
    assert sender.tester is not None  # a personal link's person
    await count_reporter(ctx, request, sender.tester.id)
    return sender
