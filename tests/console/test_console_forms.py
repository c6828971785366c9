"""The console's forms without a browser (through the app itself): login throttling as for the
API, no open redirect after login, HTML error pages, and the session cookie's rules."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html import unescape

import httpx
import pytest
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from tests.conftest import BASE_URL, Api, assert_problem

ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
async def browser_like(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that keeps cookies as a browser does: the console's are Secure, so it speaks
    https (to the app itself, in process)."""
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def _csrf(browser_like: httpx.AsyncClient, path: str = "/login") -> str:
    page = await browser_like.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found.group(1)


async def test_failed_logins_are_throttled_as_for_the_api(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    await api.register("ada@example.com", "correct horse")
    csrf = await _csrf(browser_like)
    wrong = {"csrf": csrf, "email": "ada@example.com", "password": "wrong password"}
    first = await browser_like.post("/login", data=wrong, headers=ORIGIN)
    assert first.status_code == 401
    assert "E-mail or password is wrong" in first.text
    answers = [(await browser_like.post("/login", data=wrong, headers=ORIGIN)).status_code
               for _ in range(11)]  # fmt: skip
    assert 429 in answers
    throttled = await browser_like.post(
        "/login",
        data={"csrf": csrf, "email": "ada@example.com", "password": "correct horse"},
        headers=ORIGIN,
    )
    assert throttled.status_code == 429  # even the right password waits
    assert "Too many failed logins" in throttled.text


async def test_login_goes_back_to_a_page_of_this_site_only(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    await api.register("ada@example.com", "correct horse")
    csrf = await _csrf(browser_like)
    for target, expected in (("/account", "/account"), ("//evil.example/x", "/projects"),
                             ("https://evil.example", "/projects")):  # fmt: skip
        r = await browser_like.post(
            "/login",
            data={
                "csrf": csrf,
                "email": "ada@example.com",
                "password": "correct horse",
                "next": target,
            },
            headers=ORIGIN,
        )
        assert r.status_code == 303, r.text
        assert r.headers["location"] == expected
        browser_like.cookies.delete("bb_session")
        csrf = await _csrf(browser_like)


async def test_pages_answer_in_html_with_the_right_status(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    assert (await browser_like.get("/projects")).headers["location"] == "/login?next=/projects"
    await api.register("ada@example.com", "correct horse")
    csrf = await _csrf(browser_like)
    r = await browser_like.post(
        "/login",
        data={"csrf": csrf, "email": "ada@example.com", "password": "correct horse"},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    missing = await browser_like.get("/projects/prj_00000000000000000000000000")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("text/html")
    assert "No project with this id" in missing.text
    assert (await browser_like.get("/static/console.css")).status_code == 200


async def test_the_browser_uploads_json_endpoints_answer_problems_as_the_api(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    """The console's script asks for an upload address and a verify with JSON: a refusal is
    RFC 9457 problem+json with the API's code and sentence, never a field dump or HTML."""
    owner = await api.register("ada@example.com", "correct horse")
    project = await api.project(owner)
    app_id = (await api.application(owner, project["id"]))["id"]
    csrf = await _csrf(browser_like)
    r = await browser_like.post(
        "/login",
        data={"csrf": csrf, "email": "ada@example.com", "password": "correct horse"},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    page_path = f"/projects/{project['id']}/apps/{app_id}"
    page = await browser_like.get(page_path)
    found = re.search(r'data-csrf="([^"]+)"', page.text)
    assert found, page.text[:300]
    headers = {**ORIGIN, "X-CSRF-Token": found.group(1)}
    start = f"{page_path}/uploads"

    too_big = await browser_like.post(
        start, json={"fileName": "a.apk", "fileSize": 1 << 40}, headers=headers
    )
    body = assert_problem(too_big, 413, "file_too_large")
    assert body["detail"].startswith("This file (1024 GiB) is larger than the free plan's")
    assert "largest build file" in body["detail"]

    invalid = await browser_like.post(start, json={"fileName": "a/b.apk"}, headers=headers)
    body = assert_problem(invalid, 422, "validation_error")
    assert {e["field"] for e in body["errors"]} == {"fileName", "fileSize"}
    assert "fileName:" not in body["detail"]  # sentences, never a field dump

    not_json = await browser_like.post(
        start, content=b"{", headers={**headers, "Content-Type": "application/json"}
    )
    assert_problem(not_json, 400, "malformed_json")

    link = await browser_like.post(
        start, json={"fileName": "a.apk", "fileSize": 5}, headers=headers
    )
    assert link.status_code == 201, link.text
    unverified = await browser_like.post(
        f"{start}/{link.json()['buildId']}/verify", json={"notes": "n"}, headers=headers
    )
    assert_problem(unverified, 422, "upload_incomplete")

    # The endpoint decides, not what the request sent: a JSON endpoint answers a form with
    # problem+json, and a page answers JSON with its HTML error page.
    form = await browser_like.post(f"{start}/bld_00000000000000000000000000/verify",
                                   data={"notes": "n"}, headers=headers)  # fmt: skip
    assert_problem(form, 400, "malformed_json")
    missing_page = await browser_like.post(
        f"{page_path}/builds/bld_00000000000000000000000000/delete", json={}, headers=headers
    )
    assert missing_page.status_code in (403, 404)
    assert missing_page.headers["content-type"].startswith("text/html")


async def test_a_tester_cannot_change_channels_releases_or_the_update_key(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    """The console hides these forms from testers; the server refuses them anyway."""
    owner = await api.register("ada@example.com", "correct horse")
    project = await api.project(owner)
    app_id = (await api.application(owner, project["id"]))["id"]
    tester = await api.register("tess@example.com", "correct horse")
    await api.add_member(owner, project["id"], tester, "tester")
    csrf = await _csrf(browser_like)
    r = await browser_like.post(
        "/login",
        data={"csrf": csrf, "email": tester.email, "password": "correct horse"},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    page_path = f"/projects/{project['id']}/apps/{app_id}"
    csrf = await _csrf(browser_like, page_path)
    for action, data in [
        ("channels", {"name": "beta"}),
        ("update-key", {}),
        ("builds/bld_00000000000000000000000000/release", {"channel": "default"}),
        ("builds/bld_00000000000000000000000000/rollout", {"channel": "default", "percent": "5"}),
    ]:
        refused = await browser_like.post(
            f"{page_path}/{action}", data={"csrf": csrf, **data}, headers=ORIGIN
        )
        assert refused.status_code == 403, (action, refused.text[:300])
        assert "text/html" in refused.headers["content-type"]


@pytest.mark.parametrize(
    ("public_url", "session_cookie", "secure"),
    [
        ("https://builds.example.com", "__Host-bb_session", True),
        ("http://192.168.1.20:8000", "bb_session", False),
    ],
    ids=["https", "plain-http-lan"],
)
async def test_cookies_are_secure_and_host_only_exactly_when_the_public_url_is_https(
    settings: Settings, clock: FrozenClock, public_url: str, session_cookie: str, secure: bool
) -> None:
    """A browser drops Secure cookies sent over plain HTTP to a LAN address: sign-up there
    looped on "security token out of date". Over https they are Secure and __Host- prefixed."""
    app = create_app(settings.model_copy(update={"public_url": public_url}), clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=public_url) as browser:
            form = await browser.get("/signup")
            found = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert found, form.text[:300]
            r = await browser.post(
                "/signup",
                data={"csrf": found.group(1), "email": "lan@example.com", "name": "Lan",
                      "password": "correct horse"},
                headers={"Origin": public_url},
            )  # fmt: skip
            assert r.status_code == 303, r.text
            cookies = {c.split("=", 1)[0]: c for c in r.headers.get_list("set-cookie")}
            assert set(cookies) == {session_cookie, session_cookie.replace("session", "csrf")}
            for cookie in cookies.values():
                assert "HttpOnly" in cookie
                assert "SameSite=lax" in cookie
                assert "Path=/" in cookie
                assert "Domain" not in cookie
                assert ("Secure" in cookie) is secure
            assert (await browser.get("/projects")).status_code == 200  # signed in


async def test_a_taken_name_is_shown_beside_the_field_of_each_form(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    owner = await api.register("ada@example.com", "correct horse")
    project = await api.project(owner, "Acme")
    beta = await api.project(owner, "Beta")
    await api.application(owner, project["id"], "Acme Android")
    csrf = await _csrf(browser_like)
    r = await browser_like.post(
        "/login",
        data={"csrf": csrf, "email": "ada@example.com", "password": "correct horse"},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    csrf = await _csrf(browser_like, "/projects")
    for path, name, sentence in [
        ("/projects", "acme", "You already own a project named acme"),
        (f"/projects/{beta['id']}/rename", "ACME",
         "An owner of this project already owns a project named ACME"),
        (f"/projects/{project['id']}/applications", "acme android",
         "The project already has an application named acme android"),
    ]:  # fmt: skip
        r = await browser_like.post(path, data={"csrf": csrf, "name": name}, headers=ORIGIN)
        assert r.status_code == 409, (path, r.text[:300])
        assert "text/html" in r.headers["content-type"]
        assert f'role="alert">{sentence}</p>' in r.text, (path, r.text)
        assert f'value="{name}"' in r.text  # the field keeps what was typed


async def test_the_only_owner_is_not_offered_to_leave(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    owner = await api.register("ada@example.com", "correct horse")
    project = await api.project(owner, "Acme")
    csrf = await _csrf(browser_like)
    r = await browser_like.post(
        "/login",
        data={"csrf": csrf, "email": "ada@example.com", "password": "correct horse"},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    alone = (await browser_like.get(f"/projects/{project['id']}")).text
    assert ">Leave</button>" not in alone
    assert "The only owner: make someone else owner to leave" in alone

    await api.add_member(owner, project["id"], await api.register(), "owner")
    shared = (await browser_like.get(f"/projects/{project['id']}")).text
    assert ">Leave</button>" in shared


async def test_every_page_names_the_icon_that_the_server_serves(
    browser_like: httpx.AsyncClient,
) -> None:
    page = await browser_like.get("/login")
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page.text
    icon = await browser_like.get("/static/favicon.svg")
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg ")
    legacy = await browser_like.get("/favicon.ico")
    assert (legacy.status_code, legacy.headers["location"]) == (301, "/static/favicon.svg")


HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.mark.parametrize(
    ("address", "page"),
    [
        ("/account/tokens", "/account"),  # reloading after creating a token
        ("/account/tokens/tok_01/revoke", "/account"),
        ("/projects", None),  # a page itself: no redirect
        ("/projects/prj_01/members/usr_01/role", "/projects/prj_01"),
        (
            "/projects/prj_01/apps/app_01/builds/bld_01/delete",
            "/projects/prj_01/apps/app_01/builds/bld_01",
        ),
    ],
)
async def test_a_browser_opening_a_form_address_goes_to_its_page(
    browser_like: httpx.AsyncClient, address: str, page: str | None
) -> None:
    r = await browser_like.get(address, headers=HTML)

    if page is None:
        assert r.headers["location"].startswith("/login")  # the page, once signed in
    else:
        assert r.status_code == 303, r.text
        assert r.headers["location"] == page
    assert not r.headers.get("content-type", "").startswith("application/")


async def test_an_unknown_console_address_is_a_page_and_the_api_keeps_problem_json(
    browser_like: httpx.AsyncClient,
) -> None:
    page = await browser_like.get("/no/such/page", headers=HTML)
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "There is no page at this address" in page.text

    api = await browser_like.get("/api/no/such/endpoint", headers=HTML)
    assert_problem(api, 404, "not_found")
    form = await browser_like.get("/account/tokens")  # a script, not a browser: as before
    assert_problem(form, 405, "method_not_allowed")


async def _refused(browser: httpx.AsyncClient, path: str, form: dict[str, str],
                   page: str | None = None) -> list[str]:  # fmt: skip
    """The error sentences of a refused form, in the page's order."""
    csrf = await _csrf(browser, page or path)
    r = await browser.post(path, data={"csrf": csrf, **form}, headers=ORIGIN)
    assert r.status_code in (409, 422), r.text[:300]
    found = re.findall(r'<p class="error[^"]*" id="e-[^"]+" role="alert">(.*?)</p>', r.text, re.S)
    return [unescape(text).strip() for text in found]


async def test_refused_forms_say_what_is_wrong_in_sentences(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    b = browser_like
    assert await _refused(b, "/signup", {"email": "ada", "password": "short"}) == [
        "Enter a valid e-mail address, like name@example.com.",
        "The password needs at least 8 characters.",
    ]
    assert await _refused(b, "/signup", {"email": "", "password": "x" * 200}) == [
        "Enter an e-mail address.",
        "The password can be at most 128 characters.",
    ]
    owner = await api.register("ada@example.com")
    csrf = await _csrf(b)
    signed_in = await b.post("/login", headers=ORIGIN, data={
        "csrf": csrf, "email": owner.email, "password": owner.password,
    })  # fmt: skip
    assert signed_in.status_code == 303
    assert await _refused(b, "/projects", {"name": ""}) == ["Enter a name."]
    assert await _refused(b, "/projects", {"name": "x" * 101}) == [
        "The name can be at most 100 characters."
    ]
    assert await _refused(b, "/projects", {"name": "   "}) == ["The name cannot be blank."]
    tokens = "/account/tokens"
    assert await _refused(b, tokens, {"name": "ci", "expiresInDays": "0"}, "/account") == [
        "The number of days must be at least 1."
    ]
    assert await _refused(b, tokens, {"name": "ci", "expiresInDays": "soon"}, "/account") == [
        "The number of days must be a whole number."
    ]
    project = f"/projects/{(await api.project(owner))['id']}"
    valid_email = ["Enter a valid e-mail address, like name@example.com."]
    bob = {"email": "bob", "role": "tester"}
    assert await _refused(b, f"{project}/members", bob, project) == valid_email
    assert await _refused(b, f"{project}/members", {"email": "b@example.com", "role": "king"},
                          project) == ["Choose a role from the list."]  # fmt: skip
    assert await _refused(b, f"{project}/invitations", bob, project) == valid_email
    app = {"name": "Acme iOS", "platform": "ios", "bundleId": "not valid!"}
    assert await _refused(b, f"{project}/applications", app, project) == [
        "A bundle id is letters, digits, dots, dashes and underscores, like com.example.app."
    ]
    assert await _refused(b, f"{project}/groups", {"name": "q" * 101}) == [
        "The name can be at most 100 characters."
    ]
    hook = {"url": "ftp://example.com/hook", "events": "build.ready", "description": ""}
    assert await _refused(b, f"{project}/webhooks", hook) == [
        "The address must be an https:// URL."
    ]


async def test_install_from_the_console_opens_the_install_page_of_a_build_given_to_the_tester(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    owner = await api.register("olga@example.com")
    tester = await api.register("tess@example.com")
    project = await api.project(owner)
    app = await api.application(owner, project["id"], autoDistributeGroups=[])
    await api.add_member(owner, project["id"], tester, "tester")
    given = await api.upload(owner, project["id"], app["id"], file_name="Acme.ipa")
    kept = await api.upload(owner, project["id"], app["id"], file_name="Acme.ipa")
    r = await api.client.post(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds/{given['buildId']}/distribute",
        json={"emails": [tester.email], "notify": False},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    csrf = await _csrf(browser_like)
    signed_in = await browser_like.post("/login", headers=ORIGIN, data={
        "csrf": csrf, "email": tester.email, "password": tester.password,
    })  # fmt: skip
    assert signed_in.status_code == 303
    app_path = f"/projects/{project['id']}/apps/{app['id']}"
    csrf = await _csrf(browser_like, app_path)

    installed = await browser_like.post(
        f"{app_path}/builds/{given['buildId']}/install", data={"csrf": csrf}, headers=ORIGIN
    )
    assert installed.status_code == 303, installed.text
    assert "/install/" in installed.headers["location"]
    again = await browser_like.post(
        f"{app_path}/builds/{given['buildId']}/install", data={"csrf": csrf}, headers=ORIGIN
    )
    assert again.headers["location"] == installed.headers["location"]  # one link, reused

    refused = await browser_like.post(
        f"{app_path}/builds/{kept['buildId']}/install", data={"csrf": csrf}, headers=ORIGIN
    )
    assert refused.status_code == 403
    assert "This build was not distributed to you" in refused.text
