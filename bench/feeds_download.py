"""Range downloads of a 256 MiB build through its feed address
(`/feeds/{updateKey}/download/{buildId}/{fileName}`), against a bare Starlette FileResponse of
the same file in the same server.

One server, started as `buildbay serve` runs (bench/_bench_app.py: the same uvicorn options),
serves the application plus `GET /bench/file`, a bare FileResponse of the build's stored object
(no key, no database, no If-Range or Range reading of ours). A desktop application gets one
ready 256 MiB AppImage build (random bytes after an AppImage header). wrk, one thread with
`--clients` connections, asks each address alternately (bare, feed, bare, feed, ...) for
`--duration` seconds, each request a Range of `--range` bytes at a random aligned offset
(bench/ranges.lua; every answer must be a 206), after a warm-up of each. Both addresses answer
from the same file and the same page cache.

Prints, per range size, each run's requests per second, MiB/s, p50 and p99, the ratio of the
feed's throughput to the bare FileResponse's (target: at least 0.9), the server's CPU seconds
per GiB served, and the machine's load average before and after; PASS or FAIL per range size.
Exits 1 if a request failed or a ratio is under the target. Small ranges measure the
per-request work (the feed's address is looked up, remembered by feeds/cache.py, where the bare
route looks nothing up), large ones the serving of the bytes.

Rate limiting is off (BUILDBAY_RATE_LIMIT_ENABLED=false); the uploading user is moved to the
enterprise plan (the free plan's largest file is smaller).

Usage: .venv/bin/python bench/feeds_download.py [--duration 10] [--rounds 2] [--clients 16]
       [--range 8388608 --range 65536] [--database-url postgresql+asyncpg://...]
       [--redis-url redis://...]  (default: a temporary SQLite file, no Redis)
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
    ROOT,
    VENV_BIN,
    cpu_seconds,
    create_application,
    create_project,
    enterprise_account,
    free_port,
    running_server,
    table,
)
from api import WrkResult, run_wrk

BENCH_APP = ROOT / "bench" / "_bench_app.py"
LUA = Path(__file__).with_name("ranges.lua")
SIZE = 256 * 1024 * 1024
WARMUP = 2
TARGET = 0.9
MiB = 1024 * 1024


def _appimage(path: Path) -> None:
    """SIZE bytes: an AppImage's ELF header, then random bytes, written in blocks."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"AI\x02" + bytes(5) + (2).to_bytes(2, "little")
    head = (ident + (0x3E).to_bytes(2, "little")).ljust(64, b"\0")
    with path.open("wb") as out:
        out.write(head)
        left = SIZE - len(head)
        while left:
            block = os.urandom(min(left, 8 * MiB))
            out.write(block)
            left -= len(block)


def _seed(client: httpx.Client, token: str, source: Path) -> tuple[str, str, str]:
    """The update key, build id and storage key of one ready build of `source`."""
    client.headers["Authorization"] = f"Bearer {token}"
    project = create_project(client, "Bench")
    app = create_application(client, project, "Desktop", platform="linux")
    base = f"/api/app-distribution/{project}/{app}/builds"
    link = client.post(
        f"{base}/upload-link", json={"fileName": "Example-1.0.0.AppImage", "fileSize": SIZE}
    )
    link.raise_for_status()
    body = link.json()
    with source.open("rb") as data:
        client.put(
            body["uploadUrl"], content=data, headers=body["uploadHeaders"], timeout=600
        ).raise_for_status()
    verified = client.post(
        f"{base}/verify", json={"buildId": body["buildId"], "version": "1.0.0"}, timeout=600
    )
    if verified.is_error:
        raise SystemExit(f"verify: {verified.status_code} {verified.text}")
    key = client.get(f"/api/projects/{project}/applications/{app}").json()["updateKey"]
    return str(key), str(body["buildId"]), f"{project}/{app}/{body['buildId']}"


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _mib_per_s(result: WrkResult, length: int) -> float:
    return result.rps * length / MiB


