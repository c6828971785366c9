"""The GitHub Action's upload against `buildbay upload` alone (issue 40).

Starts a real `buildbay serve` (SQLite + files) in a temporary data directory. Then:

1. The action's install step (action.yml's `install`: a virtualenv and `pip install` of this
   checkout's client/), run twice as the runner runs it (tests/ci/runner.py): the first fills
   pip's cache, the second is the install time with a warm pip cache. Measured apart.
2. Rounds of two uploads of a fresh 200 MiB file each (new bytes every time: a file already
   uploaded would be reused, not sent): the action's `upload` step as the runner runs it, from
   its first command to its outputs (bash, its inputs to options, `buildbay upload`, the
   $GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY files, the outputs read back), and the same upload
   as `buildbay upload FILE -p P -a A` run alone, with the client the action installed. Which
   goes first alternates from round to round.

Requirement: median(action) / median(alone) <= 1.1 (the action adds nothing but its install).
Printed too: the machine's load (1-minute load average, before and after) and its CPU count.

Exits 1 if the requirement is missed.
Usage: .venv/bin/python bench/ci_upload.py [--size-mib 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from _common import (
    LARGE_UPLOADS,
    ROOT,
    VENV_BIN,
    create_application,
    create_project,
    free_port,
    register,
    running_server,
    table,
)

sys.path.insert(0, str(ROOT))
from tests.ci.runner import run_action

MAX_RATIO = 1.1


def make_file(path: Path, size_mib: int) -> None:
    with path.open("wb") as file:
        for _ in range(size_mib):
            file.write(os.urandom(1024 * 1024))


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (5 min {five:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"CPUs: {os.cpu_count()}; load average before: {load()}")

    with tempfile.TemporaryDirectory(prefix="buildbay-bench-ci-") as tmp:
        work = Path(tmp)
        port = free_port()
        argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
        env = LARGE_UPLOADS
        # A new database is migrated before the server answers: slow on a busy machine.
        with running_server(argv, work / "data", port, env) as server:
            with httpx.Client(base_url=server.base_url, timeout=60) as client:
                client.headers["Authorization"] = f"Bearer {register(client)}"
                project = create_project(client, "Bench")
                app = create_application(client, project, "Android")
                token = client.post("/api/account/api-tokens", json={"name": "ci"})
                token.raise_for_status()
                api_token = token.json()["token"]

            installs = []
            for n in range(2):
                (work / f"install-{n}").mkdir()
                started = time.perf_counter()
                run = run_action({"url": "-", "token": "-", "application": "-", "file": "-"},
                                 work / f"install-{n}", only={"install"})  # fmt: skip
                installs.append(time.perf_counter() - started)
                if not run.ok:
                    raise SystemExit(f"the install step failed:\n{run.log}")
            buildbay = run.steps[0].outputs["buildbay"]
            print(f"install step: {installs[0]:.1f} s (pip cache as found), "
                  f"{installs[1]:.1f} s (warm pip cache)")  # fmt: skip

            alone_env = {
                "PATH": os.environ["PATH"], "HOME": str(work), "CI": "true",
                "BUILDBAY_URL": server.base_url, "BUILDBAY_TOKEN": api_token,
                "BUILDBAY_CONFIG_DIR": str(work / "no-profile"),
            }  # fmt: skip
            action_seconds, alone_seconds, rows = [], [], []
            for n in range(args.rounds):
                order = ["action", "alone"] if n % 2 == 0 else ["alone", "action"]
                for which in order:
                    file = work / f"app-{n}-{which}.bin"
                    make_file(file, args.size_mib)
                    round_dir = work / f"round-{n}-{which}"
                    round_dir.mkdir()
                    started = time.perf_counter()
                    if which == "action":
                        run = run_action(
                            {"url": server.base_url, "token": api_token, "project": project,
                             "application": app, "file": str(file)},
                            round_dir, only={"upload"},
                            steps_before={"install": {"buildbay": buildbay}},
                        )  # fmt: skip
                        seconds = time.perf_counter() - started
                        if not run.ok or not run.outputs["build-id"].startswith("bld_"):
                            raise SystemExit(f"the action's upload failed:\n{run.log}")
                        action_seconds.append(seconds)
                    else:
                        done = subprocess.run(
                            [buildbay, "upload", str(file), "-p", project, "-a", app],
                            env=alone_env, capture_output=True, text=True,
                        )  # fmt: skip
                        seconds = time.perf_counter() - started
                        if done.returncode != 0:
                            raise SystemExit(f"buildbay upload failed:\n{done.stderr}")
                        alone_seconds.append(seconds)
                    file.unlink()
                    rows.append([n + 1, which, f"{seconds:.2f}", f"{args.size_mib / seconds:.0f}"])
    print(table(["round", "upload", "seconds", "MiB/s"], rows))
    ratio = statistics.median(action_seconds) / statistics.median(alone_seconds)
    ok = ratio <= MAX_RATIO
    print(f"\nmedian action {statistics.median(action_seconds):.2f} s, alone "
          f"{statistics.median(alone_seconds):.2f} s: {ratio:.3f}x; required <= {MAX_RATIO}: "
          f"{'PASS' if ok else 'FAIL'}")  # fmt: skip
    fastest = min(action_seconds) / min(alone_seconds)
    print(f"fastest of each: {fastest:.3f}x (the noise of a shared machine shows between the two)")
    print(f"load average after: {load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
