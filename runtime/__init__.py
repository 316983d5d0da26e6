"""nasir.runtime: executables of compiled models; `load(path)` runs one saved by `exe.save(path)`,
`backends` is every target's entry (compile, options, load)."""

from __future__ import annotations

from nasir.runtime.backends import load

__all__ = ["load"]
