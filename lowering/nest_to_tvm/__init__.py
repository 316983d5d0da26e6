"""nest -> TVM: the tvm backend. `program.to_relax` makes @main a Relax function, each nest a
PrimFunc through `nest_ops` (TE), the nn ops left through `nn_ops`, a nest's schedule through
`schedule`; `build` compiles it for TVM's
CPU code ("tvm") or a CUDA GPU ("cuda")."""
