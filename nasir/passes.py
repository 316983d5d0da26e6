"""Pass registry and pipelines: one spelling in `nasir-opt -p`, `Model.transform` and search logs.

Passes are xDSL `ModulePass` classes living in `nasir.transforms.*` and `nasir.lowering.*`; they are
found by walking those packages, so adding a pass is adding a class. Only modules that define a
class with a string `name` attribute (as every pass has) are imported, so backends that import torch
at the top are skipped; pass modules keep heavy imports inside functions, so discovery stays cheap.
"""

from __future__ import annotations

import ast
import gc
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError

from nasir.errors import NasirError, PassError


@cache
def available_passes() -> dict[str, type[ModulePass]]:
    """Every nasir pass by name."""
    import nasir.lowering
    import nasir.transforms

    found: dict[str, type[ModulePass]] = {}
    for package in (nasir.transforms, nasir.lowering):
        for info in pkgutil.iter_modules(package.__path__):
            source = Path(info.module_finder.path, f"{info.name}.py")
            if source.exists() and not _defines_named_class(source):
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, ModulePass) and cls.__module__ == module.__name__ and getattr(cls, "name", None):
                    found[cls.name] = cls
    return found


def _defines_named_class(source: Path) -> bool:
    """Does the module define a class whose body assigns a string to `name` (a pass candidate)?"""
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
                value = getattr(stmt, "value", None)
                if isinstance(target, ast.Name) and target.id == "name" and isinstance(value, ast.Constant):
                    return True
    return False


def parse_pipeline(spec: str) -> PassPipeline:
    """`"fold-batch-norm,group{factor=2 layers=layer1.*}"` -> a PassPipeline; PassError if malformed."""
    passes: dict[str, Callable[[], type[ModulePass]]] = {
        name: (lambda cls=cls: cls) for name, cls in available_passes().items()
    }
    try:
        return PassPipeline.parse_spec(passes, spec)
    except NasirError:
        raise
    except (Exception, ArgSpecParseError) as e:  # xDSL: ValueError/Exception; lexer errors are BaseException
        msg = str(e)
        if "Unrecognized passes" in msg:
            msg += f"; available passes: {', '.join(sorted(passes))}"
        if isinstance(e, ArgSpecParseError):
            msg += '\n(quote option values that contain characters such as . or *: layers="layer1.*")'

        raise PassError(f"bad pass pipeline '{spec}': {msg}") from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block. Lowering builds IR: hundreds of
    thousands of ops that stay alive until the module is dropped, so each automatic collection
    walks them all again for nothing (a quarter of ResNet-34's compile time); peak memory grows by
    under 5%. Nested uses are fine: only the outermost one turns the collector back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_pipeline(module: ModuleOp, spec: str, verify: bool = True) -> None:
    """Apply `spec` to `module` in place and verify the result (unless `verify=False`: backends
    skip verifying huge low-level modules that the next tool, e.g. LLVM, checks anyway)."""
    from nasir.context import make_context

    pipeline = parse_pipeline(spec)
    with gc_paused():
        pipeline.apply(make_context(), module)
        if verify:
            module.verify()
