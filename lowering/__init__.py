"""nasir.lowering: the conversions between levels, one subpackage each, and the passes' registry.

    nn_to_nest/     convert-nn-to-nest, lower-batch-norm
    schedule/       default-schedule, pack-weights, pack-activations, pad-planes, the Winograd plan (CPU)
    bufferize.py    nest-bufferize
    nest_to_loops/  convert-nest-to-loops
    loops_to_llvm/  convert-loops-to-llvm, LLVM IR, O3
    nest_to_torch/  the torch backend (reference numerics, Fisher Potential, export)
    nest_to_tvm/    the tvm backend: Relax and TE for TVM's CPU code and CUDA GPUs
    target.py       the CPU target description every CPU stage reads
    passes.py       every pass by name; pipelines parsed and run
    pipeline.py     the backends' pipelines, built from named stages and cut by pass name
"""
