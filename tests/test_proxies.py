"""Zero-cost proxies (nasir/search/proxies.py) against numpy by hand on a tiny net:
x -> conv1x1 (+ bias) -> relu -> global mean -> fc (+ bias), whose gradients are written out here."""

from __future__ import annotations

import numpy as np
import pytest
from test_llvm_backend import build

from nasir.dialects import nn
from nasir.errors import NasirError
from nasir.search.proxies import PROXIES, grad_norm, jacob_cov, layer_weights, snip, synflow, zico

C, O, H, CLASSES, BATCH = 3, 5, 4, 4, 6


def tiny(seed: int = 0, batch_norm: bool = False):
    rng = np.random.default_rng(seed)
    w1, b1 = rng.standard_normal((O, C, 1, 1)).astype(np.float32), rng.standard_normal(O).astype(np.float32)
    wfc, bfc = rng.standard_normal((CLASSES, O)).astype(np.float32), rng.standard_normal(CLASSES).astype(np.float32)

    def body(a, W):
        ops = [nn.Conv2DOp.new(a[0], W("w1", w1), W("b1", b1)).named("conv1")]
        if batch_norm:
            ops.append(nn.BatchNormOp.new(ops[-1].results[0], *(W(f"bn.{k}", rng.random(O).astype(np.float32) + 0.5)
                                                                for k in ("scale", "bias", "mean", "var"))).named("bn"))
        ops.append(nn.ReluOp.new(ops[-1].results[0]).named("relu"))
        ops.append(nn.GlobalAvgPoolOp.new(ops[-1].results[0]).named("pool"))
        ops.append(nn.ReshapeOp.new(ops[-1].results[0], (1, O)).named("flatten"))
        ops.append(nn.GemmOp.new(ops[-1].results[0], W("wfc", wfc), W("bfc", bfc), trans_b=True).named("fc"))
        return ops

    model = build([(1, C, H, H)], body).transform("convert-nn-to-nest")
    return model, (w1[:, :, 0, 0].astype(np.float64), b1.astype(np.float64), wfc.astype(np.float64), bfc.astype(np.float64))


def data(seed: int = 1, n: int = BATCH):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, C, H, H)).astype(np.float32), rng.integers(0, CLASSES, n)


def by_hand(weights, x, y):
    """Forward and backward of the mean cross-entropy: (dW1, dWfc, pre-activations)."""
    w1, b1, wfc, bfc = weights
    x = x.astype(np.float64)
    z = np.einsum("oc,nchw->nohw", w1, x) + b1[None, :, None, None]
    a = np.maximum(z, 0)
    p = a.mean((2, 3))
    s = p @ wfc.T + bfc
    e = np.exp(s - s.max(1, keepdims=True))
    ds = (e / e.sum(1, keepdims=True) - np.eye(CLASSES)[y]) / len(x)
    dwfc = ds.T @ p
    dz = (ds @ wfc)[:, :, None, None] / (H * H) * (z > 0)
    dw1 = np.einsum("nohw,nchw->oc", dz, x)
    return dw1, dwfc, z


def test_layer_weights_are_the_contracted_ones():
    model, _ = tiny()
    assert layer_weights(model) == ["w1", "wfc"]


def test_grad_norm_and_snip_by_hand():
    model, weights = tiny()
    x, y = data()
    dw1, dwfc, _ = by_hand(weights, x, y)
    assert grad_norm(model, x, y) == pytest.approx(np.linalg.norm(dw1) + np.linalg.norm(dwfc), rel=1e-5)
    assert snip(model, x, y) == pytest.approx(np.abs(weights[0] * dw1).sum() + np.abs(weights[2] * dwfc).sum(),
                                              rel=1e-5)


@pytest.mark.parametrize("batch_norm", [False, True])
def test_synflow_by_hand(batch_norm):
    """All weights |W|, batch norm the identity, one all-ones input: R = sum of the logits."""
    model, (w1, b1, wfc, bfc) = tiny(batch_norm=batch_norm)
    w1, b1, wfc = np.abs(w1), np.abs(b1), np.abs(wfc)
    z = w1.sum(1) + b1  # every pixel the same, all positive
    dwfc = np.outer(np.ones(CLASSES), z)  # dR/dWfc[k, o] = p[o] = z[o]
    dz = wfc.sum(0)  # dR/dp[o], the mean over H x H pixels spread back
    dw1 = np.outer(dz, np.ones(C))  # sum over pixels of dz / (H H) * x = dz
    want = (w1 * dw1).sum() + (wfc * dwfc).sum()
    if batch_norm:
        want = want / np.sqrt(1 + 1e-5)  # x / sqrt(var + eps) with var 1 scales the layers after it
    x, _ = data()
    assert synflow(model, x) == pytest.approx(want, rel=1e-4)


def test_jacob_cov_by_hand():
    model, weights = tiny()
    x, y = data()
    codes = (by_hand(weights, x, y)[2] > 0).reshape(len(x), -1).astype(np.float64)
    k = codes @ codes.T + (1 - codes) @ (1 - codes).T
    assert jacob_cov(model, x) == pytest.approx(np.linalg.slogdet(k)[1], rel=1e-6)


def test_zico_by_hand():
    model, weights = tiny()
    x, y = data(n=6)
    parts = [by_hand(weights, x[i * 2:(i + 1) * 2], y[i * 2:(i + 1) * 2])[:2] for i in range(3)]
    want = 0.0
    for layer in range(2):
        g = np.stack([p[layer] for p in parts])
        std = g.std(0)
        want += np.log((np.abs(g).mean(0)[std > 0] / std[std > 0]).sum())
    assert zico(model, x, y, parts=3) == pytest.approx(want, rel=1e-4)
    with pytest.raises(NasirError, match="at least 2 parts"):
        zico(model, x, y, parts=1)


def test_every_proxy_scores_a_network():
    model, _ = tiny()
    x, y = data()
    assert set(PROXIES) == {"grad_norm", "snip", "synflow", "jacob_cov", "zico"}
    assert all(np.isfinite(fn(model, x, y)) for fn in PROXIES.values())
