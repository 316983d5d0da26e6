// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule,pack-activations,pack-weights,nest-bufferize | filecheck %s --check-prefix=BUF
// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule,pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s --check-prefix=LOOPS
// RUN: nasir-opt %s --cpu=x86-64-v3 -p 'default-schedule{winograd="always"}' | filecheck %s --check-prefix=AVX2
// RUN: nasir-opt %s --cpu=x86-64-v3 -p 'default-schedule{winograd="always"},pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops' | filecheck %s --check-prefix=AVX2-LOOPS
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule | filecheck %s --check-prefix=AVX2-AUTO

// A 7x7 stride-2 stem runs as 1-D Winograd along its rows: F(4, 4) for the even taps, F(4, 3)
// for the odd ones, E = 7 + 6 = 13 products per 4 outputs instead of 28. default-schedule marks
// it (`nasir.winograd` = 4 outputs a tile) with the scratch its kernel needs: the transformed
// input V[ci][row][tile][e], 3 x 21 rows (2 * 7 + 6 + 1) x 16 tiles (2, padded to a vector) x 13
// floats: 4 x 13104 bytes; pack-weights makes its transformed weights U[ci][kh][e][co] once, a
// weight of 3 x 7 x 13 x 16 floats (`w.winograd4`) the kernel reads.
// Its register tile is a row's 8 points (two Winograd tiles) by one channel vector. The 3x3 conv after it
// (F(4, 3): 6 products for 12) has too few channels for Winograd to pay (`pays`: 64 input channels),
// so it runs direct. nest-bufferize places the scratch in the arena beside the
// stem's output; convert-nest-to-loops passes it to the stem's kernel as a view, beside U.
// With AVX2 (8 lanes, 16 registers) a register tile holds one Winograd tile (13 accumulators), each
// broadcast feeding one FMA, so by default the stem runs direct there (AVX2-AUTO); asked for
// (`winograd="always"`), V has 8 tiles a row: 4 x 3 x 21 x 8 x 13 = 26208 bytes, and each vector
// of tiles' 13 products are transposed in two blocks of 8. The 3x3 conv then runs as Winograd
// too, one product at a time (stride 1, one phase): V[row][e][ci][tile], 10 rows x 6 products x
// 16 channels x 8 tiles (2, padded): 4 x 7680 bytes, and U[e][kh][ci][co], 6 x 3 x 16 x 16
// floats; a register tile of the row's 2 Winograd tiles.

builtin.module {
  func.func @main(%x: tensor<1x3x16x16xf32>) -> tensor<1x16x8x8xf32> {
    %w = nn.weight {name = "w"} : tensor<16x3x7x7xf32>
    %v = nn.weight {name = "v"} : tensor<16x16x3x3xf32>
    %s = nest.compute %x, %w {name = "stem", domain = #nest.domain<[n = 1, co = 16, oh = 8, ow = 8], [ci = 3, kh = 7, kw = 7]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -3), (((d3 * 2) + d6) + -3))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x3x16x16xf32>, tensor<16x3x7x7xf32>) -> tensor<1x16x8x8xf32>
    %c = nest.compute %s, %v {name = "conv", domain = #nest.domain<[n = 1, co = 16, oh = 8, ow = 8], [ci = 16, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x16x8x8xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x8x8xf32>
    func.return %c : tensor<1x16x8x8xf32>
  }
}

// CHECK:      nest.compute %x, %w {nasir.winograd = 4 : i64, nasir.scratch_bytes = 52416 : i64, name = "stem"
// CHECK-SAME: splits = [["co", 16 : i64]], order = ["n", "oh", "ci", "kh", "kw", "ow", "co.o", "co.i"]
// CHECK-SAME: vector = "co.i", unroll = {ow = 8 : i64
// CHECK:      nest.compute %s, %v {name = "conv"

// BUF:      builtin.module attributes {{{.*}}nasir.workspace_bytes = 56512 : i64, {{.*}}nasir.weight_offsets = {w.winograd4 = 0 : i64
// BUF:      nest.compute %{{.*}}, %{{.*}} {nasir.winograd = 4 : i64, nasir.scratch_bytes = 52416 : i64, nasir.scratch_offset = 4096 : i64, name = "stem"
// BUF:      {name = "conv"

// LOOPS:      func.func @main(
// LOOPS-SAME: %[[WS:[^:]*]]: memref<56512xi8>)
// LOOPS:      %[[U:.*]] = memref.view {{.*}} {nasir.weight = "w.winograd4"} : memref<{{[0-9]+}}xi8> to memref<3x7x13x16xf32>
// LOOPS:      %[[AT:.*]] = arith.constant 4096 : index
// LOOPS-NEXT: %[[SCRATCH:.*]] = memref.view %[[WS]][%[[AT]]][] : memref<56512xi8> to memref<52416xi8>
// LOOPS-NEXT: func.call @stem(%{{.*}}, %[[U]], %{{.*}}, %[[SCRATCH]])
// LOOPS:      func.func private @stem(
// LOOPS-SAME: memref<3x7x13x16xf32> {llvm.noalias}, %{{.*}}: memref<1x16x8x8xf32> {llvm.noalias}, %{{.*}}: memref<52416xi8>
// LOOPS:      memref.view {{.*}} to memref<3x21x16x13xf32>
// LOOPS:      vector.shuffle

// AVX2:      nest.compute %x, %w {nasir.winograd = 4 : i64, nasir.scratch_bytes = 26208 : i64, name = "stem"
// AVX2-SAME: splits = [["co", 8 : i64], ["ow", 4 : i64]]
// AVX2-SAME: vector = "co.i", unroll = {ow.i = 4 : i64
// AVX2:      nest.compute %s, %v {nasir.winograd = 4 : i64, nasir.scratch_bytes = 30720 : i64, name = "conv"
// AVX2-SAME: order = ["n", "oh", "co.o", "ci", "kh", "kw", "ow", "co.i"]
// AVX2-SAME: vector = "co.i", unroll = {ow = 8 : i64

// AVX2-AUTO:      nest.compute %x, %w {name = "stem"
// AVX2-AUTO-SAME: vector = "co.i"
// AVX2-AUTO-NOT:  nasir.winograd

// AVX2-LOOPS:      func.func private @stem(
// AVX2-LOOPS-SAME: memref<3x7x13x16xf32> {llvm.noalias}, %{{.*}}: memref<1x16x8x8xf32> {llvm.noalias}, %{{.*}}: memref<26208xi8>
// AVX2-LOOPS:      memref.view {{.*}} to memref<3x21x8x13xf32>
// AVX2-LOOPS:      vector.shuffle {{.*}} : vector<8xf32>, vector<8xf32>
// AVX2-LOOPS:      func.func private @conv(
// AVX2-LOOPS-SAME: memref<6x3x16x16xf32> {llvm.noalias}, %{{.*}}: memref<1x16x8x8xf32> {llvm.noalias}, %{{.*}}: memref<30720xi8>
// AVX2-LOOPS:      memref.view {{.*}} to memref<10x6x16x8xf32>
