"""Pass pipelines of the backends, in the one spelling `nasir-opt -p` and `Model.transform` share."""

LLVM_PIPELINE = ("fold-batch-norm,convert-nn-to-nest,lower-batch-norm,fuse-epilogue,default-schedule,"
                 "pack-activations,pad-planes,pack-weights,nest-bufferize,convert-nest-to-loops,convert-loops-to-llvm")
"""nn IR -> llvm dialect (then `nasir.lowering.loops_to_llvm.llvm_ir` makes LLVM IR, `nasir.runtime.jit` code)."""
