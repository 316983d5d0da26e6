"""Terminal output of the command-line tools: timed progress lines, tables that survive piping.

    with step(console, "exporting resnet18 to ONNX"):
        ...
    # ✓ exporting resnet18 to ONNX (1.4 s)
    show(console, model.summary())      # rich table in a terminal, plain aligned text in a pipe
    fail("nasir", error)                # "nasir: error: <message on one line>" on stderr, exit 1
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from rich.console import Console


@contextmanager
def step(console: Console, text: str) -> Iterator[None]:
    """A spinner while the block runs, then a line with its wall time."""
    start = time.perf_counter()
    with console.status(text):
        yield
    console.print(f"[green]✓[/green] {text} [dim]({time.perf_counter() - start:.1f} s)[/dim]")


def show(console: Console, renderable) -> None:
    """Rich rendering in a terminal; `str()` otherwise, so wide tables are not wrapped at 80 columns."""
    if console.is_terminal:
        console.print(renderable)
    else:
        console.file.write(f"{renderable}\n")


def fail(tool: str, message: object) -> NoReturn:
    """Exit with status 1 after one line `TOOL: error: MESSAGE` on stderr (whitespace folded)."""
    sys.exit(f"{tool}: error: {' '.join(str(message).split())}")
