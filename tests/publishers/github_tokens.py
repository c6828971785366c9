"""GitHub Actions' ID token service, as the runner offers it to a job with `id-token: write`:
GET `ACTIONS_ID_TOKEN_REQUEST_URL` with `&audience=...` and the bearer
`ACTIONS_ID_TOKEN_REQUEST_TOKEN`, answered `{"value": <ID token>}`. The tokens are the real
OpenID Connect provider's (tests/oidc_provider.py), made for the audience asked, for acme/shop's
main branch."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.oidc_provider import OidcProvider
from tests.publishers.id_tokens import GITHUB_SUBJECT, id_token

REQUEST_TOKEN = "the-runner-request-token"


class _TokenService(http.server.BaseHTTPRequestHandler):
    provider: OidcProvider

    def do_GET(self) -> None:
        audience = parse_qs(urlsplit(self.path).query)["audience"][0]
        if self.headers.get("Authorization") != f"Bearer {REQUEST_TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"value": id_token(self.provider, GITHUB_SUBJECT, audience)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def github_token_service(provider: OidcProvider) -> Iterator[str]:
    """The service's ACTIONS_ID_TOKEN_REQUEST_URL (with a query, as GitHub's has)."""
    handler = type("Handler", (_TokenService,), {"provider": provider})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token?api-version=2.0"
    finally:
        server.shutdown()
        server.server_close()
