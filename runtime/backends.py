"""The targets `nasir.compile` knows, one entry each: how a module is compiled for it, the options
that takes, and how an executable it saved is loaded.

    BACKENDS["cuda"].options        ('arch', 'tune_trials', 'tuning_dir', ...)
    backend("llvm").compile(module, cpu="znver3", threads=2)
    load("out/")                    # by the "backend" its meta.json names

An entry names its functions as "module:function" and imports them when they are first called, so
that `import nasir` loads neither PyTorch nor TVM; a backend whose package is missing is a
BackendUnavailableError naming it. A new backend is a new entry here.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nasir.errors import BackendUnavailableError, NasirError


@dataclass(frozen=True)
class Backend:
    """A compile target: `compiler` ("module:function") compiles a module (its keyword parameters
    are the target's options); `saves` is the `backend` its saved executables' meta.json names
    and `loader` the function that runs one again (None: it saves none of its own); `needs` is
    the package it cannot run without; `tunes`: it takes `nasir.compile`'s tune=True."""

    name: str
    compiler: str
    saves: str | None = None
    loader: str | None = None
    needs: str | None = None
    tunes: bool = False

    def resolve(self, spec: str) -> Callable:
        """The function "module:function" names, imported."""
        module, function = spec.split(":")
        try:
            return getattr(importlib.import_module(module), function)
        except ImportError as e:
            if self.needs is None:
                raise
            raise BackendUnavailableError(f"target '{self.name}' needs {self.needs}: {e}") from None

    @property
    def compile(self) -> Callable:
        """The compile function: `compile(module, **options)` -> an executable."""
        return self.resolve(self.compiler)

    @property
    def options(self) -> tuple[str, ...]:
        """The keyword options its compile function takes (`threads` counts where it is not 1)."""
        return tuple(list(inspect.signature(self.compile).parameters)[1:])


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("llvm", "nasir.runtime.llvm_executable:compile_llvm", saves="llvm",
            loader="nasir.runtime.llvm_executable:load", tunes=True),
    Backend("torch", "nasir.runtime.torch_executable:compile_torch"),
    Backend("tvm", "nasir.runtime.tvm_compile:compile_tvm", saves="tvm", loader="nasir.runtime.tvm_executable:load",
            needs="apache-tvm (pip install apache-tvm)"),
    Backend("cuda", "nasir.runtime.tvm_compile:compile_cuda", needs="apache-tvm (pip install apache-tvm)"),
)}
"""Every target, by name; cuda's executables save as tvm's (TVM's runtime loads both)."""
TARGETS = tuple(BACKENDS)


def backend(name: str) -> Backend:
    """The target `name` (NasirError naming the known ones if there is none)."""
    if name not in BACKENDS:
        raise NasirError(f"unknown target '{name}' (choose from {', '.join(TARGETS)})")
    return BACKENDS[name]


def load(path: str | Path, threads: int = 1):
    """Run a directory written by `exe.save(path)`, of any backend, without recompiling
    (`threads`: the llvm backend's)."""
    path = Path(path)
    if not (path / "meta.json").exists():
        raise NasirError(f"{path}: not a saved nasir executable (no meta.json)")
    meta = json.loads((path / "meta.json").read_text())
    saved = meta.get("backend", "llvm")
    entry = next((b for b in BACKENDS.values() if b.saves == saved), None)
    if entry is None:
        raise NasirError(f"{path}: saved by a backend nasir does not know ('{saved}')")
    loader = entry.resolve(entry.loader)
    takes = inspect.signature(loader).parameters
    return loader(path, **{k: v for k, v in (("meta", meta), ("threads", threads)) if k in takes})
