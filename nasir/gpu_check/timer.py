"""Times tuning candidates on the GPU machine: `python3 time_candidates.py` in a folder that
`nasir tune --target cuda --export OUT` wrote (nasir.remote_tuning).

Needs Python, numpy and TVM's runtime (the folder's runtime/, or an installed apache-tvm): not nasir,
TVM's compiler, nvcc or NVRTC. Each nest's candidates are the functions of one library compiled
on the build machine; each is run on zeros (the arguments' shapes are in manifest.json) and timed
with TVM's time_evaluator. The medians go to times.json, which `nasir tune --import OUT` reads back into
the tuning records. A candidate that fails to load or run is recorded with its error and no time.

    python3 time_candidates.py                  # every candidate: times.json
    python3 time_candidates.py --repeat 20      # more runs per candidate
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed repetitions per candidate (default 7)")
    args = parser.parse_args(argv)
    manifest = json.loads((HERE / "manifest.json").read_text())
    tvm, device = _tvm_runtime(manifest["device"])
    if not device.exist:
        raise SystemExit(f"no {manifest['device']} device here to time the candidates on (TVM's runtime sees none)")
    times: dict[str, dict[str, float | str]] = {}
    begin = time.perf_counter()
    for task in manifest["tasks"]:
        timed = times.setdefault(task["name"], {})
        module = tvm.runtime.load_module(str(HERE / task["library"]))
        tensors = [tvm.runtime.tensor(np.zeros(shape, dtype), device) for shape, dtype in task["args"]]
        for candidate in task["candidates"]:
            try:
                timed[candidate["function"]] = time_candidate(module, candidate["function"], device, tensors,
                                                              args.repeat)
            except Exception as e:  # noqa: BLE001 - TVM's runtime errors: the candidate has no time
                timed[candidate["function"]] = f"error: {str(e).strip().splitlines()[-1][:300]}"
        best = min((t for t in timed.values() if isinstance(t, float)), default=None)
        print(f"{task['name']}: {len(timed)} candidates, best {best * 1e3:.4f} ms" if best is not None
              else f"{task['name']}: no candidate ran", flush=True)
    (HERE / "times.json").write_text(json.dumps({"device": manifest["device"], "times": times}, indent=1))
    print(f"times of {sum(len(t) for t in times.values())} candidates in {time.perf_counter() - begin:.0f} s: "
          f"{HERE / 'times.json'}; on the build machine: nasir tune --import {HERE}")


if __name__ == "__main__":
    main()
