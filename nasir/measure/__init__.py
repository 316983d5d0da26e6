"""Measuring: interleaved timing (timing.py), the FMA peak a thread reaches (peak.py), the kernel
times the search and tuning read (kernels.py), and the benchmark tables that put them beside ONNX
Runtime: the zoo on a CPU (`python -m nasir.measure.benchmark`, `make bench`), on a GPU
(gpu_benchmark.py) and the ResNet variants' realisation (variants.py).
"""
