"""Times tuning candidates on the GPU machine: `python3 time_candidates.py` in a folder that
`nasir tune --target cuda --export OUT` wrote (nasir.tuning.remote).

Needs Python, numpy and TVM's runtime (the folder's runtime/, or an installed apache-tvm): not nasir,
TVM's compiler, nvcc or NVRTC. Each nest's candidates are the functions of one library compiled
on the build machine; each is run on zeros (the arguments' shapes are in manifest.json) and timed
with TVM's time_evaluator, each nest in a process of its own: a candidate that fails to run (an
illegal address poisons the process's CUDA context), crashes or hangs is recorded with its error and
no time, and the nest's other candidates go on in a fresh process. The medians go to times.json,
which `nasir tune --import OUT` reads back into the tuning records.

    python3 time_candidates.py                  # every candidate: times.json
    python3 time_candidates.py --repeat 20      # more runs per candidate
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from runner import _tvm_runtime  # noqa: E402 - the GPU check's runner, beside this file


def time_candidate(module, function: str, device, tensors: list, repeat: int) -> float:
    """Median seconds of one run of `function` of the loaded library `module` on `tensors`."""
    timer = module.time_evaluator(function, device, number=5, repeat=repeat, min_repeat_ms=2)
    return float(np.median(timer(*tensors).results))


def _time_nest(task: dict, start: int, repeat: int, device_kind: str) -> None:
    """In a child process: time the candidates of `task` from the `start`-th on, a JSON line each on
    stdout ({"function", "seconds"} or {"function", "error"}); stop at the first that fails (exit 3:
    the device may be left unusable, `cudaErrorIllegalAddress` poisons the process's CUDA context)."""
    tvm, device = _tvm_runtime(device_kind)
    module = tvm.runtime.load_module(str(HERE / task["library"]))
    tensors = [tvm.runtime.tensor(np.zeros(shape, dtype), device) for shape, dtype in task["args"]]
    for candidate in task["candidates"][start:]:
        function = candidate["function"]
        print(json.dumps({"started": function}), flush=True)
        try:
            seconds = time_candidate(module, function, device, tensors, repeat)
        except Exception as e:  # noqa: BLE001 - TVM's runtime errors: the candidate has no time
            print(json.dumps({"function": function, "error": str(e).strip().splitlines()[-1][:300]}), flush=True)
            sys.exit(3)
        print(json.dumps({"function": function, "seconds": seconds}), flush=True)


def _nest_times(task: dict, repeat: int, device_kind: str, timeout: float) -> dict[str, float | str]:
    """The times of `task`'s candidates, each in a child process that starts where the last one
    stopped: after a candidate that failed, crashed or hung, the rest go on in a fresh process."""
    timed: dict[str, float | str] = {}
    names = [c["function"] for c in task["candidates"]]
    while len(timed) < len(names):
        start = len(timed)
        command = [sys.executable, str(Path(__file__).resolve()), "--nest", task["name"], "--start", str(start),
                   "--repeat", str(repeat)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            output = done.stdout
            why = f"its timing process ended with code {done.returncode}"
            why += f" ({done.stderr.strip().splitlines()[-1][:300]})" if done.stderr.strip() else ""
        except subprocess.TimeoutExpired as e:  # its output so far is bytes, whatever run() was asked
            output = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
            why = f"no result in {timeout:.0f} s"
        started = None
        for line in output.splitlines():
            if not line.startswith("{"):  # not the child's record (a library's own print)
                continue
            record = json.loads(line)
            if "started" in record:
                started = record["started"]
            else:
                timed[record["function"]] = record["seconds"] if "seconds" in record else f"error: {record['error']}"
        if started is None:  # the library did not load: no candidate of it runs
            timed.update({name: f"error: {why}" for name in names[start:]})
        elif started not in timed:  # the process died or hung in this candidate
            timed[started] = f"error: {why}"
    return {name: timed[name] for name in names}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed repetitions per candidate (default 7)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a nest's timing process may run before it counts as hung (default 300)")
    parser.add_argument("--nest", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    manifest = json.loads((HERE / "manifest.json").read_text())
    if args.nest is not None:
        _time_nest(next(t for t in manifest["tasks"] if t["name"] == args.nest), args.start, args.repeat,
                   manifest["device"])
        return
    tvm, device = _tvm_runtime(manifest["device"])
    if not device.exist:
        raise SystemExit(f"no {manifest['device']} device here to time the candidates on (TVM's runtime sees none)")
    times: dict[str, dict[str, float | str]] = {}
    begin = time.perf_counter()
    for task in manifest["tasks"]:
        timed = times[task["name"]] = _nest_times(task, args.repeat, manifest["device"], args.timeout)
        best = min((t for t in timed.values() if isinstance(t, float)), default=None)
        failed = sum(1 for t in timed.values() if not isinstance(t, float))
        print((f"{task['name']}: {len(timed)} candidates, best {best * 1e3:.4f} ms" if best is not None
               else f"{task['name']}: no candidate ran") + (f" ({failed} failed)" if failed else ""), flush=True)
    (HERE / "times.json").write_text(json.dumps({"device": manifest["device"], "times": times}, indent=1))
    print(f"times of {sum(len(t) for t in times.values())} candidates in {time.perf_counter() - begin:.0f} s: "
          f"{HERE / 'times.json'}; on the build machine: nasir tune --import {HERE}")


if __name__ == "__main__":
    main()
