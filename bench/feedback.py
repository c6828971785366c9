"""Feedback while the load runs: the p99 of bench/load.py's reads while 20 testers send feedback
with three 2 MiB screenshots each, against the same load without them in the same run, and how
much the server's memory grows meanwhile (issue 38).

One `buildbay serve` on 127.0.0.1 (SQLite + local files by default; `--database postgres` for
PostgreSQL + Redis, `both` for one after the other), set up as bench/load.py sets up its own: an
owner, a project, an application and four reader testers, all on the enterprise plan (rate
limiting on, never refusing them), and a first build. Then `--rounds` rounds (3), each of two
phases of `--seconds` (20) in turn, after `--warm-up` unreported seconds of the load and one
unreported feedback (what a server pays once after it starts, its screenshots' workers started
and each endpoint's first request, is not what feedback costs the reads):
- the load, in both phases: bench/load.py's reads (wrk with bench/load_reads.lua, `--clients`
  connections (50) each pausing 0..`--think-ms` ms (200) between requests: the stage at which
  load.py's p99 is asked for) while `--uploaders` threads (2) upload builds of 1-50 MiB one after
  another (load.py's own functions), from the first phase to the last;
- feedback, in the second phase of each round only: `--testers` testers (20; each an account of
  the project, with new-build mails turned off, so that the uploads cost what load.py's do) each
  send feedback (`POST .../builds/{buildId}/feedback`, multipart as an app sends it: text,
  category, context and three screenshots) one after another without pause until the phase
  ends: always 20 feedback in flight, the harshest reading of "20 testers posting". Each
  feedback carries two PNG screenshots and one JPEG, each about 2 MiB and of a phone's size
  (1170 x 2532), made by Pillow with noise over the whole picture so that they are really that
  large and take real decoding and encoding work (a PNG of flat colours compresses to nothing).
  The bodies are encoded once before the rounds, so the senders cost little besides their
  sockets. A feedback in flight when the phase ends is let finish before the next phase.

It prints, for each phase, the reads' p50 and p99 and rate, the feedback sent (answers by status,
their p50 and p99, feedback per second), the CPU share of the server's process and of it with the
processes it started (the screenshots' workers: feedback/images.py), how long the server's event
loop (its main thread) waited for a core each time it woke (from /proc's schedstat: the time it
was ready to run but another process ran), the CPU share of the load generators (this process,
its testers' and uploaders' threads, and wrk), and the peak memory of them all
(their resident memory, a page they share counted once: the sum of their PSS, which for the
server's process alone is its RSS but for the shared libraries' pages); then the ratio of the
p99 with feedback to the p99 without (median of the rounds' ratios; asked: at most 1.2) and the
rise of that memory during the feedback (the highest peak of any feedback phase over the memory
before the first feedback, the warm-up's, the server having served the warm-up's load already,
so that the screenshots' workers count in the rise; asked: under 150 MiB). Exit
status 1 if either is missed, or on a 5xx, a failed read or a feedback without an answer.

`--control` is the experiment beside it: the phases "with feedback" send none, and a process of
the bench's own, at nice +10 as the workers are, compresses noise with zlib at level 3 (what
the worker spends a PNG's time on) without pause instead: what one core's worth of work at that
priority beside the server costs the reads' p99 on this machine, whoever does it. A ratio that
this control shows too is the machine's (the server, one event loop, near a core's worth of work
at this load), not the feedback's path through the server.

`--nice-workers` is an experiment: the screenshots' workers run at SCHED_IDLE
(feedback/images.py); this bench puts each process at SCHED_IDLE that the server started
back at the normal policy (their nice +10 kept), from outside, as it appears (root or
CAP_SYS_NICE is needed to leave SCHED_IDLE): the workers as they were before, to compare the
two on one machine, run after run.

Rate limiting stays on, as in load.py; the per-address feedback budget
(BUILDBAY_FEEDBACK_PER_MINUTE_PER_IP, 30 a minute) is raised for the bench's server, since its 20
testers share 127.0.0.1, where 20 phones would have 20 addresses. The per-reporter budget (10 a
minute) stays: a 429 is counted, not retried.

Usage: .venv/bin/python bench/feedback.py [--database sqlite|postgres|both] [--rounds 3]
       [--seconds 20] [--warm-up 5] [--testers 20] [--clients 50] [--think-ms 200]
       [--uploaders 2] [--nice-workers] [--control] [--postgres postgresql://postgres@127.0.0.1:5432]
       [--redis redis://127.0.0.1:6379/5] [--postgres-database bench_feedback]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from PIL import Image, ImageChops, ImageDraw

from _common import (
    VENV_BIN,
    RssSampler,
    cpu_seconds,
    descendants,
    enterprise_account,
    free_port,
    running_server,
    scaled_out,
    table,
    tree_cpu_seconds,
    tree_pss_kib,
)
from api import WrkResult
from load import MAX_UPLOAD, READERS, Uploads, read_stage, upload_once, uploader

MiB = 1024 * 1024
SCREENSHOT_BYTES = 2 * MiB
SCREEN = (1170, 2532)  # an iPhone's screen, in pixels
BODIES = 4  # distinct feedback bodies, the testers' in turn
P99_RATIO_MOST = 1.2
MEMORY_RISE_MOST_MIB = 150.0
# The testers share 127.0.0.1: the per-address budget raised (the per-reporter one stays).
FEEDBACK_BUDGET = {"BUILDBAY_FEEDBACK_PER_MINUTE_PER_IP": "100000"}


# -- the screenshots -------------------------------------------------------------------------------


def _screen(rng: random.Random) -> Image.Image:
    """A phone screen's flat parts: a light background and rows of coloured cards."""
    image = Image.new("RGB", SCREEN, (245, 245, 247))
    draw = ImageDraw.Draw(image)
    for top in range(0, SCREEN[1], 180):
        colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        draw.rounded_rectangle((40, top + 20, SCREEN[0] - 40, top + 160), 24, fill=colour)
    return image


