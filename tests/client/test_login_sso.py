"""`buildbay login --sso` end to end: the command in a process of its own against a served app,
the person played by an httpx client that signs in to the console and allows (or refuses) the
command line, then the saved token used by `buildbay whoami`. The browser the command opens is
a script of this test's (BROWSER), which only writes down the address it was given."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.conftest import serving_a_copy
from tests.oidc_provider import OidcProvider, oidc_provider_process

pytestmark = pytest.mark.slow

PASSWORD = "a long password"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
USER_CODE = re.compile(r"\b([B-Z]{4}-[B-Z]{4})\b")


@pytest.fixture(scope="module")
def sso_server(migrated_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("sso-server")
    more = {
        "BUILDBAY_CLI_DEVICE_POLL_INTERVAL_SECONDS": "1",
    }
    with serving_a_copy(migrated_database, work, more) as base:
        yield base


@dataclass
class Person:
    """Someone with an account, at a browser (cookies kept, no redirect followed)."""

    server: str
    email: str
    http: httpx.Client

    def sign_in(self, next_page: str) -> None:
        csrf = CSRF.search(self.http.get("/login").text)
        assert csrf
        data = {"csrf": csrf[1], "email": self.email, "password": PASSWORD, "next": next_page}
        r = self.http.post("/login", data=data, headers={"Origin": self.server})
        assert r.status_code == 303, r.text
        assert r.headers["location"] == next_page

    def answer(self, path: str, fields: dict[str, str]) -> httpx.Response:
        page = self.http.get(path)
        assert page.status_code == 200, page.text
        csrf = CSRF.search(page.text)
        assert csrf
        return self.http.post(
            urlsplit(path).path, data={"csrf": csrf[1], **fields}, headers={"Origin": self.server}
        )


@pytest.fixture
def person(sso_server: str, tmp_path: Path) -> Iterator[Person]:
    email = f"sso-{os.urandom(6).hex()}@example.com"
    r = httpx.post(f"{sso_server}/api/auth/register", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    with httpx.Client(base_url=sso_server, timeout=30) as http:
        yield Person(sso_server, email, http)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The command's environment: its own config directory, and a browser that writes down the
    address it is opened at."""
    browser = tmp_path / "browser"
    browser.write_text(
        f"#!{sys.executable}\nimport pathlib, sys\n"
        f"pathlib.Path({str(tmp_path / 'opened')!r}).write_text(sys.argv[1])\n"
    )
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDBAY_", "SSH_"))}
    return {**base, "BUILDBAY_CONFIG_DIR": str(tmp_path / "config"), "BROWSER": str(browser)}


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "buildbay_client", "login", "--sso", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def opened(tmp_path: Path, process: subprocess.Popen[str]) -> str:
    """The address the command opened the browser at."""
    deadline = time.monotonic() + 60
    while not (tmp_path / "opened").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the browser was never opened"
        time.sleep(0.05)
    return (tmp_path / "opened").read_text()


def whoami(env: dict[str, str]) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "buildbay_client", "whoami", "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found: dict[str, str] = json.loads(done.stdout)
    return found


def shown_code(process: subprocess.Popen[str]) -> tuple[str, str]:
    """The user code the command shows (and all it said up to it)."""
    assert process.stderr is not None
    said = ""
    while not (found := USER_CODE.search(said)):
        line = process.stderr.readline()
        assert line, process.communicate()
        said += line
    return found[1], said


def saved_token(env: dict[str, str]) -> str | None:
    path = Path(env["BUILDBAY_CONFIG_DIR"]) / "credentials.json"
    if not path.exists():
        return None
    token: str | None = json.loads(path.read_text())["profiles"]["production"]["token"]
    return token


def test_login_sso_opens_the_browser_and_the_allowed_token_is_saved_and_works(
    sso_server: str, person: Person, env: dict[str, str], tmp_path: Path
) -> None:
    process = start(env, "--url", sso_server)
    url = opened(tmp_path, process)
    assert url.startswith(f"{sso_server}/cli/authorize?")
    asked = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert urlsplit(asked["redirect_uri"]).hostname == "127.0.0.1"
    assert asked["code_challenge_method"] == "S256"

    path = url.removeprefix(sso_server)
    r = person.http.get(path)
    assert r.status_code == 303  # sign in first, then back
    person.sign_in(path)
    fields = dict(
        re.findall(r'type="hidden" name="([a-z_]+)" value="([^"]*)"', person.http.get(path).text)
    )
    r = person.answer(path, {**fields, "decision": "allow"})
    assert r.status_code == 303, r.text
    assert r.headers["location"].startswith(asked["redirect_uri"] + "?code=")
    landed = httpx.get(r.headers["location"])  # the browser follows to the command's listener
    assert landed.status_code == 200
    assert "Signed in." in landed.text
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 0, stderr
    token = saved_token(env)
    assert token is not None
    assert token.startswith("bb_")
    assert token not in stdout + stderr
    assert f"as {person.email}" in stderr
    assert whoami(env)["email"] == person.email
    listed = person.http.get("/account")
    assert "CLI on " in listed.text


