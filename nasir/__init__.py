"""nasir: neural architecture search as program transformation, on xDSL.

    import nasir
    model = nasir.load("resnet34.onnx")          # or nasir.zoo.load("resnet34")
    print(model.summary())
    exe = nasir.compile(model, target="llvm")
    y = exe(x)
    nasir.tune(model)                             # time the best schedules of its convs on this CPU
    found = nasir.synthesize(model, "layer1_conv1", flops=0.5)   # new operators for one conv (Syno)
    result = nasir.search("resnet18", budget=100)   # faster networks of the same capacity
    trained = nasir.train(model, "cifar-10-batches-bin/", epochs=200)   # accuracy: the evidence
"""

import os
from importlib.metadata import PackageNotFoundError, version

SPIN_COUNT = 3_000_000
"""GOMP_SPINCOUNT, set here unless the user set it or OMP_WAIT_POLICY: how long a libgomp thread
waiting at a barrier or for the next call spins before it sleeps (a futex). libgomp reads it once,
as it loads: at `import torch` (torch's libgomp.so.1 is then the one nasir's code runs on) or at
nasir's first compile (`nasir.runtime.jit.load_openmp`); a process that loaded libgomp before
importing nasir keeps the spin count it had. 3M spins are ~75 ms on a Zen 3 (libgomp's default
300k: ~7 ms; Intel's OpenMP spins 200 ms, ONNX Runtime's pool ~70 ms). Calls with idle time
between them (a server's; the benchmark's: 30 ms idle, 5 ms of calls, one timed) woke a sleeping
thread: ResNet-34 cifar10 `depthwise` at 2 threads (40 kernels of 9-50 µs) took 0.59-0.68 ms so,
against 0.35-0.47 with 3M spins (Zen 3 VM, 3 rounds). The cost: a core spinning up to 75 ms after
the last call."""

if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)

from nasir.errors import NasirError

_API = {"check_capacity", "compile", "fisher_potential", "load", "synthesize", "train", "transform", "tune"}


def __getattr__(name: str):
    """The API's names and subpackages, imported on first use (PEP 562), then kept in the module
    (the next lookup does not come here): a module of nasir imported alone does not load the API,
    the zoo and the search (`import nasir.errors`: 0.07 s, 0.8 s when `import nasir` loaded them;
    `nasir --help` 0.83 s, 0.96)."""
    if name in _API:
        from nasir import api

        value = getattr(api, name)
    elif name == "Model":
        from nasir.model import Model as value
    elif name == "search":
        import nasir.search as value
    elif name == "zoo":
        import nasir.zoo as value
    elif name == "__version__":
        try:
            value = version("nasir")
        except PackageNotFoundError:  # run from a source tree that was never installed
            value = "0+unknown"
    else:
        raise AttributeError(f"module 'nasir' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["SPIN_COUNT", "Model", "NasirError", "check_capacity", "compile", "fisher_potential", "load", "search", "synthesize", "train", "transform", "tune", "zoo"]