def _encoded(kind: str, sigma: float, seed: int) -> bytes:
    rng = random.Random(seed)  # the cards' colours; the noise differs from call to call
    image = _screen(rng)
    if sigma:
        noise = Image.effect_noise(SCREEN, sigma).convert("RGB")
        image = ImageChops.add(image, noise, 1, -128)  # grey noise of `sigma` over everything
    out = io.BytesIO()
    if kind == "PNG":
        image.save(out, "PNG")
    else:
        image.save(out, "JPEG", quality=90)
    return out.getvalue()


def screenshots(kind: str, count: int) -> list[bytes]:
    """`count` different `kind` (PNG or JPEG) screenshots of about SCREENSHOT_BYTES each: the
    noise's strength found by bisection on the first."""
    low, high = 0.0, 128.0
    for _ in range(10):
        middle = (low + high) / 2
        if len(_encoded(kind, middle, 0)) < SCREENSHOT_BYTES:
            low = middle
        else:
            high = middle
    return [_encoded(kind, low, seed) for seed in range(1, count + 1)]


@dataclass
class Body:
    content: bytes
    content_type: str


def feedback_bodies(count: int) -> list[Body]:
    """`count` feedback bodies as an app sends them, each with two PNG screenshots and a JPEG."""
    pngs, jpegs = screenshots("PNG", 2 * count), screenshots("JPEG", count)
    context = {"model": "iPhone 14", "os": "iOS 18.1", "locale": "en_GB", "free": "bench"}
    bodies = []
    for n in range(count):
        files = [
            ("screenshots", ("first.png", pngs[2 * n], "image/png")),
            ("screenshots", ("second.png", pngs[2 * n + 1], "image/png")),
            ("screenshots", ("photo.jpg", jpegs[n], "image/jpeg")),
        ]
        form = {"text": f"The list jumps when I scroll ({n})", "category": "bug"}
        form["context"] = json.dumps(context)
        parts = [(k, (None, v.encode())) for k, v in form.items()] + files
        request = httpx.Request("POST", "http://bench/", files=parts)
        bodies.append(Body(request.read(), request.headers["content-type"]))
    return bodies


