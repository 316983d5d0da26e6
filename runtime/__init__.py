"""nasir.runtime: executables of compiled models; `load(path)` runs one saved by `exe.save(path)`."""

from __future__ import annotations

import json
from pathlib import Path

from nasir.errors import NasirError
from nasir.runtime import llvm_executable, tvm_executable


def load(path: str | Path, threads: int = 1):
    """Run a directory written by `exe.save(path)`, of any backend, without recompiling
    (`threads`: the llvm backend's)."""
    path = Path(path)
    if not (path / "meta.json").exists():
        raise NasirError(f"{path}: not a saved nasir executable (no meta.json)")
    meta = json.loads((path / "meta.json").read_text())
    if meta.get("backend") == "tvm":
        return tvm_executable.load(path, meta)
    return llvm_executable.load(path, threads)


__all__ = ["load"]
