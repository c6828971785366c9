"""No SSRF: endpoints are https:// unless the server allows http://, and no delivery reaches a
private, loopback, link-local or metadata address, checked on the address connected to (a
hostname resolving to 127.0.0.1 is refused when a delivery connects)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.jobs.models import Job
from buildbay.webhooks.models import Webhook
from buildbay.webhooks.transport import NOT_PUBLIC, refused_address, url_problem
from tests.conftest import Account, Api, assert_problem
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Answer, Receiver, receiving


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # This file's own: neither http:// nor private addresses (the conftest allows both).
    return settings.model_copy(update={"webhook_allow_http": False, "webhook_allow_private": False})


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://hooks.example.com/x", "must be https://"),
        ("ftp://hooks.example.com/x", "must be an https:// URL"),
        ("https:///x", "has no host"),
        ("https://user:pass@hooks.example.com/x", "user name or password"),
        ("https://127.0.0.1/x", "private, loopback or link-local"),
        ("https://10.1.2.3/x", "private, loopback or link-local"),
        ("https://192.168.0.10/x", "private, loopback or link-local"),
        ("https://169.254.169.254/latest/meta-data", "private, loopback or link-local"),
        ("https://[::1]/x", "private, loopback or link-local"),
        ("https://[::ffff:127.0.0.1]/x", "private, loopback or link-local"),
        ("https://[fd00:ec2::254]/x", "private, loopback or link-local"),
        ("https://100.64.0.1/x", "private, loopback or link-local"),
        ("https://0.0.0.0/x", "private, loopback or link-local"),
    ],
)
async def test_refused_endpoint_urls(
    hooks: Hooks, api: Api, owner: Account, url: str, problem: str
) -> None:
    project = await api.project(owner)
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhooks",
        json={"url": url, "events": ["build.ready"]},
        headers=owner.headers,
    )
    body = assert_problem(r, 422, "webhook_url_refused")
    assert problem in body["detail"]


def test_public_addresses_pass_and_the_settings_open_the_rest() -> None:
    assert url_problem("https://93.184.215.14/x", allow_http=False, allow_private=False) is None
    assert url_problem("https://hooks.example.com/x", allow_http=False, allow_private=False) is None
    assert url_problem("http://10.0.0.5/x", allow_http=True, allow_private=True) is None
    assert refused_address(ipaddress.ip_address("100.100.100.200"))  # a metadata service
    assert not refused_address(ipaddress.ip_address("2606:4700::1"))


@pytest.fixture
def local_receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
async def test_a_host_that_resolves_to_loopback_is_refused_at_connect_time(
    hooks: Hooks, api: Api, owner: Account, local_receiver: Receiver, host: str
) -> None:
    # http:// allowed, private addresses not: the URL passes when saved (a name is not
    # resolved then), and the delivery is refused when it connects.
    hooks.ctx.settings.webhook_allow_http = True
    hooks.ctx.webhook_sender.allow_http = True
    project = await api.project(owner)
    url = local_receiver.url.replace("127.0.0.1", host)
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhooks",
        json={"url": url, "events": ["build.ready"]},
        headers=owner.headers,
    )
    if host == "127.0.0.1":
        assert_problem(r, 422, "webhook_url_refused")
        return
    assert r.status_code == 201, r.text
    webhook = r.json()
    await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    assert local_receiver.received == []
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"]) == ("pending", 1)
    assert delivery["lastStatusCode"] is None
    # Not what the name resolves to: the log is for any admin of the project to read.
    assert delivery["lastError"] == "refused: not a public address"


async def test_redirects_are_not_followed(
    hooks: Hooks, api: Api, owner: Account, local_receiver: Receiver
) -> None:
    hooks.ctx.settings.webhook_allow_http = True
    hooks.ctx.settings.webhook_allow_private = True
    hooks.ctx.webhook_sender.allow_http = True
    hooks.ctx.webhook_sender.allow_private = True
    with receiving() as elsewhere:
        project = await api.project(owner)
        webhook = await hooks.create(owner, project["id"], local_receiver.url)
        local_receiver.default = Answer(307, body=b"", location=elsewhere.url)
        await hooks.test(owner, project["id"], webhook["id"])
        await hooks.run()
        assert len(local_receiver.received) == 1
        assert elsewhere.received == []
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["lastStatusCode"]) == ("pending", 307)


@pytest.fixture
def http_allowed(hooks: Hooks) -> Hooks:
    """http:// allowed (as on a server whose operator allows it), private addresses not."""
    hooks.ctx.settings.webhook_allow_http = True
    hooks.ctx.webhook_sender.allow_http = True
    return hooks


