"""The TVM backend's executable: a Relax VM over the library `tvm.compile` made
(`nasir.runtime.tvm_compile` makes it).

    exe.save("out/")                          # model.so (host + device code), weights.params, meta.json
    exe = nasir.runtime.load("out/")          # TVM's runtime (and, for cuda, a GPU); no nvcc

The library holds code alone: its `main` takes the inputs, then the weights (meta.json's "weights"
names them, in order), which the executable keeps on the device and passes to every call.

This module imports TVM only when an executable runs or loads, so `import nasir` stays light;
`load` takes the library and the input/output names and shapes from meta.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from nasir.errors import BackendUnavailableError, NasirError
from nasir.runtime.executable import Executable, contiguous_f32
from nasir.runtime.profile import Profile

LIBRARY, WEIGHTS, META = "model.so", "weights.params", "meta.json"


def _tvm():
    try:
        import tvm
        from tvm import relax
    except ImportError as e:
        raise BackendUnavailableError(
            f"the tvm and cuda targets need apache-tvm (pip install apache-tvm): {e}") from None
    return tvm, relax


def device_of(meta: dict):
    """The TVM device that runs code compiled for `meta["target"]`, or BackendUnavailableError."""
    tvm, _ = _tvm()
    if meta["target"] != "cuda":
        return tvm.cpu(0)
    device = tvm.cuda(0)
    if not device.exist:
        raise BackendUnavailableError(
            f"this code was compiled for a CUDA GPU ({meta['arch']}) and this machine has none: "
            f"save() it and run it with nasir.runtime.load on a machine with one")
    return device


class TVMExecutable(Executable):
    """A model compiled by TVM; `target` is "tvm" (CPU) or "cuda"."""

    def __init__(self, library, meta: dict, weights: list[np.ndarray]):
        super().__init__(meta["input_names"], [tuple(s) for s in meta["input_shapes"]], meta["output_names"])
        self.target = meta["target"]
        self.meta = meta
        self.library = library
        self.weights = weights
        self.compile_seconds = meta.get("compile_seconds", 0.0)
        self._vm = None
        self._dev = None

    @property
    def weights(self) -> list[np.ndarray]:
        """The arrays `main` takes after the inputs (meta.json's "weights", in order)."""
        return self._weights

    @weights.setter
    def weights(self, arrays: list[np.ndarray]) -> None:
        """Other weights of the same shapes: the next call copies them to the device and uses them."""
        self._weights = [contiguous_f32(w) for w in arrays]
        self._device_weights = None

    @property
    def vm(self):
        """The Relax VM running the library, made on the first call."""
        if self._vm is None:
            _, relax = _tvm()
            self._dev = device_of(self.meta)
            self._vm = relax.VirtualMachine(self.library, self._dev)
        return self._vm

    def _weights_on_device(self) -> list:
        """The weights as tensors on the VM's device, copied there once per `weights`."""
        if self._device_weights is None:
            tvm, _ = _tvm()
            self._device_weights = [tvm.runtime.tensor(w, self._dev) for w in self._weights]
        return self._device_weights

    def device_ms(self, *inputs, repeat: int = 20) -> float:
        """Median milliseconds of one call timed on the device (TVM's time_evaluator; inputs and
        outputs stay there: on a GPU, the kernels' time without the copies `benchmark` includes)."""
        tvm, _ = _tvm()
        vm = self.vm
        args = [tvm.runtime.tensor(contiguous_f32(a), self._dev) for a in inputs]
        timer = vm.time_evaluator("main", self._dev, number=1, repeat=repeat, min_repeat_ms=1)
        return float(np.median(timer(*args, *self._weights_on_device()).results)) * 1e3

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        tvm, _ = _tvm()
        vm = self.vm
        out = vm["main"](*(tvm.runtime.tensor(a, self._dev) for a in arrays), *self._weights_on_device())
        outs = [out] if hasattr(out, "numpy") else list(out)  # one tensor, or a tuple of them
        return [o.numpy() for o in outs]

    def profile(self, *inputs, repeat: int = 20, warmup: int = 2) -> Profile:
        """Per kernel call: its time over `repeat` runs on `inputs` (see `nasir.runtime.profile`), taken
        by a VM instrument around each call; needs an executable compiled with `profile=True`."""
        info = self.meta.get("profile")
        if info is None:
            raise NasirError("this executable was compiled without profiling: compile it with profile=True")
        _, relax = _tvm()
        device = device_of(self.meta)
        vm = relax.VirtualMachine(self.library, device)
        calls: list[float] = []
        kernels: list[str] = []
        started: list[float] = []

        def instrument(func, symbol, before_run, ret_value, *args):
            if not str(symbol).startswith("vm.builtin"):
                if before_run:
                    started.append(time.perf_counter())
                else:
                    calls.append((time.perf_counter() - started.pop()) * 1e3)
                    kernels.append(str(symbol))
            return 0

        vm.set_instrument(instrument)
        self._vm, self._dev = vm, device
        runs, times = [], []
        try:
            for ms in self.timed_runs(inputs, repeat, warmup, before_each=lambda: (calls.clear(), kernels.clear())):
                times.append(ms)
                runs.append(list(calls))
        finally:
            self._vm = None
        if any(len(r) != len(info["calls"]) for r in runs):
            raise NasirError(f"profile: the VM made {len(runs[0])} kernel calls, the model has {len(info['calls'])}")
        named = [{**call, "kernel": kernel} for call, kernel in zip(info["calls"], kernels)]  # shared ones too
        return Profile.from_ticks(named, [[*r, ms] for r, ms in zip(runs, times)], float(np.median(times)), 1)

    def save(self, path: str | Path, weights: bool = True) -> Path:
        """Write `model.so` (the exported library: host and device code), `weights.params` (TVM's
        parameter file, named as meta.json's "weights"; not with `weights=False`) and `meta.json`."""
        tvm, _ = _tvm()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.library.export_library(str(path / LIBRARY))
        if weights:
            names = [w["name"] for w in self.meta["weights"]]
            tvm.runtime.save_param_dict_to_file(dict(zip(names, self.weights)), str(path / WEIGHTS))
        (path / META).write_text(json.dumps(self.meta, indent=1))
        return path


def load(path: str | Path, meta: dict | None = None) -> TVMExecutable:
    """Run a directory written by `TVMExecutable.save` (`meta`: its meta.json, if already read)."""
    tvm, _ = _tvm()
    path = Path(path)
    meta = meta or json.loads((path / META).read_text())
    for name in (LIBRARY, WEIGHTS):
        if not (path / name).exists():
            raise NasirError(f"{path}: no {name} beside meta.json")
    device_of(meta)  # TVM cannot even load CUDA code where no CUDA driver is
    library = tvm.runtime.load_module(str(path / LIBRARY))
    saved = tvm.runtime.load_param_dict_from_file(str(path / WEIGHTS))
    return TVMExecutable(library, meta, [saved[w["name"]].numpy() for w in meta["weights"]])
