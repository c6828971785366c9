"""The client's start (`buildbay --help`), and memory of `buildbay upload` as the file grows.

First `buildbay --help` (as installed in .venv: the client with the server's commands added),
run several times, each in a fresh process: the median wall time and peak resident memory,
next to those of the bare interpreter (`python -c pass`) measured the same way in the same run.
Required: under 0.6 s and under 50 MiB.

Then it starts a real `buildbay serve` (SQLite + files) in a temporary data directory, and
uploads files of growing size with the CLI (`buildbay upload ... --json`, as a CI job runs it),
each in a fresh process whose peak resident memory (ru_maxrss) is read when it ends. The
baseline, measured in the same run, is the same command uploading the smallest file: the ratio
of each peak to it should stay near 1.0 (the file is streamed from disk in 1 MiB blocks, never
held).

Also printed: each upload's wall time and throughput (client, HTTP and server storage together).

Requirement: the largest file's peak is at most 1.25x the smallest's, and within 32 MiB of it.

Last, a resumed upload (issue 17): the CLI uploads a 1 GiB file (in parts, above 64 MiB) through
a TCP proxy that counts the bytes the client sends towards the server; it is killed (SIGKILL)
once about half has gone through, then the same command is run again. Required: it exits 0
with a ready build of the file's sha256, and the server received at most 1.6 GiB in all (the
second run sends only the parts that had not arrived).

Exits 1 if a requirement is missed.
Usage: .venv/bin/python bench/cli_upload.py [--sizes-mib 16,256,1024] [--start-runs 7]
       [--resume-mib 1024]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from _common import (
    LARGE_UPLOADS,
    VENV_BIN,
    create_application,
    create_project,
    free_port,
    register,
    running_server,
    table,
)

MAX_RATIO = 1.25
MAX_GROWTH_MIB = 32
MAX_START_SECONDS = 0.6
MAX_START_MIB = 50
MAX_RESUMED_RECEIVED = 1.6  # the server may receive at most 1.6x the file, kill included


def make_file(path: Path, size_mib: int) -> None:
    block = os.urandom(1024 * 1024)
    with path.open("wb") as file:
        for i in range(size_mib):
            file.write(i.to_bytes(4, "big") + block[4:])


def measured_upload(env: dict[str, str], argv: list[str]) -> tuple[float, float, dict[str, object]]:
    """(peak RSS in MiB, seconds, the build) of one `buildbay upload` in a process of its own:
    a small driver runs the command and reports RUSAGE_CHILDREN, the peak of that one child."""
    result = measured(env, argv)
    if result["code"] != 0:
        raise SystemExit(f"upload failed ({result['code']}): {result['err']}")
    return result["peak_kib"] / 1024, result["seconds"], json.loads(result["out"])


# Runs a command once and reports its wall time and the peak RSS of that one child.
DRIVER = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "elapsed = time.perf_counter() - t\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'code': done.returncode, 'out': done.stdout, 'err': done.stderr,"
    " 'peak_kib': usage.ru_maxrss, 'seconds': elapsed,"
    " 'cpu': usage.ru_utime + usage.ru_stime}))\n"
)


def measured(env: dict[str, str] | None, argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *argv], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def start(argv: list[str], runs: int) -> tuple[float, float, float]:
    """(median seconds, median CPU seconds, median peak RSS in MiB) of `argv`, each run in a
    fresh process. The CPU time says how much of the wall time was the command's own work on
    a machine that other processes keep busy."""
    seconds, cpu, peaks = [], [], []
    for _ in range(runs):
        result = measured(None, argv)
        if result["code"] != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({result['code']}): {result['err']}")
        seconds.append(result["seconds"])
        cpu.append(result["cpu"])
        peaks.append(result["peak_kib"] / 1024)
    return statistics.median(seconds), statistics.median(cpu), statistics.median(peaks)


def client_start(runs: int) -> bool:
    python = start([sys.executable, "-c", "pass"], runs)
    help_ = start([str(VENV_BIN / "buildbay"), "--help"], runs)
    rows = [
        [name, f"{s:.3f}", f"{s / python[0]:.2f}", f"{c:.3f}", f"{m:.1f}", f"{m / python[2]:.2f}"]
        for name, (s, c, m) in (("python -c pass (baseline)", python), ("buildbay --help", help_))
    ]
    print(f"start of the client, median of {runs} fresh processes each")
    headers = ["command", "seconds", "vs python", "CPU seconds", "peak RSS MiB", "vs python"]
    print(table(headers, rows))
    ok = help_[0] < MAX_START_SECONDS and help_[2] < MAX_START_MIB
    print(
        f"\nbuildbay --help: {help_[0]:.2f} s, {help_[2]:.1f} MiB; required < "
        f"{MAX_START_SECONDS} s and < {MAX_START_MIB} MiB: {'PASS' if ok else 'FAIL'}\n"
    )
    return ok


class CountingProxy:
    """A TCP proxy to `target_port` that counts the bytes clients send through it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.upstream = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(256 * 1024):
                sink.sendall(data)
                if counted:
                    with self._lock:
                        self.upstream += len(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._listener.close()


def resumed_upload(work: Path, size_mib: int) -> bool:
    """Kill the CLI at about half of a `size_mib` upload, run it again: the bytes the server
    received in all, and the build."""
    file = work / "resume.bin"
    make_file(file, size_mib)
    with file.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    port = free_port()
    proxy = CountingProxy(port)
    address = f"http://127.0.0.1:{proxy.port}"
    env = {
        **LARGE_UPLOADS,
        "BUILDBAY_PUBLIC_URL": address,  # the part addresses go through the proxy too
    }
    argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
    with running_server(argv, work / "resume-data", port, env) as server:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            token = register(client)
            client.headers["Authorization"] = f"Bearer {token}"
            project = create_project(client, "Resume")
            app = create_application(client, project, "Desktop")
        cli_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")},
            "BUILDBAY_URL": address,
            "BUILDBAY_TOKEN": token,
            "BUILDBAY_CONFIG_DIR": str(work / "resume-config"),
            "CI": "true",
        }
        command = [str(VENV_BIN / "buildbay"), "upload", str(file), "-p", project, "-a", app,
                   "--json"]  # fmt: skip
        size = file.stat().st_size
        start = time.perf_counter()
        with subprocess.Popen(
            command, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        ) as first:
            while proxy.upstream < size // 2:
                if first.poll() is not None:
                    raise SystemExit(f"the upload ended before the kill: {first.communicate()}")
                time.sleep(0.01)
            first.send_signal(signal.SIGKILL)
            first.communicate()
        at_kill = proxy.upstream
        second = subprocess.run(command, env=cli_env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        proxy.close()
    if second.returncode != 0:
        raise SystemExit(f"the resumed upload failed ({second.returncode}): {second.stderr}")
    build = json.loads(second.stdout)
    received = proxy.upstream
    print(
        table(
            ["file", "sent before the kill", "sent in all", "x file", "seconds", "sha256 ok"],
            [
                [
                    f"{size_mib} MiB",
                    f"{at_kill / 1024**2:.0f} MiB",
                    f"{received / 1024**2:.0f} MiB",
                    f"{received / size:.2f}",
                    f"{seconds:.1f}",
                    build["sha256"] == digest,
                ]
            ],
        )
    )
    ok = build["status"] == "ready" and build["sha256"] == digest
    ok = ok and received <= MAX_RESUMED_RECEIVED * size
    print(
        f"\nkilled at about half, run again: the server received {received / size:.2f}x the "
        f"file; required <= {MAX_RESUMED_RECEIVED}x and a ready build of the file's sha256: "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="16,256,1024")
    parser.add_argument("--start-runs", type=int, default=7)
    parser.add_argument("--resume-mib", type=int, default=1024)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    started = client_start(args.start_runs)

    with tempfile.TemporaryDirectory(prefix="buildbay-bench-cli-") as tmp:
        work = Path(tmp)
        port = free_port()
        argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
        env = LARGE_UPLOADS
        with running_server(argv, work / "data", port, env) as server:
            with httpx.Client(base_url=server.base_url, timeout=60) as client:
                token = register(client)
                client.headers["Authorization"] = f"Bearer {token}"
                project = create_project(client, "Bench")
                app = create_application(client, project, "Android")
            cli_env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")},
                "BUILDBAY_URL": server.base_url,
                "BUILDBAY_TOKEN": token,
                "BUILDBAY_CONFIG_DIR": str(work / "config"),
                "CI": "true",
            }
            rows, peaks = [], []
            for size in sizes:
                file = work / f"app-{size}.apk"
                make_file(file, size)
                command = [str(VENV_BIN / "buildbay"), "upload", str(file), "-p", project,
                           "-a", app, "--json"]  # fmt: skip
                peak, seconds, build = measured_upload(cli_env, command)
                if build["status"] != "ready" or build["fileSize"] != file.stat().st_size:
                    raise SystemExit(f"not the build that was sent: {build}")
                file.unlink()
                peaks.append(peak)
                rows.append(
                    [f"{size} MiB", f"{peak:.1f}", f"{peak / peaks[0]:.2f}", f"{seconds:.2f}",
                     f"{size / seconds:.0f}"]
                )  # fmt: skip
    print(table(["file", "peak RSS MiB", "vs smallest", "seconds", "MiB/s"], rows))
    ratio, growth = peaks[-1] / peaks[0], peaks[-1] - peaks[0]
    ok = ratio <= MAX_RATIO and growth <= MAX_GROWTH_MIB
    print(
        f"\nlargest/smallest peak RSS: {ratio:.2f} ({growth:+.1f} MiB); "
        f"required <= {MAX_RATIO} and <= {MAX_GROWTH_MIB} MiB: {'PASS' if ok else 'FAIL'}"
    )
    with tempfile.TemporaryDirectory(prefix="buildbay-bench-resume-") as tmp:
        print()
        resumed = resumed_upload(Path(tmp), args.resume_mib)
    return 0 if ok and started and resumed else 1


if __name__ == "__main__":
    sys.exit(main())
