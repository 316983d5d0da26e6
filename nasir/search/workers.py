"""Evaluations in worker processes, so a crash, a hang or an exception costs one candidate only.

`LocalPool(setup, workers, timeout)` keeps `workers` processes, each holding an `Evaluator`. A
candidate sent to a worker (to be evaluated, or, for the front's members, to be compiled whole and
timed: `MEASURE`) comes back as an `Outcome`; a worker that dies (a segfault in generated code),
runs past `timeout` seconds or raises gives an outcome `failed` with the reason, and is replaced by
a fresh one.

    pool = LocalPool(setup, workers=2, timeout=600)
    pool.submit(7, "group{factor=2 ...}", enter_below=4.2)   # or pool.submit(7, pipeline, MEASURE)
    for number, outcome in pool.results(wait=1.0): ...

The Ray pool (`nasir.search.distributed`) has the same three methods.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing import connection
from multiprocessing.connection import Connection

from nasir.search.evaluate import Evaluator, Outcome, Setup

STARTUP_SECONDS = 900
EVALUATE, MEASURE = "evaluate", "measure"
"""The jobs of a worker: evaluate a candidate; compile a candidate whole and time it."""
"""Time a worker may take to load the models and measure the original before its first candidate."""


def failed(reason: str, seconds: float | None = None) -> Outcome:
    return Outcome("failed", None, reason, seconds=seconds)


def evaluate_safely(evaluator: Evaluator, job: tuple[str, str, float | None]) -> Outcome:
    """The outcome of `job` (kind, pipeline, the evaluation's `enter_below`); an unexpected
    exception is a failed outcome with its traceback tail."""
    kind, pipeline, enter_below = job
    start = time.perf_counter()
    try:
        outcome = evaluator.measure(pipeline) if kind == MEASURE else evaluator(pipeline, enter_below)
    except Exception as e:  # noqa: BLE001 - any error of one candidate is that candidate's failure
        tail = traceback.format_exc(limit=-3).strip().splitlines()[-1]
        return failed(f"{type(e).__name__}: {e} [{tail}]", time.perf_counter() - start)
    outcome.seconds = time.perf_counter() - start
    return outcome


def serve(setup: Setup, inbox: Connection, outbox: Connection) -> None:
    """A worker's life: build the evaluator, then evaluate what arrives until None."""
    try:
        evaluator = setup.make_evaluator()
    except Exception as e:  # noqa: BLE001 - reported to the parent, which stops the search
        outbox.send(("error", f"{type(e).__name__}: {e}"))
        return
    outbox.send(("ready", None))
    while (job := inbox.recv()) is not None:
        outbox.send(("done", evaluate_safely(evaluator, job)))


def main() -> None:
    """`python -m nasir.search.workers`: a worker on its stdin/stdout (messages: multiprocessing
    connection frames); anything else written to stdout goes to stderr. Ctrl-C is the parent's to
    handle (it closes the pool): a worker ignores SIGINT, so a user's interrupt prints nothing here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    outbox = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    inbox = Connection(os.dup(0), writable=False)
    serve(inbox.recv(), inbox, outbox)


@dataclass
class _Worker:
    process: subprocess.Popen
    inbox: Connection
    outbox: Connection
    job: tuple[int, str] | None = None
    started: float = 0.0


class WorkerStartError(RuntimeError):
    """A worker could not build its evaluator (the same would happen to every candidate)."""


class LocalPool:
    """`workers` local processes evaluating candidates (see the module docstring)."""

    def __init__(self, setup: Setup, workers: int = 1, timeout: float = 600.0):
        self.setup, self.timeout = setup, timeout
        self.workers = [self._start() for _ in range(workers)]
        for w in self.workers:
            self._wait_ready(w)

    def _start(self) -> _Worker:
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        process = subprocess.Popen([sys.executable, "-m", "nasir.search.workers"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, env=env)
        worker = _Worker(process, Connection(os.dup(process.stdin.fileno()), readable=False),
                         Connection(os.dup(process.stdout.fileno()), writable=False))
        process.stdin.close()
        process.stdout.close()
        worker.inbox.send(self.setup)
        return worker

    def _wait_ready(self, worker: _Worker) -> None:
        if not worker.outbox.poll(STARTUP_SECONDS):
            raise WorkerStartError(f"a worker did not start within {STARTUP_SECONDS} s")
        try:
            kind, message = worker.outbox.recv()
        except EOFError:
            raise WorkerStartError(f"a worker died while starting (exit code {worker.process.poll()})") from None
        if kind == "error":
            raise WorkerStartError(message)

    @property
    def idle(self) -> int:
        return sum(w.job is None for w in self.workers)

    @property
    def busy(self) -> int:
        return len(self.workers) - self.idle

    def submit(self, number: int, pipeline: str, kind: str = EVALUATE, enter_below: float | None = None) -> None:
        worker = next(w for w in self.workers if w.job is None)
        worker.job, worker.started = (number, pipeline), time.perf_counter()
        worker.inbox.send((kind, pipeline, enter_below))

    def results(self, wait: float = 0.5) -> list[tuple[int, Outcome]]:
        """Outcomes finished within `wait` seconds (failed ones included)."""
        done = []
        deadline = time.perf_counter() + wait
        while not done and (now := time.perf_counter()) < deadline:
            busy = [w for w in self.workers if w.job is not None]
            if not busy:
                break
            first_timeout = min(w.started for w in busy) + self.timeout
            connection.wait([w.outbox for w in busy], max(0.0, min(deadline, first_timeout) - now))
            for k, w in enumerate(self.workers):
                if w.job is None:
                    continue
                outcome = self._poll(k, w)
                if outcome is not None:
                    done.append((w.job[0], outcome))
                    self.workers[k].job = None
        return done

    def _poll(self, k: int, w: _Worker) -> Outcome | None:
        elapsed = time.perf_counter() - w.started
        try:
            if w.outbox.poll():
                return w.outbox.recv()[1]
        except (EOFError, OSError):
            pass
        if w.process.poll() is not None:
            self._replace(k, w)
            return failed(f"the worker died ({describe_exit(w.process.returncode)}) evaluating it", elapsed)
        if elapsed > self.timeout:
            self._replace(k, w)
            return failed(f"timed out after {self.timeout:g} s", elapsed)
        return None

    def _replace(self, k: int, w: _Worker) -> None:
        w.process.kill()
        w.process.wait()
        fresh = self._start()
        self._wait_ready(fresh)
        self.workers[k] = fresh

    def close(self) -> None:
        for w in self.workers:
            try:
                w.inbox.send(None)
            except OSError:
                pass
        for w in self.workers:
            try:
                w.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                w.process.kill()
                w.process.wait()


def describe_exit(code: int | None) -> str:
    """`exit code 3`, or the signal's name for a process a signal killed (`SIGSEGV`)."""
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


if __name__ == "__main__":
    main()
