"""Load: reads at rising concurrency while upload sequences run, on the embedded default (SQLite +
local files) and on PostgreSQL + Redis.

Each configuration is a real `buildbay serve` on 127.0.0.1: one process on SQLite, and on
PostgreSQL + Redis one process (or more: `--postgres-workers 1,2`). An owner creates a project and
an application and adds reader accounts as testers; every account is on the enterprise plan, so
rate limiting stays on (counted, in Redis for the second configuration) but never answers 429.

For `--duration` seconds (60 by default), split into stages of rising concurrency (10, 25 and 50
clients by default), then a shorter saturation stage:
- reads: wrk with bench/load_reads.lua cycles over the project list, a project, its applications,
  the build list and one build, with the readers' tokens in turn. Each wrk connection is a
  client that thinks 0..`--think-ms` ms (200: 100 on average) between a response and its next
  request, as a person or a polling job does. The saturation stage (`--saturation-seconds`,
  10) has 50 connections that never pause: the most the server answers, and the latency of
  requests that queue behind each other;
- uploads: `--uploaders` threads (2 by default) each run whole upload sequences (upload-link,
  PUT of 1-50 MiB of random bytes with a declared sha256, verify) one after another, from the
  start of the first stage to the end of the last.

Afterwards every build the application lists as ready is compared with the verifies that
answered 200: a build verified but not listed (or listed with other bytes) is lost.

Each new build is distributed to the application's `everyone` group (the default), so the
testers get a mail per build, written as `.eml` files (no SMTP server is configured); the
report counts them. With `--no-mail` the testers turn new-build mails off first (`PUT
/api/auth/me`), as a tester may: the builds reach them unmailed. That is the workload of a
commit that sends no mail, such as fd16823, issue 14's starting commit, against which the
issue's targets compare like for like (docs/performance.md); what the mails cost a build is
`bench/build_cost.py`'s measure.

Targets (exit status 1 if one is missed): no 5xx response, no lost build, and a p99 read latency
under 100 ms with 50 clients. The load generators share the machine's cores with the server.
Usage: .venv/bin/python bench/load.py [--config sqlite|postgres|both] [--duration 60]
       [--stages 10,25,50] [--think-ms 200] [--saturation-seconds 10] [--uploaders 2] [--no-mail]
       [--postgres postgresql://postgres@127.0.0.1:5432] [--redis redis://127.0.0.1:6379/13]
       [--database buildbay_load]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from _common import (
    ROOT,
    VENV_BIN,
    enterprise_account,
    free_port,
    mails_written,
    running_server,
    scaled_out,
    table,
)
from api import WrkResult, parse_wrk

LUA = ROOT / "bench" / "load_reads.lua"
DATABASE = "buildbay_load"
READERS = 4
MIB = 1024 * 1024
MIN_UPLOAD, MAX_UPLOAD = 1 * MIB, 50 * MIB
READ_P99_TARGET_MS = 100.0
SATURATION_CONNECTIONS = 50


@dataclass
class Stage:
    connections: int
    think_ms: int
    reads: WrkResult
    statuses: dict[str, int]
    uploads: list[Upload]


@dataclass
class Upload:
    size: int
    seconds: float
    finished_at: float
    build_id: str | None = None
    sha256: str | None = None
    error: str | None = None
    server_error: bool = False


@dataclass
class Uploads:
    """What the upload threads did, shared with the main thread under a lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    done: list[Upload] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def add(self, upload: Upload) -> None:
        with self.lock:
            self.done.append(upload)

    def between(self, start: float, end: float) -> list[Upload]:
        with self.lock:
            return [u for u in self.done if start <= u.finished_at < end]


def upload_once(client: httpx.Client, builds: str, blob: bytes, rng: random.Random) -> Upload:
    size = rng.randint(MIN_UPLOAD, MAX_UPLOAD)
    offset = rng.randint(0, len(blob) - size)
    data = uuid.uuid4().bytes + blob[offset : offset + size - 16]  # unique bytes per build
    sha256 = hashlib.sha256(data).hexdigest()
    started = time.perf_counter()
    upload = Upload(size=size, seconds=0.0, finished_at=0.0, sha256=sha256)
    try:
        link = client.post(
            f"{builds}/upload-link",
            json={"fileName": f"load-{sha256[:8]}.bin", "fileSize": size, "sha256": sha256},
        )
        _check(link, upload, 201, "upload-link")
        body = link.json()
        upload.build_id = body["buildId"]
        put = client.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"])
        _check(put, upload, 200, "PUT", also=(201, 204))
        verify = client.post(f"{builds}/verify", json={"buildId": upload.build_id})
        _check(verify, upload, 200, "verify")
    except _Failed:
        pass
    except httpx.HTTPError as exc:
        upload.error = f"{type(exc).__name__}: {exc}"
    upload.seconds = time.perf_counter() - started
    upload.finished_at = time.monotonic()
    return upload


class _Failed(Exception):
    pass


def _check(
    response: httpx.Response, upload: Upload, status: int, step: str, also: tuple[int, ...] = ()
) -> None:
    if response.status_code == status or response.status_code in also:
        return
    upload.error = f"{step}: {response.status_code} {response.text[:200]}"
    upload.server_error = response.status_code >= 500
    raise _Failed


