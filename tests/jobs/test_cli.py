"""`buildbay jobs failed` and `buildbay jobs retry`: an operator sees the jobs that failed for
good, with why, and runs them again once the cause is fixed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from buildbay.jobs.models import JobStatus
from buildbay.jobs.worker import JobFailed, JobRun
from tests.conftest import TEST_SECRET
from tests.jobs.conftest import Outbox
from tests.test_operator_commands import operator_command


async def buildbay(tmp_path: Path, database_url: str, *args: str) -> tuple[int, str, str]:
    """`buildbay ARGS` as an operator runs it on this database: the command's own code, in
    this process (a thread: it runs an event loop of its own), which a process of its own ran
    only after seconds of imports."""
    env = {"BUILDBAY_DATA_DIR": str(tmp_path / "data"), "BUILDBAY_DATABASE_URL": database_url,
           "BUILDBAY_SECRET_KEY": TEST_SECRET}  # fmt: skip
    done = await asyncio.to_thread(operator_command, env, *args)
    return done.returncode, done.stdout, done.stderr


async def test_failed_jobs_are_listed_with_their_error_and_run_again_on_retry(
    outbox: Outbox, tmp_path: Path, database_url: str
) -> None:
    refuse = True

    async def mail(run: JobRun) -> None:
        if refuse:
            raise JobFailed("the SMTP server answered 550 5.7.1 relaying denied")

    outbox.handlers["mail"] = mail
    failed = await outbox.add("mail", {"to": ["carol@example.com"], "message": "..."})
    worker = outbox.worker()
    await worker.run_until_idle()

    code, out, _ = await buildbay(tmp_path, database_url, "jobs", "failed")
    assert code == 0
    [line, total] = out.splitlines()
    assert line.startswith(f"{failed}  mail to carol@example.com  failed ")
    assert line.endswith("after 1 attempt(s): the SMTP server answered 550 5.7.1 relaying denied")
    assert total == "1 failed job(s)"

    refuse = False  # the operator fixed the relay
    code, out, err = await buildbay(tmp_path, database_url, "jobs", "retry", failed, "job_nope")
    assert (code, out.strip()) == (1, "1 job(s) will run again")
    assert "the others are not failed jobs" in err
    outbox.clock.advance(minutes=1)  # the command ran on the wall clock, a moment ago
    await worker.run_until_idle()
    job = await outbox.job(failed)
    assert job is not None
    assert job.status is JobStatus.DONE
