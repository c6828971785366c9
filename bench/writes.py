"""Units of work on a busy pool: the p99 of writes when more requests write at once than the pool
has connections, against the same load with a connection for each.

One `buildbay serve` on PostgreSQL + Redis. USERS users each get an access token; then wrk (one
thread, so that the load generator takes little of the cores) keeps `--clients` connections
renaming them (`PUT /api/auth/me`, bench/writes.lua: each request with the next user's token,
so that few wait on another's row lock), without pauses, for `--seconds`. The server runs with
the default pool (BUILDBAY_DATABASE_POOL_SIZE, 10) and with a pool of `--clients` (no unit of
work ever waits for a connection), in turn, `--rounds` times, each after WARMUP unreported
seconds. It prints requests per second, p50 and p99 of each, and the ratio of the p99s: how
much longer the slowest writes wait because the pool is smaller than the load (exit status 1
past MOST_RATIO). SQLAlchemy's pool let a late asker go first (sqlalchemy/sqlalchemy#7679):
8-11x, the tail in seconds; units of work now wait in turn (db/turns.py; docs/performance.md,
eleventh session).

Rate limiting is off (BUILDBAY_RATE_LIMIT_ENABLED=false): 50 clients on one IP would spend the
per-IP budget in a fraction of a second.

Usage: .venv/bin/python bench/writes.py [--clients 50] [--seconds 15] [--rounds 2]
       [--postgres postgresql://postgres@127.0.0.1:5432] [--redis redis://127.0.0.1:6379/5]
       [--database bench_writes]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import httpx

from _common import VENV_BIN, free_port, register, running_server, scaled_out, table
from api import WrkResult, run_wrk
from buildbay.db.engine import POOL_SIZE

LUA = Path(__file__).with_name("writes.lua")
USERS = 50
WARMUP = 3  # seconds of unreported load after each start: pools and statement caches fill
DEFAULT_POOL = POOL_SIZE  # BUILDBAY_DATABASE_POOL_SIZE's default
# The writes that wait for a connection in turn wait about as long as those that never wait for
# one (the server is as busy either way); a pool that served late askers first read 8-11x.
MOST_RATIO = 1.5


def measure(pool: int, args: argparse.Namespace, env: dict[str, str], work: Path) -> WrkResult:
    port = free_port()
    argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
    pooled = {**env, "BUILDBAY_DATABASE_POOL_SIZE": str(pool)}
    with (
        running_server(argv, work / "data", port, pooled) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as client,
    ):
        tokens = [register(client) for _ in range(USERS)]
        load = ("-s", str(LUA), server.base_url, "--", ",".join(tokens))
        run_wrk(args.clients, WARMUP, *load)
        result = run_wrk(args.clients, args.seconds, *load)
    if result.non_2xx or result.socket_errors:
        print(f"pool {pool}: {result.non_2xx + result.socket_errors} failed", file=sys.stderr)
    return result


def _ms(result: WrkResult) -> tuple[str, str]:
    return f"{result.p50_ms:.1f}", f"{result.p99_ms:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument(
        "--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
    )
    parser.add_argument(
        "--database", default="bench_writes", help="created afresh and dropped afterwards"
    )
    args = parser.parse_args()
    rows = []
    p99s: dict[int, list[float]] = {DEFAULT_POOL: [], args.clients: []}
    with tempfile.TemporaryDirectory(prefix="buildbay-writes-") as tmp:
        work = Path(tmp)
        with scaled_out(args.postgres, args.redis, args.database, work / "data") as env:
            env["BUILDBAY_RATE_LIMIT_ENABLED"] = "false"
            for _ in range(args.rounds):
                for pool in (DEFAULT_POOL, args.clients):
                    result = measure(pool, args, env, work)
                    p99s[pool].append(result.p99_ms)
                    rows.append((pool, f"{result.rps:.0f}", *_ms(result)))
    print(
        f"Units of work: PUT /api/auth/me by {args.clients} connections without pauses, "
        f"{args.seconds} s a run, PostgreSQL + Redis"
    )
    print(table(["pool", "req/s", "p50 ms", "p99 ms"], rows))
    ratio = max(p99s[DEFAULT_POOL]) / max(p99s[args.clients])
    print(
        f"p99 with a pool of {DEFAULT_POOL} / with a connection for each client "
        f"(worst runs): {ratio:.2f} (at most {MOST_RATIO} asked)"
    )
    return 0 if ratio <= MOST_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