UNUSUAL_SPELLING = "IP address written other than as four decimal numbers"
NON_ASCII_DIGITS = "spells an IP address in characters other than ASCII digits"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://0177.0.0.1/", UNUSUAL_SPELLING),  # octal
        ("http://0x7f.0.0.1/", UNUSUAL_SPELLING),  # hex
        ("http://0x7f000001/", UNUSUAL_SPELLING),
        ("http://2130706433/", UNUSUAL_SPELLING),  # one decimal integer
        ("http://127.1/", UNUSUAL_SPELLING),  # fewer than four parts
        ("http://127.0.1/", UNUSUAL_SPELLING),
        ("http://127.0.0.1./", UNUSUAL_SPELLING),  # the root's dot
        ("http://010.0.0.1/", UNUSUAL_SPELLING),
        ("http://1.2.3.4.5/", UNUSUAL_SPELLING),
        ("http://%31%32%37.0.0.1/", UNUSUAL_SPELLING),
        ("http://0x5db8d70e/", UNUSUAL_SPELLING),  # a public address, still refused
        ("http://①②⑦.0.0.1/", NON_ASCII_DIGITS),
        ("http://\uff11\uff12\uff17.0.0.1/", NON_ASCII_DIGITS),  # fullwidth digits
        ("http://١٢٧.0.0.1/", UNUSUAL_SPELLING),  # Arabic-Indic digits, valid IDNA
        ("http://[::1%25eth0]/", "not a valid IPv6 address"),
        ("http://[::7f00:1]/", "private, loopback or link-local"),  # IPv4-compatible
        ("http://[64:ff9b::a00:1]/", "private, loopback or link-local"),  # NAT64 of 10.0.0.1
        ("http://[2002:a9fe:a9fe::]/", "private, loopback or link-local"),  # 6to4 of 169.254.x
        ("http://hooks.example.com:99999/", "port outside 1 to 65535"),
        ("http://hooks example.com/", "not a valid domain name"),
    ],
)
async def test_a_url_the_sender_could_not_send_as_checked_is_refused_when_saved(
    http_allowed: Hooks, api: Api, owner: Account, url: str, problem: str
) -> None:
    hooks = http_allowed
    project = await api.project(owner)
    base = f"/api/projects/{project['id']}/webhooks"
    r = await hooks.client.post(
        base, json={"url": url, "events": ["build.ready"]}, headers=owner.headers
    )
    body = assert_problem(r, 422, "webhook_url_refused")
    assert problem in body["detail"], body
    assert body["errors"] == [{"field": "url", "message": body["detail"].removeprefix("url: ")}]
    # The same check when an endpoint's URL is changed.
    webhook = await hooks.create(owner, project["id"], "https://hooks.example.com/x")
    r = await hooks.client.put(f"{base}/{webhook['id']}", json={"url": url}, headers=owner.headers)
    assert problem in assert_problem(r, 422, "webhook_url_refused")["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/x?a=1",
        "HTTPS://Hooks.Example.COM:8443/x",
        "https://hooks.example.com./x",  # a name with the root's dot is still a name
        "https://пример.рф/hook",  # IDNA, sent to xn--e1afmkfd.xn--p1ai
        "https://93.184.215.14/x",
        "https://[2606:4700::1]/x",
        "https://[64:ff9b::5db8:d70e]/x",  # NAT64 of a public address
        "https://1e100.net/x",
        "https://123.example/x",
    ],
)
async def test_usual_urls_are_still_taken(hooks: Hooks, api: Api, owner: Account, url: str) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], url)
    assert webhook["url"] == url


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def _write_url(hooks: Hooks, webhook_id: str, url: str) -> None:
    """The URL as a version with other rules saved it (the row is older than the rules)."""
    db = hooks.ctx.sessions()
    await db.execute(update(Webhook).where(Webhook.id == webhook_id).values(url=url))
    await finish(db, ok=True)


