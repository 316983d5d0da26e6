// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule | filecheck %s --check-prefix=AVX2
// RUN: nasir-opt %s --cpu=x86-64-v3 -p 'default-schedule{winograd="always"}' | filecheck %s --check-prefix=AVX2-WINOGRAD

// ResNet's stem read only by its max pool. The stem runs as 1-D Winograd (`nasir.winograd`, with
// the scratch nest-bufferize is to reserve for it) in blocks of one channel vector inside its rows;
// default-schedule gives the pool lanes over channels with the same four blocks as its outer
// channel loop (`c.o`) and marks it `nasir.fuse_rows`: convert-nest-to-loops then computes the
// stem's rows inside the pool's kernel as it needs them. With AVX2 (8 lanes, 16 registers) the stem
// runs direct (a Winograd tile's 13 accumulators leave no room for a second one), its register
// tile 4 points by 2 channel vectors (not 6 as a strided 3x3 window's: `STRIDED_TAPS`), and the
// pool's blocks are its four blocks of two vectors;
// asked for, Winograd there runs in eight blocks of one vector, one Winograd tile (4 points).

builtin.module {
  func.func @main(%x: tensor<1x3x224x224xf32>) -> tensor<1x64x56x56xf32> {
    %w = nn.weight {name = "w"} : tensor<64x3x7x7xf32>
    %s = nest.compute %x, %w {name = "stem", domain = #nest.domain<[n = 1, co = 64, oh = 112, ow = 112], [ci = 3, kh = 7, kw = 7]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -3), (((d3 * 2) + d6) + -3))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x3x224x224xf32>, tensor<64x3x7x7xf32>) -> tensor<1x64x112x112xf32>
    %p = nest.compute %s {name = "pool", domain = #nest.domain<[n = 1, c = 64, oh = 56, ow = 56], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, (((d2 * 2) + d4) + -1), (((d3 * 2) + d5) + -1))>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "max", epilogue = []} : (tensor<1x64x112x112xf32>) -> tensor<1x64x56x56xf32>
    func.return %p : tensor<1x64x56x56xf32>
  }
}

// CHECK: nest.compute %x, %w {nasir.winograd = 4 : i64, nasir.scratch_bytes = 1143168 : i64, name = "stem"
// CHECK-SAME: order = ["n", "oh", "co.o", "ow.o"
// CHECK: nest.compute %s {nasir.fuse_rows, name = "pool"
// CHECK-SAME: splits = [["c", 16 : i64], ["ow", 14 : i64]]
// CHECK-SAME: order = ["n", "c.o", "oh", "ow.o", "kh", "kw", "ow.i", "c.i"]

// AVX2: nest.compute %x, %w {name = "stem"
// AVX2-SAME: splits = [["co", 8 : i64], ["ow", 4 : i64], ["co.o", 2 : i64]]
// AVX2-SAME: order = ["n", "oh", "co.o.o", "ow.o"
// AVX2: nest.compute %s {nasir.fuse_rows, name = "pool"
// AVX2-SAME: splits = [["c", 8 : i64], ["ow", 4 : i64], ["c.o", 2 : i64]]
// AVX2-SAME: order = ["n", "c.o.o", "oh", "ow.o", "kh", "kw", "ow.i", "c.o.i", "c.i"]

// AVX2-WINOGRAD: nest.compute %x, %w {nasir.winograd = 4 : i64, nasir.scratch_bytes = 1143168 : i64, name = "stem"
// AVX2-WINOGRAD-SAME: splits = [["co", 8 : i64], ["ow", 4 : i64]]
// AVX2-WINOGRAD-SAME: order = ["n", "oh", "co.o", "ow.o"
// AVX2-WINOGRAD: nest.compute %s {nasir.fuse_rows, name = "pool"
// AVX2-WINOGRAD-SAME: splits = [["c", 8 : i64], ["ow", 8 : i64]]
// AVX2-WINOGRAD-SAME: order = ["n", "c.o", "oh", "ow.o", "kh", "kw", "ow.i", "c.i"]
