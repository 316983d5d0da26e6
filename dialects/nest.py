"""The nest dialect: every heavy op of a network as one polyhedral loop nest.

A `nest.compute` op says *what* is computed, as attributes that transforms rewrite locally:

- **domain**: named dimensions with extents, parallel ones first, then reduction ones. Affine maps
  number them d0, d1, ... in that order.
- **maps**: one affine map per input, from the domain to the input's indices. Reads outside the
  input's bounds yield the combiner's identity (0 for `mac` and `copy`, skipped for `max`/`avg`),
  which is how padding is expressed.
- **out_map**: from the domain's parallel dims to the output's indices (a bijection onto them).
- **combiner**: `mac` (sum over the reduction dims of in0 * in1), `max`, `avg` (mean over the
  in-bounds window positions of in0), or `copy` (no reduction dims: out = in0). On NaN reads
  the backends differ for `max`: llvm skips them (IEEE maxNum), torch propagates them (amax).
- **epilogue**: element-wise steps applied to each finished output value, in order (see
  `EPILOGUE_STEPS`); `add 2` adds input 2 read through its map.
- **schedule** (optional): *how* the nest is executed (see `nasir.dialects.schedule`); absent means domain order.

A 3x3 convolution with padding 1, bias and ReLU:

    %y = nest.compute %x, %w, %b {name = "conv1",
        domain = #nest.domain<[n = 1, co = 16, oh = 32, ow = 32], [ci = 3, kh = 3, kw = 3]>,
        maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>,
                affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>,
                affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>],
        out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>,
        combiner = "mac", epilogue = ["add 2", "relu"]}
        : (tensor<1x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<1x16x32x32xf32>
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import (
    AffineMapAttr,
    ArrayAttr,
    DictionaryAttr,
    IntAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.ir.affine import (
    AffineMap,
)
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from nasir.dialects.affine import expr_range, linear_form, map_dims, used_dims
from nasir.dialects.attributes import LAYER_CLASS, PAD_ROWS
from nasir.dialects.nn import Conv2DOp, GemmOp, MatMulOp
from nasir.dialects.schedule import Schedule
from nasir.dialects.shapes import Shape, shape_of, tensor


def pad_rows(value: SSAValue) -> int:
    """Rows below each channel plane of `value` (an NCHW nest result, or after nest-bufferize its
    memref read back as a tensor) that hold no element of it (`PAD_ROWS`, pad-planes); 0 for any
    other value."""
    return PAD_ROWS.get(value.owner, 0) if isinstance(value.owner, Operation) else 0


COMBINERS = {"mac": 2, "max": 1, "avg": 1, "copy": 1}
"""Combiner name -> number of leading inputs it reads; later inputs serve the epilogue."""

EPILOGUE_STEPS = {
    # step: (operand references, float parameters)
    "add": (1, 0), "sub": (1, 0), "mul": (1, 0), "div": (1, 0),
    "pow": (1, 0), "min": (1, 0), "max": (1, 0), "prelu": (1, 0),
    "relu": (0, 0), "sigmoid": (0, 0), "hard_swish": (0, 0), "tanh": (0, 0), "exp": (0, 0), "log": (0, 0),
    "sqrt": (0, 0), "abs": (0, 0), "neg": (0, 0), "sign": (0, 0), "softplus": (0, 0),
    "leaky_relu": (0, 1), "clip": (0, 2), "hard_sigmoid": (0, 2), "scale": (0, 1), "elu": (0, 1),
    "selu": (0, 2), "shrink": (0, 2),
}
"""Epilogue steps: `add K`/`sub K`/`mul K`/`div K`/`pow K`/`min K`/`max K` combine with input K
(value op input); `prelu K` scales negative values by input K; `scale C` multiplies by C; `clip LO
HI`, `leaky_relu ALPHA`, `hard_sigmoid ALPHA BETA`, `elu ALPHA`, `selu ALPHA GAMMA`, `shrink LAMBD
BIAS` and the rest (`tanh`, `exp`, `log`, `sqrt`, `abs`, `neg`, `sign`, `softplus`) as in ONNX."""


# --- domain ------------------------------------------------------------------------------------

@irdl_attr_definition
class DomainAttr(ParametrizedAttribute):
    """Named iteration space: `#nest.domain<[n = 1, co = 64], [ci = 64, kh = 3]>`.

    The first list holds the parallel dims, the second the reduction dims.
    """

    name = "nest.domain"

    names: ArrayAttr[StringAttr]
    extents: ArrayAttr[IntAttr]
    num_parallel: IntAttr

    @staticmethod
    def make(parallel: Sequence[tuple[str, int]], reduction: Sequence[tuple[str, int]] = ()) -> "DomainAttr":
        dims = list(parallel) + list(reduction)
        return DomainAttr(
            ArrayAttr([StringAttr(n) for n, _ in dims]),
            ArrayAttr([IntAttr(e) for _, e in dims]),
            IntAttr(len(parallel)),
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        def dim() -> tuple[str, int]:
            name = parser.parse_identifier()
            parser.parse_punctuation("=")
            return name, parser.parse_integer()

        with parser.in_angle_brackets():
            par = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, dim)
            red: list[tuple[str, int]] = []
            if parser.parse_optional_punctuation(","):
                red = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, dim)
        made = DomainAttr.make(par, red)
        return [made.names, made.extents, made.num_parallel]

    def print_parameters(self, printer: Printer) -> None:
        def dims(items):
            return "[" + ", ".join(f"{n} = {e}" for n, e in items) + "]"

        text = dims(self.parallel)
        if self.reduction:
            text += ", " + dims(self.reduction)
        printer.print_string(f"<{text}>")

    def verify(self) -> None:
        names = self.dim_names
        if len(names) != len(self.extents.data):
            raise VerifyException("domain: names and extents differ in length")
        if len(set(names)) != len(names):
            raise VerifyException(f"domain: duplicate dimension names in {names}")
        if any(e.data < 1 for e in self.extents.data):
            raise VerifyException(f"domain: extents must be positive, got {self.dims}")
        if not 0 <= self.num_parallel.data <= len(names):
            raise VerifyException("domain: bad number of parallel dims")

    @property
    def dim_names(self) -> list[str]:
        return [n.data for n in self.names.data]

    @property
    def dims(self) -> list[tuple[str, int]]:
        return [(n.data, e.data) for n, e in zip(self.names.data, self.extents.data)]

    @property
    def parallel(self) -> list[tuple[str, int]]:
        return self.dims[: self.num_parallel.data]

    @property
    def reduction(self) -> list[tuple[str, int]]:
        return self.dims[self.num_parallel.data:]

    def extent(self, name: str) -> int:
        return dict(self.dims)[name]

    def index(self, name: str) -> int:
        try:
            return self.dim_names.index(name)
        except ValueError:
            raise KeyError(f"domain has no dimension '{name}' (it has {', '.join(self.dim_names)})") from None

    @property
    def size(self) -> int:
        return math.prod(e for _, e in self.dims)


def parse_step(step: str) -> tuple[str, list[int], list[float]]:
    """`"clip 0 6"` -> ("clip", [], [0.0, 6.0]); `"add 2"` -> ("add", [2], [])."""
    kind, *args = step.split()
    if kind not in EPILOGUE_STEPS:
        raise VerifyException(f"unknown epilogue step '{kind}' (known: {', '.join(EPILOGUE_STEPS)})")
    n_ops, n_params = EPILOGUE_STEPS[kind]
    if len(args) != n_ops + n_params:
        raise VerifyException(f"epilogue step '{step}' takes {n_ops + n_params} arguments")
    return kind, [int(a) for a in args[:n_ops]], [float(a) for a in args[n_ops:]]


def format_step(kind: str, operands: Sequence[int] = (), params: Sequence[float] = ()) -> str:
    return " ".join([kind, *map(str, operands), *(repr(float(p)) for p in params)])


# --- the op ------------------------------------------------------------------------------------

@irdl_op_definition
class ComputeOp(IRDLOperation):
    """One loop nest (see the module docstring for the attributes and their meaning)."""

    name = "nest.compute"
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, results)"
    traits = traits_def(Pure())

    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    layer = prop_def(StringAttr, prop_name="name")
    domain = prop_def(DomainAttr)
    maps = prop_def(ArrayAttr[AffineMapAttr])
    out_map = prop_def(AffineMapAttr)
    combiner = prop_def(StringAttr)
    epilogue = prop_def(ArrayAttr[StringAttr])
    schedule = opt_prop_def(DictionaryAttr)

    @classmethod
    def make(
        cls,
        name: str,
        inputs: Sequence[SSAValue],
        domain: DomainAttr,
        maps: Sequence[AffineMap],
        out_map: AffineMap,
        out_shape: Sequence[int],
        combiner: str = "mac",
        epilogue: Sequence[str] = (),
        schedule: "Schedule | None" = None,
    ) -> "ComputeOp":
        props: dict[str, Attribute] = {
            "name": StringAttr(name),
            "domain": domain,
            "maps": ArrayAttr([AffineMapAttr(m) for m in maps]),
            "out_map": AffineMapAttr(out_map),
            "combiner": StringAttr(combiner),
            "epilogue": ArrayAttr([StringAttr(s) for s in epilogue]),
        }
        if schedule is not None:
            props["schedule"] = schedule.to_attr()
        return cls.create(operands=list(inputs), properties=props, result_types=[tensor(out_shape)])

    # Convenient views -------------------------------------------------------------------------
    @property
    def layer_name(self) -> str:
        return self.layer.data

    @property
    def layer_class(self) -> str:
        """What kind of layer the nest computes: the class a pass that rewrote it recorded
        (`LAYER_CLASS`: subsample-strided-1x1 gives a strided 1x1 conv's copy and its conv at stride
        1 the class "conv 1x1 s2" of the layer they compute), else its view's (`NestView.layer_class`)."""
        return LAYER_CLASS.get(self) if LAYER_CLASS.on(self) else NestView.of(self).layer_class

    @property
    def access_maps(self) -> list[AffineMap]:
        return [m.data for m in self.maps.data]

    @property
    def output_map(self) -> AffineMap:
        return self.out_map.data

    @property
    def kind(self) -> str:
        return self.combiner.data

    @property
    def steps(self) -> list[tuple[str, list[int], list[float]]]:
        return [parse_step(s.data) for s in self.epilogue.data]

    def get_schedule(self) -> "Schedule":
        return Schedule.from_attr(self.schedule, self.domain)

    # Verification ----------------------------------------------------------------------------
    def verify_(self) -> None:
        dom = self.domain
        extents = [e for _, e in dom.dims]
        ndims, npar = len(extents), dom.num_parallel.data
        where = f"nest '{self.layer_name}'"
        if self.kind not in COMBINERS:
            raise VerifyException(f"{where}: unknown combiner '{self.kind}' (known: {', '.join(COMBINERS)})")
        arity = COMBINERS[self.kind]
        if len(self.inputs) < arity:
            raise VerifyException(f"{where}: combiner '{self.kind}' needs {arity} inputs")
        if self.kind == "copy" and npar != ndims:
            raise VerifyException(f"{where}: combiner 'copy' takes no reduction dims")
        if len(self.access_maps) != len(self.inputs):
            raise VerifyException(f"{where}: {len(self.inputs)} inputs but {len(self.access_maps)} maps")
        for i, (amap, operand) in enumerate(zip(self.access_maps, self.inputs)):
            rank = len(shape_of(operand))
            if amap.num_dims != ndims or len(amap.results) != rank:
                raise VerifyException(
                    f"{where}: map {i} is {amap.num_dims}-d -> {len(amap.results)} but the domain has "
                    f"{ndims} dims and input {i} has rank {rank}")
        out_shape = shape_of(self.result)
        omap = self.output_map
        if omap.num_dims != ndims or len(omap.results) != len(out_shape):
            raise VerifyException(f"{where}: out_map does not fit the domain and the result rank {len(out_shape)}")
        if map_dims(omap) - set(range(npar)):
            raise VerifyException(f"{where}: out_map may only use parallel dims")
        for axis, e in enumerate(omap.results):
            lo, hi = expr_range(e, extents)
            if lo < 0 or hi >= out_shape[axis]:
                raise VerifyException(
                    f"{where}: out_map result {axis} spans [{lo}, {hi}] outside the output extent {out_shape[axis]}")
        padded = PAD_ROWS.get(self, 0)
        if padded and (len(out_shape) != 4 or expr_range(omap.results[2], extents)[1] >= out_shape[2] - padded):
            raise VerifyException(f"{where}: writes the {padded} padding rows of its result's planes")
        written = math.prod(out_shape) * (out_shape[2] - padded) // out_shape[2] if padded else math.prod(out_shape)
        if math.prod(extents[:npar]) != written:
            raise VerifyException(
                f"{where}: parallel dims cover {math.prod(extents[:npar])} points but the output has "
                f"{written} elements" + (f" outside its {padded} padding rows" if padded else ""))
        for kind, refs, _ in self.steps:
            for k in refs:
                if not arity <= k < len(self.inputs):
                    raise VerifyException(f"{where}: epilogue step '{kind} {k}' refers to no epilogue input")
                if map_dims(self.access_maps[k]) - set(range(npar)):
                    raise VerifyException(f"{where}: epilogue input {k} may only be indexed by parallel dims")
                shape = shape_of(self.inputs[k])
                for axis, e in enumerate(self.access_maps[k].results):
                    lo, hi = expr_range(e, extents)
                    if lo < 0 or hi >= shape[axis]:
                        raise VerifyException(f"{where}: epilogue input {k} is read out of bounds on axis {axis}")
        if self.schedule is not None:
            self.get_schedule().verify(dom)


