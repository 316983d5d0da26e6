"""How each nest runs on a CPU: default-schedule (with its cost model), the Winograd plan of wide
strided stems, the packed layouts of weights (pack-weights) and activations (pack-activations), and
the padded planes of activations that would alias in the caches (pad-planes).
All read the module's target (`nasir.lowering.target`)."""
