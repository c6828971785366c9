"""No SSRF: endpoints are https:// unless the server allows http://, and no delivery reaches a
private, loopback, link-local or metadata address, checked on the address connected to (a
hostname resolving to 127.0.0.1 is refused when a delivery connects)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from buildbay.config import Settings
from buildbay.webhooks.transport import refused_address, url_problem
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
    assert delivery["status"] == "pending"
    assert delivery["lastStatusCode"] is None
    assert "private, loopback or link-local" in delivery["lastError"]
    assert "127.0.0.1" in delivery["lastError"]


async def test_redirects_are_not_followed(
    hooks: Hooks, api: Api, owner: Account, local_receiver: Receiver
) -> None:
    hooks.ctx.settings.webhook_allow_http = True
    hooks.ctx.settings.webhook_allow_private = True
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
