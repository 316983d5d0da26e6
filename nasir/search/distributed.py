"""Evaluations as Ray tasks on a Ray cluster (`nasir search --ray ADDRESS`, `nasir.search(ray=...)`).

Ray is the engine: each of `workers` Ray actors (one CPU each) holds an `Evaluator`, and Ray places
them on the cluster's nodes. The pool has `LocalPool`'s methods; an actor that dies or runs past the
timeout is killed, its candidate failed with the reason, and a fresh actor takes its place. Timing
takes the machine's lock file (`nasir.measure.kernels.timing_lock`), so the actors of one node time
one thing at a time. The output folder must be visible to every node (the models and the kernel
cache are read from it): one machine, or a shared file system.

    ray start --head --node-ip-address 127.0.0.1 --num-cpus 2
    nasir search resnet18 --ray 127.0.0.1:6379 --workers 2
"""

from __future__ import annotations

import time
from functools import partial

from nasir.errors import NasirError
from nasir.search.evaluate import Outcome, Setup
from nasir.search.workers import EVALUATE, STARTUP_SECONDS, WorkerStartError, evaluate_safely, failed


def ray_pool(address: str) -> partial:
    """A pool factory for `Search.run` on the Ray cluster at `address`; a clear error without Ray."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise NasirError("--ray needs Ray, an optional dependency: pip install 'nasir[distributed]'") from None
    return partial(RayPool, address=address)


class EvaluatorActor:
    """A Ray actor holding one evaluator."""

    def __init__(self, setup: Setup):
        self.evaluator = setup.make_evaluator()

    def ready(self) -> bool:
        return True

    def evaluate(self, job: tuple[str, str]) -> Outcome:
        return evaluate_safely(self.evaluator, job)


class RayPool:
    """`workers` Ray actors evaluating candidates (see the module docstring)."""

    def __init__(self, setup: Setup, workers: int = 1, timeout: float = 600.0, address: str = "auto"):
        import ray

        self.ray, self.setup, self.timeout = ray, setup, timeout
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
        except (ConnectionError, RuntimeError) as e:
            raise NasirError(f"cannot reach a Ray cluster at {address}: {e}") from None
        self.actor_class = ray.remote(num_cpus=1)(EvaluatorActor)
        self.actors = [self._start() for _ in range(workers)]
        self.jobs: dict[object, tuple[int, int, str, float]] = {}  # ref -> (actor index, number, pipeline, start)

    def _start(self):
        actor = self.actor_class.remote(self.setup)
        try:
            self.ray.get(actor.ready.remote(), timeout=STARTUP_SECONDS)
        except Exception as e:  # noqa: BLE001 - any start failure stops the search with its reason
            raise WorkerStartError(f"a Ray actor could not start: {e}") from None
        return actor

    @property
    def busy_actors(self) -> set[int]:
        return {k for k, _, _, _ in self.jobs.values()}

    @property
    def idle(self) -> int:
        return len(self.actors) - len(self.busy_actors)

    def submit(self, number: int, pipeline: str, kind: str = EVALUATE, enter_below: float | None = None) -> None:
        k = next(k for k in range(len(self.actors)) if k not in self.busy_actors)
        self.jobs[self.actors[k].evaluate.remote((kind, pipeline, enter_below))] = (k, number, pipeline, time.perf_counter())

    def results(self, wait: float = 0.5) -> list[tuple[int, Outcome]]:
        done = []
        if self.jobs:
            ready, _ = self.ray.wait(list(self.jobs), num_returns=len(self.jobs), timeout=wait)
            for ref in ready:
                k, number, _, started = self.jobs.pop(ref)
                done.append((number, self._outcome(ref, k, time.perf_counter() - started)))
        for ref, (k, number, _, started) in list(self.jobs.items()):
            elapsed = time.perf_counter() - started
            if elapsed > self.timeout:
                del self.jobs[ref]
                self._replace(k)
                done.append((number, failed(f"timed out after {self.timeout:g} s", elapsed)))
        return done

    def _outcome(self, ref, k: int, elapsed: float) -> Outcome:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayActorError as e:
            self._replace(k)
            return failed(f"the Ray actor died evaluating it: {str(e).splitlines()[0]}", elapsed)
        except self.ray.exceptions.RayError as e:
            return failed(f"Ray: {str(e).splitlines()[0]}", elapsed)

    def _replace(self, k: int) -> None:
        self.ray.kill(self.actors[k])
        self.actors[k] = self._start()

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.ray.shutdown()
