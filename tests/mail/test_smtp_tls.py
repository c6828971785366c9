"""With a password in BUILDBAY_SMTP_URL, it crosses only over TLS (issue 34): a server that
offers no STARTTLS (or whose offer a man in the middle strips) gets no password and no mail,
and the job waits with a clear error; `smtp+insecure://` says explicitly that it may go in
clear. Real SMTP servers (aiosmtpd), one of them with STARTTLS and a certificate of a test CA."""

from __future__ import annotations

import ipaddress
import logging
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.deps import AppContext
from buildbay.jobs.models import Job, JobStatus
from buildbay.mail.message import Mail, render
from tests.smtp import SmtpSink, _Handler

LOGIN = ("mailer", "s3cret-pass")


def a_mail() -> Mail:
    return render("invitation", "carol@example.com", "Join Acme on Buildbay", inviter="Alice",
                  project="Acme", role="tester", link="http://testserver/i/t")  # fmt: skip


async def send_and_run(app: FastAPI) -> str:
    ctx: AppContext = app.state.ctx
    db = ctx.sessions()
    job_id = ctx.mail.send(db, a_mail(), ctx.clock.now()).id
    await finish(db, ok=True)
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    return job_id


async def job(app: FastAPI, job_id: str) -> Job:
    ctx: AppContext = app.state.ctx
    db = ctx.sessions()
    try:
        return await db.get_one(Job, job_id)
    finally:
        await finish(db, ok=True)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def a_test_ca(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (its certificate's file, for the client) and a server context whose certificate,
    for 127.0.0.1, it signed."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("Buildbay test CA"))
        .issuer_name(_name("Buildbay test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = directory / "server.pem"
    chain.write_bytes(
        server.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    return ca_file, context


class StartTlsSink(SmtpSink):
    """A server that offers STARTTLS, requires it before AUTH and records each login."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        super().__init__(login=LOGIN)
        self.tls = tls

    def start(self) -> StartTlsSink:
        options: dict[str, Any] = {
            "tls_context": self.tls,
            "require_starttls": True,
            "auth_require_tls": True,
            "authenticator": self._authenticate,
        }
        self._controller = Controller(
            _Handler(self), hostname="127.0.0.1", port=self.port, **options
        )
        self._controller.start()
        return self


async def test_a_password_never_crosses_to_a_server_that_offers_no_starttls(
    settings: Settings, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    sink = SmtpSink(login=LOGIN).start()  # offers AUTH, and no STARTTLS
    settings.smtp_url = SecretStr(f"smtp://{LOGIN[0]}:{LOGIN[1]}@127.0.0.1:{sink.port}")
    app = create_app(settings, clock=clock, migrate_on_start=False)
    try:
        with caplog.at_level(logging.WARNING, logger="buildbay.jobs"):
            job_id = await send_and_run(app)
        waiting = await job(app, job_id)
    finally:
        await app.state.ctx.dispose()
        sink.stop()

    assert sink.logins == []  # the password (a right one) never arrived: no AUTH at all
    assert sink.messages() == []
    assert waiting.status is JobStatus.PENDING  # kept, for when the server is fixed
    assert waiting.last_error is not None
    assert "offers no STARTTLS" in waiting.last_error
    assert "nothing was sent" in waiting.last_error
    logged = [r.getMessage() for r in caplog.records if job_id in r.getMessage()]
    assert any("offers no STARTTLS" in line and "smtp+insecure://" in line for line in logged)
    assert not any(LOGIN[1] in r.getMessage() for r in caplog.records)


async def test_smtp_insecure_says_the_password_may_go_in_clear(
    settings: Settings, clock: FrozenClock
) -> None:
    sink = SmtpSink(login=LOGIN).start()
    url = f"smtp+insecure://{LOGIN[0]}:{LOGIN[1]}@127.0.0.1:{sink.port}"
    settings.smtp_url = SecretStr(url)
    app = create_app(settings, clock=clock, migrate_on_start=False)
    try:
        job_id = await send_and_run(app)
        done = await job(app, job_id)
    finally:
        await app.state.ctx.dispose()
        sink.stop()

    assert done.status is JobStatus.DONE
    assert sink.logins == ["mailer"]
    [received] = sink.messages()
    assert received.recipients == ["carol@example.com"]


async def test_with_starttls_the_password_and_the_mail_go_over_tls(
    settings: Settings, clock: FrozenClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_file, tls = a_test_ca(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # the client trusts the test CA
    sink = StartTlsSink(tls).start()
    settings.smtp_url = SecretStr(f"smtp://{LOGIN[0]}:{LOGIN[1]}@127.0.0.1:{sink.port}")
    app = create_app(settings, clock=clock, migrate_on_start=False)
    try:
        job_id = await send_and_run(app)
        done = await job(app, job_id)
    finally:
        await app.state.ctx.dispose()
        sink.stop()

    assert (done.status, done.last_error) == (JobStatus.DONE, None)
    assert sink.logins == ["mailer"]  # accepted only after STARTTLS (auth_require_tls)
    [received] = sink.messages()
    assert received.message["Subject"] == "Join Acme on Buildbay"


def test_settings_take_the_three_smtp_url_forms(settings: Settings) -> None:
    for url in ("smtp://h", "smtps://u:p@h:465", "smtp+insecure://u:p@h:25"):
        Settings(**{**settings.model_dump(), "smtp_url": url})
