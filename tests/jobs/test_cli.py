"""`buildbay jobs failed` and `buildbay jobs retry`: an operator sees the jobs that failed for
good, with why, and runs them again once the cause is fixed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from buildbay.jobs.models import JobStatus
from buildbay.jobs.worker import JobFailed, JobRun
from tests.conftest import TEST_SECRET
from tests.jobs.conftest import Outbox


async def buildbay(tmp_path: Path, database_url: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")}
    env |= {"BUILDBAY_DATA_DIR": str(tmp_path / "data"), "BUILDBAY_DATABASE_URL": database_url,
            "BUILDBAY_SECRET_KEY": TEST_SECRET}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "buildbay", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    # Generous: on a loaded 2-core machine the server's imports alone took over 30 s.
    out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


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
