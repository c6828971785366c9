"""Issue 40: a build event carries the build's source as the API shows it (commit, branch, its
host's links), so that a receiver can say which commit a build is."""

from __future__ import annotations

import pytest

from tests.conftest import Account, Api
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.usefixtures("no_leaks")

COMMIT = "3f0a9c1e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a"


async def test_build_ready_carries_the_source(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await hooks.create(owner, project["id"], receiver.url, ["build.ready"], receiver=receiver)
    source = {"commit": COMMIT, "branch": "main", "repository": "https://gitlab.com/acme/app",
              "pullRequest": 5}  # fmt: skip

    build = await api.upload(owner, project["id"], app["id"], source=source)
    await hooks.run()

    [message] = receiver.received
    assert message.verified_by
    data = message.payload["data"]
    assert data["source"] == build["source"]
    assert data["source"]["commit"] == COMMIT
    assert data["source"]["branch"] == "main"
    assert data["source"]["links"]["commit"] == f"https://gitlab.com/acme/app/-/commit/{COMMIT}"
    assert (
        data["source"]["links"]["pullRequest"] == "https://gitlab.com/acme/app/-/merge_requests/5"
    )
