"""What one build costs the server, from its upload to its testers' mails, against a build that
mails nobody, in the same run.

A real `buildbay serve` (one process) on PostgreSQL + Redis, or on SQLite with --sqlite. An owner
creates a project and an application (distributed to `everyone` when a build is ready, the
default) and adds TESTERS accounts as testers. Two threads each upload small builds one after
another (upload-link, PUT, verify), BUILDS in all; the run ends when every tester's mail of every
build is written (no SMTP server is configured: mails are `.eml` files under the data
directory). The server's CPU time (user + system, from /proc) over that span, per build, is what
a build costs, with everything it sets going. The same is measured with no tester (nobody to
mail) in the same run, first, and the ratio printed. Both are measured until the server is
idle again (its job worker done with what the builds set going).

Usage: .venv/bin/python bench/build_cost.py [--builds 200] [--testers 4] [--size-kib 64]
       [--sqlite] [--postgres postgresql://postgres@127.0.0.1:5432]
       [--redis redis://127.0.0.1:6379/12]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

from _common import (
    VENV_BIN,
    cpu_seconds,
    create_application,
    create_project,
    enterprise_account,
    free_port,
    mails_written,
    running_server,
    scaled_out,
    table,
)

THREADS = 2
DEADLINE_SECONDS = 300  # for the mails, after the last upload
IDLE_SECONDS, IDLE_CPU_MS = 0.5, 10  # idle: under 10 ms of CPU in half a second


def wait_for_mails(data_dir: Path, expected: int) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while mails_written(data_dir) < expected:
        if time.monotonic() > deadline:
            raise SystemExit(f"{expected - mails_written(data_dir)} mails never came")
        time.sleep(0.05)


def wait_until_idle(pid: int) -> float:
    """Wait until the server spends under IDLE_CPU_MS of CPU in IDLE_SECONDS (its job worker
    done); its CPU seconds then."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    cpu = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(IDLE_SECONDS)
        now = cpu_seconds(pid)
        if (now - cpu) * 1000 < IDLE_CPU_MS:
            return now
        cpu = now
    raise SystemExit("the server never became idle")


def upload(client: httpx.Client, builds: str, blob: bytes) -> None:
    data = uuid.uuid4().bytes + blob[16:]  # unique bytes per build
    sha256 = hashlib.sha256(data).hexdigest()
    link = client.post(
        f"{builds}/upload-link",
        json={"fileName": "build.bin", "fileSize": len(data), "sha256": sha256},
    )
    link.raise_for_status()
    body = link.json()
    client.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"]).raise_for_status()
    client.post(f"{builds}/verify", json={"buildId": body["buildId"]}).raise_for_status()


@contextlib.contextmanager
def environment(args: argparse.Namespace, data: Path) -> Iterator[dict[str, str]]:
    if args.sqlite:
        yield {}
    else:
        with scaled_out(args.postgres, args.redis, "buildbay_build_cost", data) as env:
            yield env


def measure(args: argparse.Namespace, testers: int) -> tuple[float, float]:
    """(server CPU ms per build, builds uploaded a second) with `testers` testers."""
    with tempfile.TemporaryDirectory(prefix="buildbay-bench-cost-") as root:
        data = Path(root) / "data"
        data.mkdir()
        with environment(args, data) as env:
            env = {**env, "BUILDBAY_DATA_DIR": str(data)}
            port = free_port()
            argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port), "--workers", "1"]
            with (
                running_server(argv, data, port, env) as server,
                httpx.Client(base_url=server.base_url, timeout=60) as client,
            ):
                _, owner = enterprise_account(client, env)
                client.headers["Authorization"] = f"Bearer {owner}"
                project = create_project(client, "cost")
                app = create_application(client, project, "cost")
                for _ in range(testers):
                    email, _token = enterprise_account(client, env)
                    client.post(
                        f"/api/projects/{project}/members",
                        json={"email": email, "role": "tester"},
                    ).raise_for_status()
                builds = f"/api/app-distribution/{project}/{app}/builds"
                blob = os.urandom(args.size_kib * 1024)
                expected = mails_written(data) + 3 * testers
                for _ in range(3):  # warm-up: first requests, first mails
                    upload(client, builds, blob)
                wait_for_mails(data, expected)
                wait_until_idle(server.pid)
                expected += args.builds * testers
                failures: list[BaseException] = []

                def uploader(count: int) -> None:
                    try:
                        with httpx.Client(
                            base_url=server.base_url, timeout=60, headers=client.headers
                        ) as own:
                            for _ in range(count):
                                upload(own, builds, blob)
                    except BaseException as exc:  # reported below
                        failures.append(exc)

                cpu_before, began = cpu_seconds(server.pid), time.monotonic()
                counts = [
                    args.builds // THREADS + (n < args.builds % THREADS) for n in range(THREADS)
                ]
                threads = [threading.Thread(target=uploader, args=(c,)) for c in counts]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                uploaded = time.monotonic() - began
                if failures:
                    raise SystemExit(f"an upload failed: {failures[0]}")
                wait_for_mails(data, expected)
                # With or without mails, the jobs the last builds set going (their
                # distribution) count: the server is measured until it has nothing left to do.
                cpu = wait_until_idle(server.pid) - cpu_before
    return cpu * 1000 / args.builds, args.builds / uploaded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=200)
    parser.add_argument("--testers", type=int, default=4, help="mailed for each build")
    parser.add_argument("--size-kib", type=int, default=64, help="of each build")
    parser.add_argument("--sqlite", action="store_true", help="the embedded default instead")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12")
    args = parser.parse_args()
    where = "SQLite" if args.sqlite else "PostgreSQL + Redis"
    print(
        f"{where}, one process, {args.builds} builds of {args.size_kib} KiB from {THREADS} threads"
    )
    rows = []
    baseline = None
    for testers in (0, args.testers):
        cpu_ms, rate = measure(args, testers)
        baseline = baseline or cpu_ms
        rows.append([testers, f"{cpu_ms:.1f}", f"{cpu_ms / baseline:.2f}x", f"{rate:.1f}"])
        print(f"  {testers} testers: {cpu_ms:.1f} ms of server CPU a build", flush=True)
    print()
    print(table(["testers mailed", "server CPU ms a build", "ratio", "builds a second"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
