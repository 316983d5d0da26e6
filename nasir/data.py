"""Minibatches for data-driven legality (Fisher Potential) and search: .npz, CIFAR-10, synthetic.

Fisher Potential (`nasir.fisher`) needs one minibatch of training data at
initialisation; this module produces it as numpy arrays `(x float32 N x C x H x W, y int64 N)`:

    x, y = minibatch("cifar-10-batches-bin/", batch=64, seed=0)   # CIFAR-10 binary directory
    x, y = minibatch("batch.npz", batch=64)                        # arrays under keys x and y
    x, y = minibatch(None, batch=64, shape=(3, 32, 32), num_classes=10, seed=0)   # synthetic

CIFAR-10 binary format (https://www.cs.toronto.edu/~kriz/cifar.html): `data_batch_1.bin` ..
`data_batch_5.bin` and `test_batch.bin`, each a sequence of 3073-byte records: one label byte, then
3072 pixel bytes (1024 red, 1024 green, 1024 blue, row-major 32 x 32). Pixels are scaled to [0, 1]
and normalised per channel with the CIFAR-10 mean and standard deviation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nasir.errors import DataError

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
_RECORD = 1 + 3 * 32 * 32


def synthetic_batch(batch: int, shape: tuple[int, ...], num_classes: int, seed: int = 0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal inputs and uniform labels from a seeded generator."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, *shape), dtype=np.float32)
    return x, rng.integers(0, num_classes, size=batch).astype(np.int64)


def load_npz(path: str | Path, batch: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Arrays `x` and `y` of an .npz file; `batch` examples drawn without replacement (seeded)."""
    try:
        with np.load(path) as data:
            if "x" not in data.files or "y" not in data.files:
                raise DataError(f"{path}: an .npz minibatch needs arrays 'x' and 'y' (found {', '.join(data.files)})")
            x, y = data["x"].astype(np.float32), data["y"].astype(np.int64).reshape(-1)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read as .npz ({e})") from None
    if len(x) != len(y):
        raise DataError(f"{path}: {len(x)} inputs but {len(y)} labels")
    return _draw(x, y, batch, seed, str(path))


def load_cifar10(directory: str | Path, batch: int | None = None, split: str = "train", seed: int = 0
                 ) -> tuple[np.ndarray, np.ndarray]:
    """A normalised minibatch from a CIFAR-10 binary directory (`split` "train" or "test")."""
    directory = Path(directory)
    pattern = {"train": "data_batch_*.bin", "test": "test_batch.bin"}.get(split)
    if pattern is None:
        raise DataError(f"CIFAR-10 split must be 'train' or 'test', got '{split}'")
    files = sorted(directory.glob(pattern))
    if not files:
        raise DataError(f"{directory}: no CIFAR-10 binary files {pattern} (expected the cifar-10-batches-bin layout)")
    records = []
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        if raw.size == 0 or raw.size % _RECORD:
            raise DataError(f"{f}: {raw.size} bytes is not a whole number of {_RECORD}-byte CIFAR-10 records")
        records.append(raw.reshape(-1, _RECORD))
    data = np.concatenate(records)
    labels = data[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise DataError(f"{directory}: label {labels.max()} out of range 0..9: not CIFAR-10 binary data")
    images = data[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
    mean = np.asarray(CIFAR_MEAN, np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(CIFAR_STD, np.float32).reshape(1, 3, 1, 1)
    return _draw((images - mean) / std, labels, batch, seed, str(directory))


def minibatch(source: str | Path | None, batch: int = 64, seed: int = 0,
              shape: tuple[int, ...] = (3, 32, 32), num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """One minibatch from `source`: a CIFAR-10 directory, an .npz file, or None for synthetic data."""
    if source is None or str(source) == "synthetic":
        return synthetic_batch(batch, shape, num_classes, seed)
    path = Path(source)
    if path.is_dir():
        return load_cifar10(path, batch, seed=seed)
    if path.suffix == ".npz":
        return load_npz(path, batch, seed)
    raise DataError(f"{source}: not a CIFAR-10 binary directory or an .npz file (or 'synthetic' for synthetic data)")


def _draw(x: np.ndarray, y: np.ndarray, batch: int | None, seed: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    if batch is None:
        return np.ascontiguousarray(x), y
    if not 0 < batch <= len(x):
        raise DataError(f"{where}: cannot draw a batch of {batch} from {len(x)} examples")
    pick = np.random.default_rng(seed).choice(len(x), size=batch, replace=False)
    return np.ascontiguousarray(x[pick]), y[pick]
