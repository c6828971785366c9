"""A failed login says nothing about whether the e-mail has an account: not by its status, not by
its body or headers, and not by how long it takes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from buildbay.auth import passwords
from buildbay.config import Settings
from tests.conftest import Account, assert_problem

UNKNOWN = "nobody@example.com"
ROUNDS = 15
# The fastest of each kind of failure may differ by this factor at most, in CPU time: wall-clock
# medians of 15 moved by 1.7x in CI, with parallel workers and browsers on the same 2 cores. A
# login that skipped the argon2 verify for unknown e-mails would differ by the factor the last
# assertion measures (several times over).
TOLERATED_RATIO = 1.5


@pytest.fixture
def fast_password_hashing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Overrides the autouse fixture: a verify must cost real work here, so that skipping it
    would show. OWASP's minimum (19 MiB, 2 passes) is a few tens of milliseconds, far more than
    the rest of a login, and the real code path chooses what to verify against."""
    hasher = PasswordHash((Argon2Hasher(time_cost=2, memory_cost=19_456, parallelism=1),))
    monkeypatch.setattr(passwords, "_hasher", hasher)
    passwords._dummy_hash.cache_clear()  # made again, with this hasher, by the code under test
    yield
    passwords._dummy_hash.cache_clear()


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Many failures in a minute from one address, for one e-mail: counted, never throttled.
    settings.login_failures_per_minute = 10_000
    settings.rate_limit_free_per_minute = 10_000
    return settings


async def login(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    return await client.post("/api/auth/login", json={"email": email, "password": password})


async def test_an_unknown_e_mail_and_a_wrong_password_get_the_same_answer(
    client: httpx.AsyncClient, owner: Account
) -> None:
    wrong = await login(client, owner.email, "not the password")
    unknown = await login(client, UNKNOWN, "not the password")

    for r in (wrong, unknown):
        assert_problem(r, 401, "invalid_credentials")
    first, second = wrong.json(), unknown.json()
    assert first.pop("requestId") != second.pop("requestId")
    assert first == second
    varying = {"x-request-id", "date", "ratelimit"}
    assert {k: v for k, v in wrong.headers.items() if k not in varying} == {
        k: v for k, v in unknown.headers.items() if k not in varying
    }


async def timed(client: httpx.AsyncClient, body: dict[str, str], status: int) -> float:
    # The process's CPU time, not the wall clock: the request runs in this process (the app
    # through ASGI, the password hash in its worker thread), and CPU time is the work the
    # server did for it, which other processes on a loaded machine do not stretch.
    started = time.process_time()
    r = await client.post("/api/auth/login", json=body)
    elapsed = time.process_time() - started
    assert r.status_code == status, r.text
    return elapsed


async def test_an_unknown_e_mail_fails_as_slowly_as_a_wrong_password(
    client: httpx.AsyncClient, owner: Account
) -> None:
    # The first failure for an unknown e-mail makes the process's stand-in hash: not measured.
    await timed(client, {"email": UNKNOWN, "password": "warming up"}, 401)
    await timed(client, {"email": owner.email, "password": "warming up"}, 401)
    known: list[float] = []
    unknown: list[float] = []
    no_verify: list[float] = []  # the same request refused before any password is looked at
    for i in range(ROUNDS):
        pair = [(known, owner.email), (unknown, UNKNOWN)]
        for samples, email in pair if i % 2 else reversed(pair):  # alternated against drift
            samples.append(await timed(client, {"email": email, "password": f"wrong {i}"}, 401))
        no_verify.append(await timed(client, {"email": UNKNOWN}, 422))

    ratio = min(unknown) / min(known)
    assert 1 / TOLERATED_RATIO < ratio < TOLERATED_RATIO, (known, unknown)
    # The check can see what it looks for: the verify is most of a failed login's time, so
    # skipping it would move the ratio far past the tolerance.
    assert min(known) > 2 * TOLERATED_RATIO * min(no_verify)