def run(args: argparse.Namespace, root: Path) -> int:
    data_dir = root / "data"
    source = root / "build.AppImage"
    _appimage(source)
    port = free_port()
    # Verify reads the whole 256 MiB file (its hashes): on a loaded machine longer than the
    # default 30 s of a read.
    env = {"BUILDBAY_RATE_LIMIT_ENABLED": "false", "BUILDBAY_PARSE_TIMEOUT_SECONDS": "600"}
    if args.redis_url:
        env["BUILDBAY_REDIS_URL"] = args.redis_url
    if args.database_url:
        env["BUILDBAY_DATABASE_URL"] = args.database_url
        subprocess.run(
            [str(VENV_BIN / "buildbay"), "db", "upgrade"],
            env={**os.environ, "BUILDBAY_DATA_DIR": str(data_dir), **env},
            check=True,
            capture_output=True,
        )
    # The bare route serves the build's object as stored (LocalStorage: objects/<key>).
    stored = data_dir / "storage" / "objects"
    argv = [str(VENV_BIN / "python"), str(BENCH_APP), "serve", "--port", str(port)]
    failed = False
    with httpx.Client(timeout=60) as setup:
        # The file's path is only known once the build exists: the server reads it per request.
        placeholder = root / "bench-file"
        env["BUILDBAY_BENCH_FILE"] = str(placeholder)
        with running_server(argv, data_dir, port, env) as server:
            setup.base_url = httpx.URL(server.base_url)
            _, token = enterprise_account(setup, {"BUILDBAY_DATA_DIR": str(data_dir), **env})
            key, build_id, storage_key = _seed(setup, token, source)
            object_path = _find_object(data_dir, storage_key, stored)
            placeholder.symlink_to(object_path)
            source.unlink()  # one copy of the bytes in the page cache, the stored one
            feed = f"{server.base_url}/feeds/{key}/download/{build_id}/Example-1.0.0.AppImage"
            bare = f"{server.base_url}/bench/file"
            print(f"{SIZE // MiB} MiB build, {args.clients} clients, {args.duration} s a run, "
                  f"load average before: {_load()}")  # fmt: skip
            for length in args.range:
                rows = []
                totals = {"bare": 0.0, "feed": 0.0}
                for url in (bare, feed):  # warm-up, unreported
                    run_wrk(args.clients, WARMUP, "-s", str(LUA), url, "--", str(SIZE), str(length))
                for n in range(args.rounds):
                    for name, url in (("bare", bare), ("feed", feed)):
                        before = cpu_seconds(server.pid)
                        result = run_wrk(
                            args.clients, args.duration, "-s", str(LUA), url, "--",
                            str(SIZE), str(length),
                        )  # fmt: skip
                        cpu = cpu_seconds(server.pid) - before
                        served_gib = result.requests * length / 1024**3
                        failed |= bool(result.non_2xx or result.socket_errors)
                        totals[name] += _mib_per_s(result, length)
                        rows.append((
                            f"{name} {n + 1}", f"{result.rps:.0f}",
                            f"{_mib_per_s(result, length):.0f}", f"{result.p50_ms:.1f}",
                            f"{result.p99_ms:.1f}",
                            f"{cpu / served_gib:.2f}" if served_gib else "-",
                            result.non_2xx + result.socket_errors,
                        ))  # fmt: skip
                ratio = totals["feed"] / totals["bare"] if totals["bare"] else float("nan")
                print(f"\nRange of {length} bytes ({length / MiB:g} MiB):")
                print(table(
                    ["run", "req/s", "MiB/s", "p50 ms", "p99 ms", "CPU s/GiB", "errors"], rows
                ))  # fmt: skip
                held = ratio >= TARGET
                print(f"feed / bare throughput: {ratio:.2f}x (target >= {TARGET}x): "
                      f"{'PASS' if held else 'FAIL'}")  # fmt: skip
                failed |= not held
            print(f"\nload average after: {_load()}; cores: {os.cpu_count()}")
    return 1 if failed else 0


def _find_object(data_dir: Path, storage_key: str, stored: Path) -> Path:
    """Where LocalStorage keeps the build's object (objects/<key> under its root)."""
    candidates = [stored / storage_key, *data_dir.rglob(storage_key.rsplit("/", 1)[1])]
    for path in candidates:
        if path.is_file() and path.stat().st_size == SIZE:
            return path
    raise SystemExit(f"the stored object of {storage_key} is not under {data_dir}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=2, help="bare+feed pairs per range size")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--range", type=int, action="append", help="bytes a request (repeatable; default "
        "8 MiB, then 64 KiB)",
    )  # fmt: skip
    parser.add_argument("--database-url")
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    args.range = args.range or [8 * MiB, 64 * 1024]
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")
    root = Path(tempfile.mkdtemp(prefix="buildbay-bench-feeds-download-"))
    try:
        return run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
