"""Where the suite's CPU goes: each test's CPU time, that of the test process and of the
processes it started and reaped (servers, browsers, `buildbay` commands), as a pytest plugin,
and a report of the tests, files and folders that cost the most.

On a shared machine wall-clock durations (`--durations`) measure the neighbours as much as the
test; CPU time does not. A fixture's set-up and tear-down count to the test that ran them
(a module's browser to its last test); a process a test leaves running counts to none. Under
xdist, the reaped CPU of the controlling process (worker None) is its workers' whole CPU,
imports and collection included: the run's total.

Usage (several workers write to the same file):
    rm -f /tmp/cpu.jsonl
    CPU_PER_TEST=/tmp/cpu.jsonl PYTHONPATH=tools .venv/bin/pytest -p cpu_per_test -n 2 tests/...
    .venv/bin/python tools/cpu_per_test.py /tmp/cpu.jsonl [how many tests to list]
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime


def _write(row: dict[str, Any]) -> None:
    with Path(os.environ.get("CPU_PER_TEST", "cpu-per-test.jsonl")).open("a") as out:
        out.write(json.dumps(row | {"worker": os.environ.get("PYTEST_XDIST_WORKER")}) + "\n")


_started: tuple[tuple[float, float], float] | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _started
    _started = (_cpu(), time.monotonic())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    (own, reaped), began = _cpu(), time.monotonic()
    try:
        return (yield)
    finally:
        own_now, reaped_now = _cpu()
        _write({"id": item.nodeid, "self": own_now - own, "children": reaped_now - reaped,
                "wall": time.monotonic() - began})  # fmt: skip


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The whole process (collection included) as one row: `__session__`."""
    if _started is not None:
        (own, reaped), began = _started
        own_now, reaped_now = _cpu()
        _write({"id": "__session__", "self": own_now - own, "children": reaped_now - reaped,
                "wall": time.monotonic() - began})  # fmt: skip


def report(path: str, top: int) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    tests = [r for r in rows if r["id"] != "__session__"]
    cpu = {r["id"]: r["self"] + r["children"] for r in tests}
    print(f"{len(tests)} tests, {sum(cpu.values()):.1f} s of CPU")
    for r in rows:
        if r["id"] == "__session__":
            print(f"  process {r['worker']}: {r['self']:.1f} s own, {r['children']:.1f} s reaped")
    print(f"-- the {top} tests that cost the most (CPU s, own, reaped, wall s)")
    for r in sorted(tests, key=lambda r: -cpu[r["id"]])[:top]:
        print(
            f"{cpu[r['id']]:7.2f} {r['self']:6.2f} {r['children']:6.2f} {r['wall']:6.1f}  {r['id']}"
        )
    for title, key in (
        ("folder", lambda i: "/".join(i.split("::")[0].split("/")[:2])),
        ("file", lambda i: i.split("::")[0]),
    ):
        total: collections.Counter[str] = collections.Counter()
        count: collections.Counter[str] = collections.Counter()
        for test_id, seconds in cpu.items():
            total[key(test_id)] += seconds
            count[key(test_id)] += 1
        print(f"-- per {title} (CPU s, tests)")
        for name, seconds in total.most_common(30):
            print(f"{seconds:7.1f} {count[name]:5d}  {name}")


if __name__ == "__main__":
    report(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
