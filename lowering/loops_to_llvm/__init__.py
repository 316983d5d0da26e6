"""loops -> llvm: convert-loops-to-llvm (`convert`), then LLVM IR text and O3 (`llvm_ir`)."""
