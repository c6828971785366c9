"""Update checks per second (GET /api/updates/check) against the project list in the same run.

One `buildbay serve` process; an application with 20 ready builds on its default channel. Each
endpoint first runs WARMUP seconds unreported (the server's pools and statement caches fill).
Then, alternately, 50 connections calling the update check (every other request sending the
ETag of the answer as If-None-Match, so answered 304), and 50 calling the authenticated
`GET /api/projects`, each driven by wrk (bench/updates.lua, bench/load_reads.lua): first without
pauses for `--saturation-seconds` each (the most the server answers, every answer queued behind
49 others), then for `--duration` each with every client pausing 0..200 ms between answers, as
bench/load.py's clients do. Prints requests per second, p50 and p99 of each, the ratio of the
check's rate to the list's without pauses, and the check's p99 at 50 clients, with and without
pauses (target: under 50 ms).

Why the stages without pauses are long (40 s): each wrk run opens its 50 connections at once.
uvloop's libuv accepts one connection per turn of the event loop (libuv 1.45, "unix: don't
accept() connections in a loop", which spreads connections over `--workers` processes), and on
a single saturated SQLite process, whose queries run on the loop, a turn serves every open
connection once: the last of the 50 first requests waits up to 0.7 s. wrk's latency histogram
then adds, for each slow answer, the answers the connection would have had meanwhile (its
coordinated-omission correction), about 600 samples for those 50. In a 10 s stage they are the
top 4%, and p99 reads 200-300 ms while the requests as sent (a packet capture) read 30 ms. In
40 s they are under 1%, and p99 is the steady state's (docs/performance.md, seventh session).

Rate limiting is off for the run (BUILDBAY_RATE_LIMIT_ENABLED=false): 50 clients on one IP would
spend the per-IP budget (120 a minute) in a fraction of a second.

Usage: .venv/bin/python bench/updates.py [--saturation-seconds 40] [--duration 10]
       [--clients 50] [--database-url postgresql+asyncpg://...] [--redis-url redis://...]
       (default: a temporary SQLite file, no Redis)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from _common import (
    VENV_BIN,
    create_application,
    create_project,
    free_port,
    register,
    running_server,
    table,
)
from api import run_wrk

BUILDS = 20
LUA = Path(__file__).with_name("updates.lua")
READS_LUA = Path(__file__).with_name("load_reads.lua")
THINK_MS = 200  # as bench/load.py's clients: an app checks, shows, and checks again later
WARMUP = 3  # seconds of each endpoint before the measured stages


def _seed(client: httpx.Client, token: str) -> str:
    """The application's update key, with BUILDS ready builds published to `default`."""
    client.headers["Authorization"] = f"Bearer {token}"
    project = create_project(client, "Bench")
    app = create_application(client, project, "App")
    base = f"/api/app-distribution/{project}/{app}/builds"
    for n in range(BUILDS):
        data = f"build {n}".encode()
        link = client.post(
            f"{base}/upload-link", json={"fileName": "app.zip", "fileSize": len(data)}
        )
        link.raise_for_status()
        body = link.json()
        client.put(
            body["uploadUrl"], content=data, headers=body["uploadHeaders"]
        ).raise_for_status()
        client.post(
            f"{base}/verify", json={"buildId": body["buildId"], "notes": f"{n}"}
        ).raise_for_status()
    key = client.get(f"/api/projects/{project}/applications/{app}").json()["updateKey"]
    return str(key)


def run(
    data_dir: Path,
    saturation: int,
    duration: int,
    clients: int,
    database_url: str | None,
    redis_url: str | None,
) -> int:
    port = free_port()
    argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
    env = {"BUILDBAY_RATE_LIMIT_ENABLED": "false"}
    if redis_url:
        env["BUILDBAY_REDIS_URL"] = redis_url
    if database_url:
        env["BUILDBAY_DATABASE_URL"] = database_url
        subprocess.run(
            [str(VENV_BIN / "buildbay"), "db", "upgrade"],
            env={**os.environ, "BUILDBAY_DATA_DIR": str(data_dir), **env},
            check=True,
            capture_output=True,
        )
    with (
        running_server(argv, data_dir, port, env) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as client,
    ):
        token = register(client)
        key = _seed(client, token)
        check = f"/api/updates/check?key={key}&versionCode=0&versionName=0.1&platform=android&os=34"
        first = client.get(check)
        first.raise_for_status()
        etag = first.headers["etag"]
        base = server.base_url

        def listing(think: int) -> tuple[str, ...]:
            return ("-s", str(READS_LUA), base, "--", str(think), token, "/api/projects")

        def checking(think: int) -> tuple[str, ...]:
            return ("-s", str(LUA), f"{base}{check}", "--", etag, str(think))

        for extra in (listing(0), checking(0)):
            run_wrk(clients, WARMUP, *extra)
        rows = []
        results: dict[tuple[str, int], list[float]] = {}
        p99s: dict[tuple[str, int], list[float]] = {}
        for think in (0, THINK_MS):
            for name, extra in (
                ("projects list", listing(think)),
                ("update check", checking(think)),
                ("projects list", listing(think)),
                ("update check", checking(think)),
            ):
                result = run_wrk(clients, duration if think else saturation, *extra)
                failures = result.non_2xx + result.socket_errors
                results.setdefault((name, think), []).append(result.rps)
                p99s.setdefault((name, think), []).append(result.p99_ms)
                pauses = f"0..{think}" if think else "none"
                p50, p99 = f"{result.p50_ms:.1f}", f"{result.p99_ms:.1f}"
                rows.append((name, pauses, f"{result.rps:.0f}", p50, p99, failures))
                if failures:
                    print(f"{name}: {failures} failed requests", file=sys.stderr)
        print(table(["endpoint", "pauses ms", "req/s", "p50 ms", "p99 ms", "failed"], rows))
        ratio = max(results[("update check", 0)]) / max(results[("projects list", 0)])
        print(f"without pauses, update checks per second / project lists per second: {ratio:.2f}")
        print(
            f"p99 of update checks at {clients} clients (target: under 50 ms): without pauses "
            f"{max(p99s[('update check', 0)]):.1f} ms, pausing 0..{THINK_MS} ms "
            f"{max(p99s[('update check', THINK_MS)]):.1f} ms"
        )
        return 1 if any(row[5] for row in rows) else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--saturation-seconds", type=int, default=40, help="each stage without pauses"
    )
    parser.add_argument("--duration", type=int, default=10, help="each stage with pauses")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--database-url")
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="buildbay-bench-updates-")) / "data"
    try:
        return run(
            data_dir,
            args.saturation_seconds,
            args.duration,
            args.clients,
            args.database_url,
            args.redis_url,
        )
    finally:
        shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
