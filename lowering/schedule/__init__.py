"""How each nest runs on a CPU: default-schedule (with its cost model), the Winograd plan of wide
strided stems, and the packed layouts of weights (pack-weights) and activations (pack-activations).
All read the module's target (`nasir.lowering.target`)."""