@pytest.mark.parametrize(
    ("url", "saved", "error"),
    [
        # Names that pass the check when saved, refused when each delivery connects.
        ("https://hooks.nowhere.invalid/x", True, NOT_PUBLIC),
        ("http://localhost/x", True, NOT_PUBLIC),
        # URLs saved before the check refused them: each attempt is refused before it is made.
        ("http://0177.0.0.1/", False, "refused: the URL has a host that is an IP address"),
        ("http://①②⑦.0.0.1/", False, "refused: the URL has a host that spells an IP address"),
        ("http://10.11.12.13/", False, NOT_PUBLIC),
    ],
)
async def test_deliveries_that_fail_before_the_request_are_attempts_and_disable_the_endpoint(
    http_allowed: Hooks,
    api: Api,
    owner: Account,
    clock: FrozenClock,
    settings: Settings,
    url: str,
    saved: bool,
    error: str,
) -> None:
    hooks = http_allowed
    project = await api.project(owner)
    base = f"/api/projects/{project['id']}/webhooks"
    webhook = await hooks.create(owner, project["id"], url if saved else "https://example.com/")
    if not saved:
        await _write_url(hooks, webhook["id"], url)
    start = clock.now()
    for day in range(6):
        clock.advance(seconds=(start + timedelta(days=day) - clock.now()).total_seconds())
        owner = await hooks.api.login(owner)
        await hooks.test(owner, project["id"], webhook["id"])
        await hooks.run()
        hook = (await hooks.client.get(f"{base}/{webhook['id']}", headers=owner.headers)).json()
        assert hook["enabled"] is (day < 5), (day, hook)
    assert parse(hook["failingSince"]) == start
    assert hook["disabledReason"] == "every delivery failed for 5 days"
    deliveries = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert len(deliveries) == 6
    for delivery in deliveries:
        assert delivery["lastStatusCode"] is None
        # Those due after the endpoint was disabled were not sent again.
        if delivery["lastError"] != "the endpoint is disabled":
            assert delivery["lastError"].startswith(error), delivery
            assert delivery["attempts"] >= 1, delivery
    assert sum(d["attempts"] for d in deliveries) > len(deliveries)  # retried meanwhile
    first = deliveries[-1]
    r = await hooks.client.get(f"{base}/{webhook['id']}/deliveries/{first['id']}",
                               headers=owner.headers)  # fmt: skip
    history = r.json()["history"]
    assert len(history) == first["attempts"] >= 2  # retried on the schedule meanwhile
    assert all(a["error"].startswith(error) and a["statusCode"] is None for a in history)
    # The outbox's jobs carried every attempt to its end: none was retried as a crash.
    db = hooks.ctx.sessions()
    crashed = (await db.scalars(select(Job.last_error).where(Job.last_error.is_not(None)))).all()
    await finish(db, ok=True)
    assert crashed == []
    mails = [p.read_text() for p in settings.mail_dir.glob("*.eml")]
    # (The sign-ups' verification mails are there too.)
    disabled = [mail for mail in mails if "Subject: A webhook of Acme was disabled" in mail]
    assert len(disabled) == 1


async def test_the_log_does_not_say_what_a_name_resolves_to_or_whether_it_does(
    http_allowed: Hooks, api: Api, owner: Account
) -> None:
    """A name that resolves to a private address and one that does not resolve read the same,
    in the list and in each attempt: the log tells no admin what the server's resolver knows."""
    hooks = http_allowed
    project = await api.project(owner)
    base = f"/api/projects/{project['id']}/webhooks"
    seen = []
    for url in ("http://localhost:8080/x", "https://hooks.nowhere.invalid/x"):
        webhook = await hooks.create(owner, project["id"], url)
        await hooks.test(owner, project["id"], webhook["id"])
        await hooks.run()
        [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
        r = await hooks.client.get(f"{base}/{webhook['id']}/deliveries/{delivery['id']}",
                                   headers=owner.headers)  # fmt: skip
        assert r.status_code == 200, r.text
        detail = r.json()
        assert [a["error"] for a in detail["history"]] == [NOT_PUBLIC]
        seen.append((delivery["lastError"], delivery["lastStatusCode"], delivery["attempts"]))
        for text in (r.text, json.dumps(delivery)):
            assert "127.0.0.1" not in text
            assert "::1" not in text
            assert "resolve" not in text
    assert seen == [(NOT_PUBLIC, None, 1), (NOT_PUBLIC, None, 1)]
