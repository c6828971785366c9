"""What one feedback costs the server's own process, alone: the CPU of its event loop (the
main thread) and of the whole process (its threads: reading the screenshots, handing them to
the worker, storing them), per feedback, beside the same for a read (issue 38: at the knee of
bench/feedback.py's load, each millisecond of the loop's that a feedback takes is one the reads
wait for). The screenshots' worker processes are not counted: they run at SCHED_IDLE, on the
cores the requests leave (docs/performance.md, "Feedback while the load runs").

One `buildbay serve` on SQLite, no other load: a tester sends `--feedback` feedback (20) one
after another, the bench's own bodies (two PNG and a JPEG of a phone's size, ~2 MiB each), after
one unreported (the workers' start, each endpoint's first request); then `--reads` reads (500)
of load.py's paths one after another. CPU times from /proc (clock ticks: 10 ms, so the more
feedback, the finer).

Usage: .venv/bin/python bench/feedback_cost.py [--feedback 20] [--reads 500]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

import httpx

from _common import (
    VENV_BIN,
    cpu_seconds,
    create_application,
    create_project,
    enterprise_account,
    free_port,
    running_server,
)
from feedback import FEEDBACK_BUDGET, _add_tester, feedback_bodies
from load import MAX_UPLOAD, upload_once


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--feedback", type=int, default=20)
    parser.add_argument("--reads", type=int, default=500)
    args = parser.parse_args()
    bodies = feedback_bodies(4)
    data_dir = Path(tempfile.mkdtemp(prefix="buildbay-bench-feedback-cost-")) / "data"
    port = free_port()
    env = {
        "BUILDBAY_DATA_DIR": str(data_dir),
        **FEEDBACK_BUDGET,
        "BUILDBAY_FEEDBACK_PER_MINUTE_PER_REPORTER": "100000",
    }
    argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
    with (
        running_server(argv, data_dir, port, env) as server,
        httpx.Client(base_url=server.base_url, timeout=120) as client,
    ):
        _, owner = enterprise_account(client, env)
        client.headers["Authorization"] = f"Bearer {owner}"
        project = create_project(client, "cost")
        app = create_application(client, project, "cost")
        email = f"tester-{os.urandom(4).hex()}@example.com"
        registered = client.post(
            "/api/auth/register", json={"email": email, "password": "bench-password-123"}
        )
        registered.raise_for_status()
        tester = {"Authorization": f"Bearer {registered.json()['access_token']}"}
        _add_tester(client, project, email)
        builds = f"/api/app-distribution/{project}/{app}/builds"
        seed = upload_once(client, builds, os.urandom(MAX_UPLOAD), random.Random(0))
        url = f"{builds}/{seed.build_id}/feedback"

        def send(n: int) -> None:
            body = bodies[n % len(bodies)]
            headers = {**tester, "Content-Type": body.content_type}
            answer = client.post(url, content=body.content, headers=headers)
            if answer.status_code != 201:
                raise SystemExit(f"feedback answered {answer.status_code}: {answer.text[:300]}")

        send(0)
        time.sleep(2)  # its mail and event leave through the outbox
        loop, process = cpu_seconds(server.pid, server.pid), cpu_seconds(server.pid)
        for n in range(args.feedback):
            send(n + 1)
        time.sleep(2)
        loop = cpu_seconds(server.pid, server.pid) - loop
        process = cpu_seconds(server.pid) - process

        paths = [
            "/api/projects", f"/api/projects/{project}", f"/api/projects/{project}/applications",
            f"{builds}?limit=20", f"{builds}/{seed.build_id}",
        ]  # fmt: skip
        for path in paths:
            client.get(path).raise_for_status()
        read_loop = cpu_seconds(server.pid, server.pid)
        for n in range(args.reads):
            client.get(paths[n % len(paths)])
        read_loop = cpu_seconds(server.pid, server.pid) - read_loop

    per_read = 1000 * read_loop / args.reads
    print(
        f"a feedback: {1000 * loop / args.feedback:.1f} ms of the event loop's CPU, "
        f"{1000 * process / args.feedback:.1f} ms of the whole process's ({args.feedback} sent)"
    )
    print(f"a read: {per_read:.2f} ms of the event loop's CPU ({args.reads} sent)")
    reads = loop / args.feedback / (read_loop / args.reads)
    print(f"a feedback costs the event loop what {reads:.0f} reads do")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