def test_login_sso_device_shows_a_code_the_person_allows_in_the_console(
    sso_server: str, person: Person, env: dict[str, str]
) -> None:
    process = start(env, "--url", sso_server, "--device")
    user_code, said = shown_code(process)
    assert f"{sso_server}/cli/device" in said

    person.sign_in("/cli/device")
    r = person.answer(f"/cli/device?code={user_code}", {"code": user_code, "decision": "allow"})
    assert r.headers["location"] == "/cli/device?done=allowed"
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 0, said + stderr
    token = saved_token(env)
    assert token is not None
    assert token not in said + stdout + stderr
    assert whoami(env)["email"] == person.email


def test_login_sso_device_refused_in_the_console_exits_3_and_saves_nothing(
    sso_server: str, person: Person, env: dict[str, str]
) -> None:
    process = start(env, "--url", sso_server, "--device")
    user_code, _ = shown_code(process)

    person.sign_in("/cli/device")
    person.answer(f"/cli/device?code={user_code}", {"code": user_code, "decision": "deny"})
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 3, stderr
    assert "refused in the console" in stderr
    assert saved_token(env) is None


def test_ctrl_c_stops_the_wait_at_once_and_saves_nothing(
    sso_server: str, env: dict[str, str], tmp_path: Path
) -> None:
    process = start(env, "--url", sso_server)
    url = opened(tmp_path, process)
    port = urlsplit(parse_qs(urlsplit(url).query)["redirect_uri"][0]).port

    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)

    assert process.returncode == 130, stderr
    assert "Sign-in stopped" in stderr
    assert "Traceback" not in stderr
    assert saved_token(env) is None
    with pytest.raises(httpx.ConnectError):  # the listener is gone
        httpx.get(f"http://127.0.0.1:{port}/callback")


def test_without_a_display_over_ssh_it_signs_in_with_a_code(
    sso_server: str, env: dict[str, str]
) -> None:
    quiet = {k: v for k, v in env.items() if k not in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY")}
    process = start({**quiet, "SSH_CONNECTION": "10.0.0.2 50000 10.0.0.1 22"}, "--url", sso_server)
    assert process.stderr is not None
    said = ""
    while not USER_CODE.search(said):
        line = process.stderr.readline()
        assert line, process.communicate()
        said += line

    process.send_signal(signal.SIGINT)
    process.communicate(timeout=30)
    assert "/cli/device" in said
    assert "/cli/authorize" not in said


# -- on a server that signs people in through its identity provider only (issue 41) ----------


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with oidc_provider_process(tmp_path_factory.mktemp("oidc")) as running_provider:
        yield running_provider


@pytest.fixture(scope="module")
def sso_only_server(
    migrated_database: str, tmp_path_factory: pytest.TempPathFactory, provider: OidcProvider
) -> Iterator[str]:
    work = tmp_path_factory.mktemp("sso-only-server")
    more = {
        "BUILDBAY_OIDC_ISSUER": provider.issuer,
        "BUILDBAY_OIDC_CLIENT_ID": "buildbay-console",
        "BUILDBAY_OIDC_CLIENT_SECRET": "a-client-secret",
        "BUILDBAY_OIDC_ONLY": "true",
    }
    with serving_a_copy(migrated_database, work, more) as base:
        yield base


def test_on_an_sso_only_server_the_password_login_points_to_sso_and_sso_signs_in(
    sso_only_server: str, provider: OidcProvider, env: dict[str, str], tmp_path: Path
) -> None:
    email = f"ada-{os.urandom(4).hex()}@acme.example"
    provider.set_user(email, email=email, email_verified=True)
    refused = subprocess.run(
        [sys.executable, "-m", "buildbay_client", "login", "--url", sso_only_server,
         "--email", email],
        env=env, input=PASSWORD + "\n", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "buildbay login --sso" in refused.stderr
    assert saved_token(env) is None

    # `login --sso`: the console sends the person to sign in, which here is the company's
    # provider (its real form), and back to the command line's question.
    process = start(env, "--url", sso_only_server)
    path = opened(tmp_path, process).removeprefix(sso_only_server)
    with httpx.Client(base_url=sso_only_server, timeout=30) as http:
        r = http.get(path)
        assert r.status_code == 303
        login = r.headers["location"]
        assert login.startswith("/login?next=")
        assert 'id="sso-sign-in"' in http.get(login).text
        r = http.get(f"/auth/sso/start?{urlsplit(login).query}")
        assert r.status_code in (302, 303), r.text
        callback = provider.authorize(r.headers["location"], email)
        r = http.get(callback.removeprefix(sso_only_server))
        assert r.status_code == 303, r.text
        assert r.headers["location"] == path
        person = Person(sso_only_server, email, http)
        fields = dict(
            re.findall(r'type="hidden" name="([a-z_]+)" value="([^"]*)"', http.get(path).text)
        )
        r = person.answer(path, {**fields, "decision": "allow"})
        assert r.status_code == 303, r.text
        assert httpx.get(r.headers["location"]).status_code == 200
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 0, stderr
    assert whoami(env)["email"] == email
