"""Distillation (nasir/training/distill.py) against a hand computation in numpy on a tiny net:
Hinton's loss on the outputs, attention transfer at the block output both nets share, and the
loss `nasir.train(..., teacher=...)` trains with."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from test_llvm_backend import build

import nasir
from nasir.data import Dataset
from nasir.dialects import nn
from nasir.errors import NasirError
from nasir.training.distill import ALPHA, BETA, TEMPERATURE, Distillation, block_outputs, distillation_loss

C, H, CLASSES, BATCH = 4, 5, 3, 8


def tiny(seed: int, width: int = C):
    """x -> relu(conv1x1(x)) + x ("block_Add") -> global mean -> fc: weights drawn from `seed`."""
    rng = np.random.default_rng(seed)
    w1, b1 = rng.standard_normal((width, C, 1, 1)).astype(np.float32), rng.standard_normal(width).astype(np.float32)
    wfc, bfc = rng.standard_normal((CLASSES, C)).astype(np.float32), rng.standard_normal(CLASSES).astype(np.float32)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w1", w1), W("b1", b1)).named("conv1")
        relu = nn.ReluOp.new(conv.results[0]).named("relu")
        add = nn.AddOp.new(relu.results[0], a[0]).named("block_Add")
        pool = nn.GlobalAvgPoolOp.new(add.results[0]).named("pool")
        flat = nn.ReshapeOp.new(pool.results[0], (1, C)).named("flatten")
        fc = nn.GemmOp.new(flat.results[0], W("wfc", wfc), W("bfc", bfc), trans_b=True).named("fc")
        return [conv, relu, add, pool, flat, fc]

    return build([(1, C, H, H)], body), (w1, b1, wfc, bfc)


def forward(weights, x):
    """The tiny net by hand: (logits, block output)."""
    w1, b1, wfc, bfc = weights
    conv = np.einsum("oc,bchw->bohw", w1[:, :, 0, 0], x) + b1[None, :, None, None]
    block = np.maximum(conv, 0) + x
    return block.mean((2, 3)) @ wfc.T + bfc, block


def softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def hand_loss(student, teacher, x, y, t=TEMPERATURE, alpha=ALPHA, beta=BETA):
    (s, s_block), (q, q_block) = forward(student, x), forward(teacher, x)
    p_t, p_s = softmax(q / t), softmax(s / t)
    kl = (p_t * (np.log(p_t) - np.log(p_s))).sum(1).mean()
    ce = -np.log(softmax(s)[np.arange(len(y)), y]).mean()

    def attention(a):
        m = (a ** 2).mean(1).reshape(len(a), -1)
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    at = ((attention(s_block) - attention(q_block)) ** 2).mean()
    return alpha * t * t * kl + (1 - alpha) * ce + beta / 2 * at


def data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, C, H, H)).astype(np.float32)
    return x, rng.integers(0, CLASSES, BATCH)


def test_the_loss_is_hintons_plus_attention_transfer_as_computed_by_hand():
    (student, ws), (teacher, wt) = tiny(1), tiny(2)
    x, y = data()
    assert block_outputs(student, teacher) == ["block_Add"]
    s_prog, t_prog = student.at_batch(BATCH).to_torch(), teacher.at_batch(BATCH).to_torch()
    s_prog.taps = t_prog.taps = {"block_Add"}
    s_logits, t_logits = s_prog(torch.from_numpy(x)), t_prog(torch.from_numpy(x))
    spec = Distillation(teacher)
    loss = distillation_loss(s_logits, s_prog.tapped, t_logits, t_prog.tapped, torch.from_numpy(y), spec)
    assert float(loss.detach()) == pytest.approx(hand_loss(ws, wt, x, y), rel=1e-5)
    no_at = distillation_loss(s_logits, s_prog.tapped, t_logits, t_prog.tapped, torch.from_numpy(y),
                              Distillation(teacher, temperature=2.0, alpha=0.5, beta=0.0))
    assert float(no_at.detach()) == pytest.approx(hand_loss(ws, wt, x, y, t=2.0, alpha=0.5, beta=0.0), rel=1e-5)


def test_train_with_a_teacher_trains_on_that_loss():
    """One epoch of one batch: the loss it reports is the distillation loss of the student's
    starting weights (computed by hand); the student's weights move, the teacher's do not."""
    (student, ws), (teacher, wt) = tiny(1), tiny(2)
    x, y = data()
    task = Dataset("tiny", (x, y), data(1), CLASSES)
    result = nasir.train(student, task, epochs=1, batch=BATCH, lr=0.01, teacher=teacher, progress=False)
    assert result.history[0]["train_loss"] == pytest.approx(hand_loss(ws, wt, x, y), rel=1e-5)
    plain = nasir.train(student, task, epochs=1, batch=BATCH, lr=0.01, progress=False)
    s = forward(ws, x)[0]
    assert plain.history[0]["train_loss"] == pytest.approx(-np.log(softmax(s)[np.arange(BATCH), y]).mean(), rel=1e-5)
    trained = result.apply_to(student)
    assert not np.allclose(trained.weights["w1"], ws[0])
    np.testing.assert_array_equal(teacher.weights["w1"], wt[0])


def test_a_teacher_of_another_shape_is_refused():
    student, _ = tiny(1)
    other = build([(1, C, H + 1, H + 1)], lambda a, W: [nn.GlobalAvgPoolOp.new(a[0])])
    with pytest.raises(NasirError, match="the teacher takes"):
        nasir.train(student, Dataset("tiny", data(), data(1), CLASSES), epochs=1, batch=BATCH, teacher=other,
                    progress=False)


def test_nasir_train_takes_a_teacher(tmp_path):
    """`nasir train MODEL --teacher TRAINED`: the loss in its metrics is the distillation loss."""
    (student, ws), (teacher, wt) = tiny(1), tiny(2)
    x, y = data()
    xt, yt = data(1)
    np.savez(tmp_path / "task.npz", x=x, y=y, x_test=xt, y_test=yt)
    student.save(tmp_path / "student.mlir")
    teacher.save(tmp_path / "teacher.mlir")
    done = subprocess.run([sys.executable, "-m", "nasir.cli.main", "train", str(tmp_path / "student.mlir"),
                           "--teacher", str(tmp_path / "teacher.mlir"), "--data", str(tmp_path / "task.npz"),
                           "--epochs", "1", "--batch", str(BATCH), "--lr", "0.01", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1].split(",")
    assert float(row[2]) == pytest.approx(hand_loss(ws, wt, x, y), rel=1e-5)
