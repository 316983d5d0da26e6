"""nasir.runtime: executables of compiled models; `load(path)` runs one saved by `exe.save(path)`."""

from nasir.runtime.llvm_executable import load

__all__ = ["load"]
