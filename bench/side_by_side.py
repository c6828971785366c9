"""Two trees side by side: the server's CPU per request of bench/load.py's reads, and per upload
sequence, for this tree and another checkout (`--other`, e.g. a `git worktree` of a baseline
commit with its own .venv from `make lint`).

A shared machine's latencies measure the neighbours as much as the server (docs/performance.md);
the CPU time a server process spends per request (from /proc) moves far less. Both servers run
at once, each from its own tree's .venv and on its own database, with the same data: an owner,
an application of platform `other`, four testers and `--builds` ready builds of 4 KiB. Then,
`--rounds` times, each measurement runs on one server and then the other (the order alternates
from round to round):

- a read (wrk, `--connections` connections without pauses, `--seconds`, the testers' tokens in
  turn): `projects`, `project`, `apps`, `builds` (the first page of 20), `build`, or `mix` (the
  five in turn, as bench/load.py reads);
- `upload`: `--uploads` upload sequences of 4 KiB one after another (upload-link with a sha256,
  PUT, verify); `uploadN`: N threads doing so at once (for the application row's lock).

It prints the medians and every round, and on PostgreSQL the database's CPU per request too
(the backends of the server's connections); beside them the reads' p99 and the upload
sequences' median wall time, which move with the machine far more. Uploads add builds: with
`--analyze` each database is analysed after its uploads, as autovacuum does when it is on (the
benches' PostgreSQL may run without it: `SHOW autovacuum`).

Usage: .venv/bin/python bench/side_by_side.py --other ../base [--config sqlite|postgres]
       [--only mix,upload] [--rounds 4] [--seconds 8] [--connections 50] [--builds 150]
       [--uploads 30] [--analyze] [--postgres postgresql://postgres@127.0.0.1:5432]
       [--redis redis://127.0.0.1:6379] [--redis-dbs 4,5] [--database side_by_side]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import redis

from _common import PASSWORD, ROOT, _postgres_admin, cpu_seconds, free_port, running_server
from api import parse_wrk

LUA = ROOT / "bench" / "load_reads.lua"
READERS = 4
SIZE = 4096
READS = ("projects", "project", "apps", "builds", "build", "mix")
LATENCY = {False: "p99", True: "p50"}  # of reads, of upload sequences


class Side:
    """One tree's server, its data and what the measurements ask of it."""

    def __init__(
        self, name: str, tree: Path, env: dict[str, str], postgres: str, database: str | None
    ) -> None:
        self.name, self.tree, self.env = name, tree, env
        self.postgres, self.database = postgres, database
        self.paths: dict[str, str] = {}
        self.readers: list[str] = []
        self.owner = ""
        self.builds = ""

    def cli(self, *argv: str) -> None:
        subprocess.run(
            [str(self.tree / ".venv" / "bin" / "buildbay"), *argv],
            env={**os.environ, **self.env},
            check=True,
            capture_output=True,
        )

    def account(self, client: httpx.Client) -> tuple[str, str]:
        """A fresh account on the enterprise plan (set with this tree's own CLI)."""
        email = f"bench-{uuid.uuid4().hex[:12]}@example.com"
        answer = client.post("/api/auth/register", json={"email": email, "password": PASSWORD})
        answer.raise_for_status()
        self.cli("users", "set-plan", email, "enterprise")
        return email, str(answer.json()["access_token"])

    def set_up(self, client: httpx.Client, builds: int) -> None:
        _, self.owner = self.account(client)
        client.headers["Authorization"] = f"Bearer {self.owner}"
        project = client.post("/api/projects", json={"name": "side"}).json()["id"]
        app = client.post(
            f"/api/projects/{project}/applications", json={"name": "side", "platform": "other"}
        ).json()["id"]
        for _ in range(READERS):
            email, token = self.account(client)
            client.post(
                f"/api/projects/{project}/members", json={"email": email, "role": "tester"}
            ).raise_for_status()
            self.readers.append(token)
        self.builds = f"/api/app-distribution/{project}/{app}/builds"
        ids = [upload(client, self.builds) for _ in range(builds)]
        self.paths = {
            "projects": "/api/projects",
            "project": f"/api/projects/{project}",
            "apps": f"/api/projects/{project}/applications",
            "builds": f"{self.builds}?limit=20",
            "build": f"{self.builds}/{ids[0]}",
        }

    def database_cpu(self) -> float:
        """CPU seconds of the PostgreSQL backends connected to this side's database."""
        if self.database is None:
            return 0.0
        total = 0.0
        for pid in asyncio.run(_backends(self.postgres, self.database)):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += cpu_seconds(pid)
        return total

    def analyze(self) -> None:
        if self.database is not None:
            asyncio.run(_analyze(self.postgres, self.database))


async def _backends(postgres: str, database: str) -> list[int]:
    connection = await asyncpg.connect(f"{postgres}/postgres")
    try:
        query = "SELECT pid FROM pg_stat_activity WHERE datname = $1"
        return [row["pid"] for row in await connection.fetch(query, database)]
    finally:
        await connection.close()


async def _analyze(postgres: str, database: str) -> None:
    connection = await asyncpg.connect(f"{postgres}/{database}")
    try:
        await connection.execute("ANALYZE")
    finally:
        await connection.close()


def upload(client: httpx.Client, builds: str) -> str:
    data = uuid.uuid4().bytes + os.urandom(SIZE - 16)
    sha256 = hashlib.sha256(data).hexdigest()
    link = client.post(
        f"{builds}/upload-link",
        json={"fileName": f"side-{sha256[:8]}.bin", "fileSize": SIZE, "sha256": sha256},
    )
    link.raise_for_status()
    body = link.json()
    client.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"]).raise_for_status()
    client.post(f"{builds}/verify", json={"buildId": body["buildId"]}).raise_for_status()
    return str(body["buildId"])


