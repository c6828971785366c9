"""Upload throughput and server memory of the local-storage upload path.

Starts a real `buildbay serve` (SQLite + files; through bench/_bench_app.py, which only adds
`PUT /bench/sink`) in a temporary data directory, registers a user,
creates a project and an application, asks for an upload link, PUTs the file with curl (C, so the
client is not the bottleneck) and verifies it. The baseline, measured in the same run on the same
disk, copies the same file in 1 MiB blocks into a new file and fsyncs it: what any upload has to
do at least. Baseline and upload alternate (after two uncounted baseline copies: the first writes
on a fresh page cache run at other speeds), and each repeat gives one ratio. The PUT's time is
curl's wall time, so it includes the server's fsync and rename before it answers.

For information (no requirement) each repeat also PUTs the file to `/bench/sink`, an endpoint of
the same server that reads the body and drops it: the HTTP stack's own ceiling, which shows how
much of the PUT's time is the storage code's.

While the PUT runs, a thread samples the server's VmRSS every 20 ms; the peak growth over the RSS
just before the PUT is reported, with the CPU share of the server and of curl (which shows whether
the client could be the bottleneck).

Each repeat also uploads the same file in parts (issue 17): `"multipart": true`, the parts PUT
4 at a time (--parts-in-flight) by threads that send each part straight from the file with
sendfile(2) (so the client costs as little as curl does), then verify, and, for a file the
server checks in the background (202), until the build is ready. Compared in the same repeat
with the one PUT: time from the first byte sent to the build being ready, both ways (the one
PUT's verify is quick: its hash was computed on the way in; the parts' verify reads the file
once). The server's peak RSS growth is sampled the same way during the parts and their verify.

Requirements: median ratio upload/baseline >= 0.6, peak RSS growth < 100 MiB (worst repeat);
in parts: median speed at least the one PUT's (ratio >= 1.0), RSS growth < 64 MiB.
Exits 1 if one is missed.
Usage: .venv/bin/python bench/upload.py [--size-mib 512] [--repeat 3] [--parts-in-flight 4]
       [--platform other|linux]  (linux: a .tar.gz to a Linux app: SHA-512 hashed too)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from _common import (
    ROOT,
    VENV_BIN,
    RssSampler,
    cpu_seconds,
    create_application,
    create_project,
    free_port,
    register,
    running_server,
    table,
    vm_rss_kib,
)

MiB = 1024 * 1024
BLOCK = MiB
RATIO_REQUIRED = 0.6
RSS_LIMIT_MIB = 100
PARTS_RATIO_REQUIRED = 1.0
PARTS_RSS_LIMIT_MIB = 64
WARMUP_COPIES = 2
OCTET_STREAM = {"Content-Type": "application/octet-stream"}


def make_source(path: Path, size: int, start: bytes = b"") -> str:
    """Random bytes, after `start` (a format's first bytes), fsynced; their SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb") as f:
        for n in range(size // BLOCK):
            block = os.urandom(BLOCK)
            if n == 0:
                block = start + block[len(start) :]
            digest.update(block)
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def baseline_copy(source: Path, target: Path) -> float:
    """Seconds to write the source's bytes to `target` in 1 MiB blocks, then fsync."""
    os.sync()
    with source.open("rb", buffering=0) as src:
        start = time.perf_counter()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while block := src.read(BLOCK):
                view = memoryview(block)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        elapsed = time.perf_counter() - start
    target.unlink()
    return elapsed


def put_with_curl(url: str, headers: dict[str, str], source: Path) -> tuple[float, float, int, str]:
    """Seconds, curl's CPU seconds, HTTP status and body of `curl -T source url`."""
    argv = ["curl", "-sS", "-X", "PUT", "-T", str(source), "-H", "Expect:", "-w", "\n%{http_code}"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    argv.append(url)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (children.ru_utime - children_before.ru_utime) + (
        children.ru_stime - children_before.ru_stime
    )
    if done.returncode != 0:
        raise SystemExit(f"curl failed ({done.returncode}): {done.stderr.decode()}")
    body, _, status = done.stdout.decode().rpartition("\n")
    return elapsed, client_cpu, int(status), body


def put_range(url: str, headers: dict[str, str], source: Path, offset: int, length: int) -> str:
    """PUT `length` bytes of `source` from `offset` with sendfile(2): the kernel copies them from
    the file to the socket, so the client spends next to no CPU. Raises unless the answer is
    200; returns its body."""
    parts = urlsplit(url)
    head = [f"PUT {parts.path}?{parts.query} HTTP/1.1", f"Host: {parts.netloc}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    head += [f"Content-Length: {length}", "Connection: close", "", ""]
    with (
        socket.create_connection((parts.hostname, parts.port or 80)) as sock,
        source.open("rb") as file,
    ):
        sock.sendall("\r\n".join(head).encode())
        sent = 0
        while sent < length:
            sent += os.sendfile(sock.fileno(), file.fileno(), offset + sent, length - sent)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    if b" 200 " not in status_line + b" ":
        raise SystemExit(f"a part's PUT answered {answer[:500]!r}")
    return rest.partition(b"\r\n\r\n")[2].decode()


def upload_in_parts(
    client: httpx.Client, builds: str, source: Path, size: int, in_flight: int, file_name: str
) -> tuple[float, float, str]:
    """(seconds to send every part, seconds from verify to the build being ready, the build's
    sha256) of `source` uploaded in parts, `in_flight` at a time."""
    link = client.post(
        f"{builds}/upload-link",
        json={"fileName": file_name, "fileSize": size, "multipart": True},
    )
    link.raise_for_status()
    build_id, plan = link.json()["buildId"], link.json()["multipart"]
    part_size, count = plan["partSize"], plan["partsCount"]
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
        sending = []
        for first in range(1, count + 1, 100):
            numbers = list(range(first, min(first + 100, count + 1)))
            targets = client.post(f"{builds}/{build_id}/parts", json={"partNumbers": numbers})
            targets.raise_for_status()
            for target in targets.json()["parts"]:
                offset = (target["partNumber"] - 1) * part_size
                length = min(part_size, size - offset)
                sending.append(
                    pool.submit(put_range, target["url"], target["headers"], source, offset, length)
                )
        for future in sending:
            future.result()
    sent_s = time.perf_counter() - start
    start = time.perf_counter()
    verified = client.post(f"{builds}/verify", json={"buildId": build_id})
    verified.raise_for_status()
    build = verified.json()
    while build["status"] == "processing":
        time.sleep(0.05)
        build = client.get(f"{builds}/{build_id}").json()
    verify_s = time.perf_counter() - start
    if build["status"] != "ready":
        raise SystemExit(f"the build in parts did not become ready: {build}")
    client.delete(f"{builds}/{build_id}").raise_for_status()
    return sent_s, verify_s, str(build["sha256"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parts-in-flight", type=int, default=4)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the temporary files go (default: $TMPDIR)"
    )
    parser.add_argument(
        "--platform",
        choices=sorted(FILES),
        default="other",
        help="the application's platform: `linux` uploads a .tar.gz to a Linux application, "
        "whose bytes are hashed through SHA-512 too (for the desktop updaters' feeds)",
    )
    args = parser.parse_args()
    size = args.size_mib * MiB

    root = Path(tempfile.mkdtemp(prefix="buildbay-bench-upload-", dir=args.dir))
    try:
        return run(root, size, args.size_mib, args.repeat, args.parts_in_flight, args.platform)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# Per platform: the file uploaded, and its first bytes (what verify recognises it by).
FILES = {"other": ("bench.apk", b""), "linux": ("bench.tar.gz", b"\x1f\x8b")}


def run(
    root: Path, size: int, size_mib: int, repeat: int, in_flight: int, platform: str = "other"
) -> int:
    file_name, start = FILES[platform]
    data_dir = root / "data"
    data_dir.mkdir()
    source = root / "source.bin"
    baseline_target = data_dir / "baseline.bin"
    print(f"creating a {size_mib} MiB source file in {root} ...", flush=True)
    source_sha256 = make_source(source, size, start)
    if source.stat().st_dev != data_dir.stat().st_dev:
        raise SystemExit("the source and the data directory are not on the same filesystem")

    port = free_port()
    argv = [str(VENV_BIN / "python"), str(ROOT / "bench" / "_bench_app.py"), "serve"]
    argv += ["--port", str(port)]
    rows: list[list[object]] = []
    ratios: list[float] = []
    growths: list[float] = []
    parts_rows: list[list[object]] = []
    parts_ratios: list[float] = []
    parts_growths: list[float] = []
    with (
        running_server(argv, data_dir, port) as server,
        httpx.Client(base_url=server.base_url, timeout=120) as client,
    ):
        token = register(client)
        client.headers["Authorization"] = f"Bearer {token}"
        if size > 1024 * MiB:  # the free plan's largest build file is 1 GiB
            email = client.get("/api/auth/me").json()["email"]
            subprocess.run(
                [str(VENV_BIN / "buildbay"), "users", "set-plan", email, "enterprise"],
                env={**os.environ, "BUILDBAY_DATA_DIR": str(data_dir)},
                check=True,
                capture_output=True,
            )
        project = create_project(client, "bench upload")
        application = create_application(client, project, "bench app", platform)
        builds = f"/api/app-distribution/{project}/{application}/builds"

        # The first writes of this size on a fresh page cache run at other speeds (slower, then
        # much faster) than every later one: two uncounted copies let the counted ones compare
        # like with like.
        for _ in range(WARMUP_COPIES):
            baseline_copy(source, baseline_target)

        for n in range(1, repeat + 1):
            base_s = baseline_copy(source, baseline_target)
            sink_s, _, status, sink_body = put_with_curl(
                f"{server.base_url}/bench/sink", OCTET_STREAM, source
            )
            if status != 200 or json.loads(sink_body)["size"] != size:
                raise SystemExit(f"the sink answered {status}: {sink_body}")

            link = client.post(
                f"{builds}/upload-link", json={"fileName": file_name, "fileSize": size}
            )
            link.raise_for_status()
            link_body = link.json()
            os.sync()
            rss_before = vm_rss_kib(server.pid)
            server_cpu_before = cpu_seconds(server.pid)
            sampler = RssSampler(server.pid)
            sampler.start()
            try:
                put_s, client_cpu, status, put_body = put_with_curl(
                    link_body["uploadUrl"], link_body["uploadHeaders"], source
                )
            finally:
                sampler.stop()
            server_cpu = cpu_seconds(server.pid) - server_cpu_before
            if status != 200:
                raise SystemExit(f"PUT answered {status}: {put_body}")
            if json.loads(put_body)["sha256"] != source_sha256:
                raise SystemExit("the server stored other bytes than were sent")

            start = time.perf_counter()
            verified = client.post(f"{builds}/verify", json={"buildId": link_body["buildId"]})
            verify_s = time.perf_counter() - start
            put_and_verify_cpu = cpu_seconds(server.pid) - server_cpu_before
            verified.raise_for_status()
            build = verified.json()
            if build["status"] != "ready" or build["sha256"] != source_sha256:
                raise SystemExit(f"verify did not make the build ready: {build}")
            client.delete(f"{builds}/{link_body['buildId']}").raise_for_status()

            os.sync()
            parts_rss_before = vm_rss_kib(server.pid)
            parts_sampler = RssSampler(server.pid)
            parts_cpu_before = cpu_seconds(server.pid)  # the link, the parts and their verify
            parts_sampler.start()
            try:
                parts_s, parts_verify_s, parts_sha256 = upload_in_parts(
                    client, builds, source, size, in_flight, file_name
                )
            finally:
                parts_sampler.stop()
            parts_cpu = cpu_seconds(server.pid) - parts_cpu_before
            if parts_sha256 != source_sha256:
                raise SystemExit("the build in parts has other bytes than were sent")
            one_put_total = put_s + verify_s
            parts_total = parts_s + parts_verify_s
            parts_ratio = one_put_total / parts_total
            parts_growth = (parts_sampler.peak_kib - parts_rss_before) / 1024
            parts_ratios.append(parts_ratio)
            parts_growths.append(parts_growth)
            parts_rows.append(
                [
                    n,
                    f"{put_s:.2f}",
                    f"{verify_s:.2f}",
                    f"{size_mib / one_put_total:.0f}",
                    f"{put_and_verify_cpu:.2f}",
                    f"{parts_s:.2f}",
                    f"{parts_verify_s:.2f}",
                    f"{size_mib / parts_total:.0f}",
                    f"{parts_ratio:.2f}",
                    f"{parts_cpu:.2f}",
                    f"{parts_growth:.1f}",
                ]
            )

            base_rate = size_mib / base_s
            sink_rate = size_mib / sink_s
            put_rate = size_mib / put_s
            ratio = put_rate / base_rate
            growth = (sampler.peak_kib - rss_before) / 1024
            ratios.append(ratio)
            growths.append(growth)
            rows.append(
                [
                    n,
                    f"{base_rate:.0f}",
                    f"{put_rate:.0f}",
                    f"{ratio:.2f}",
                    f"{sink_rate:.0f}",
                    f"{put_rate / sink_rate:.2f}",
                    f"{100 * server_cpu / put_s:.0f}",
                    f"{100 * client_cpu / put_s:.0f}",
                    f"{rss_before / 1024:.1f}",
                    f"{growth:.1f}",
                    sampler.samples,
                    f"{verify_s * 1000:.0f}",
                ]
            )
            print(f"  repeat {n}/{repeat} done", flush=True)

    median_ratio = statistics.median(ratios)
    worst_growth = max(growths)
    print()
    print(f"upload of {size_mib} MiB to `buildbay serve` (SQLite + local disk), curl -T")
    print("baseline: copy the same file in 1 MiB blocks to a new file on the same disk + fsync")
    print("sink: the same PUT to an endpoint of the same server that drops the body (information)")
    print("CPU % and RSS: the server during the PUT; ratio = PUT / baseline")
    print()
    print(
        table(
            [
                "repeat",
                "baseline MiB/s",
                "PUT MiB/s",
                "ratio",
                "sink MiB/s",
                "PUT/sink",
                "server CPU %",
                "curl CPU %",
                "RSS before MiB",
                "RSS peak growth MiB",
                "RSS samples",
                "verify ms",
            ],
            rows,
        )
    )
    print()
    ratio_ok = median_ratio >= RATIO_REQUIRED
    rss_ok = worst_growth < RSS_LIMIT_MIB
    print(
        f"ratio PUT/baseline: median {median_ratio:.2f} (best {max(ratios):.2f}); "
        f"required median >= {RATIO_REQUIRED}: {'PASS' if ratio_ok else 'FAIL'}"
    )
    print(
        f"server RSS peak growth during the PUT: worst {worst_growth:.1f} MiB; "
        f"required < {RSS_LIMIT_MIB} MiB: {'PASS' if rss_ok else 'FAIL'}"
    )
    print()
    print(f"the same file in parts, {in_flight} in flight (sendfile), against the one PUT above")
    print("total = first byte sent to build ready; ratio = one PUT's total / the parts' total")
    print("server CPU = the server's CPU seconds from the first byte sent to the build ready")
    print()
    print(
        table(
            [
                "repeat",
                "PUT s",
                "its verify s",
                "PUT+verify MiB/s",
                "its server CPU s",
                "parts s",
                "their verify s",
                "parts+verify MiB/s",
                "ratio",
                "their server CPU s",
                "RSS peak growth MiB",
            ],
            parts_rows,
        )
    )
    print()
    parts_ratio_ok = statistics.median(parts_ratios) >= PARTS_RATIO_REQUIRED
    parts_rss_ok = max(parts_growths) < PARTS_RSS_LIMIT_MIB
    print(
        f"in parts vs one PUT: median {statistics.median(parts_ratios):.2f}; required >= "
        f"{PARTS_RATIO_REQUIRED}: {'PASS' if parts_ratio_ok else 'FAIL'}"
    )
    print(
        f"server RSS peak growth in parts: worst {max(parts_growths):.1f} MiB; required < "
        f"{PARTS_RSS_LIMIT_MIB} MiB: {'PASS' if parts_rss_ok else 'FAIL'}"
    )
    return 0 if ratio_ok and rss_ok and parts_ratio_ok and parts_rss_ok else 1


if __name__ == "__main__":
    sys.exit(main())
