"""A real OpenID Connect provider for the tests: `oidc-provider-mock` (Authlib and Flask, served
by uvicorn) in a process of its own on a free port, with its users set through its own API.

`OidcProvider.authorize(url, sub)` is what a person does at the provider's sign-in form: it takes
the authorization request the relying party redirected to, answers the form as `sub`, and gives
back the redirect the provider answers with (the relying party's callback, with `code` and
`state`). `rotate_keys()` restarts the provider on the same port: it makes a new signing key at
each start, so its JWKS then holds a key the relying party has never seen.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tests.processes import free_port, running


@dataclass
class OidcProvider:
    port: int
    log_path: Path
    extra_args: tuple[str, ...] = ()
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    process: subprocess.Popen[bytes] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [
            sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1",
            "--port", str(self.port), *self.extra_args,
        ]  # fmt: skip
        self.process = self._stack.enter_context(
            running(
                argv,
                env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
                log_path=self.log_path,
                ready_url=f"{self.issuer}/.well-known/openid-configuration",
            )
        )

    def stop(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.process = None

    def rotate_keys(self) -> None:
        """A new signing key (and so a new `kid` in the JWKS); users set before are gone."""
        self.stop()
        self.start()

    def set_user(self, sub: str, **claims: Any) -> None:
        """The claims the provider gives for `sub` (e.g. email, email_verified, name, groups)."""
        r = httpx.put(f"{self.issuer}/users/{quote(sub, safe='')}", json=claims, timeout=10)
        assert r.status_code == 204, r.text

    def authorize(self, authorization_url: str, sub: str) -> str:
        """Sign in at the provider's form as `sub`; the URL the provider redirects back to."""
        with httpx.Client(timeout=10) as http:
            form = http.get(authorization_url)
            assert form.status_code == 200, form.text
            answer = http.post(authorization_url, data={"sub": sub})
        assert answer.status_code in (302, 303), answer.text
        return answer.headers["location"]


@contextlib.contextmanager
def oidc_provider_process(log_dir: Path, *extra_args: str) -> Iterator[OidcProvider]:
    provider = OidcProvider(free_port(), log_dir / "oidc-provider.log", tuple(extra_args))
    provider.start()
    try:
        yield provider
    finally:
        provider.stop()
