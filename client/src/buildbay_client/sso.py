"""`buildbay login --sso`: the command line signs in through the server's console, where the
person signs in as in the browser (a password, or the company's identity provider), and gets
an API token named "CLI on <this computer>".

Two ways, as the server offers them (docs/cli.md):
- a loopback redirect (RFC 8252 §7.3, with PKCE S256): a listener on 127.0.0.1 on a port the
  system picks, the browser opened at the server's `/cli/authorize`, and the code it redirects
  back with exchanged for the token. The default where a browser can be opened;
- the device authorization grant (RFC 8628): a code the person enters at the server's
  `/cli/device` on any computer, while this one polls. With `--device`, and by itself where no
  browser can be opened here (over SSH, no display) or the loopback cannot listen.

Neither prints the token. Ctrl-C stops the wait at once and leaves nothing behind.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import socket
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

from buildbay_client.errors import SignInFailed, ValidationError

if TYPE_CHECKING:
    from buildbay_client.api import Buildbay
    from buildbay_client.models import CliToken

CALLBACK_PATH = "/callback"
DEFAULT_TIMEOUT = 300.0  # seconds the command waits for the person
SLOW_DOWN_STEP = 5  # RFC 8628 §3.5
_DONE_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>Buildbay</title>"
    b"<p>%s You can close this tab and go back to the terminal.</p>"
)


Say = Callable[[str], None]


def client_name() -> str:
    """This computer's name, as the console's page and the token's name show it."""
    return socket.gethostname().split(".")[0] or "a computer"


def can_open_browser() -> bool:
    """Whether a browser here can reach a listener on this computer's loopback: not over SSH
    (the browser would be another computer's), nor on Linux without a display; BROWSER set
    says there is one whatever else."""
    if os.environ.get("BROWSER"):
        return True
    if os.environ.get("SSH_CONNECTION") or os.environ.get("SSH_TTY"):
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier (RFC 7636: 43 unreserved characters and more) and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)  # 64 characters
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _open(url: str) -> bool:
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False


# -- loopback redirect ------------------------------------------------------------------------


@dataclass
class _Answer:
    """What the browser brought back to the loopback."""

    params: dict[str, str] = field(default_factory=dict)
    arrived: threading.Event = field(default_factory=threading.Event)


class _Listener(HTTPServer):
    answer: _Answer
    state: str


class _Callback(BaseHTTPRequestHandler):
    server: _Listener

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        # Only the answer to this sign-in (its state) ends the wait: another page of this
        # computer cannot end it with a code of its own.
        if parts.path != CALLBACK_PATH or params.get("state") != self.server.state:
            self.send_error(404)
            return
        said = b"Signed in." if "code" in params else b"The sign-in was refused."
        body = _DONE_PAGE % said
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)
        if not self.server.answer.arrived.is_set():
            self.server.answer.params = params
            self.server.answer.arrived.set()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: the address it logs holds the one-time code."""


def listen() -> _Listener:
    """The loopback listener, on a port the system picks (OSError if none can be had)."""
    listener = _Listener(("127.0.0.1", 0), _Callback)
    listener.answer = _Answer()
    listener.state = secrets.token_urlsafe(24)
    return listener


def loopback_sign_in(
    client: Buildbay,
    server_url: str,
    listener: _Listener,
    say: Say,
    *,
    open_browser: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
) -> CliToken:
    verifier, challenge = pkce_pair()
    port = listener.server_address[1]
    redirect_uri = f"http://127.0.0.1:{port}{CALLBACK_PATH}"
    url = f"{server_url}/cli/authorize?" + urlencode(
        {
            "redirect_uri": redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": listener.state,
            "client_name": client_name(),
        }
    )
    thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.2})
    thread.daemon = True
    thread.start()
    try:
        opened = open_browser and _open(url)
        say(
            ("Your browser has been opened to sign in. " if opened else "")
            + f"If it did not open, open this address:\n\n  {url}\n\nWaiting for you to allow "
            "it (Ctrl-C to stop) ..."
        )
        if not _wait(listener.answer.arrived, timeout):
            raise SignInFailed(f"not signed in within {timeout:.0f} seconds; run it again")
    finally:
        listener.shutdown()
        listener.server_close()
        thread.join(5)
    params = listener.answer.params
    if "code" not in params:
        raise SignInFailed("the sign-in was refused in the browser")
    return client.cli_token(params["code"], verifier, redirect_uri)


def _wait(event: threading.Event, timeout: float) -> bool:
    """Wait in short steps: the main thread stays able to take Ctrl-C at once."""
    deadline = time.monotonic() + timeout
    while not event.wait(0.2):
        if time.monotonic() >= deadline:
            return False
    return True


# -- device authorization grant ---------------------------------------------------------------


def device_sign_in(
    client: Buildbay,
    say: Say,
    *,
    open_browser: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    sleep: Callable[[float], None] = time.sleep,
) -> CliToken:
    grant = client.device_code(client_name())
    opened = open_browser and _open(grant.verification_uri_complete)
    say(
        f"To sign in, open {grant.verification_uri} on any computer or phone and enter the "
        f"code\n\n  {grant.user_code}\n\n"
        + ("(Your browser has been opened at it.) " if opened else "")
        + f"Or open {grant.verification_uri_complete}\n\nWaiting (Ctrl-C to stop) ..."
    )
    interval = grant.interval
    deadline = time.monotonic() + min(timeout, grant.expires_in)
    while True:
        sleep(interval)
        try:
            return client.device_token(grant.device_code)
        except ValidationError as exc:
            if exc.code == "authorization_pending":
                pass
            elif exc.code == "slow_down":
                interval += SLOW_DOWN_STEP
            elif exc.code == "access_denied":
                raise SignInFailed("the sign-in was refused in the console") from None
            elif exc.code == "expired_token":
                raise SignInFailed("the code expired before it was allowed; run it again") from None
            else:
                raise
        if time.monotonic() + interval > deadline:
            raise SignInFailed(f"not signed in within {timeout:.0f} seconds; run it again")