# -- the feedback senders --------------------------------------------------------------------------


@dataclass
class Sent:
    status: int  # 0: no answer (the error says why)
    seconds: float
    finished_at: float  # time.monotonic()
    error: str | None = None


@dataclass
class Senders:
    """What the testers' threads sent, shared with the main thread under a lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: list[Sent] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def add(self, sent: Sent) -> None:
        with self.lock:
            self.sent.append(sent)


def tester(client: httpx.Client, url: str, token: str, body: Body, log: Senders) -> None:
    """One tester: feedback after feedback, without pause, until `log.stop`; `client` made
    before the phase (a client's making, its TLS context's certificates loaded, costs this
    process ~22 ms of a core: 20 at once at the phase's start took the cores from the server
    for half a second, a phone's own work on its own processor that is not the server's)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": body.content_type}
    while not log.stop.is_set():
        started = time.perf_counter()
        try:
            answer = client.post(url, content=body.content, headers=headers)
            sent = Sent(answer.status_code, time.perf_counter() - started, time.monotonic())
            if answer.status_code != 201:
                sent.error = f"{answer.status_code} {answer.text[:200]}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
            sent = Sent(0, time.perf_counter() - started, time.monotonic(), error)
        log.add(sent)


# -- one server ------------------------------------------------------------------------------------


@dataclass
class Phase:
    round: int
    feedback: bool
    reads: WrkResult
    statuses: dict[str, int]
    cpu_share: float  # of the server's own process
    tree_cpu_share: float  # of it and its workers
    run_queue_ms: float  # the server's main thread's wait for a core, a wake-up
    generators_cpu_share: float  # of this process and wrk
    memory_before_mib: float
    memory_peak_mib: float
    sent: list[Sent]
    began: float  # time.monotonic()


@dataclass
class Outcome:
    name: str
    phases: list[Phase]
    memory_start_mib: float  # before the first feedback (the warm-up's)
    memory_end_mib: float
    upload_errors: list[str]


