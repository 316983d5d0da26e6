// RUN: nasir-opt %s --cpu=x86-64-v3 -p 'default-schedule{winograd="always"}' | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p 'default-schedule{winograd="always"},pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops' | filecheck %s --check-prefix=LOOPS
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule | filecheck %s --check-prefix=AUTO

// A grouped 3x3 stride-1 conv runs as Winograd by its groups: 2 groups of 16 -> 16 channels. The
// transformed input V[row][e][ci][tile] holds every input channel (32: each group's tiles read
// their own 16), 10 rows x 6 products x 32 channels x 8 tiles (2, padded to a vector): 4 x 15360
// = 61440 bytes of scratch; the transformed weights U[e][kh][ci][co] (pack-weights) a group's 16
// input channels by all 32 output channels. The group is the outer loop of the nest; within it,
// the channel blocks take turns on each row, and the register tile is the row's 2 Winograd tiles
// by one channel vector, as a dense conv's. By default
// (AUTO) it runs direct: a group has 16 input channels, not the 64 where Winograd pays.

builtin.module {
  func.func @main(%x: tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32> {
    %w = nn.weight {name = "w"} : tensor<32x16x3x3xf32>
    %c = nest.compute %x, %w {name = "conv", domain = #nest.domain<[n = 1, g = 2, co = 16, oh = 8, ow = 8], [ci = 16, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 16) + d5), ((d3 + d6) + -1), ((d4 + d7) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (((d1 * 16) + d2), d5, d6, d7)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 16) + d2), d3, d4)>, combiner = "mac", epilogue = []} : (tensor<1x32x8x8xf32>, tensor<32x16x3x3xf32>) -> tensor<1x32x8x8xf32>
    func.return %c : tensor<1x32x8x8xf32>
  }
}

// CHECK:      nest.compute %x, %w {nasir.winograd = 4 : i64, nasir.scratch_bytes = 61440 : i64, name = "conv"
// CHECK-SAME: order = ["n", "g", "oh", "co.o", "ci", "kh", "kw", "ow", "co.i"]
// CHECK-SAME: vector = "co.i"

// LOOPS:      func.func private @conv(
// LOOPS-SAME: memref<6x3x16x32xf32> {llvm.noalias}, %{{.*}}: memref<1x32x8x8xf32> {llvm.noalias}, %{{.*}}: memref<61440xi8>
// LOOPS:      memref.view {{.*}} to memref<10x6x32x8xf32>

// AUTO:      nest.compute %x, %w {name = "conv"
// AUTO-NOT:  nasir.winograd
