// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule,pack-activations | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule,pack-activations | filecheck %s --check-prefix=AVX2

// A stem (lanes over its 32 output channels) feeding only a max pool: default-schedule gives the
// pool lanes over channels too (its 8-point rows one register tile), and pack-activations stores
// the stem's output with a vector of channels innermost (16 with AVX-512, 8 with AVX2): the stem writes it and the pool reads it through
// floordiv/mod of the channel, one vector each. The pool's own output stays NCHW.

builtin.module {
  func.func @main(%x: tensor<1x3x32x32xf32>) -> tensor<1x32x8x8xf32> {
    %w = nn.weight {name = "w"} : tensor<32x3x7x7xf32>
    %s = nest.compute %x, %w {name = "stem", domain = #nest.domain<[n = 1, co = 32, oh = 16, ow = 16], [ci = 3, kh = 7, kw = 7]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -3), (((d3 * 2) + d6) + -3))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x3x32x32xf32>, tensor<32x3x7x7xf32>) -> tensor<1x32x16x16xf32>
    %p = nest.compute %s {name = "pool", domain = #nest.domain<[n = 1, c = 32, oh = 8, ow = 8], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, (((d2 * 2) + d4) + -1), (((d3 * 2) + d5) + -1))>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "max", epilogue = []} : (tensor<1x32x16x16xf32>) -> tensor<1x32x8x8xf32>
    func.return %p : tensor<1x32x8x8xf32>
  }
}

// CHECK: %[[S:.*]] = nest.compute %x, %w {{{.*}}name = "stem"
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 floordiv 16), d2, d3, (d1 mod 16))>
// CHECK-SAME: vector = "co.i"
// CHECK-SAME: -> tensor<1x2x16x16x16xf32>
// CHECK: nest.compute %[[S]] {{{.*}}name = "pool"
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, (d1 floordiv 16), (((d2 * 2) + d4) + -1), (((d3 * 2) + d5) + -1), (d1 mod 16))>]
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
// CHECK-SAME: splits = [["c", 16 : i64]], order = ["n", "c.o", "oh", "kh", "kw", "ow", "c.i"], vector = "c.i"
// CHECK-SAME: unroll = {ow = 8 : i64, kw = 3 : i64, kh = 3 : i64}
// CHECK-SAME: (tensor<1x2x16x16x16xf32>) -> tensor<1x32x8x8xf32>

// AVX2: %[[S:.*]] = nest.compute %x, %w {{{.*}}name = "stem"
// AVX2-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 floordiv 8), d2, d3, (d1 mod 8))>
// AVX2-SAME: vector = "co.i"
// AVX2-SAME: -> tensor<1x4x16x16x8xf32>
// AVX2: nest.compute %[[S]] {{{.*}}name = "pool"
// AVX2-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, (d1 floordiv 8), (((d2 * 2) + d4) + -1), (((d3 * 2) + d5) + -1), (d1 mod 8))>]
// AVX2-SAME: vector = "c.i"
// AVX2-SAME: (tensor<1x4x16x16x8xf32>) -> tensor<1x32x8x8xf32>