def read(side: Side, base_url: str, what: str, args: argparse.Namespace) -> tuple[int, float]:
    """(requests answered, their p99 in ms)."""
    paths = list(side.paths.values()) if what == "mix" else [side.paths[what]] * 2
    argv = ["wrk", "-t1", f"-c{args.connections}", f"-d{args.seconds}s", "--latency"]
    argv += ["-s", str(LUA), f"{base_url}/", "--", "0", ",".join(side.readers), *paths]
    output = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    if "4xx=0 5xx=0" not in output:
        raise SystemExit(f"{side.name}: failed reads:\n{output}")
    result = parse_wrk(output)
    return result.requests, result.p99_ms


def uploads(side: Side, base_url: str, what: str, args: argparse.Namespace) -> tuple[int, float]:
    """(upload sequences done, their median wall time in ms)."""
    threads = int(what.removeprefix("upload") or 1)

    def sequences(_: int) -> list[float]:
        headers = {"Authorization": f"Bearer {side.owner}"}
        took = []
        with httpx.Client(base_url=base_url, timeout=60, headers=headers) as client:
            for _ in range(args.uploads):
                began = time.perf_counter()
                upload(client, side.builds)
                took.append((time.perf_counter() - began) * 1000)
        return took

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        done = [ms for took in pool.map(sequences, range(threads)) for ms in took]
    if args.analyze:
        side.analyze()
    return len(done), statistics.median(done)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", required=True, help="the other tree (with its own .venv)")
    parser.add_argument("--config", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--only", default="mix,upload", help=f"of {', '.join(READS)}, uploadN")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--builds", type=int, default=150)
    parser.add_argument("--uploads", type=int, default=30)
    parser.add_argument("--analyze", action="store_true", help="ANALYZE after uploads")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--redis-dbs", default="4,5", help="one Redis database for each side")
    parser.add_argument("--database", default="side_by_side", help="prefix of the two databases")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")
    trees = {"this": ROOT, "other": Path(args.other).resolve()}
    redis_dbs = args.redis_dbs.split(",")
    measured = args.only.split(",")
    root = Path(tempfile.mkdtemp(prefix="buildbay-side-"))
    sides: dict[str, tuple[Side, str, int]] = {}
    try:
        with contextlib.ExitStack() as stack:
            for n, (name, tree) in enumerate(trees.items()):
                data = root / name / "data"
                data.mkdir(parents=True)
                env = {"BUILDBAY_DATA_DIR": str(data)}
                database = None
                if args.config == "postgres":
                    database = f"{args.database}_{name}"
                    drop = f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"
                    asyncio.run(_postgres_admin(args.postgres, drop, f"CREATE DATABASE {database}"))
                    stack.callback(
                        lambda drop=drop: asyncio.run(_postgres_admin(args.postgres, drop))
                    )
                    redis_url = f"{args.redis}/{redis_dbs[n]}"
                    redis.Redis.from_url(redis_url).flushdb()
                    env["BUILDBAY_DATABASE_URL"] = (
                        args.postgres.replace("postgresql://", "postgresql+asyncpg://")
                        + f"/{database}"
                    )
                    env["BUILDBAY_REDIS_URL"] = redis_url
                side = Side(name, tree, env, args.postgres, database)
                if database is not None:
                    side.cli("db", "upgrade")
                port = free_port()
                argv = [str(tree / ".venv" / "bin" / "buildbay"), "serve", "--port", str(port)]
                server = stack.enter_context(running_server(argv, data, port, env))
                client = stack.enter_context(httpx.Client(base_url=server.base_url, timeout=60))
                print(f"{name} ({tree}): setting up", flush=True)
                side.set_up(client, args.builds)
                if args.analyze:
                    side.analyze()
                sides[name] = (side, server.base_url, server.pid)
            results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
            for n in range(args.rounds):
                for what in measured:
                    order = list(sides) if n % 2 == 0 else list(reversed(sides))
                    for name in order:
                        side, base_url, pid = sides[name]
                        cpu, db_cpu = cpu_seconds(pid), side.database_cpu()
                        if what.startswith("upload"):
                            count, latency = uploads(side, base_url, what, args)
                        else:
                            count, latency = read(side, base_url, what, args)
                        cpu = (cpu_seconds(pid) - cpu) / count * 1000
                        db_cpu = (side.database_cpu() - db_cpu) / count * 1000
                        results.setdefault((what, name), []).append((cpu, db_cpu, latency))
                        print(
                            f"round {n + 1} {what:8s} {name:5s} {count:6d} requests: "
                            f"server {cpu:6.2f} ms, database {db_cpu:5.2f} ms CPU each; "
                            f"{LATENCY[what.startswith('upload')]} {latency:.1f} ms",
                            flush=True,
                        )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"\nCPU ms per request, and latency ({LATENCY[False]} of reads, {LATENCY[True]} of "
        f"upload sequences), on {args.config}: {args.connections} connections for reads, "
        f"{args.builds} builds to start with; medians of {args.rounds} rounds"
    )
    for what in measured:
        for part, label in ((0, "server"), (1, "database"), (2, "latency")):
            if part == 1 and args.config != "postgres":
                continue
            this = [r[part] for r in results[(what, "this")]]
            other = [r[part] for r in results[(what, "other")]]
            ratio = statistics.median(this) / statistics.median(other)
            print(
                f"  {what:8s} {label:8s} this {statistics.median(this):6.2f} "
                f"({min(this):.2f}-{max(this):.2f})  other {statistics.median(other):6.2f} "
                f"({min(other):.2f}-{max(other):.2f})  this/other {ratio:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
