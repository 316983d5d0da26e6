"""Terminal output of the command-line tools: timed progress lines, tables that survive piping.

    with step(console, "exporting resnet18 to ONNX"):
        ...
    # ✓ exporting resnet18 to ONNX (1.4 s)
    with status_on_terminal(console, "lowering") as update:   # nothing unless console is a terminal
        update("pass 3/9: convert-nest-to-loops")
    show(console, model.summary())      # rich table in a terminal, plain aligned text in a pipe
    fail("nasir", error)                # "nasir: error: <message on one line>" on stderr, exit 1
    end_on_closed_pipe()                # `nasir summary resnet18 | head`: no traceback, exit 141
    progress_console()                  # stderr for a progress bar, not cut at 80 columns in a log
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
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


@contextmanager
def status_on_terminal(console: Console, text: str) -> Iterator[Callable[[str], None]]:
    """A spinner with `text` while the block runs, on a terminal only (a pipe or file gets nothing);
    yields the function that changes the text."""
    if not console.is_terminal:
        yield lambda _: None
        return
    with console.status(text) as status:
        yield status.update


def show(console: Console, renderable) -> None:
    """Rich rendering in a terminal; `str()` otherwise, so wide tables are not wrapped at 80 columns."""
    if console.is_terminal:
        console.print(renderable)
    else:
        console.file.write(f"{renderable}\n")


CLOSED_PIPE_STATUS = 128 + signal.SIGPIPE
"""The exit status of a tool whose reader closed the pipe (`nasir-opt model.onnx | head`): what a
shell reports for `yes | head`, a tool that SIGPIPE ended."""


def end_on_closed_pipe() -> NoReturn:
    """Exit quietly once stdout's reader is gone (Python's documented idiom: stdout goes to devnull
    so that the flush at exit raises nothing either)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(CLOSED_PIPE_STATUS)


LOG_WIDTH = 400
"""Columns of a progress line written to a log (not a terminal), where rich would cut it at 80."""


def progress_console() -> Console:
    """The console of a live progress bar, on stderr: a terminal's width, or in a log `LOG_WIDTH`
    columns, so a frame's counts are not cut off (a frame takes the columns it needs only)."""
    console = Console(stderr=True, highlight=False)
    return console if console.is_terminal else Console(stderr=True, highlight=False, width=LOG_WIDTH)


class ToolConsole(Console):
    """A rich console of the tools: a closed pipe ends the tool as `end_on_closed_pipe` does (rich's
    own handler exits with status 1), and output to a pipe or a file is not wrapped at rich's 80
    columns: a path in a message stays whole for the reader that copies it, and a table takes the
    columns it needs (up to `LOG_WIDTH`), so its headers and passes are not cut into fragments."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_terminal:
            self.soft_wrap = True
            if "width" not in kwargs:
                self.width = LOG_WIDTH

    def on_broken_pipe(self) -> None:
        end_on_closed_pipe()


def fail(tool: str, message: object) -> NoReturn:
    """Exit with status 1 after one line `TOOL: error: MESSAGE` on stderr (whitespace folded)."""
    sys.exit(f"{tool}: error: {' '.join(str(message).split())}")
