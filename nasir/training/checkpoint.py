"""The checkpoint of a training run: `checkpoint.pt` in its output folder, rewritten after every
epoch (written beside, then renamed, so a kill leaves the previous epoch's intact).

It holds the network's parameters and batch-norm statistics, the optimizer's momentum, the
metrics so far and the run's fingerprint (the network's IR, the data source and the recipe):
a resumed run refuses a checkpoint of another run instead of silently mixing them. It holds
tensors and plain data only, and is read so (`torch.load(weights_only=True)`): a checkpoint whose
pickle would construct anything else, or run code, is refused, so a run folder from someone else
is data, not a program.

An epoch's files are written under `interrupts_deferred`: a Ctrl-C then takes effect once they are
all written.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from nasir.errors import NasirError

NAME = "checkpoint.pt"


def save(folder: Path, state: dict) -> None:
    """Write `state` as `folder/checkpoint.pt`, whole or not at all."""
    path = folder / NAME
    tmp = path.with_name(f".{NAME}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A SIGINT (Ctrl-C) inside the block raises KeyboardInterrupt at its end, not inside it: the
    first epoch's curves import matplotlib's C extensions, and an interrupt landing in those
    imports ended `nasir train` with "ImportError: initialization failed", killed by SIGINT, or
    (swallowed) not at all (4 of 26 interrupts on a loaded Zen 3). Only where Python's own handler
    is installed, on the main thread (a SIGINT a background run ignores stays ignored)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    received = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if received:
        raise KeyboardInterrupt


def load(folder: Path, fingerprint: dict) -> dict | None:
    """The checkpoint in `folder` (None when there is none); NasirError when it is another run's."""
    path = folder / NAME
    if not path.is_file():
        return None
    try:
        state = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:  # weights_only refused something that is not plain data
        reason = str(e).splitlines()[0]
        raise NasirError(f"{path}: refused, it holds more than tensors and plain data ({reason}); "
                         "delete it to start over") from None
    except Exception as e:  # a truncated or foreign file
        raise NasirError(f"{path}: cannot read the checkpoint ({e}); delete it to start over") from None
    if state.get("fingerprint") != fingerprint:
        changed = sorted(k for k in fingerprint if state.get("fingerprint", {}).get(k) != fingerprint[k])
        raise NasirError(f"{path} is the checkpoint of another run (it differs in: {', '.join(changed)}); "
                         "give another output folder, or delete it to start over")
    return state
