"""`buildbay devices register-with-apple` and `buildbay devices apple-key ...` against a real
server over HTTP (in a thread of this process) whose Apple is the receiver of
tests/ios/apple_receiver.py; and the client's Apple ops and models against the server's
/openapi.json, as tests/client/test_contract.py checks the others."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker
from typer.testing import CliRunner

from buildbay.db.engine import create_engine
from buildbay_client import apple
from buildbay_client.cli import command
from buildbay_client.ops import Op
from tests.client.test_contract import _check_body, _check_model, _operation
from tests.conftest import TEST_SECRET, serving_in_thread
from tests.ios.apple_receiver import (
    Answer,
    AppleReceiver,
    apple_error,
    apple_receiving,
    enrolled,
    new_team_key,
)

PASSWORD = "a long password"
P, D = "prj_01", "dev_01"
OPS: dict[str, Op[Any]] = {
    "put_apple_key": apple.put_apple_key(
        P, "2X9R4HXF34", "57246542-96fe-1a63-e053-0824d011072a", "-----BEGIN PRIVATE KEY-----"
    ),
    "get_apple_key": apple.get_apple_key(P),
    "delete_apple_key": apple.delete_apple_key(P),
    "register_device_with_apple": apple.register_device_with_apple(P, D),
    "register_missing_with_apple": apple.register_missing_with_apple(P),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_apple_op_is_an_operation_of_the_server_and_reads_its_answer(
    name: str, served_openapi: str
) -> None:
    document = json.loads(served_openapi)
    op = OPS[name]
    operation = _operation(document, op)
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if op.json is None:
        assert body is None
    else:
        _check_body(document, op.json, body["schema"], name)
    answers = [a for status, a in operation["responses"].items() if status.startswith("2")]
    for answer in answers:
        if op.model is None:
            assert "content" not in answer
            continue
        ref = answer["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{op.model.__name__}"
        _check_model(document, op.model, op.model.__name__)


# -- the commands ----------------------------------------------------------------------------


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def receiver() -> Iterator[AppleReceiver]:
    with apple_receiving() as r:
        yield r


@pytest.fixture
def apple_server(receiver: AppleReceiver, database_url: str, tmp_path: Path) -> Iterator[str]:
    env = {
        "BUILDBAY_DATA_DIR": str(tmp_path / "data"),
        "BUILDBAY_DATABASE_URL": database_url,
        "BUILDBAY_SECRET_KEY": TEST_SECRET,
        "BUILDBAY_APPLE_API_URL": receiver.url,
    }
    with serving_in_thread(env) as base:
        yield base


def _enroll(database_url: str, user_id: str, name: str) -> dict[str, str]:
    """A device stored in the server's database, as enrollment would."""

    async def store() -> dict[str, str]:
        engine = create_engine(database_url)
        try:
            return await enrolled(async_sessionmaker(engine), user_id, name=name)
        finally:
            await engine.dispose()

    return asyncio.run(store())


class Cli:
    def __init__(self, server: str, config: Path) -> None:
        self.server = server
        self.env = {"BUILDBAY_CONFIG_DIR": str(config), "BUILDBAY_RETRY_ATTEMPTS": "1"}
        self.app = command()

    def __call__(self, *args: str, stdin: str | None = None) -> Done:
        unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("BUILDBAY_")}
        result = CliRunner().invoke(self.app, list(args), input=stdin, env={**unset, **self.env})
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Done(result.exit_code, result.stdout, result.stderr)


def _register(server: str, email: str) -> dict[str, Any]:
    r = httpx.post(f"{server}/api/auth/register", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.slow
def test_a_developer_sets_the_key_and_registers_the_missing_devices_from_a_terminal(
    apple_server: str, receiver: AppleReceiver, database_url: str, tmp_path: Path
) -> None:
    owner = _register(apple_server, "owner@example.com")
    tester = _register(apple_server, "tester@example.com")
    auth = {"Authorization": f"Bearer {owner['access_token']}"}
    project = httpx.post(f"{apple_server}/api/projects", json={"name": "Acme"}, headers=auth)
    r = httpx.post(
        f"{apple_server}/api/projects/{project.json()['id']}/members",
        json={"email": "tester@example.com", "role": "tester"},
        headers=auth,
    )
    assert r.status_code == 201, r.text
    cli = Cli(apple_server, tmp_path / "config")
    done = cli("login", "--url", apple_server, "--email", "owner@example.com",
               stdin=PASSWORD + "\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    key = receiver.trust(new_team_key())
    p8 = tmp_path / f"AuthKey_{key.key_id}.p8"
    p8.write_text(key.pem)

    done = cli("devices", "apple-key", "set", "-p", "Acme", "--key-id", key.key_id,
               "--issuer-id", key.issuer_id, "--p8", str(p8))  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert key.key_id in done.stdout
    assert "PRIVATE" not in done.stdout + done.stderr
    done = cli("devices", "apple-key", "show", "-p", "Acme", "--json")
    assert json.loads(done.stdout)["keyId"] == key.key_id

    devices = [_enroll(database_url, tester["user"]["id"], f"Phone {n}") for n in range(3)]
    invalid = Answer(409, apple_error(409, "ENTITY_ERROR.ATTRIBUTE.INVALID", "An attribute "
                     "value is invalid.", "An invalid value was provided for the parameter "
                     "'udid'."))  # fmt: skip
    receiver.answers += [Answer(201), invalid, Answer(201)]

    done = cli("devices", "register-with-apple", "-p", "Acme")

    assert done.returncode == 5, done.stderr  # Apple refused one
    assert devices[0]["id"] in done.stdout
    assert devices[2]["id"] in done.stdout
    assert f"Apple refused Phone 1 ({devices[1]['udid']}, {devices[1]['id']})" in done.stderr
    assert "2 registered, 1 refused, 1 not registered yet" in done.stderr
    assert done.stderr.count("Apple refused Phone 1") == 1
    assert len(receiver.received) == 3  # the refused device was not sent again
    assert all(r.problems == [] for r in receiver.received)

    done = cli("devices", "register-with-apple", "-p", "Acme", devices[0]["id"], "--json")
    assert done.returncode == 0, done.stderr
    [again] = json.loads(done.stdout)["registrations"]
    assert again["outcome"] == "unchanged"
    assert len(receiver.received) == 3

    done = cli("devices", "apple-key", "delete", "-p", "Acme", "--yes")
    assert done.returncode == 0, done.stderr
    done = cli("devices", "register-with-apple", "-p", "Acme")
    assert done.returncode == 5  # refused: a conflict
    assert "apple_key_missing" in done.stderr
    done = cli("devices", "apple-key", "show", "-p", "Acme")
    assert done.returncode == 4
