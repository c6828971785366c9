"""Webhooks: how many events a second reach a local receiver, with 1 and 2 server processes;
and the API's p99 while a webhook receiver takes 9 s to answer, against no webhook at all.

1. Throughput. A fast receiver (a process of its own, answering 200 at once) is the endpoint of
   one webhook. With the server stopped, EVENTS events are written to the outbox (the same
   `emit` the services call); then `buildbay serve --workers N` starts and delivers them. The
   rate is events over the time from the first delivery the receiver got to the last. Runs on
   PostgreSQL + Redis (two processes need them), in a database of its own.
2. Latency. One `buildbay serve` (SQLite, the embedded default); 4 clients add and remove a
   member in turn for REQUESTS requests (each change emits an event), once with no webhook and
   once with a webhook whose receiver answers after 9 s, in ROUNDS rounds of each in turn (so
   that both meet the same load of a shared machine). It prints both p99s and their ratio
   (the issue asks for at most 1.2).

Rate limiting is off in the servers (BUILDBAY_RATE_LIMIT_ENABLED=false).
Usage: .venv/bin/python bench/webhooks.py [--events 2000] [--requests 800]
       [--postgres postgresql://postgres@127.0.0.1:5432] [--redis redis://127.0.0.1:6379/5]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from _common import (
    PASSWORD,
    VENV_BIN,
    create_project,
    free_port,
    register,
    running_server,
    scaled_out,
    table,
)

RECEIVER = Path(__file__).resolve().parent / "_receiver.py"
ALLOW = {
    "BUILDBAY_WEBHOOK_ALLOW_HTTP": "true",
    "BUILDBAY_WEBHOOK_ALLOW_PRIVATE": "true",
    "BUILDBAY_RATE_LIMIT_ENABLED": "false",
    "BUILDBAY_SWEEP_INTERVAL_SECONDS": "0",
}
CLIENTS = 4
ROUNDS = 3  # of each latency configuration, in turn


@contextlib.contextmanager
def receiver(delay: float) -> Iterator[str]:
    """A receiver process answering 200 after `delay` seconds; its URL. GET /stats gives how
    many it got, and when the first and the last arrived."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(RECEIVER), str(port), str(delay)], stdout=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{url}/stats", timeout=1).raise_for_status()
                break
            if time.monotonic() > deadline:
                raise SystemExit("the receiver did not start")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait()


def stats(url: str) -> dict[str, Any]:
    result: dict[str, Any] = httpx.get(f"{url}/stats", timeout=5).json()
    return result


def webhook(client: httpx.Client, project_id: str, url: str, events: list[str]) -> None:
    r = client.post(
        f"/api/projects/{project_id}/webhooks", json={"url": f"{url}/hooks", "events": events}
    )
    r.raise_for_status()


# -- 1. throughput ------------------------------------------------------------------------------


async def _write_events(database_url: str, project_id: str, count: int) -> None:
    from buildbay.clock import SystemClock
    from buildbay.db.engine import create_engine, create_sessionmaker, finish
    from buildbay.webhooks.events import EventType, emit

    engine = create_engine(database_url)
    sessions = create_sessionmaker(engine)
    try:
        for start in range(0, count, 500):
            db = sessions()
            for n in range(start, min(start + 500, count)):
                data = {"n": n}
                await emit(db, project_id, EventType.BUILD_READY, data, SystemClock().now())
            await finish(db, ok=True)
    finally:
        await engine.dispose()


def throughput(processes: int, events: int, postgres: str, redis_url: str, work: Path) -> float:
    data_dir = work / f"throughput-{processes}"
    with (
        scaled_out(postgres, redis_url, "bench_webhooks", data_dir) as env,
        receiver(0.0) as url,
    ):
        env = {**env, **ALLOW}
        port = free_port()
        serve = [str(VENV_BIN / "buildbay"), "serve"]
        with running_server([*serve, "--port", str(port)], data_dir, port, env) as server:
            client = httpx.Client(base_url=server.base_url, timeout=30)
            client.headers["Authorization"] = f"Bearer {register(client)}"
            project_id = create_project(client, "Bench")
            webhook(client, project_id, url, ["build.ready"])
        asyncio.run(_write_events(env["BUILDBAY_DATABASE_URL"], project_id, events))
        port = free_port()
        argv = [*serve, "--port", str(port), "--workers", str(processes)]
        with running_server(argv, data_dir, port, env):
            deadline = time.monotonic() + 600
            while (got := stats(url))["count"] < events:
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {got['count']} of {events} events arrived")
                time.sleep(0.2)
    return (events - 1) / (got["last"] - got["first"])