def run_configuration(
    name: str, env: dict[str, str], data_dir: Path, args: argparse.Namespace, bodies: list[Body]
) -> Outcome:
    port = free_port()
    env = {**env, "BUILDBAY_DATA_DIR": str(data_dir), **FEEDBACK_BUDGET}
    argv = [str(VENV_BIN / "buildbay"), "serve", "--port", str(port)]
    blob = os.urandom(MAX_UPLOAD)
    with (
        running_server(argv, data_dir, port, env) as server,
        httpx.Client(base_url=server.base_url, timeout=60) as client,
    ):
        print(f"{name}: setting up accounts ...", flush=True)
        _, owner = enterprise_account(client, env)
        client.headers["Authorization"] = f"Bearer {owner}"
        project = client.post("/api/projects", json={"name": "feedback"}).json()["id"]
        app = client.post(
            f"/api/projects/{project}/applications", json={"name": "load", "platform": "other"}
        ).json()["id"]
        readers = []
        for _ in range(READERS):
            email, token = enterprise_account(client, env)
            _add_tester(client, project, email)
            readers.append(token)
        testers = []
        for n in range(args.testers):
            email = f"tester-{n}-{os.urandom(4).hex()}@example.com"
            answer = client.post(
                "/api/auth/register", json={"email": email, "password": "bench-password-123"}
            )
            answer.raise_for_status()
            token = str(answer.json()["access_token"])
            _add_tester(client, project, email)
            client.put(
                "/api/auth/me",
                json={"notifyNewBuilds": False},
                headers={"Authorization": f"Bearer {token}"},
            ).raise_for_status()
            testers.append(token)
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
        feedback_url = f"{builds}/{seed.build_id}/feedback"

        uploads = Uploads()
        if args.nice_workers:
            threading.Thread(target=_not_idle, args=(server.pid, uploads), daemon=True).start()
        upload_threads = [
            threading.Thread(
                target=uploader,
                args=(server.base_url, owner, builds, blob, n + 1, uploads),
                daemon=True,
            )
            for n in range(args.uploaders)
        ]
        for thread in upload_threads:
            thread.start()

        def reads(seconds: int) -> tuple[WrkResult, dict[str, int]]:
            return read_stage(server.base_url, readers, paths, args.clients, args.think_ms, seconds)

        if args.warm_up:
            print(f"{name}: {args.warm_up} s of the load, unreported", flush=True)
            reads(args.warm_up)
        # The memory before any feedback, so that the rise counts the screenshots' workers; then
        # one feedback, unreported: what a server pays once after it starts (its workers and
        # their codecs started, each endpoint's first request: FastAPI reads the endpoint's
        # source then, 150 ms on the event loop) is not the feedback's cost to the reads.
        memory_start = tree_pss_kib(server.pid) / 1024
        first = client.post(
            feedback_url,
            content=bodies[0].content,
            headers={"Authorization": f"Bearer {testers[0]}",
                     "Content-Type": bodies[0].content_type},
            timeout=300,
        )  # fmt: skip
        if first.status_code != 201:
            raise SystemExit(f"the first feedback failed: {first.status_code} {first.text[:200]}")
        phases: list[Phase] = []
        for round_ in range(1, args.rounds + 1):
            for with_feedback in (False, True):
                said = "with feedback" if with_feedback else "without feedback"
                print(f"{name}: round {round_}, {args.seconds} s {said}", flush=True)
                memory_before = tree_pss_kib(server.pid) / 1024
                senders = Senders()
                body = [bodies[n % len(bodies)] for n in range(len(testers))]
                sending = testers if with_feedback and not args.control else []
                clients = [httpx.Client(base_url=server.base_url, timeout=300) for _ in sending]
                threads = [
                    threading.Thread(
                        target=tester,
                        args=(clients[n], feedback_url, token, body[n], senders),
                        daemon=True,
                    )
                    for n, token in enumerate(sending)
                ]
                sampler = RssSampler(server.pid, tree=True)
                sampler.start()
                cpu_before, began = cpu_seconds(server.pid), time.monotonic()
                tree_before = tree_cpu_seconds(server.pid)
                waited_before, generators_before = _waits(server.pid), _generators_cpu()
                for thread in threads:
                    thread.start()
                hog = _hog() if with_feedback and args.control else None
                result, statuses = reads(args.seconds)
                if hog is not None:
                    hog.kill()
                    hog.wait()
                cpu_after, ended = cpu_seconds(server.pid), time.monotonic()
                tree_share = (tree_cpu_seconds(server.pid) - tree_before) / (ended - began)
                waited_after, wake_ups_after = _waits(server.pid)
                waited = waited_after - waited_before[0]
                wake_ups = wake_ups_after - waited_before[1]
                generators = (_generators_cpu() - generators_before) / (ended - began)
                senders.stop.set()
                for thread in threads:  # the feedback in flight finishes before the next phase
                    thread.join(timeout=600)
                for made in clients:
                    made.close()
                sampler.stop()
                share = (cpu_after - cpu_before) / (ended - began)
                peak = sampler.peak_kib / 1024
                phases.append(
                    Phase(round_, with_feedback, result, statuses, share, tree_share,
                          1000 * waited / max(1, wake_ups), generators, memory_before, peak,
                          senders.sent, began)
                )  # fmt: skip
        uploads.stop.set()
        for thread in upload_threads:
            thread.join(timeout=180)
        memory_end = tree_pss_kib(server.pid) / 1024
    errors = [u.error for u in uploads.done if u.error]
    return Outcome(name, phases, memory_start, memory_end, errors)