@dataclass
class NestView:
    """One nest as the scheduler, the emitters and the summary read it: its domain (`dims`, the
    first `npar` parallel), access maps, buffer shapes and combiner, in plain Python values.

        view = NestView.of(op)     # a 3x3 conv: dims [("n", 1), ("co", 64), ("oh", 56), ("ow", 56),
                                   #   ("ci", 64), ("kh", 3), ("kw", 3)], npar 4, combiner "mac"

    `weight_layouts`: the inputs that are weights (packable at compile time) with their axis letters
    ("OIHW"), where the reader knows them (default-schedule). `in_pad_rows`: the padding rows below
    each plane of each input (pad-planes), which its reads take for padding like any row outside
    (`in_extents`).
    """

    name: str
    dims: list[tuple[str, int]]
    npar: int
    maps: list[AffineMap]
    out_map: AffineMap
    in_shapes: list[Shape]
    out_shape: Shape
    combiner: str
    weight_layouts: dict[int, str] = field(default_factory=dict)
    in_pad_rows: list[int] = field(default_factory=list)

    @staticmethod
    def of(op: ComputeOp, weight_layouts: dict[int, str] | None = None) -> NestView:
        dom = op.domain
        return NestView(op.layer_name, dom.dims, dom.num_parallel.data, op.access_maps, op.output_map,
                        [shape_of(v) for v in op.inputs], shape_of(op.result), op.kind, weight_layouts or {},
                        [pad_rows(v) for v in op.inputs])

    def in_extents(self, k: int) -> Shape:
        """The index range of each axis of input `k` that holds its elements: its stored shape less
        its padding rows (a read beyond is padding, as a read at row -1 is)

            in_shapes[k] = (1, 64, 33, 32), in_pad_rows[k] = 1  ->  (1, 64, 32, 32)"""
        shape = self.in_shapes[k]
        pad = self.in_pad_rows[k] if k < len(self.in_pad_rows) else 0
        return shape if not pad else (*shape[:2], shape[2] - pad, *shape[3:])

    @property
    def domain(self) -> DomainAttr:
        return DomainAttr.make(self.dims[: self.npar], self.dims[self.npar:])

    @property
    def macs(self) -> int:
        """Multiply-accumulates (see `macs`)."""
        return math.prod(e for _, e in self.dims) if self.combiner == "mac" else 0

    @property
    def layer_class(self) -> str:
        """What kind of layer the nest computes, in words (the rows of `nasir profile --by class`):
        the window and stride along the image axes of an NCHW input (blocked or not) and how the
        input channel is indexed: by reduction dims alone (a conv), by parallel ones alone
        (depthwise: a channel's own outputs) or by both (grouped, `g * 64 + ci`):

            (n, co, oh, ow | ci, kh, kw) reading (n, ci, oh + kh - 1, ow + kw - 1)   ->  "conv 3x3"
            (n, g, co, oh, ow | ci) reading (n, g * 64 + ci, oh * 2, ow * 2)          ->  "grouped conv 1x1 s2"
            (n, c, oh, ow | kh, kw), combiner max, (n, c, oh * 2 + kh, ow * 2 + kw)   ->  "max pool 2x2 s2"
            a mac nest of 2-D operands -> "gemm"; an elementwise nest -> "elementwise"
        """
        if self.combiner == "copy":
            return "elementwise"
        names = [d for d, _ in self.dims]
        extent = dict(self.dims)
        parallel = set(range(self.npar))
        results = self.maps[0].results if self.maps else ()
        if len(results) < 4:
            return "gemm" if self.combiner == "mac" and len(self.maps) > 1 else self.combiner
        window, stride = [], 1
        for expr in results[2:4]:
            form = linear_form(expr)
            if form is None:
                return self.combiner
            window.append(math.prod(extent[names[d]] for d in form[0] if d not in parallel))
            stride = max([stride] + [c for d, c in form[0].items() if d in parallel])
        shape = f"{window[0]}x{window[1]}" + (f" s{stride}" if stride > 1 else "")
        if self.combiner != "mac":
            return f"{self.combiner} pool {shape}"
        channel = used_dims(results[1]).union(*(used_dims(e) for e in results[4:]))
        channel = {d for d in channel if extent[names[d]] > 1}
        if not channel & parallel:
            return f"conv {shape}"
        return f"{'grouped' if channel - parallel else 'depthwise'} conv {shape}"


def macs(op: Operation) -> int:
    """Multiply-accumulates of one op: a `nest.compute` with the `mac` combiner its domain size, a conv
    N*Co*OH*OW*(Ci/G)*KH*KW, gemm and matmul M*N*K (times the batch); 0 for any other op."""
    if isinstance(op, ComputeOp):
        return op.domain.size if op.kind == "mac" else 0
    if isinstance(op, Conv2DOp):
        _, ci_per_group, kh, kw = shape_of(op.operands[1])
        return math.prod(shape_of(op.result)) * ci_per_group * kh * kw
    if isinstance(op, GemmOp):
        a = shape_of(op.operands[0])
        k = a[0] if op.trans_a.value.data else a[1]
        return math.prod(shape_of(op.result)) * k
    if isinstance(op, MatMulOp):
        return math.prod(shape_of(op.result)) * shape_of(op.operands[0])[-1]
    return 0


NEST = Dialect("nest", [ComputeOp], [DomainAttr])
