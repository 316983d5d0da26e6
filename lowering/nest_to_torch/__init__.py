"""nest -> torch: the torch backend. `TorchProgram` (`program`) interprets @main op by op, nn ops
through `nn_ops`, nests through `nest_ops`; `export` makes trainable modules and ONNX files."""
