"""The screenshots' worker processes' first act (feedback/images.py): to step below the requests.

A module of its own, importing nothing heavy: a worker imports this module to run
`lower_priority`, and only afterwards, at its new priority, Pillow and the codecs for its first
screenshot (a few hundred milliseconds of a core, at the moment 20 feedback arrive)."""

from __future__ import annotations

import contextlib
import os

NICENESS = 10  # added to the workers' nice value: their disk I/O's priority follows it


def lower_priority() -> None:
    """At SCHED_IDLE where the system has it (Linux), which runs the worker only on a core that
    nothing else wants at that moment; nice +10 (NICENESS) as well, which also lowers its disk
    I/O's priority, and is all a system without SCHED_IDLE gets. At nice +10 alone the reads'
    p99 beside 20 testers' feedback rose 2.6 times, at SCHED_IDLE 1.9 (the median of 3 and 6
    rounds, bench/feedback.py; docs/performance.md). The price: on a host whose cores are always
    busy, a feedback waits for a free one."""
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    if hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
