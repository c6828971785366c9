"""Authenticated `GET /api/projects` throughput: one and two server processes on PostgreSQL +
Redis, beside the single-process embedded default (SQLite), all measured in one run.

Each configuration is a real `buildbay serve` (`--workers 2` for two processes, which share the
port); the user owns 10 projects and is on the enterprise plan, so rate limiting stays on (its
Redis round trip is part of the figure) but never answers 429. wrk loads each configuration in
turn, after a warm-up, with the same connections and duration. PostgreSQL gets a database of its
own (created and dropped here); Redis a database number of its own (flushed).

There is no pass mark: the numbers are for the operations guide. On a 2-core machine wrk and the
server processes share the cores, so a second process gains less than it would on a bigger host.
Usage: .venv/bin/python bench/scale.py [--duration 10] [--connections 32]
       [--postgres postgresql://postgres@127.0.0.1:5432] [--redis redis://127.0.0.1:6379/14]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import httpx

from _common import (
    VENV_BIN,
    create_application,
    create_project,
    enterprise_account,
    free_port,
    running_server,
    scaled_out,
    table,
)
from api import WrkResult, wrk

DATABASE = "buildbay_bench"
PROJECTS = 10
WARMUP_SECONDS = 3


def measure(
    name: str, env: dict[str, str], workers: int, data_dir: Path, duration: int, connections: int
) -> WrkResult:
    port = free_port()
    argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port), "--workers", str(workers)]
    with (
        running_server(argv, data_dir, port, env) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as client,
    ):
        _, token = enterprise_account(client, {"BUILDBAY_DATA_DIR": str(data_dir), **env})
        client.headers["Authorization"] = f"Bearer {token}"
        for n in range(PROJECTS):
            create_application(client, create_project(client, f"p{n}"), f"a{n}")
        url = f"{server.base_url}/api/projects"
        print(f"  {name}: warming up, then {duration} s ...", flush=True)
        wrk(url, token, WARMUP_SECONDS, connections)
        return wrk(url, token, duration, connections)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")

    root = Path(tempfile.mkdtemp(prefix="buildbay-bench-scale-"))
    try:
        with scaled_out(args.postgres, args.redis, DATABASE, root / "pg") as scaled:
            configurations = [
                ("SQLite, 1 process", {}, 1, root / "sqlite"),
                ("PostgreSQL + Redis, 1 process", scaled, 1, root / "pg"),
                ("PostgreSQL + Redis, 2 processes", scaled, 2, root / "pg"),
            ]
            results = [
                (name, measure(name, env, workers, data, args.duration, args.connections))
                for name, env, workers, data in configurations
            ]
    finally:
        shutil.rmtree(root, ignore_errors=True)

    single_pg = results[1][1].rps
    print()
    print(
        f"wrk -t1 -c{args.connections} -d{args.duration}s, authenticated GET /api/projects "
        f"(10 projects), enterprise plan (rate limiting on, never 429), {os.cpu_count()} CPUs"
    )
    print(
        table(
            ["configuration", "req/s", "p50 ms", "p99 ms", "vs PG 1 process", "errors"],
            [
                [
                    name,
                    f"{r.rps:.0f}",
                    f"{r.p50_ms:.2f}",
                    f"{r.p99_ms:.2f}",
                    f"{r.rps / single_pg:.2f}",
                    r.non_2xx + r.socket_errors,
                ]
                for name, r in results
            ],
        )
    )
    return 0 if all(r.non_2xx + r.socket_errors == 0 for _, r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
