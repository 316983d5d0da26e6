"""Typed errors of nasir.

Every user mistake surfaces as one `NasirError` subclass with a message the user can act on; the
CLIs print the message and exit non-zero, never a traceback.
"""


class NasirError(Exception):
    """Base class of every error nasir reports to users."""


class FrontendError(NasirError):
    """The input model file cannot be read or imported (malformed, truncated, unsupported)."""


class UnsupportedOpError(FrontendError):
    """An ONNX node whose op type nasir does not implement."""


class ShapeError(NasirError):
    """A shape is dynamic where a static one is required, or shapes do not agree."""


class PassError(NasirError):
    """An unknown pass, a bad pass option, or a transform that cannot be applied as asked."""


class LegalityError(PassError):
    """A transform request that is illegal (dependences, divisibility, block boundaries, capacity)."""


class LoweringError(NasirError):
    """A nest or op that a backend cannot lower, named with what is unsupported."""


class RuntimeInputError(NasirError):
    """Inputs given to an Executable do not match the compiled signature."""


class BoundsError(NasirError):
    """A checked build (`compile(..., checked=True)`) caught generated code reading or writing
    outside a buffer; the message names the kernel, the buffer and the index."""


class ForeignCPUError(NasirError):
    """Code compiled for a CPU whose vectors this machine lacks (AVX-512 code on an AVX2 CPU) was
    called; `executable` is the code, which can still be saved for that CPU."""

    def __init__(self, message: str, executable):
        super().__init__(message)
        self.executable = executable


class BackendUnavailableError(NasirError):
    """A target that needs what this machine lacks: TVM, TVM built with CUDA, nvcc, or (to run
    CUDA code) a GPU; the message names what is missing."""


class ZooError(NasirError):
    """An unknown zoo model name or a dataset the model does not support."""


class DataError(NasirError):
    """A data source that is missing, malformed, or too small for the requested batch."""


class TrainingDiverged(NasirError):
    """A training step's loss was not finite (NaN or infinite): the run cannot go on."""