def uploader(base_url: str, token: str, builds: str, blob: bytes, seed: int, log: Uploads) -> None:
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
        while not log.stop.is_set():
            log.add(upload_once(client, builds, blob, rng))


def read_stage(
    base_url: str,
    tokens: list[str],
    paths: list[str],
    connections: int,
    think_ms: int,
    seconds: int,
) -> tuple[WrkResult, dict[str, int]]:
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(LUA)]
    argv += [f"{base_url}/", "--", str(think_ms), ",".join(tokens), *paths]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    statuses = re.search(r"STATUS 2xx=(\d+) 3xx=(\d+) 4xx=(\d+) 5xx=(\d+)", done.stdout)
    if statuses is None:
        raise SystemExit(f"unreadable wrk output:\n{done.stdout}\n{done.stderr}")
    counts = dict(zip(("2xx", "3xx", "4xx", "5xx"), map(int, statuses.groups()), strict=True))
    return parse_wrk(done.stdout), counts


def listed_ready_builds(client: httpx.Client, builds: str) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"status": "ready", "limit": 100}
        if cursor:
            params["cursor"] = cursor
        page = client.get(builds, params=params)
        page.raise_for_status()
        body = page.json()
        found.update({b["buildId"]: b["sha256"] for b in body["builds"]})
        cursor = body["nextCursor"]
        if cursor is None:
            return found


@dataclass
class Outcome:
    name: str
    stages: list[Stage]
    expected: int
    listed: int
    lost: list[str]
    pending_left: int
    mailed: int


