"""nasir: neural architecture search as program transformation, on xDSL.

    import nasir
    model = nasir.load("resnet34.onnx")          # or nasir.zoo.load("resnet34")
    print(model.summary())
    exe = nasir.compile(model, target="llvm")
    y = exe(x)
    nasir.tune(model)                             # time the best schedules of its convs on this CPU
    found = nasir.synthesize(model, "layer1_conv1", flops=0.5)   # new operators for one conv (Syno)
    result = nasir.search("resnet18", budget=100)   # faster networks of the same capacity
    trained = nasir.train(model, "cifar-10-batches-bin/", epochs=200)   # accuracy: the evidence
"""

from importlib.metadata import PackageNotFoundError, version

from nasir import search, zoo
from nasir.api import check_capacity, compile, fisher_potential, load, synthesize, train, transform, tune
from nasir.errors import NasirError
from nasir.model import Model

try:
    __version__ = version("nasir")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Model", "NasirError", "check_capacity", "compile", "fisher_potential", "load", "search", "synthesize", "train", "transform", "tune", "zoo"]