# -- 2. the API's latency with a slow receiver --------------------------------------------------


def _member_changes(base_url: str, token: str, project_id: str, email: str, n: int) -> list[float]:
    """Add then remove the member `email`, n requests in all; each request's seconds."""
    took = []
    with httpx.Client(base_url=base_url, timeout=60) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        for i in range(n):
            started = time.perf_counter()
            if i % 2 == 0:
                r = client.post(
                    f"/api/projects/{project_id}/members", json={"email": email, "role": "tester"}
                )
            else:
                r = client.get(f"/api/projects/{project_id}/members")
                user_id = next(m["userId"] for m in r.json()["members"] if m["email"] == email)
                started = time.perf_counter()
                r = client.delete(f"/api/projects/{project_id}/members/{user_id}")
            took.append(time.perf_counter() - started)
            r.raise_for_status()
    return took


def latency(slow_receiver: bool, requests: int, work: Path) -> list[float]:
    """Each request's seconds."""
    data_dir = work / f"latency-{'slow' if slow_receiver else 'none'}"
    data_dir.mkdir(parents=True)
    port = free_port()
    serve = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(running_server(serve, data_dir, port, ALLOW))
        client = httpx.Client(base_url=server.base_url, timeout=30)
        token = register(client)
        client.headers["Authorization"] = f"Bearer {token}"
        project_id = create_project(client, "Bench")
        if slow_receiver:
            url = stack.enter_context(receiver(9.0))
            webhook(client, project_id, url, ["member.added", "member.removed"])
        emails = []
        for n in range(CLIENTS):
            email = f"member{n}-{port}@example.com"
            httpx.post(
                f"{server.base_url}/api/auth/register",
                json={"email": email, "password": PASSWORD},
            ).raise_for_status()
            emails.append(email)
        per_client = requests // CLIENTS
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            runs = [
                pool.submit(_member_changes, server.base_url, token, project_id, e, per_client)
                for e in emails
            ]
            took = [t for run in runs for t in run.result()]
        if slow_receiver:
            assert stats(url)["count"] > 0, "the slow receiver got nothing"
    return took


def percentiles(took: list[float]) -> tuple[float, float]:
    """p50 and p99, in milliseconds."""
    ordered = sorted(took)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99) - 1] * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument(
        "--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
    )
    parser.add_argument("--part", choices=["all", "throughput", "latency"], default="all")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        work = Path(tmp)
        if args.part in ("all", "throughput"):
            rates = [
                (p, throughput(p, args.events, args.postgres, args.redis, work)) for p in (1, 2)
            ]
            print(
                f"Events delivered to a local receiver ({args.events} events, PostgreSQL + Redis):"
            )
            print(table(["processes", "events/s"], [(p, f"{r:.0f}") for p, r in rates]))
            print()
        if args.part in ("all", "latency"):
            # Rounds of each in turn, so that both meet the same load of the machine.
            samples: dict[bool, list[float]] = {False: [], True: []}
            for n in range(ROUNDS):
                for slow_receiver in (False, True):
                    samples[slow_receiver] += latency(
                        slow_receiver, args.requests // ROUNDS, work / f"round-{n}"
                    )
            none, slow = percentiles(samples[False]), percentiles(samples[True])
            print(
                f"API latency, member add/remove ({args.requests} requests, {CLIENTS} clients, "
                "SQLite):"
            )
            print(
                table(
                    ["webhook", "p50 ms", "p99 ms"],
                    [
                        ("none", f"{none[0]:.1f}", f"{none[1]:.1f}"),
                        ("receiver answering after 9 s", f"{slow[0]:.1f}", f"{slow[1]:.1f}"),
                    ],
                )
            )
            print(f"p99 ratio (slow receiver / none): {slow[1] / none[1]:.2f} (at most 1.2 asked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