def run_configuration(
    name: str,
    env: dict[str, str],
    data_dir: Path,
    args: argparse.Namespace,
    blob: bytes,
    workers: int = 1,
) -> Outcome:
    port = free_port()
    env = {**env, "BUILDBAY_DATA_DIR": str(data_dir)}
    mailed_before = mails_written(data_dir)
    argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port), "--workers", str(workers)]
    with (
        running_server(argv, data_dir, port, env) as server,
        httpx.Client(base_url=server.base_url, timeout=60) as client,
    ):
        print(f"{name}: setting up accounts ...", flush=True)
        _, owner = enterprise_account(client, env)
        client.headers["Authorization"] = f"Bearer {owner}"
        project = client.post("/api/projects", json={"name": "load"}).json()["id"]
        app = client.post(
            f"/api/projects/{project}/applications", json={"name": "load", "platform": "other"}
        ).json()["id"]
        readers = []
        for _ in range(READERS):
            email, token = enterprise_account(client, env)
            client.post(
                f"/api/projects/{project}/members", json={"email": email, "role": "tester"}
            ).raise_for_status()
            if args.no_mail:
                client.put(
                    "/api/auth/me",
                    json={"notifyNewBuilds": False},
                    headers={"Authorization": f"Bearer {token}"},
                ).raise_for_status()
            readers.append(token)
        builds = f"/api/app-distribution/{project}/{app}/builds"
        seed = upload_once(client, builds, blob, random.Random(0))
        if seed.error:
            raise SystemExit(f"the first upload failed: {seed.error}")
        paths = [
            "/api/projects",
            f"/api/projects/{project}",
            f"/api/projects/{project}/applications",
            f"{builds}?limit=20",
            f"{builds}/{seed.build_id}",
        ]

        log = Uploads()
        threads = [
            threading.Thread(
                target=uploader,
                args=(server.base_url, owner, builds, blob, n + 1, log),
                daemon=True,
            )
            for n in range(args.uploaders)
        ]
        stage_seconds = max(1, args.duration // len(args.stages))
        plan = [(clients, args.think_ms, stage_seconds) for clients in args.stages]
        if args.saturation_seconds:
            plan.append((SATURATION_CONNECTIONS, 0, args.saturation_seconds))
        measured: list[tuple[int, int, float, WrkResult, dict[str, int]]] = []
        for thread in threads:
            thread.start()
        for connections, think_ms, seconds in plan:
            print(
                f"{name}: {connections} read clients thinking 0..{think_ms} ms, {seconds} s",
                flush=True,
            )
            began = time.monotonic()
            reads, statuses = read_stage(
                server.base_url, readers, paths, connections, think_ms, seconds
            )
            measured.append((connections, think_ms, began, reads, statuses))
        log.stop.set()
        for thread in threads:
            thread.join(timeout=180)
        # Each upload counts in the stage it finished in; those still running when the reads
        # ended count in the last.
        ends = [began for _, _, began, _, _ in measured[1:]] + [float("inf")]
        stages = [
            Stage(connections, think_ms, reads, statuses, log.between(began, end))
            for (connections, think_ms, began, reads, statuses), end in zip(
                measured, ends, strict=True
            )
        ]

        verified = {
            u.build_id: u.sha256 for u in [*log.done, seed] if u.error is None and u.build_id
        }
        listed = listed_ready_builds(client, builds)
        lost = sorted(b for b, sha in verified.items() if listed.get(str(b)) != sha)
        pending = client.get(builds, params={"status": "pending", "limit": 100}).json()["builds"]
    mailed = mails_written(data_dir) - mailed_before
    return Outcome(name, stages, len(verified), len(listed), lost, len(pending), mailed)


def report(outcome: Outcome) -> bool:
    rows = []
    for stage in outcome.stages:
        r, ups = stage.reads, stage.uploads
        ok = [u for u in ups if u.error is None]
        mib = sum(u.size for u in ok) / MIB
        rows.append(
            [
                stage.connections,
                f"0-{stage.think_ms}" if stage.think_ms else "none",
                f"{r.rps:.0f}",
                f"{r.p50_ms:.1f}",
                f"{r.p99_ms:.1f}",
                stage.statuses["5xx"],
                r.non_2xx - stage.statuses["5xx"],
                r.socket_errors,
                len(ok),
                f"{mib / r.seconds:.0f}",
                f"{statistics.median(u.seconds for u in ok):.2f}" if ok else "-",
                sum(u.error is not None for u in ups),
            ]
        )
    print()
    print(f"{outcome.name}:")
    print(
        table(
            [
                "clients",
                "think ms",
                "reads/s",
                "p50 ms",
                "p99 ms",
                "5xx",
                "other non-2xx",
                "socket errors",
                "uploads",
                "upload MiB/s",
                "upload p50 s",
                "upload errors",
            ],
            rows,
        )
    )
    for stage in outcome.stages:
        for upload in stage.uploads:
            if upload.error:
                print(f"  upload error: {upload.error}")
    five_xx = sum(s.statuses["5xx"] for s in outcome.stages) + sum(
        u.server_error for s in outcome.stages for u in s.uploads
    )
    thinking = [s for s in outcome.stages if s.think_ms]
    top = max(thinking or outcome.stages, key=lambda s: s.connections)
    checks = [
        (f"5xx responses: {five_xx} (required 0)", five_xx == 0),
        (
            f"builds verified: {outcome.expected}, listed ready: {outcome.listed}, lost: "
            f"{len(outcome.lost)} {outcome.lost[:5] if outcome.lost else ''}(required 0)",
            not outcome.lost,
        ),
        (
            f"p99 of reads with {top.connections} clients: {top.reads.p99_ms:.1f} ms "
            f"(required < {READ_P99_TARGET_MS:.0f})",
            top.reads.p99_ms < READ_P99_TARGET_MS,
        ),
    ]
    for text, passed in checks:
        print(f"  {text}: {'PASS' if passed else 'FAIL'}")
    print(f"  pending builds left (sequences cut by an error): {outcome.pending_left}")
    print(f"  mails to testers written by the end: {outcome.mailed}")
    return all(passed for _, passed in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--duration", type=int, default=60, help="seconds of load, all stages")
    parser.add_argument(
        "--stages",
        type=lambda s: [int(n) for n in s.split(",")],
        default=[10, 25, 50],
        help="read connections of each stage, comma-separated (default 10,25,50)",
    )
    parser.add_argument(
        "--think-ms", type=int, default=200, help="each client pauses 0..this between requests"
    )
    parser.add_argument(
        "--saturation-seconds",
        type=int,
        default=10,
        help=f"then {SATURATION_CONNECTIONS} connections without pauses for this long (0: skip)",
    )
    parser.add_argument("--uploaders", type=int, default=2, help="concurrent upload sequences")
    parser.add_argument(
        "--postgres-workers",
        type=lambda s: [int(n) for n in s.split(",")],
        default=[1],
        help="server processes of the PostgreSQL + Redis runs, one run each (default 1)",
    )
    parser.add_argument(
        "--no-mail",
        action="store_true",
        help="the testers turn new-build mails off: the builds reach them unmailed",
    )
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument(
        "--database", default=DATABASE, help="created afresh and dropped afterwards (PostgreSQL)"
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")

    blob = os.urandom(MAX_UPLOAD)
    root = Path(tempfile.mkdtemp(prefix="buildbay-bench-load-"))
    outcomes = []
    try:
        if args.config in ("sqlite", "both"):
            outcomes.append(
                run_configuration("SQLite + local files", {}, root / "sqlite", args, blob)
            )
        if args.config in ("postgres", "both"):
            with scaled_out(args.postgres, args.redis, args.database, root / "pg") as env:
                for workers in args.postgres_workers:
                    name = f"PostgreSQL + Redis + local files, {workers} process(es)"
                    outcomes.append(run_configuration(name, env, root / "pg", args, blob, workers))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print()
    print(
        f"{args.duration} s per configuration in stages of {args.stages} read clients thinking "
        f"0..{args.think_ms} ms between requests, then {args.saturation_seconds} s of "
        f"{SATURATION_CONNECTIONS} connections without pauses (wrk -t1, {READERS} tester tokens); "
        f"{args.uploaders} upload sequences running throughout (1-50 MiB each); "
        f"{os.cpu_count()} CPUs shared with the load generators; rate limiting on "
        "(enterprise plan); "
        + (
            "testers not mailed (--no-mail)"
            if args.no_mail
            else f"{READERS} testers mailed per build"
        )
    )
    results = [report(outcome) for outcome in outcomes]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
