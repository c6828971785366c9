"""Reading build files: what the attack's crafted .ipa costs, and what it costs another tenant.

Three measurements, each against a baseline taken in the same run, printed as ratios:

1. The parser itself, in this process: the crafted .ipa (an Info.plist naming 40,000 icon files
   over 3,200 PNGs, ~660 KB; the attack's was 430 KB with the same counts) against the small
   demo .apk (8 KB) of the tests' fixtures.
2. The reading processes (builds/readers.py): the demo .apk read through a pool whose processes
   are reused (PARSE_FILES_PER_PROCESS=100) and through a fresh process per file (1), against
   reading it in this process.
3. A real `buildbay serve` (one process, SQLite): tenant A's verify of the demo .apk, alone, and
   while tenant B verifies crafted .ipa files from two threads without pause (as many as there
   are reading processes), against A's verify alone.

4. A real `buildbay serve` (SQLite, or PostgreSQL + Redis with --postgres): one account sends
   --flood concurrent verifies, spread over --projects projects, of an .ipa of 99,000 empty
   entries (the second outside attack's, ~0.7 s of processor time each to read; it sent 12);
   another account's verifies of a small .ipa, alone and then one after another once the flood
   is under way, printed as a ratio, with the order in which the verifies were answered.

Usage: .venv/bin/python bench/parse.py [--verifies 30] [--reads 50] [--src DIR]
         [--parts 1234] [--flood 24] [--projects 2] [--victims 5] [--entries 99000]
         [--postgres URL --redis URL]
  --src DIR: run the servers of parts 3 and 4 from another source tree (e.g. `git archive main
  src` unpacked in DIR), to compare with it; parts 1 and 2 always measure this tree.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import plistlib
import statistics
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

# A reading process re-imports the __main__ module (multiprocessing's spawn preparation), as it
# re-imports `buildbay`'s in a server: what this script needs of HTTP, PostgreSQL and Redis
# (_common) is imported where it is used, so that part 2 measures a process, not those imports.
ROOT = Path(__file__).resolve().parent.parent
APK = ROOT / "tests" / "fixtures" / "android" / "demo.apk"
ATTACKERS = 2  # as many as the server's reading processes (PARSE_PROCESSES)


def crafted_ipa(names: int = 40_000, pngs: int = 3_200) -> bytes:
    info = {
        "CFBundleIdentifier": "com.example.crafted",
        "CFBundleVersion": "1",
        "CFBundleIconFiles": [f"I{i}" for i in range(names)],
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("Payload/X.app/Info.plist", plistlib.dumps(info, fmt=plistlib.FMT_BINARY))
        for i in range(pngs):
            archive.writestr(f"Payload/X.app/P{i}.png", b"\x89PNG")
    return out.getvalue()


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


# -- 1 and 2: in this process ---------------------------------------------------------------------


def parser_costs(crafted: bytes, apk: bytes, reads: int) -> list[list[str]]:
    from buildbay.builds.metadata import read_metadata

    def once(data: bytes, name: str) -> float:
        began = time.perf_counter()
        reading = read_metadata(lambda: io.BytesIO(data), name)
        assert reading.metadata is not None, reading.error
        return time.perf_counter() - began

    apk_ms = median_ms([once(apk, "demo.apk") for _ in range(reads)])
    crafted_ms = median_ms([once(crafted, "X.ipa") for _ in range(5)])
    return [
        ["demo .apk (baseline)", f"{len(apk) // 1024} KiB", f"{apk_ms:.2f}", "1.00x"],
        [
            "crafted .ipa",
            f"{len(crafted) // 1024} KiB",
            f"{crafted_ms:.2f}",
            ratio(crafted_ms, apk_ms),
        ],
    ]


def pool_costs(apk: bytes, reads: int) -> list[list[str]]:
    from buildbay.builds.metadata import read_metadata
    from buildbay.builds.readers import MetadataReaders, ReadLimits

    limits = ReadLimits(cpu_seconds=10, memory_bytes=1024 * 1024 * 1024, timeout_seconds=30)

    def in_process() -> float:
        began = time.perf_counter()
        read_metadata(lambda: io.BytesIO(apk), "demo.apk")
        return time.perf_counter() - began

    async def through(files_per_process: int) -> float:
        pool = MetadataReaders(1, limits, files_per_process)
        try:
            await pool.read(lambda: io.BytesIO(apk), "demo.apk")  # the fork server, started once
            samples = []
            for _ in range(reads):
                began = time.perf_counter()
                reading = await pool.read(lambda: io.BytesIO(apk), "demo.apk")
                samples.append(time.perf_counter() - began)
                assert reading.metadata is not None, reading.error
            return median_ms(samples)
        finally:
            await pool.aclose()

    baseline = median_ms([in_process() for _ in range(reads)])
    reused = asyncio.run(through(100))
    fresh = asyncio.run(through(1))
    return [
        ["in this process (baseline)", f"{baseline:.2f}", "1.00x"],
        ["reused process (100 files each)", f"{reused:.2f}", ratio(reused, baseline)],
        ["fresh process per file", f"{fresh:.2f}", ratio(fresh, baseline)],
    ]


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x"


# -- 3: a real server -----------------------------------------------------------------------------


def application(client: httpx.Client, project: str, platform: str) -> str:
    response = client.post(
        f"/api/projects/{project}/applications", json={"name": platform, "platform": platform}
    )
    response.raise_for_status()
    return str(response.json()["id"])


def verify_seconds(client: httpx.Client, builds: str, data: bytes, file_name: str) -> float:
    """Upload a build (upload-link, PUT), then time its verify."""
    link = client.post(f"{builds}/upload-link", json={"fileName": file_name, "fileSize": len(data)})
    link.raise_for_status()
    body = link.json()
    client.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"]).raise_for_status()
    began = time.perf_counter()
    answer = client.post(f"{builds}/verify", json={"buildId": body["buildId"]})
    took = time.perf_counter() - began
    if answer.status_code not in (200, 422):
        raise SystemExit(f"verify answered {answer.status_code}: {answer.text}")
    return took


def server_costs(args: argparse.Namespace, crafted: bytes, apk: bytes) -> list[list[str]]:
    import httpx

    from _common import VENV_BIN, create_project, enterprise_account, free_port, running_server

    with tempfile.TemporaryDirectory(prefix="buildbay-bench-parse-") as root:
        data = Path(root) / "data"
        data.mkdir()
        env = {"BUILDBAY_DATA_DIR": str(data), "BUILDBAY_RATE_LIMIT_ENABLED": "false"}
        if args.src:
            env["PYTHONPATH"] = str(Path(args.src).resolve())
        port = free_port()
        argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port), "--workers", "1"]
        with (
            running_server(argv, data, port, env) as server,
            httpx.Client(base_url=server.base_url, timeout=600) as victim,
            httpx.Client(base_url=server.base_url, timeout=600) as attacker,
        ):
            for client, name in ((victim, "victim"), (attacker, "attacker")):
                _, token = enterprise_account(client, env)
                client.headers["Authorization"] = f"Bearer {token}"
                project = create_project(client, name)
                platform = "android" if client is victim else "ios"
                app = application(client, project, platform)
                client.base_url = httpx.URL(
                    f"{server.base_url}/api/app-distribution/{project}/{app}/builds/"
                )
            for _ in range(3):  # warm-up: first requests, the fork server
                verify_seconds(victim, "", apk, "demo.apk")
            alone = [verify_seconds(victim, "", apk, "demo.apk") for _ in range(args.verifies)]

            stop = threading.Event()
            crafted_times: list[float] = []

            def attack() -> None:
                with httpx.Client(
                    base_url=attacker.base_url, headers=attacker.headers, timeout=600
                ) as own:
                    while not stop.is_set():
                        crafted_times.append(verify_seconds(own, "", crafted, "X.ipa"))

            threads = [threading.Thread(target=attack) for _ in range(ATTACKERS)]
            for thread in threads:
                thread.start()
            time.sleep(1.0)  # both attackers' first files uploaded: their verifies under way
            attacked = [verify_seconds(victim, "", apk, "demo.apk") for _ in range(args.verifies)]
            stop.set()
            for thread in threads:
                thread.join()
    base = median_ms(alone)
    return [
        ["A's .apk verify alone (baseline)", f"{base:.1f}", f"{max(alone) * 1000:.1f}", "1.00x"],
        [
            f"A's .apk verify, B verifying crafted .ipa x{ATTACKERS}",
            f"{median_ms(attacked):.1f}",
            f"{max(attacked) * 1000:.1f}",
            ratio(median_ms(attacked), base),
        ],
        [
            f"B's crafted .ipa verify ({len(crafted_times)} done)",
            f"{median_ms(crafted_times):.1f}",
            f"{max(crafted_times) * 1000:.1f}",
            ratio(median_ms(crafted_times), base),
        ],
    ]


# -- 4: one account's flood of verifies ----------------------------------------------------------


def entries_ipa(entries: int) -> bytes:
    """An .ipa of `entries` empty PNGs with 180-character names beside its Info.plist, stored:
    within the entry and directory limits, and ~0.7 s of processor time to read at 99,000."""
    info = {"CFBundleIdentifier": "com.example.flood", "CFBundleVersion": "1"}
    info["CFBundleIconFiles"] = ["I"]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("Payload/A.app/Info.plist", plistlib.dumps(info, fmt=plistlib.FMT_BINARY))
        for i in range(entries):
            archive.writestr(f"Payload/A.app/I{i:06d}" + "x" * 160 + ".png", b"")
    return out.getvalue()


def small_ipa() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        info = {"CFBundleIdentifier": "com.example.small", "CFBundleVersion": "1"}
        archive.writestr("Payload/S.app/Info.plist", plistlib.dumps(info, fmt=plistlib.FMT_BINARY))
    return out.getvalue()


def uploaded(client: httpx.Client, data: bytes, file_name: str) -> str:
    link = client.post("upload-link", json={"fileName": file_name, "fileSize": len(data)})
    link.raise_for_status()
    body = link.json()
    client.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"]).raise_for_status()
    return str(body["buildId"])


def flood_costs(args: argparse.Namespace) -> tuple[list[list[str]], str]:
    import contextlib

    import httpx

    from _common import (
        VENV_BIN,
        create_project,
        enterprise_account,
        free_port,
        running_server,
        scaled_out,
    )

    big, small = entries_ipa(args.entries), small_ipa()
    with tempfile.TemporaryDirectory(prefix="buildbay-bench-flood-") as root:
        data = Path(root) / "data"
        data.mkdir()
        env = {"BUILDBAY_DATA_DIR": str(data), "BUILDBAY_RATE_LIMIT_ENABLED": "false"}
        if args.src:
            env["PYTHONPATH"] = str(Path(args.src).resolve())
        database: contextlib.AbstractContextManager[dict[str, str]] = contextlib.nullcontext({})
        if args.postgres:
            database = scaled_out(args.postgres, args.redis, "buildbay_bench_flood", data)
        port = free_port()
        argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port), "--workers", "1"]
        with database as extra:
            env.update(extra)
            with running_server(argv, data, port, env) as server:

                def builds_of(name: str, token: str) -> httpx.Client:
                    """A client of the builds of a new iOS application in a new project."""
                    client = httpx.Client(base_url=server.base_url, timeout=600)
                    client.headers["Authorization"] = f"Bearer {token}"
                    project = create_project(client, name)
                    app = application(client, project, "ios")
                    client.base_url = httpx.URL(
                        f"{server.base_url}/api/app-distribution/{project}/{app}/builds/"
                    )
                    return client

                with httpx.Client(base_url=server.base_url, timeout=600) as signing_up:
                    victim = builds_of("victim", enterprise_account(signing_up, env)[1])
                    token = enterprise_account(signing_up, env)[1]
                    attackers = [builds_of(f"flood {n}", token) for n in range(args.projects)]

                def victim_verify(build: str = "") -> tuple[float, int]:
                    build = build or uploaded(victim, small, "small.ipa")
                    began = time.perf_counter()
                    answer = victim.post("verify", json={"buildId": build})
                    return time.perf_counter() - began, answer.status_code

                for _ in range(3):  # warm-up: first requests, the fork server
                    victim_verify()
                alone = [victim_verify()[0] for _ in range(5)]
                builds = [
                    (attacker, uploaded(attacker, big, "flood.ipa"))
                    for n in range(args.flood)
                    for attacker in [attackers[n % len(attackers)]]
                ]
                # A's builds uploaded before: what is timed is each verify, the request alone.
                victims = [uploaded(victim, small, "small.ipa") for _ in range(args.victims)]
                answered: list[tuple[float, str]] = []
                first_answer = threading.Event()
                began = time.perf_counter()

                def flood(attacker: httpx.Client, build: str) -> None:
                    with httpx.Client(
                        base_url=attacker.base_url, headers=attacker.headers, timeout=600
                    ) as own:
                        status = own.post("verify", json={"buildId": build}).status_code
                    answered.append((time.perf_counter() - began, f"B:{status}"))
                    first_answer.set()

                threads = [threading.Thread(target=flood, args=pair) for pair in builds]
                for thread in threads:
                    thread.start()
                # The flood's verifies are in (reading, waiting, refused) once one is answered.
                first_answer.wait()
                time.sleep(0.5)
                flooded = []
                for build in victims:
                    took, status = victim_verify(build)
                    flooded.append(took)
                    answered.append((time.perf_counter() - began, f"A:{status}"))
                for thread in threads:
                    thread.join()
    order = " ".join(f"{who}@{at:.1f}s" for at, who in sorted(answered))
    base = median_ms(alone)
    return [
        [
            "A's small .ipa verify alone (baseline)",
            f"{base:.1f}",
            f"{max(alone) * 1000:.1f}",
            "1.00x",
        ],
        [
            f"A's small .ipa verify x{args.victims}, B's {args.flood} verifies of "
            f"{args.entries:,} entries in {args.projects} projects",
            f"{median_ms(flooded):.1f}",
            f"{max(flooded) * 1000:.1f}",
            ratio(median_ms(flooded), base),
        ],
    ], order


def main() -> int:
    from _common import table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifies", type=int, default=30, help="of A's .apk, each way")
    parser.add_argument("--reads", type=int, default=50, help="of the .apk in parts 1 and 2")
    parser.add_argument("--src", help="source tree of the servers of parts 3 and 4")
    parser.add_argument("--parts", default="1234", help="which parts to run, e.g. 4")
    parser.add_argument("--flood", type=int, default=24, help="B's concurrent verifies (4)")
    parser.add_argument("--projects", type=int, default=2, help="B's flood's projects (4)")
    parser.add_argument("--victims", type=int, default=5, help="A's verifies in the flood (4)")
    parser.add_argument("--entries", type=int, default=99_000, help="of B's .ipa (4)")
    parser.add_argument("--postgres", help="part 4 on this PostgreSQL server (postgresql://...)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/11", help="with --postgres")
    args = parser.parse_args()
    crafted, apk = crafted_ipa(), APK.read_bytes()

    if "1" in args.parts:
        print("1. The parser, in this process (median of the reads)\n")
        rows = parser_costs(crafted, apk, args.reads)
        print(table(["file", "size", "ms", "ratio"], rows), "\n", flush=True)

    if "2" in args.parts:
        print("2. The demo .apk through a reading process (median of the reads)\n")
        print(table(["read", "ms", "ratio"], pool_costs(apk, args.reads)), "\n", flush=True)

    where = f"the server of {args.src}" if args.src else "this tree's server"
    if "3" in args.parts:
        print(f"3. Verify on a real server ({where}, SQLite, one process)\n")
        rows = server_costs(args, crafted, apk)
        print(table(["verify", "median ms", "max ms", "ratio"], rows), "\n", flush=True)

    if "4" in args.parts:
        database = "PostgreSQL + Redis" if args.postgres else "SQLite"
        print(f"4. One account's flood of verifies ({where}, {database}, one process)\n")
        rows, order = flood_costs(args)
        print(table(["verify", "median ms", "max ms", "ratio"], rows))
        print(f"\nanswered (A: the other account; B: the flood; s from the flood's start): {order}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
