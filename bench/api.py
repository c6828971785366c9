"""Requests per second of an authenticated `GET /api/projects`, against a bare endpoint.

One server process, started through the real `buildbay serve` command (so with its uvicorn
options: uvloop, httptools, ...), serves the application plus `GET /bench/bare`, a FastAPI
endpoint answering `{"projects": []}` with no auth, database or response model, placed in the
routing table just before `GET /api/projects` so that both pay the same route matching (see
bench/_bench_app.py). A fresh user owns 10 projects with one application each. wrk loads the bare
endpoint and the real one alternately (bare, real, bare, real, ...) after a short warm-up of each,
always with the same Authorization header.

Rate limiting is disabled in the server for this run (BUILDBAY_RATE_LIMIT_ENABLED=false): the free
plan's 100 requests a minute would answer 429 within a second of load.

It prints the ratio of the real endpoint's req/s to the bare one's, for information: that ratio is
not a target (users feel bench/load.py's figures, not this one), and the bench exits 1 only if a
request failed (a non-2xx response or a socket error).
Usage: .venv/bin/python bench/api.py [--rounds 2] [--duration 10] [--connections 32]
       [--database-url postgresql+asyncpg://...]  (default: a temporary SQLite file)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from _common import (
    ROOT,
    VENV_BIN,
    create_application,
    create_project,
    free_port,
    register,
    running_server,
    table,
)

BENCH_APP = ROOT / "bench" / "_bench_app.py"
PROJECTS = 10
WARMUP_SECONDS = 2
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


@dataclass
class WrkResult:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def _ms(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", value)
    if match is None:
        raise ValueError(f"unreadable wrk latency {value!r}")
    return float(match[1]) * _UNITS[match[2]]


def parse_wrk(output: str) -> WrkResult:
    done = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.MULTILINE)
    if done is None or p50 is None or p99 is None:
        raise SystemExit(f"unreadable wrk output:\n{output}")
    seconds = float(done[2]) * {"ms": 1e-3, "s": 1.0, "m": 60.0}[done[3]]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    return WrkResult(
        requests=int(done[1]),
        seconds=seconds,
        p50_ms=_ms(p50[1]),
        p99_ms=_ms(p99[1]),
        non_2xx=int(non_2xx[1]) if non_2xx else 0,
        socket_errors=sum(int(n) for n in errors.groups()) if errors else 0,
    )


def run_wrk(clients: int, seconds: int, *extra: str) -> WrkResult:
    """`clients` connections of wrk for `seconds`, with `extra` (a Lua script, the URL and the
    script's arguments): wrk is C, and one thread, so that the load generator takes little of
    the two cores the server runs on."""
    # A 10 s timeout: on a busy machine a slow answer is latency, not a failed request.
    argv = ["wrk", "-t1", f"-c{clients}", f"-d{seconds}s", "--timeout", "10s", "--latency", *extra]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return parse_wrk(done.stdout)


def wrk(url: str, token: str, seconds: int, connections: int) -> WrkResult:
    argv = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "-H",
        f"Authorization: Bearer {token}",
        url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return parse_wrk(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="bare+real pairs (default 2)")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--database-url",
        help="run against this database (migrated first; a user and 10 projects are left in it) "
        "instead of a temporary SQLite file",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")

    root = Path(tempfile.mkdtemp(prefix="buildbay-bench-api-"))
    try:
        return run(root / "data", args.rounds, args.duration, args.connections, args.database_url)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(
    data_dir: Path, rounds: int, duration: int, connections: int, database_url: str | None
) -> int:
    port = free_port()
    argv = [str(VENV_BIN / "python"), str(BENCH_APP), "serve", "--port", str(port)]
    env = {"BUILDBAY_RATE_LIMIT_ENABLED": "false"}
    database = "a temporary SQLite file"
    if database_url:
        env["BUILDBAY_DATABASE_URL"] = database_url
        database = database_url.split("://", 1)[0]
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
        client.headers["Authorization"] = f"Bearer {token}"
        for n in range(PROJECTS):
            project = create_project(client, f"bench project {n}")
            create_application(client, project, f"bench app {n}")
        listed = client.get("/api/projects")
        listed.raise_for_status()
        if len(listed.json()["projects"]) != PROJECTS:
            raise SystemExit(f"expected {PROJECTS} projects, got {listed.text}")
        if "RateLimit" in listed.headers:
            raise SystemExit("the server still counts requests; rate limiting should be off")

        urls = {
            "bare": f"{server.base_url}/bench/bare",
            "real": f"{server.base_url}/api/projects",
        }
        print(f"warming up ({WARMUP_SECONDS} s each) ...", flush=True)
        for url in urls.values():
            wrk(url, token, WARMUP_SECONDS, connections)
        results: list[tuple[str, WrkResult]] = []
        for n in range(rounds):
            for name, url in urls.items():
                print(f"  round {n + 1}/{rounds}: {name} ({duration} s)", flush=True)
                results.append((name, wrk(url, token, duration, connections)))

    rows = [
        [
            name,
            "GET /bench/bare" if name == "bare" else "GET /api/projects (10)",
            f"{r.rps:.0f}",
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            r.non_2xx,
            r.socket_errors,
        ]
        for name, r in results
    ]
    totals = {
        name: sum(r.requests for n, r in results if n == name)
        / sum(r.seconds for n, r in results if n == name)
        for name in urls
    }
    pair_ratios = [real.rps / bare.rps for (_, bare), (_, real) in _pairs(results)]
    ratio = totals["real"] / totals["bare"]
    failures = sum(r.non_2xx + r.socket_errors for _, r in results)

    print()
    print(
        f"wrk -t1 -c{connections} -d{duration}s against one `buildbay serve` process on "
        f"{database}, {rounds} rounds, alternating"
    )
    print(
        "rate limiting DISABLED for this run (BUILDBAY_RATE_LIMIT_ENABLED=false; the free plan's "
        "100/minute would answer 429): the limiter's cost is not in these numbers"
    )
    print()
    print(
        table(
            ["run", "endpoint", "req/s", "p50 ms", "p99 ms", "non-2xx", "socket errors"],
            rows,
        )
    )
    print()
    print(f"bare: {totals['bare']:.0f} req/s, real: {totals['real']:.0f} req/s (all rounds)")
    print(
        f"ratio real/bare: {ratio:.2f} (per round: {', '.join(f'{r:.2f}' for r in pair_ratios)}); "
        "for information, not a target"
    )
    print(
        f"non-2xx responses + socket errors: {failures}; required 0: "
        f"{'PASS' if failures == 0 else 'FAIL'}"
    )
    return 0 if failures == 0 else 1


def _pairs(
    results: list[tuple[str, WrkResult]],
) -> list[tuple[tuple[str, WrkResult], tuple[str, WrkResult]]]:
    return [(results[i], results[i + 1]) for i in range(0, len(results) - 1, 2)]


if __name__ == "__main__":
    sys.exit(main())
