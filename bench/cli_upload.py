"""Memory of `buildbay upload` as the file grows: flat, whatever the file's size.

Starts a real `buildbay serve` (SQLite + files) in a temporary data directory, and uploads files
of growing size with the CLI (`buildbay upload ... --json`, as a CI job runs it), each in a fresh
process whose peak resident memory (ru_maxrss) is read when it ends. The baseline, measured in
the same run, is the same command uploading the smallest file: the ratio of each peak to it
should stay near 1.0 (the file is streamed from disk in 1 MiB blocks, never held).

Also printed: each upload's wall time and throughput (client, HTTP and server storage together).

Requirement: the largest file's peak is at most 1.25x the smallest's, and within 32 MiB of it.
Exits 1 if missed. Usage: .venv/bin/python bench/cli_upload.py [--sizes-mib 16,256,1024]
"""

from __future__ import annotations

import argparse
import json
import os
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

MAX_RATIO = 1.25
MAX_GROWTH_MIB = 32


def make_file(path: Path, size_mib: int) -> None:
    block = os.urandom(1024 * 1024)
    with path.open("wb") as file:
        for i in range(size_mib):
            file.write(i.to_bytes(4, "big") + block[4:])


def measured_upload(env: dict[str, str], argv: list[str]) -> tuple[float, float, dict[str, object]]:
    """(peak RSS in MiB, seconds, the build) of one `buildbay upload` in a process of its own.

    A small driver runs the command and reports RUSAGE_CHILDREN: the peak of that one child.
    """
    driver = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "elapsed = time.perf_counter() - t\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'code': done.returncode, 'out': done.stdout, 'err': done.stderr,"
        " 'peak_kib': peak, 'seconds': elapsed}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", driver, *argv], env=env, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    if result["code"] != 0:
        raise SystemExit(f"upload failed ({result['code']}): {result['err']}")
    return result["peak_kib"] / 1024, result["seconds"], json.loads(result["out"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="16,256,1024")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]

    with tempfile.TemporaryDirectory(prefix="buildbay-bench-cli-") as tmp:
        work = Path(tmp)
        port = free_port()
        argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
        env = {
            "BUILDBAY_RATE_LIMIT_ENABLED": "false",
            "BUILDBAY_MAX_UPLOAD_BYTES_FREE": str(8 * 1024**3),
            "BUILDBAY_QUOTA_BYTES_FREE": "0",
        }
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