_HOG = """
import os, zlib
os.nice(10)
noise = os.urandom(2 * 1024 * 1024)
while True:
    zlib.compress(noise, 3)
"""


def _hog() -> subprocess.Popen[bytes]:
    """A process at nice +10 that compresses noise without pause until killed (--control)."""
    return subprocess.Popen([sys.executable, "-c", _HOG])


def _not_idle(pid: int, uploads: Uploads) -> None:
    """Every thread of every process `pid` has started that runs at SCHED_IDLE (the
    screenshots' workers) at the normal policy instead, as it appears, until the uploads stop
    (--nice-workers)."""
    while not uploads.stop.wait(0.2):
        for child in descendants(pid):
            for task in Path(f"/proc/{child}/task").glob("*"):
                with contextlib.suppress(OSError):
                    if os.sched_getscheduler(int(task.name)) == os.SCHED_IDLE:
                        os.sched_setscheduler(int(task.name), os.SCHED_OTHER, os.sched_param(0))


def _waits(pid: int) -> tuple[float, int]:
    """How long the main thread of `pid` has waited for a core, in seconds, and how many times
    it ran (/proc's schedstat: time on a core, time ready but waiting, times run)."""
    _, waiting, runs = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(waiting) / 1e9, int(runs)


def _generators_cpu() -> float:
    """The CPU seconds of this process (the testers' and uploaders' threads) and of the
    children it has waited for (each phase's wrk, waited for as its reads end)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _add_tester(client: httpx.Client, project: str, email: str) -> None:
    client.post(
        f"/api/projects/{project}/members", json={"email": email, "role": "tester"}
    ).raise_for_status()


# -- the report ------------------------------------------------------------------------------------


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def report(outcome: Outcome) -> bool:
    rows = []
    for phase in outcome.phases:
        r = phase.reads
        answered = Counter(s.status for s in phase.sent)
        took = [s.seconds for s in phase.sent if s.status == 201]
        # Feedback a second: those stored, over the phase and the time the last one took after.
        span = max((s.finished_at for s in phase.sent), default=phase.began) - phase.began
        rows.append(
            [
                phase.round,
                "yes" if phase.feedback else "no",
                f"{r.rps:.0f}",
                f"{r.p50_ms:.1f}",
                f"{r.p99_ms:.1f}",
                phase.statuses["5xx"] + r.socket_errors,
                " ".join(f"{k}:{v}" for k, v in sorted(answered.items())) or "-",
                f"{answered[201] / span:.2f}" if took else "-",
                f"{statistics.median(took):.1f}" if took else "-",
                f"{_percentile(took, 0.99):.1f}" if took else "-",
                f"{100 * phase.cpu_share:.0f}",
                f"{100 * phase.tree_cpu_share:.0f}",
                f"{phase.run_queue_ms:.2f}",
                f"{100 * phase.generators_cpu_share:.0f}",
                f"{phase.memory_before_mib:.0f}",
                f"{phase.memory_peak_mib:.0f}",
            ]
        )
    print()
    print(f"{outcome.name}:")
    print(
        table(
            [
                "round",
                "feedback",
                "reads/s",
                "p50 ms",
                "p99 ms",
                "read 5xx+errors",
                "feedback answers",
                "feedback/s",
                "fb p50 s",
                "fb p99 s",
                "server CPU %",
                "+workers CPU %",
                "server waits for a core, ms a wake-up",
                "load generators CPU %",
                "memory before MiB",
                "memory peak MiB",
            ],
            rows,
        )
    )
    ratios = []
    for round_ in sorted({p.round for p in outcome.phases}):
        without, with_ = (
            next(p for p in outcome.phases if p.round == round_ and p.feedback is f)
            for f in (False, True)
        )
        ratios.append(with_.reads.p99_ms / without.reads.p99_ms)
    ratio = statistics.median(ratios)
    rise = max(p.memory_peak_mib for p in outcome.phases if p.feedback) - outcome.memory_start_mib
    five_xx = sum(p.statuses["5xx"] + p.reads.socket_errors for p in outcome.phases)
    five_xx += sum(s.status >= 500 or s.status == 0 for p in outcome.phases for s in p.sent)
    for error in sorted({s.error for p in outcome.phases for s in p.sent if s.error})[:5]:
        print(f"  feedback not stored: {error}")
    for error in outcome.upload_errors[:5]:
        print(f"  upload error: {error}")
    checks = [
        (
            "p99 of reads with feedback / without, per round: "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + f"; median {ratio:.2f} (at most {P99_RATIO_MOST} asked)",
            ratio <= P99_RATIO_MOST,
        ),
        (
            f"server memory (PSS, with its workers) rise during the feedback: {rise:+.0f} MiB over "
            f"{outcome.memory_start_mib:.0f} (under {MEMORY_RISE_MOST_MIB:.0f} asked); "
            f"{outcome.memory_end_mib:.0f} MiB at the end",
            rise < MEMORY_RISE_MOST_MIB,
        ),
        (f"5xx, failed reads and feedback without an answer: {five_xx} (0 asked)", not five_xx),
    ]
    for text, passed in checks:
        print(f"  {text}: {'PASS' if passed else 'FAIL'}")
    return all(passed for _, passed in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=20, help="of each phase")
    parser.add_argument("--warm-up", type=int, default=5, help="unreported seconds of the load")
    parser.add_argument("--testers", type=int, default=20, help="sending feedback at once")
    parser.add_argument("--clients", type=int, default=50, help="wrk's read connections")
    parser.add_argument("--think-ms", type=int, default=200, help="each read client's 0..pause")
    parser.add_argument("--uploaders", type=int, default=2, help="concurrent upload sequences")
    parser.add_argument(
        "--nice-workers",
        action="store_true",
        help="an experiment: the screenshots' workers at nice +10 only, not SCHED_IDLE",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="an experiment: no feedback; a nice +10 process compressing noise in its phases",
    )
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument(
        "--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
    )
    parser.add_argument(
        "--postgres-database",
        default="bench_feedback",
        help="created afresh and dropped afterwards",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")

    print("making the screenshots ...", flush=True)
    bodies = feedback_bodies(BODIES)
    root = Path(tempfile.mkdtemp(prefix="buildbay-bench-feedback-"))
    outcomes = []
    try:
        if args.database in ("sqlite", "both"):
            outcomes.append(
                run_configuration("SQLite + local files", {}, root / "sqlite", args, bodies)
            )
        if args.database in ("postgres", "both"):
            with scaled_out(args.postgres, args.redis, args.postgres_database, root / "pg") as env:
                name = "PostgreSQL + Redis + local files"
                outcomes.append(run_configuration(name, env, root / "pg", args, bodies))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    mib = statistics.mean(len(b.content) for b in bodies) / MiB
    print()
    print(
        f"{args.rounds} rounds of {args.seconds} s without then with feedback; the load: "
        f"{args.clients} read clients pausing 0..{args.think_ms} ms (wrk -t1) and "
        f"{args.uploaders} upload sequences (1-50 MiB); the feedback: {args.testers} testers "
        f"each sending one after another ({mib:.1f} MiB a body: two PNG and a JPEG of "
        f"{SCREEN[0]} x {SCREEN[1]}); {os.cpu_count()} CPUs shared with the load generators; "
        + (
            "the workers at nice +10, not SCHED_IDLE (--nice-workers); "
            if args.nice_workers
            else ""
        )
        + (
            "CONTROL: no feedback sent, a nice +10 zlib loop instead (--control); "
            if args.control
            else ""
        )
        + f"load average {' '.join(f'{n:.1f}' for n in os.getloadavg())}"
    )
    results = [report(outcome) for outcome in outcomes]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
