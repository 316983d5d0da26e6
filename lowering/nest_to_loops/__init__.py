"""nest -> loops: convert-nest-to-loops (`convert`). A `Spec` (`spec`) is one nest to emit; `NestEmitter`
(`emitter`) builds its loops with a `LoopBuilder` (`builder`), `WinogradEmitter` (`winograd`) a
Winograd stem's; `kernels` makes the kernel functions and the row-fused ones."""
