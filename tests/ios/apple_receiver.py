"""A stand-in for App Store Connect's `POST /v1/devices`: a real HTTP server on 127.0.0.1 (a
thread of its own) that checks each request the way Apple's documentation says it must be made,
with no code of Buildbay's:

- the bearer token is a JWT whose ES256 signature verifies with the public half of the key the
  test registered (checked with `cryptography` alone, not with the library that signed it); its
  header is exactly `{"alg": "ES256", "kid": <key id>, "typ": "JWT"}`; its claims exactly
  `iss` (the key's issuer id), `iat`, `exp` (after `iat`, by 20 minutes at most) and `aud`
  `appstoreconnect-v1`, issued about now;
- the body is exactly `{"data": {"type": "devices", "attributes": {"name", "platform",
  "udid"}}}`, the name 1 to 50 characters, the platform `IOS` or `MAC_OS`.

What is wrong is noted in `Received.problems` (a test asserts it is empty). Unless a test
queued answers of its own, it answers as Apple does: 401 to a token that fails the checks, 409
"already exists on this team" for a UDID it has, else 201 with a new device id.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import string
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from buildbay.devices.enums import DevicePlatform
from buildbay.devices.models import Device
from buildbay.ids import new_id

AUDIENCE = "appstoreconnect-v1"
LONGEST_TOKEN = 20 * 60
CLOCK_SLACK = 60  # seconds an `iat` may be from the receiver's idea of now


@dataclass(frozen=True)
class TeamKey:
    """An App Store Connect API key as a team has it: its id, its issuer, the .p8 file."""

    key_id: str
    issuer_id: str
    private_key: ec.EllipticCurvePrivateKey

    @property
    def pem(self) -> str:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()

    @property
    def der(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def body(self) -> dict[str, str]:
        return {"keyId": self.key_id, "issuerId": self.issuer_id, "privateKey": self.pem}


def new_team_key() -> TeamKey:
    alphabet = string.ascii_uppercase + string.digits
    key_id = "".join(secrets.choice(alphabet) for _ in range(10))
    issuer = "-".join(secrets.token_hex(n) for n in (4, 2, 2, 2, 6))
    return TeamKey(key_id, issuer, ec.generate_private_key(ec.SECP256R1()))


@dataclass(frozen=True)
class Answer:
    status: int = 201
    body: Any = None  # JSON (None: Apple's own answer), or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    # Held until the test sets it (at most 30 s): a slow answer.
    release: threading.Event | None = None


def apple_error(status: int, code: str, title: str, detail: str) -> dict[str, Any]:
    """An error answer as App Store Connect writes one (JSON:API)."""
    return {
        "errors": [
            {"id": secrets.token_hex(8), "status": str(status), "code": code, "title": title,
             "detail": detail}
        ]
    }  # fmt: skip


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    token_header: dict[str, Any] | None
    claims: dict[str, Any] | None
    problems: list[str]

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = self.json["data"]["attributes"]
        return attributes


@dataclass
class AppleReceiver:
    url: str = ""
    keys: dict[str, TeamKey] = field(default_factory=dict)  # by key id: whose tokens verify
    answers: list[Answer] = field(default_factory=list)  # taken in turn; then Apple's own
    devices: dict[str, str] = field(default_factory=dict)  # UDID -> Apple's id: the team's
    received: list[Received] = field(default_factory=list)
    now: Callable[[], float] = time.time  # what `iat` is compared with
    on_request: Callable[[], None] | None = None  # called as each request arrives
    lock: threading.Lock = field(default_factory=threading.Lock)

    def trust(self, key: TeamKey) -> TeamKey:
        self.keys[key.key_id] = key
        return key

    def now_from(self, clock_now: Callable[[], datetime]) -> None:
        """Compare `iat` with this clock (the app's, when a test moves it) rather than the
        wall clock."""
        self.now = lambda: clock_now().timestamp()

    @property
    def udids(self) -> list[str]:
        return [r.attributes["udid"] for r in self.received if not r.problems]

    def handle(self, headers: dict[str, str], body: bytes) -> tuple[Answer, bytes]:
        if self.on_request is not None:
            self.on_request()
        token_header, claims, problems = self._check_token(headers.get("authorization", ""))
        problems += self._check_body(headers, body)
        received = Received(headers, body, token_header, claims, problems)
        with self.lock:  # one request at a time decides: a UDID is created once
            self.received.append(received)
            answer = self.answers.pop(0) if self.answers else self._as_apple(received)
            payload = answer.body
            if payload is None:
                payload = self._created(received) if answer.status < 300 else b""
        return answer, payload if isinstance(payload, bytes) else json.dumps(payload).encode()

    def _as_apple(self, received: Received) -> Answer:
        if received.claims is None or any(p.startswith("token") for p in received.problems):
            return Answer(401, apple_error(401, "NOT_AUTHORIZED", "Authentication credentials "
                          "are missing or invalid.", "Provide a properly configured and signed "
                          "bearer token, and make sure that it has not expired."))  # fmt: skip
        if received.problems:
            return Answer(409, apple_error(409, "ENTITY_ERROR", "The provided entity is "
                          "invalid", "; ".join(received.problems)))  # fmt: skip
        udid = received.attributes["udid"]
        if udid in self.devices:
            return Answer(409, apple_error(409, "ENTITY_ERROR.ATTRIBUTE.INVALID", "There is a "
                          "problem with the request entity", f"A device with number '{udid}' "
                          "already exists on this team."))  # fmt: skip
        return Answer(201)

    def _created(self, received: Received) -> dict[str, Any]:
        attributes = received.attributes
        device_id = "".join(secrets.choice(string.ascii_uppercase + string.digits)
                            for _ in range(10))  # fmt: skip
        self.devices[attributes["udid"]] = device_id
        return {
            "data": {
                "type": "devices",
                "id": device_id,
                "attributes": {**attributes, "deviceClass": "IPHONE", "status": "ENABLED"},
                "links": {"self": f"{self.url}/v1/devices/{device_id}"},
            },
            "links": {"self": f"{self.url}/v1/devices"},
        }

    def _check_token(
        self, authorization: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[str]]:
        scheme, _, token = authorization.partition(" ")
        if scheme != "Bearer" or token.count(".") != 2:
            return None, None, ["token: no bearer JWT"]
        encoded_header, encoded_claims, encoded_signature = token.split(".")
        try:
            header = json.loads(_unbase64(encoded_header))
            claims = json.loads(_unbase64(encoded_claims))
            signature = _unbase64(encoded_signature)
        except ValueError:
            return None, None, ["token: not a JWT"]
        problems = []
        key = self.keys.get(header.get("kid", ""))
        if header != {"alg": "ES256", "kid": header.get("kid"), "typ": "JWT"}:
            problems.append(f"token: header {header}")
        if key is None:
            problems.append("token: an unknown kid")
        elif len(signature) != 64:
            problems.append("token: not an ES256 signature (r || s, 64 bytes)")
        else:
            r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            try:
                key.private_key.public_key().verify(
                    encode_dss_signature(r, s),
                    f"{encoded_header}.{encoded_claims}".encode(),
                    ec.ECDSA(hashes.SHA256()),
                )
            except InvalidSignature:
                problems.append("token: the signature does not verify with the key's public half")
        if set(claims) != {"iss", "iat", "exp", "aud"}:
            problems.append(f"token: claims {sorted(claims)}")
        if claims.get("aud") != AUDIENCE:
            problems.append(f"token: aud {claims.get('aud')!r}")
        if key is not None and claims.get("iss") != key.issuer_id:
            problems.append("token: iss is not the key's issuer")
        issued, expires = claims.get("iat"), claims.get("exp")
        if not isinstance(issued, int) or not isinstance(expires, int):
            problems.append("token: iat and exp are not whole seconds")
        else:
            if not 0 < expires - issued <= LONGEST_TOKEN:
                problems.append(f"token: lives {expires - issued} s")
            if abs(issued - self.now()) > CLOCK_SLACK:
                problems.append("token: iat is not now")
        return header, claims, problems

    def _check_body(self, headers: dict[str, str], body: bytes) -> list[str]:
        if not headers.get("content-type", "").startswith("application/json"):
            return ["body: not application/json"]
        try:
            document = json.loads(body)
        except ValueError:
            return ["body: not JSON"]
        data = document.get("data") if isinstance(document, dict) else None
        if set(document) != {"data"} or not isinstance(data, dict):
            return [f"body: {document}"]
        attributes = data.get("attributes")
        if set(data) != {"type", "attributes"} or data["type"] != "devices":
            return [f"body: data {data}"]
        if not isinstance(attributes, dict) or set(attributes) != {"name", "platform", "udid"}:
            return [f"body: attributes {attributes}"]
        problems = []
        name = attributes["name"]
        if not isinstance(name, str) or not 1 <= len(name) <= 50:
            problems.append(f"body: name {name!r}")
        if attributes["platform"] not in ("IOS", "MAC_OS"):
            problems.append(f"body: platform {attributes['platform']!r}")
        if not isinstance(attributes["udid"], str):
            problems.append("body: udid")
        return problems


def _unbase64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@contextlib.contextmanager
def apple_receiving() -> Iterator[AppleReceiver]:
    receiver = AppleReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path != "/v1/devices":
                answer, payload = Answer(404), b'{"errors":[{"status":"404"}]}'
            else:
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer, payload = receiver.handle(headers, body)
            if answer.release is not None:
                answer.release.wait(30)
            try:
                self.send_response(answer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting

        def log_message(self, message: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield receiver
    finally:
        for answer in receiver.answers:
            if answer.release is not None:
                answer.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


# -- devices, as enrollment would have stored them ---------------------------------------------


def a_udid() -> str:
    return f"{secrets.token_hex(4)}-{secrets.token_hex(8)}".upper()


async def enrolled(
    sessions: async_sessionmaker[AsyncSession],
    user_id: str,
    name: str = "Erin's iPhone",
    platform: DevicePlatform = DevicePlatform.IOS,
    udid: str | None = None,
    now: datetime | None = None,
) -> dict[str, str]:
    """A device of `user_id`, inserted as enrollment (another part of issue 37) stores one."""
    now = now or datetime.now(UTC).replace(microsecond=0)
    device = Device(
        id=new_id("dev"),
        user_id=user_id,
        udid=udid or a_udid(),
        name=name,
        model="MacBookPro18,1" if platform is DevicePlatform.MACOS else "iPhone14,2",
        os_version="21E236",
        platform=platform,
        serial=None,
        enrolled_at=now,
        last_seen_at=now,
    )
    stored = {"id": device.id, "udid": device.udid, "name": device.name}
    async with sessions() as db, db.begin():
        db.add(device)
    return stored
