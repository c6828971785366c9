"""Mail through the outbox to a real SMTP server (aiosmtpd), or to .eml files without one: what
arrives, once; what a refusal or an outage does to the job."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.clock import FrozenClock
from buildbay.config import ConfigurationError, Settings
from buildbay.db.engine import finish
from buildbay.deps import AppContext
from buildbay.jobs.models import Job, JobStatus
from buildbay.mail.message import Mail, render
from buildbay.mail.transports import SmtpServer
from tests.conftest import TEST_SECRET
from tests.smtp import SmtpSink


def ctx_of(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


async def send(app: FastAPI, mail: Mail, *, commit: bool = True) -> str:
    """`mail` sent by a unit of work that commits (or rolls back), as a request would."""
    ctx = ctx_of(app)
    db = ctx.sessions()
    job = ctx.mail.send(db, mail, ctx.clock.now())
    await finish(db, ok=commit)
    return job.id


async def run_jobs(app: FastAPI) -> int:
    jobs = ctx_of(app).jobs
    assert jobs is not None
    return await jobs.run_until_idle()


async def job(app: FastAPI, job_id: str) -> Job:
    db = ctx_of(app).sessions()
    try:
        return await db.get_one(Job, job_id)
    finally:
        await finish(db, ok=True)


def a_mail(to: str = "carol@example.com", project: str = "Acme") -> Mail:
    link = "http://testserver/invitations/t0k3n"
    subject = f"Join {project} on Buildbay"
    return render("invitation", to, subject, inviter="Alice", project=project, role="tester",
                  link=link)  # fmt: skip


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    settings.mail_from = "Buildbay <builds@example.com>"
    return settings


async def test_a_committed_mail_reaches_the_smtp_server_once_and_a_rolled_back_one_never(
    app: FastAPI, smtp: SmtpSink
) -> None:
    await send(app, a_mail("carol@example.com"))
    await send(app, a_mail("dave@example.com"), commit=False)

    assert await run_jobs(app) == 1
    assert await run_jobs(app) == 0

    [received] = smtp.messages()
    assert received.sender == "builds@example.com"
    assert received.recipients == ["carol@example.com"]
    message = received.message
    assert message["From"] == "Buildbay <builds@example.com>"
    assert message["To"] == "carol@example.com"
    assert message["Subject"] == "Join Acme on Buildbay"
    assert message["Message-ID"].endswith("@example.com>")
    assert message["Auto-Submitted"] == "auto-generated"
    assert received.link("http") == "http://testserver/invitations/t0k3n"
    assert "Alice invited you to the project Acme on Buildbay, as tester." in received.text
    assert 'href="http://testserver/invitations/t0k3n"' in received.html


async def test_the_html_part_escapes_what_users_typed_and_loads_nothing_remote(
    app: FastAPI, smtp: SmtpSink
) -> None:
    await send(app, a_mail(project='<img src="http://evil.example/x.png"> & Co'))
    await run_jobs(app)

    [received] = smtp.messages()
    assert "&lt;img src=&#34;http://evil.example/x.png&#34;&gt; &amp; Co" in received.html
    assert "<img" not in received.html
    assert "<script" not in received.html
    assert (
        received.message["Subject"] == 'Join <img src="http://evil.example/x.png"> & Co on Buildbay'
    )


async def test_a_permanent_refusal_fails_the_job_visibly(
    app: FastAPI, smtp: SmtpSink, caplog: pytest.LogCaptureFixture
) -> None:
    smtp.refusal = "550 5.1.1 No such user here"
    job_id = await send(app, a_mail())

    with caplog.at_level(logging.ERROR, logger="buildbay.jobs"):
        await run_jobs(app)

    failed = await job(app, job_id)
    assert failed.status is JobStatus.FAILED
    assert failed.last_error is not None
    assert "550 5.1.1 No such user here" in failed.last_error
    assert any(job_id in r.getMessage() and "550" in r.getMessage() for r in caplog.records)
    assert smtp.messages() == []


async def test_a_deferral_and_an_outage_are_retried_until_the_mail_arrives_once(
    app: FastAPI, smtp: SmtpSink, clock: FrozenClock
) -> None:
    smtp.refusal = "450 4.2.1 Mailbox busy, try later"
    job_id = await send(app, a_mail())
    await run_jobs(app)
    deferred = await job(app, job_id)
    assert deferred.status is JobStatus.PENDING
    assert deferred.last_error is not None
    assert "450 4.2.1 Mailbox busy" in deferred.last_error

    smtp.refusal = None
    smtp.stop()  # and now the server is down altogether
    clock.advance(seconds=(deferred.run_after - clock.now()).total_seconds())
    await run_jobs(app)
    down = await job(app, job_id)
    assert down.status is JobStatus.PENDING
    assert down.attempts == 2
    assert down.last_error is not None
    assert f"cannot reach the SMTP server 127.0.0.1:{smtp.port}" in down.last_error

    smtp.start()
    clock.advance(seconds=(down.run_after - clock.now()).total_seconds())
    await run_jobs(app)

    done = await job(app, job_id)
    assert (done.status, done.attempts) == (JobStatus.DONE, 3)
    assert len(smtp.messages()) == 1


async def test_a_server_that_asks_for_a_login_gets_the_urls_user_and_password(
    settings: Settings, clock: FrozenClock
) -> None:
    from buildbay.app import create_app

    sink = SmtpSink(login=("mailer", "p@ss:word")).start()
    try:
        # A server without STARTTLS: the URL says explicitly that the password may go in clear
        # (tests/mail/test_smtp_tls.py: without `+insecure` it does not).
        url = f"smtp+insecure://mailer:p%40ss%3Aword@127.0.0.1:{sink.port}"
        settings.smtp_url = SecretStr(url)
        app = create_app(settings, clock=clock, migrate_on_start=False)
        await send(app, a_mail())
        await run_jobs(app)
        await ctx_of(app).dispose()
    finally:
        sink.stop()

    assert sink.logins == ["mailer"]
    assert len(sink.messages()) == 1


def test_smtp_urls_say_how_to_connect() -> None:
    plain = SmtpServer.from_url("smtp://user%40corp:se%2Fcret@mail.example.com")
    assert (plain.hostname, plain.port, plain.implicit_tls) == ("mail.example.com", 587, False)
    assert (plain.username, plain.password) == ("user@corp", "se/cret")
    tls = SmtpServer.from_url("smtps://mail.example.com")
    assert (tls.port, tls.implicit_tls, tls.username) == (465, True, None)
    assert SmtpServer.from_url("smtp://mail.example.com:2525").port == 2525
    assert plain.starttls_required
    assert not tls.starttls_required
    assert not SmtpServer.from_url("smtp://mail.example.com").starttls_required  # no password
    insecure = SmtpServer.from_url("smtp+insecure://u:p@relay.internal:25")
    assert (insecure.port, insecure.insecure, insecure.starttls_required) == (25, True, False)


@pytest.mark.parametrize("url", ["http://mail.example.com", "smtp://", "mail.example.com:25"])
def test_a_setting_that_is_not_an_smtp_url_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigurationError, match="BUILDBAY_SMTP_URL"):
        Settings(data_dir=tmp_path, secret_key=TEST_SECRET, smtp_url=url)  # type: ignore[arg-type]


class TestWithoutSmtp:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        settings.smtp_url = None
        return settings

    async def test_each_mail_is_an_eml_file_whose_path_the_log_gives(
        self, app: FastAPI, settings: Settings, caplog: pytest.LogCaptureFixture
    ) -> None:
        job_id = await send(app, a_mail())
        with caplog.at_level(logging.INFO, logger="buildbay.mail"):
            await run_jobs(app)

        path = settings.mail_dir / f"{job_id}.eml"
        assert [p.name for p in settings.mail_dir.iterdir()] == [path.name]
        assert any(str(path) in r.getMessage() for r in caplog.records)
        text = path.read_text()
        assert "Subject: Join Acme on Buildbay" in text
        assert "\nhttp://testserver/invitations/t0k3n\n" in text.replace("\r\n", "\n")

    async def test_a_mail_delivered_twice_is_still_one_file(
        self, app: FastAPI, settings: Settings
    ) -> None:
        job_id = await send(app, a_mail())
        transport_handler = ctx_of(app).jobs.handlers["mail"]  # type: ignore[union-attr]
        stored = await job(app, job_id)
        from buildbay.jobs.worker import JobRun

        for attempt in (1, 2):
            run = JobRun(job_id, "mail", stored.payload, attempt, stored.created_at, None)  # type: ignore[arg-type]
            await transport_handler(run)

        assert [p.name for p in settings.mail_dir.iterdir()] == [f"{job_id}.eml"]
