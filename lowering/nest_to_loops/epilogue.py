"""The epilogue steps of finished values before they are written.

A part of `NestEmitter` (`nasir.lowering.nest_to_loops.emitter`), which holds the spec, the
builder and the loops these methods read."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.spec import Spec
from nasir.lowering.target import CPUTarget


class Epilogue:
    """The epilogue steps of finished values before they are written."""

    spec: Spec
    b: LoopBuilder
    target: CPUTarget

    def _steps(self, v: SSAValue, dims: Sequence[Lin], conds: list[tuple[Lin, int]], steps) -> SSAValue:
        for kind, refs, params in steps:
            operands = [self.read(k, dims, conds, 0.0)[0] for k in refs]
            v = epilogue(self.b, kind, v, operands, params)
        return v

    def _finish(self, v: SSAValue, dims: Sequence[Lin], conds: list[tuple[Lin, int]], done: int = 0) -> None:
        """The epilogue steps from `done` on, then the store."""
        self.write(self._steps(v, dims, conds, self.spec.steps[done:]), dims, conds)


def epilogue(b: LoopBuilder, kind: str, v: SSAValue, operands: list[SSAValue], params: list[float]) -> SSAValue:
    """One epilogue step on a finished value (see nest.EPILOGUE_STEPS; `lrn`, `batch_norm` internal).
    NaN and infinities come out as torch and ONNX Runtime give them (relu(NaN) is NaN)."""
    f = lambda x: b.f(x, v)  # noqa: E731
    if kind in ("add", "sub", "mul", "div"):
        return b.binary(kind, v, operands[0])
    if kind == "pow":
        return b.pow(v, operands[0])
    if kind in ("min", "max"):
        return (b.minimum if kind == "min" else b.maximum)(v, operands[0])
    if kind == "prelu":
        return b.select(b.add(arith.CmpfOp(v, f(0.0), "olt")), b.binary("mul", v, operands[0]), v)
    if kind in ("exp", "log", "sqrt", "abs"):
        return b.unary(kind, v)
    if kind == "neg":
        return b.binary("mul", v, f(-1.0))
    if kind == "sign":
        below = b.select(b.add(arith.CmpfOp(v, f(0.0), "olt")), f(-1.0), v)
        return b.select(b.add(arith.CmpfOp(v, f(0.0), "ogt")), f(1.0), below)
    if kind == "tanh":
        # sign(x) * (1 - e) / (1 + e), e = exp(-2|x|): no overflow, NaN stays NaN
        e = b.unary("exp", b.binary("mul", b.unary("abs", v), f(-2.0)))
        t = b.binary("div", b.binary("sub", f(1.0), e), b.binary("add", f(1.0), e))
        return b.select(b.add(arith.CmpfOp(v, f(0.0), "olt")), b.binary("mul", t, f(-1.0)), t)
    if kind == "softplus":
        # max(x, 0) + log(1 + exp(-|x|)): exp never overflows
        e = b.unary("exp", b.binary("mul", b.unary("abs", v), f(-1.0)))
        return b.binary("add", b.at_least(v, 0.0), b.unary("log", b.binary("add", f(1.0), e)))
    if kind in ("elu", "selu"):
        neg = b.binary("mul", f(params[0]), b.binary("sub", b.unary("exp", v), f(1.0)))
        y = b.select(b.add(arith.CmpfOp(v, f(0.0), "ogt")), v, neg)
        return b.binary("mul", y, f(params[1])) if kind == "selu" else y
    if kind == "shrink":
        lambd, bias = params
        inner = b.select(b.add(arith.CmpfOp(v, f(lambd), "ogt")), b.binary("sub", v, f(bias)), f(0.0))
        return b.select(b.add(arith.CmpfOp(v, f(-lambd), "olt")), b.binary("add", v, f(bias)), inner)
    if kind == "relu":
        return b.at_least(v, 0.0)
    if kind == "clip":
        return b.at_most(b.at_least(v, params[0]), params[1])
    if kind == "scale":
        return b.binary("mul", v, f(params[0]))
    if kind == "leaky_relu":
        # max(x, 0) + alpha * min(x, 0)
        return b.fma(b.at_most(v, 0.0), f(params[0]), b.at_least(v, 0.0))
    if kind == "hard_sigmoid":
        return b.at_most(b.at_least(b.fma(v, f(params[0]), f(params[1])), 0.0), 1.0)
    if kind == "hard_swish":
        return b.binary("mul", v, b.at_most(b.at_least(b.fma(v, f(1 / 6), f(0.5)), 0.0), 1.0))
    if kind == "sigmoid":
        e = b.unary("exp", b.binary("sub", f(0.0), v))
        return b.binary("div", f(1.0), b.binary("add", f(1.0), e))
    if kind == "batch_norm":
        scale, shift, mean, var = operands
        inv = b.binary("div", scale, b.unary("sqrt", b.binary("add", var, f(params[0]))))
        return b.fma(b.binary("sub", v, mean), inv, shift)
    if kind == "lrn":
        alpha_n, beta, bias = params
        return b.binary("div", operands[0], b.pow(b.fma(v, f(alpha_n), f(bias)), f(beta)))
    raise LoweringError(f"epilogue step '{kind}' is not supported by the llvm backend")
