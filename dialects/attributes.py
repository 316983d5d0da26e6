"""The contracts between passes and the runtime: every `nasir.*` discardable attribute, typed.

A pass that leaves information for a later pass or for the runtime writes it as an attribute of
the module or of an op; this module is the one place such attributes are named, with the Python
type of their value. Each is a `Key`: `KEY.set(op, value)`, `KEY.get(op)` (KeyError when absent),
`KEY.get(op, default)`, `KEY.on(op)`.

    builtin.module attributes {nasir.target = {cpu = "znver3"}, nasir.workspace_bytes = 1024 : i64}
    %y = nest.compute ... {nasir.winograd = 4 : i64, nasir.scratch_bytes = 50176 : i64, ...}
    func.call @conv1(%x, %w, %y) {nasir.layer = "conv1", nasir.macs = 118013952 : i64}

    WORKSPACE_BYTES.get(module)    # 1024
    LAYER.set(call, "conv1")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute, Operation

T = TypeVar("T")
_ABSENT = object()


@dataclass(frozen=True)
class Key(Generic[T]):
    """A `nasir.*` attribute and the conversion between its IR form and a Python value."""

    name: str
    doc: str

    def to_attr(self, value: T) -> Attribute:
        raise NotImplementedError

    def from_attr(self, attr: Attribute) -> T:
        raise NotImplementedError

    def on(self, op: Operation) -> bool:
        return self.name in op.attributes

    def get(self, op: Operation, default=_ABSENT) -> T:
        attr = op.attributes.get(self.name)
        if attr is None:
            if default is _ABSENT:
                raise KeyError(f"{op.name} has no attribute {self.name}")
            return default
        return self.from_attr(attr)

    def set(self, op: Operation, value: T) -> None:
        op.attributes[self.name] = self.to_attr(value)


class IntKey(Key[int]):
    """An `i64` integer."""

    def to_attr(self, value: int) -> Attribute:
        return IntegerAttr(value, i64)

    def from_attr(self, attr: Attribute) -> int:
        return attr.value.data


class StrKey(Key[str]):
    def to_attr(self, value: str) -> Attribute:
        return StringAttr(value)

    def from_attr(self, attr: Attribute) -> str:
        return attr.data


class FlagKey(Key[bool]):
    """Present (a unit attribute) or absent; `set(op, True)` marks the op."""

    def to_attr(self, value: bool) -> Attribute:
        assert value, f"{self.name}: a flag is set by its presence"
        return UnitAttr()

    def from_attr(self, attr: Attribute) -> bool:
        return True


class StrListKey(Key[list[str]]):
    def to_attr(self, value: list[str]) -> Attribute:
        return ArrayAttr([StringAttr(v) for v in value])

    def from_attr(self, attr: Attribute) -> list[str]:
        return [a.data for a in attr.data]


class IntMapKey(Key[dict[str, int]]):
    def to_attr(self, value: dict[str, int]) -> Attribute:
        return DictionaryAttr({k: IntegerAttr(v, i64) for k, v in value.items()})

    def from_attr(self, attr: Attribute) -> dict[str, int]:
        return {k: v.value.data for k, v in attr.data.items()}


Record = dict[str, "int | str"]


class RecordsKey(Key[list[Record]]):
    """A list of records whose fields are strings or `i64` integers."""

    def to_attr(self, value: list[Record]) -> Attribute:
        return ArrayAttr([DictionaryAttr({k: StringAttr(v) if isinstance(v, str) else IntegerAttr(v, i64)
                                          for k, v in r.items()}) for r in value])

    def from_attr(self, attr: Attribute) -> list[Record]:
        return [{k: v.data if isinstance(v, StringAttr) else v.value.data for k, v in r.data.items()}
                for r in attr.data]


class DictKey(Key[DictionaryAttr]):
    """A dictionary attribute read by its owner module (the target: `nasir.lowering.target`)."""

    def to_attr(self, value: DictionaryAttr) -> Attribute:
        return value

    def from_attr(self, attr: Attribute) -> DictionaryAttr:
        return attr


# --- the module ----------------------------------------------------------------------------------
INPUTS = StrListKey("nasir.inputs", "names of @main's inputs (the ONNX graph's)")
OUTPUTS = StrListKey("nasir.outputs", "names of @main's outputs")
TARGET = DictKey("nasir.target", "the CPU the module is compiled for: {cpu = NAME, <overridden fields>}")
WORKSPACE_BYTES = IntKey("nasir.workspace_bytes", "bytes of the workspace @main takes (the arena, then "
                         "profile counters); nest-bufferize, convert-loops-to-llvm, the runtime")
WEIGHTS_BYTES = IntKey("nasir.weights_bytes", "bytes of the one weights buffer (nest-bufferize)")
WEIGHT_OFFSETS = IntMapKey("nasir.weight_offsets", "byte offset of each weight in that buffer")
NUM_OUTPUTS = IntKey("nasir.num_outputs", "outputs among @main's memref arguments, after its inputs")
PROFILE = RecordsKey("nasir.profile", "profiled kernel calls of @main in order: {layer, kernel, macs, class}")
PROFILE_OFFSET = IntKey("nasir.profile_offset", "workspace offset of the calls' tick counters")
BOUNDS_CHECKS = RecordsKey("nasir.bounds_checks", "what each checked access is: {kernel, access, operand, type}")

# --- ops -----------------------------------------------------------------------------------------
WINOGRAD = IntKey("nasir.winograd", "a conv run as 1-D Winograd: outputs of a tile (default-schedule)")
SCRATCH_BYTES = IntKey("nasir.scratch_bytes", "bytes a compute op's kernel needs of its own while it runs")
FUSE_ROWS = FlagKey("nasir.fuse_rows", "a max pool whose kernel computes its producer's rows too")
PAD_ROWS = IntKey("nasir.pad_rows", "rows below each channel plane of a nest's NCHW result that no nest "
                   "writes and its readers take for padding (pad-planes: a plane pitch off the cache sets' "
                   "period); after nest-bufferize also on the to_tensor its readers read it through")
IN_PLACE = IntKey("nasir.in_place", "a bufferized nest writes its result over this operand's bytes")
SCRATCH_OFFSET = IntKey("nasir.scratch_offset", "arena offset of a bufferized op's scratch bytes")
WEIGHT = StrKey("nasir.weight", "the weight a view of the weights buffer is (nest-bufferize)")
LAYER = StrKey("nasir.layer", "the layer a kernel call computes (convert-nest-to-loops)")
MACS = IntKey("nasir.macs", "multiply-accumulates of a kernel call")
LAYER_CLASS = StrKey("nasir.layer_class", "what kind of layer a kernel call computes: 'conv 3x3', "
                     "'depthwise conv 3x3 s2', 'gemm' (ComputeOp.layer_class; convert-nest-to-loops); on a "
                     "nest.compute, the class of the layer a pass rewrote it from (subsample-strided-1x1)")
UNCLASSIFIED = "other"
"""The class of a kernel call that has none (a call no nest made, a profile saved before classes)."""
VECTORS = RecordsKey("nasir.vectors", "the vectorised nests of each kernel: {kernel, layer, lanes}, lanes the "
                     "extent of the nest's vector loop as its schedule gives it (convert-nest-to-loops)")
