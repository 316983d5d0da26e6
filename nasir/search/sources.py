"""The model a search starts from: a zoo name or an ONNX file, at batch 1 (latency) and at the
Fisher batch, both at nest level (`convert-nn-to-nest`; batch norms stay, Fisher Potential runs them
in training mode)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from nasir import api, zoo
from nasir.errors import NasirError
from nasir.model import Model

TO_NEST = "convert-nn-to-nest"


def from_nn(pipeline: str) -> str:
    """`pipeline` as it applies to a model at nn level (an imported file, a zoo model): with
    `convert-nn-to-nest` in front unless it is its first pass already.

        >>> from_nn('group{factor=2 layers="c1"}')
        'convert-nn-to-nest,group{factor=2 layers="c1"}'
        >>> from_nn("convert-nn-to-nest,fold")
        'convert-nn-to-nest,fold'
    """
    if pipeline.split(",", 1)[0].split("{", 1)[0].strip() == TO_NEST:
        return pipeline
    return ",".join(p for p in (TO_NEST, pipeline) if p)


def rebatched(path: Path, out: Path) -> Path:
    """A copy of the ONNX file at `path` whose inputs' first dimension is symbolic (the Fisher
    batch is then given at import); inferred shapes are dropped, the importer infers them again."""
    proto = onnx.load(str(path))
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_param = "batch"
    del proto.graph.value_info[:]
    onnx.save(proto, str(out))
    return out


def is_zoo_name(source: str) -> bool:
    """Whether a search's `source` names a zoo model (untrained weights) rather than a model file:
    a path that exists or ends in .onnx is a file, whatever its name."""
    return not _is_file_path(Path(source)) and source in zoo.names()


def _is_file_path(path: Path) -> bool:
    return path.suffix == ".onnx" or path.exists()


def load_source(source: str, dataset: str, batch: int) -> tuple[Model, Model]:
    """(model at batch 1, model at `batch`) of a zoo name or an .onnx path, at nest level."""
    path = Path(source)
    if _is_file_path(path):
        if not path.is_file():
            raise NasirError(f"{source}: no such file")
        one = api.load(path)
        with tempfile.TemporaryDirectory(prefix="nasir-search-") as tmp:
            many = api.load(rebatched(path, Path(tmp) / "model.onnx"),
                            input_shapes=[(batch, *shape[1:]) for shape in one.input_shapes])
    elif is_zoo_name(source):
        one = zoo.load(source, dataset)
        with tempfile.TemporaryDirectory(prefix="nasir-search-") as tmp:
            onnx = zoo.export_onnx(source, Path(tmp) / "model.onnx", dataset, batch=batch)
            many = api.load(onnx)
    else:
        raise NasirError(f"'{source}' is neither a file nor a zoo model (zoo models: {', '.join(zoo.names())})")
    return one.transform(TO_NEST), many.transform(TO_NEST)
