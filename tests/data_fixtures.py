"""Data sources for tests: CIFAR binary files of random records, and a small learnable task."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_cifar(directory: Path, counts: list[int], seed: int = 0, classes: int = 10) -> list:
    """CIFAR-10 (`classes` 10: data_batch_k.bin, test_batch.bin) or CIFAR-100 (100: train.bin,
    test.bin, coarse and fine label bytes) files of random records, the last count for the test
    file; returns the raw (labels, pixels) per file (the fine labels for CIFAR-100)."""
    rng = np.random.default_rng(seed)
    raw = []
    if classes == 10:
        names = [f"data_batch_{i + 1}.bin" for i in range(len(counts) - 1)] + ["test_batch.bin"]
    else:
        names = ["train.bin", "test.bin"]
    for name, count in zip(names, counts):
        labels = rng.integers(0, classes, count, dtype=np.uint8)
        pixels = rng.integers(0, 256, (count, 3072), dtype=np.uint8)
        heads = [labels[:, None]] if classes == 10 else [labels[:, None] // 5, labels[:, None]]
        np.concatenate([*heads, pixels], axis=1).tofile(directory / name)
        raw.append((labels, pixels))
    return raw


def quadrant_task(path: Path, train: int = 128, test: int = 64, size: int = 16, seed: int = 0,
                  noise: float = 0.5) -> Path:
    """An .npz of a seeded 4-class task a tiny CNN learns in a few epochs: the class is the
    quadrant of the image that is brighter, under Gaussian noise of deviation `noise` (the
    brighter quadrant is brighter by 1)."""
    rng = np.random.default_rng(seed)

    def make(n):
        y = rng.integers(0, 4, n)
        x = rng.standard_normal((n, 3, size, size)).astype(np.float32) * noise
        half = size // 2
        for i, c in enumerate(y):
            row, col = divmod(int(c), 2)
            x[i, :, row * half:(row + 1) * half, col * half:(col + 1) * half] += 1.0
        return x, y

    (x, y), (xt, yt) = make(train), make(test)
    np.savez(path, x=x, y=y, x_test=xt, y_test=yt)
    return path
